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

#define NPY_CHUNK (4u << 20)
#define NPY_HEADER_MAX (1u << 20)  /* numpy itself refuses headers past 10 KB to load */

/* A cursor over the header's dict literal. */
struct lit {
	const char *p, *end;
};

static void skip_ws(struct lit *l)
{
	while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' ||
				 *l->p == '\r'))
		l->p++;
}

static int eat(struct lit *l, char c)
{
	skip_ws(l);
	if (l->p < l->end && *l->p == c) {
		l->p++;
		return 1;
	}
	return 0;
}

/* A quoted Python string without escapes (numpy never writes any in these keys). */
static int parse_str(struct lit *l, char *dst, size_t cap)
{
	char q;
	size_t n = 0;

	skip_ws(l);
	if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
		return -1;
	q = *l->p++;
	while (l->p < l->end && *l->p != q) {
		if (*l->p == '\\' || n + 1 >= cap)
			return -1;
		dst[n++] = *l->p++;
	}
	if (l->p >= l->end)
		return -1;
	l->p++;
	dst[n] = 0;
	return 0;
}

static int parse_word(struct lit *l, const char *w)
{
	size_t n = strlen(w);

	skip_ws(l);
	if ((size_t)(l->end - l->p) >= n && !memcmp(l->p, w, n)) {
		l->p += n;
		return 1;
	}
	return 0;
}

/* A shape tuple: "(" [int ("," int)* [","]] ")". Returns the number of dims (capped at
 * 8 stored) or -1. */
static int parse_shape(struct lit *l, uint64_t *dims)
{
	int nd = 0;

	if (!eat(l, '('))
		return -1;
	for (;;) {
		uint64_t v = 0;
		int digits = 0;

		if (eat(l, ')'))
			return nd;
		skip_ws(l);
		while (l->p < l->end && isdigit((unsigned char)*l->p)) {
			if (v > (UINT64_MAX - 9) / 10)
				return -1;
			v = v * 10 + (uint64_t)(*l->p++ - '0');
			digits++;
		}
		if (!digits)
			return -1;
		if (nd < 8)
			dims[nd] = v;
		nd++;
		if (nd > 64)
			return -1;
		if (!eat(l, ',')) {
			if (!eat(l, ')'))
				return -1;
			return nd;
		}
	}
}

static int dtype_from_descr(const char *d, struct npy_header *h, char *why, size_t why_len)
{
	char order = d[0], kind;
	int size;

	if (order != '<' && order != '>' && order != '|' && order != '=') {
		snprintf(why, why_len, "dtype '%s' is not a plain numeric dtype", d);
		return -EINVAL;
	}
	kind = d[1];
	size = atoi(d + 2);
	if (kind == 'O') {
		snprintf(why, why_len, "object dtype ('%s') holds Python objects, not token ids; "
			 "convert with arr.astype(numpy.uint32)", d);
		return -EINVAL;
	}
	if (kind == 'f' || kind == 'c') {
		snprintf(why, why_len, "floating-point dtype '%s': token ids must be integers; "
			 "convert with arr.astype(numpy.uint32)", d);
		return -EINVAL;
	}
	if (kind == 'u' && size == 1)
		h->dtype = DTYPE_UINT8;
	else if (kind == 'u' && size == 2)
		h->dtype = DTYPE_UINT16;
	else if (kind == 'u' && size == 4)
		h->dtype = DTYPE_UINT32;
	else if (kind == 'i' && size == 4)
		h->dtype = DTYPE_INT32;
	else {
		snprintf(why, why_len, "dtype '%s' is not one zephon stores (uint8, uint16, "
			 "uint32, int32); convert with arr.astype(numpy.uint32)", d);
		return -EINVAL;
	}
	if (d[2 + strspn(d + 2, "0123456789")] != 0) {
		snprintf(why, why_len, "dtype '%s' is not a plain numeric dtype", d);
		return -EINVAL;
	}
	h->swap = order == '>' && size > 1;
	return 0;
}

