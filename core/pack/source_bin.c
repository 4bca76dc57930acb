/* source_bin.c: a raw little-endian token stream of --dtype. */
#include "source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BIN_CHUNK (4u << 20)

struct bin_src {
	int fd;
	unsigned itemsize;
	int ended;               /* the end of the file, one document, was reached */
};

static void bin_close(struct source *s)
{
	struct bin_src *b = s->priv;

	if (b->fd >= 0)
		close(b->fd);
	free(b);
	s->priv = NULL;
}

static int bin_open(struct source *s)
{
	struct bin_src *b = calloc(1, sizeof(*b));
	struct stat sb;
	int rc;

	if (!b)
		return -ENOMEM;
	s->priv = b;
	s->content = CONTENT_TOKENS;
	b->fd = open(s->path, O_RDONLY | O_CLOEXEC);
	if (b->fd < 0 || fstat(b->fd, &sb) != 0) {
		rc = -errno;
		snprintf(s->err, sizeof(s->err), "%s: cannot open: %s", s->path, strerror(-rc));
		return rc;
	}
	if (!S_ISREG(sb.st_mode)) {
		snprintf(s->err, sizeof(s->err), "%s: not a regular file", s->path);
		return -EINVAL;
	}
	if (!s->opts->have_dtype) {
		snprintf(s->err, sizeof(s->err), "%s: a raw token file needs its dtype; pass "
			 "--dtype uint8|uint16|uint32|int32", s->path);
		return -EINVAL;
	}
	s->dtype = s->opts->dtype;
	b->itemsize = dtype_size(s->dtype);
	s->bytes_total = (uint64_t)sb.st_size;
	if (s->bytes_total % b->itemsize) {
		snprintf(s->err, sizeof(s->err), "%s: %ju bytes are not a whole number of %s "
			 "tokens (%u bytes each); check --dtype", s->path, (uintmax_t)sb.st_size,
			 dtype_name(s->dtype), b->itemsize);
		return -EINVAL;
	}
	return 0;
}

static int bin_next(struct source *s, struct buf *out)
{
	struct bin_src *b = s->priv;
	uint64_t left = s->bytes_total - s->bytes_read;
	size_t want = left < BIN_CHUNK ? (size_t)left : BIN_CHUNK;
	int rc;

	if (want == 0) {
		if (b->ended)
			return 0;
		b->ended = 1;
		return source_put_eod(s, out);
	}
	rc = buf_reserve(out, want);
	if (!rc)
		rc = source_read_chunk(s, b->fd, s->path, s->bytes_read, want, out);
	if (rc)
		return rc;
	s->bytes_read += want;
	return 1;
}

const struct source_ops source_bin_ops = {
	.name = "bin",
	.open = bin_open,
	.next = bin_next,
	.close = bin_close,
};
