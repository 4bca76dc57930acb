#include "compressor.h"

#include <errno.h>
#include <stdlib.h>

#include <zstd.h>

struct compressor {
	ZSTD_CCtx *cctx;
	ZSTD_CDict *cdict;
};

int compressor_new(int level, const void *dict, size_t dict_len, struct compressor **out)
{
	struct compressor *c = calloc(1, sizeof(*c));
	size_t r;

	if (!c || !(c->cctx = ZSTD_createCCtx())) {
		free(c);
		return -ENOMEM;
	}
	if (dict) {
		c->cdict = ZSTD_createCDict(dict, dict_len, level);
		if (!c->cdict) {
			compressor_free(c);
			return -EINVAL;
		}
		/* the level comes with the CDict */
		r = ZSTD_CCtx_refCDict(c->cctx, c->cdict);
	} else {
		r = ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, level);
	}
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_checksumFlag, 1);
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_contentSizeFlag, 1);
	/* The dictionary is the dataset's, never looked up by id: its 4-byte id in every
	 * frame would only cost space (a tenth of a 40-byte text line's frame). */
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_dictIDFlag, 0);
	if (ZSTD_isError(r)) {
		compressor_free(c);
		return -EINVAL;
	}
	*out = c;
	return 0;
}

void compressor_free(struct compressor *c)
{
	if (!c)
		return;
	ZSTD_freeCCtx(c->cctx);
	ZSTD_freeCDict(c->cdict);
	free(c);
}

int compressor_frame(struct compressor *c, const void *src, size_t len, struct buf *out)
{
	size_t bound = ZSTD_compressBound(len), n;

	if (buf_reserve(out, bound))
		return -ENOMEM;
	n = ZSTD_compress2(c->cctx, out->data + out->len, bound, src, len);
	if (ZSTD_isError(n))
		return -EIO;
	out->len += n;
	return 0;
}