int npy_header_parse(const uint8_t *p, size_t len, struct npy_header *out,
		     char *why, size_t why_len)
{
	struct npy_header h = { 0 };
	struct lit l;
	size_t hlen, pre;
	char descr[32] = "", key[32];
	int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0, nd = 0;
	uint64_t dims[8] = { 0 };

	if (len < 10 || memcmp(p, "\x93NUMPY", 6)) {
		snprintf(why, why_len, "not a .npy file (no \\x93NUMPY magic)");
		return -EINVAL;
	}
	if (p[6] == 1) {
		hlen = (size_t)p[8] | (size_t)p[9] << 8;
		pre = 10;
	} else if (p[6] == 2 || p[6] == 3) {
		if (len < 12) {
			snprintf(why, why_len, "truncated .npy header");
			return -EBADMSG;
		}
		hlen = (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
		pre = 12;
	} else {
		snprintf(why, why_len, ".npy format version %u.%u is not supported (1.0-3.0 are)",
			 p[6], p[7]);
		return -EINVAL;
	}
	if (hlen > NPY_HEADER_MAX || hlen > len - pre) {
		snprintf(why, why_len, "truncated .npy header (%zu header bytes announced)", hlen);
		return -EBADMSG;
	}
	l.p = (const char *)p + pre;
	l.end = l.p + hlen;
	if (!eat(&l, '{'))
		goto malformed;
	while (!eat(&l, '}')) {
		if (parse_str(&l, key, sizeof(key)) || !eat(&l, ':'))
			goto malformed;
		if (!strcmp(key, "descr")) {
			skip_ws(&l);
			if (l.p < l.end && *l.p == '[') {
				snprintf(why, why_len, "structured dtype: a token array must be a "
					 "plain integer array");
				return -EINVAL;
			}
			if (parse_str(&l, descr, sizeof(descr)) || !descr[0])
				goto malformed;
			have_descr = 1;
		} else if (!strcmp(key, "fortran_order")) {
			if (parse_word(&l, "True"))
				fortran = 1;
			else if (!parse_word(&l, "False"))
				goto malformed;
			have_order = 1;
		} else if (!strcmp(key, "shape")) {
			nd = parse_shape(&l, dims);
			if (nd < 0)
				goto malformed;
			have_shape = 1;
		} else {
			goto malformed;
		}
		if (!eat(&l, ',')) {
			if (!eat(&l, '}'))
				goto malformed;
			break;
		}
	}
	if (!have_descr || !have_order || !have_shape)
		goto malformed;
	{
		int rc = dtype_from_descr(descr, &h, why, why_len);

		if (rc)
			return rc;
	}
	if (nd != 1) {
		snprintf(why, why_len, "array has %d dimensions; zephon takes a 1-D token array "
			 "(flatten it with arr.reshape(-1))", nd);
		return -EINVAL;
	}
	(void)fortran; /* meaningless for 1-D */
	h.count = dims[0];
	h.data_offset = pre + hlen;
	*out = h;
	return 0;
malformed:
	snprintf(why, why_len, "malformed .npy header near byte %zu",
		 (size_t)(l.p - (const char *)p));
	return -EBADMSG;
}

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
	static const unsigned itemsizes[] = { 1, 2, 4, 4 };
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
	n->itemsize = itemsizes[h.dtype];
	if (h.count > (UINT64_MAX - h.data_offset) / n->itemsize ||
	    h.data_offset + h.count * n->itemsize != (uint64_t)sb.st_size) {
		snprintf(s->err, sizeof(s->err), "%s: header announces %ju %s elements but the "
			 "file has %ju data bytes (truncated?)", s->path, (uintmax_t)h.count,
			 dataset_dtype_name(h.dtype), (uintmax_t)(sb.st_size - (off_t)h.data_offset));
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
