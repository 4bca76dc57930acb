/* source_npy.c: a 1-D .npy array of token ids (NumPy NEP 1, format versions 1.0-3.0). */
#include "source.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"

#define NPY_CHUNK (4u << 20)

struct npy_src {
	int fd;
	unsigned itemsize;
	int swap;
	uint64_t data_offset;
	uint64_t data_end;
	uint64_t pos;
	int ended;               /* the end of the file, one document, was reached */
};

static void npy_close(struct source *s)
{
	struct npy_src *n = s->priv;

	if (n->fd >= 0)
		close(n->fd);
	free(n);
	s->priv = NULL;
}

static int npy_open(struct source *s)
{
	struct npy_src *n = calloc(1, sizeof(*n));
	struct npy_header h;
	struct stat sb;
	uint8_t *head = NULL;
	char why[300];
	size_t hcap;
	ssize_t got;
	int rc;

	if (!n)
		return -ENOMEM;
	s->priv = n;
	s->content = CONTENT_TOKENS;
	n->fd = open(s->path, O_RDONLY | O_CLOEXEC);
	if (n->fd < 0 || fstat(n->fd, &sb) != 0) {
		rc = -errno;
		snprintf(s->err, sizeof(s->err), "%s: cannot open: %s", s->path, strerror(-rc));
		return rc;
	}
	s->bytes_total = (uint64_t)sb.st_size;
	hcap = (uint64_t)sb.st_size < NPY_HEADER_MAX + 12 ? (size_t)sb.st_size + 1 :
		NPY_HEADER_MAX + 12;
	head = malloc(hcap);
	if (!head)
		return -ENOMEM;
	got = pread(n->fd, head, hcap, 0);
	if (got < 0) {
		rc = -errno;
		snprintf(s->err, sizeof(s->err), "%s: read error: %s", s->path, strerror(-rc));
		free(head);
		return rc;
	}
	rc = npy_header_parse(head, (size_t)got, &h, why, sizeof(why));
	if (rc == 0)
		XXH3_128bits_update(s->hash, head, h.data_offset);
	free(head);
	if (rc) {
		snprintf(s->err, sizeof(s->err), "%s: %s", s->path, why);
		return rc;
	}
	n->itemsize = dtype_size(h.dtype);
	if (h.count > (UINT64_MAX - h.data_offset) / n->itemsize ||
	    h.data_offset + h.count * n->itemsize != (uint64_t)sb.st_size) {
		snprintf(s->err, sizeof(s->err), "%s: header announces %ju %s elements but the "
			 "file has %ju data bytes (truncated?)", s->path, (uintmax_t)h.count,
			 dtype_name(h.dtype), (uintmax_t)(sb.st_size - (off_t)h.data_offset));
		return -EBADMSG;
	}
	s->dtype = h.dtype;
	n->swap = h.swap;
	n->data_offset = n->pos = h.data_offset;
	n->data_end = (uint64_t)sb.st_size;
	s->bytes_read = h.data_offset;
	return 0;
}

static int npy_next(struct source *s, struct buf *out)
{
	struct npy_src *n = s->priv;
	uint64_t left = n->data_end - n->pos;
	size_t want = left < NPY_CHUNK ? (size_t)left : NPY_CHUNK;
	uint8_t *dst;
	int rc;

	if (want == 0) {
		if (n->ended)
			return 0;
		n->ended = 1;
		return source_put_eod(s, out);
	}
	rc = buf_reserve(out, want);
	if (rc)
		return rc;
	dst = out->data + out->len;
	rc = source_read_chunk(s, n->fd, s->path, n->pos, want, out);
	if (rc)
		return rc;
	if (n->swap) { /* the file's bytes were hashed as they are; samples are little-endian */
		for (size_t i = 0; i < want; i += n->itemsize) {
			if (n->itemsize == 2) {
				uint8_t t = dst[i];
				dst[i] = dst[i + 1];
				dst[i + 1] = t;
			} else {
				uint8_t t0 = dst[i], t1 = dst[i + 1];
				dst[i] = dst[i + 3];
				dst[i + 1] = dst[i + 2];
				dst[i + 2] = t1;
				dst[i + 3] = t0;
			}
		}
	}
	n->pos += want;
	s->bytes_read = n->pos;
	return 1;
}

const struct source_ops source_npy_ops = {
	.name = "npy",
	.open = npy_open,
	.next = npy_next,
	.close = npy_close,
};
