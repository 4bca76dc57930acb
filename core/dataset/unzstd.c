#include "unzstd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <zstd.h>
#include <zstd_errors.h>

struct unzstd {
	ZSTD_DStream *ds;
	uint64_t in_total;       /* compressed bytes consumed: the file offset of the next */
	uint64_t frame_start;    /* file offset of the current (or next) frame */
	uint64_t frames;         /* frames decoded and checked, skippable ones included */
	int in_frame;            /* inside a frame: it has not ended yet */
};

struct unzstd *unzstd_new(void)
{
	struct unzstd *z = calloc(1, sizeof(*z));

	if (z && !(z->ds = ZSTD_createDStream())) {
		free(z);
		return NULL;
	}
	return z;
}

void unzstd_free(struct unzstd *z)
{
	if (!z)
		return;
	ZSTD_freeDStream(z->ds);
	free(z);
}

/* The one place zstd's error codes become ours. */
static int data_error(const struct unzstd *z, size_t zr, const char *path, char *err,
		      size_t errlen)
{
	switch (ZSTD_getErrorCode(zr)) {
	case ZSTD_error_memory_allocation:
		snprintf(err, errlen, "%s: out of memory decoding zstd data", path);
		return -ENOMEM;
	case ZSTD_error_frameParameter_windowTooLarge:
		/* zstd --long=N with N > 27: the default limit, as for `zstd -d` */
		snprintf(err, errlen, "%s: the zstd frame at byte %ju needs a window larger than "
			 "128 MiB (compressed with zstd --long); re-compress it without --long",
			 path, (uintmax_t)z->frame_start);
		break;
	case ZSTD_error_checksum_wrong:
		snprintf(err, errlen, "%s: zstd checksum mismatch in the frame at byte %ju (corrupt "
			 "or truncated file); re-download or re-compress it", path,
			 (uintmax_t)z->frame_start);
		break;
	case ZSTD_error_prefix_unknown:
		/* At byte 0 the caller sniffed a frame magic; so an unknown one here follows
		 * a complete frame. */
		if (z->frames) {
			snprintf(err, errlen, "%s: trailing garbage after the zstd data at byte %ju "
				 "(not another zstd frame); remove it, or re-download the file", path,
				 (uintmax_t)z->frame_start);
			break;
		}
		/* fall through */
	default:
		snprintf(err, errlen, "%s: corrupt zstd data near byte %ju (in the frame at byte "
			 "%ju): %s", path, (uintmax_t)z->in_total, (uintmax_t)z->frame_start,
			 ZSTD_getErrorName(zr));
		break;
	}
	return -EBADMSG;
}

int unzstd_decode(struct unzstd *z, struct dec_io *io, const char *path, char *err,
		  size_t errlen)
{
	while (io->src_pos < io->src_len && io->dst_pos < io->dst_cap) {
		ZSTD_inBuffer zin = { io->src, io->src_len, io->src_pos };
		ZSTD_outBuffer zout = { io->dst, io->dst_cap, io->dst_pos };
		size_t zr = ZSTD_decompressStream(z->ds, &zout, &zin);

		z->in_total += zin.pos - io->src_pos;
		io->src_pos = zin.pos;
		io->dst_pos = zout.pos;
		if (ZSTD_isError(zr))
			return data_error(z, zr, path, err, errlen);
		/* 0: a frame ended and is fully flushed (its checksum checked). zstd never
		 * runs on into the next frame within one call, so the next byte starts one. */
		z->in_frame = zr != 0;
		if (!z->in_frame) {
			z->frames++;
			z->frame_start = z->in_total;
		}
	}
	return 0;
}

int unzstd_finish(const struct unzstd *z, const char *path, char *err, size_t errlen)
{
	if (!z->in_frame)
		return 0;
	/* After a good frame, fewer bytes than a frame magic number (RFC 8878, section 3.1.1)
	 * are as likely stray bytes as a frame cut short: say both. */
	if (z->frames && z->in_total - z->frame_start < 4) {
		snprintf(err, errlen, "%s: trailing garbage or a truncated zstd frame at byte %ju "
			 "(the file ends at byte %ju, too soon for a frame header); remove it, or "
			 "re-download the file", path, (uintmax_t)z->frame_start,
			 (uintmax_t)z->in_total);
		return -EBADMSG;
	}
	snprintf(err, errlen, "%s: truncated zstd frame: the input ends at byte %ju inside the "
		 "frame that starts at byte %ju (corrupt or truncated file); re-download or "
		 "re-compress it", path, (uintmax_t)z->in_total, (uintmax_t)z->frame_start);
	return -EBADMSG;
}
