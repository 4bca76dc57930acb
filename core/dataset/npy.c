/* npy.c: .npy headers (NumPy NEP 1), read for the npy pack input and written by the
 * npy batch encoding. */
#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "le.h"

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
	if ((kind != 'u' && kind != 'i') || size <= 0 ||
	    dtype_from_npy(kind, (unsigned)size, &h->dtype)) {
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

/* Owns the preamble of a .npy file: the magic, the format version and the header
 * length. *hlen receives the dict's length, *pre the bytes before it (10 or 12).
 * 0, or -EINVAL (not .npy, unsupported version) or -EBADMSG (truncated), with why. */
static int parse_preamble(const uint8_t *p, size_t len, size_t *hlen, size_t *pre,
			  char *why, size_t why_len)
{
	if (len < 10 || memcmp(p, "\x93NUMPY", 6)) {
		snprintf(why, why_len, "not a .npy file (no \\x93NUMPY magic)");
		return -EINVAL;
	}
	if (p[6] == 1) {
		*hlen = le16_get(p + 8);
		*pre = 10;
	} else if (p[6] == 2 || p[6] == 3) {
		if (len < 12) {
			snprintf(why, why_len, "truncated .npy header");
			return -EBADMSG;
		}
		*hlen = le32_get(p + 8);
		*pre = 12;
	} else {
		snprintf(why, why_len, ".npy format version %u.%u is not supported (1.0-3.0 are)",
			 p[6], p[7]);
		return -EINVAL;
	}
	if (*hlen > NPY_HEADER_MAX || *hlen > len - *pre) {
		snprintf(why, why_len, "truncated .npy header (%zu header bytes announced)", *hlen);
		return -EBADMSG;
	}
	return 0;
}

/* Owns the header's dict literal: its three keys, descr into descr (of cap bytes), the
 * shape's dimension count into *nd and its first 8 dims into dims; fortran_order is
 * read and ignored (meaningless for 1-D). 0; -EINVAL with why for a structured dtype;
 * -EBADMSG without why when malformed (l->p is then where it stopped). */
static int parse_dict(struct lit *l, char *descr, size_t cap, int *nd, uint64_t *dims,
		      char *why, size_t why_len)
{
	char key[32];
	int have_descr = 0, have_order = 0, have_shape = 0;

	if (!eat(l, '{'))
		return -EBADMSG;
	while (!eat(l, '}')) {
		if (parse_str(l, key, sizeof(key)) || !eat(l, ':'))
			return -EBADMSG;
		if (!strcmp(key, "descr")) {
			skip_ws(l);
			if (l->p < l->end && *l->p == '[') {
				snprintf(why, why_len, "structured dtype: a token array must be a "
					 "plain integer array");
				return -EINVAL;
			}
			if (parse_str(l, descr, cap) || !descr[0])
				return -EBADMSG;
			have_descr = 1;
		} else if (!strcmp(key, "fortran_order")) {
			if (!parse_word(l, "True") && !parse_word(l, "False"))
				return -EBADMSG;
			have_order = 1;
		} else if (!strcmp(key, "shape")) {
			*nd = parse_shape(l, dims);
			if (*nd < 0)
				return -EBADMSG;
			have_shape = 1;
		} else {
			return -EBADMSG;
		}
		if (!eat(l, ',')) {
			if (!eat(l, '}'))
				return -EBADMSG;
			break;
		}
	}
	return have_descr && have_order && have_shape ? 0 : -EBADMSG;
}

int npy_header_parse(const uint8_t *p, size_t len, struct npy_header *out,
		     char *why, size_t why_len)
{
	struct npy_header h = { 0 };
	struct lit l;
	size_t hlen, pre;
	char descr[32] = "";
	int nd = 0, rc;
	uint64_t dims[8] = { 0 };

	if ((rc = parse_preamble(p, len, &hlen, &pre, why, why_len)))
		return rc;
	l.p = (const char *)p + pre;
	l.end = l.p + hlen;
	rc = parse_dict(&l, descr, sizeof(descr), &nd, dims, why, why_len);
	if (rc == -EBADMSG)
		goto malformed;
	if (rc)
		return rc;
	if ((rc = dtype_from_descr(descr, &h, why, why_len)))
		return rc;
	if (nd != 1) {
		snprintf(why, why_len, "array has %d dimensions; zephon takes a 1-D token array "
			 "(flatten it with arr.reshape(-1))", nd);
		return -EINVAL;
	}
	h.count = dims[0];
	h.data_offset = pre + hlen;
	*out = h;
	return 0;
malformed:
	snprintf(why, why_len, "malformed .npy header near byte %zu",
		 (size_t)(l.p - (const char *)p));
	return -EBADMSG;
}

#define NPY_PREAMBLE 10 /* "\x93NUMPY", major, minor, u16 header_len */

/* The header of an array of dtype and the shape spelled `shape` ("2, 3"). */
static int header_write(struct buf *out, enum token_dtype dtype, const char *shape)
{
	const char *descr = dtype_npy_descr(dtype);
	char dict[200];
	uint8_t pre[NPY_PREAMBLE] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0 };
	size_t dlen, total, hlen;
	int n, rc;

	if (!descr)
		return -EINVAL;

	n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': "
		     "(%s), }", descr, shape);
	if (n < 0 || (size_t)n >= sizeof(dict))
		return -EINVAL;
	dlen = (size_t)n;
	/* dict, spaces, '\n', so that preamble + header is a multiple of NPY_ALIGN */
	total = (NPY_PREAMBLE + dlen + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
	hlen = total - NPY_PREAMBLE;
	if (hlen > UINT16_MAX)
		return -EOVERFLOW;
	le16_put(pre + 8, (uint16_t)hlen);
	rc = buf_reserve(out, total);
	if (rc)
		return rc;
	buf_append(out, pre, sizeof(pre)); /* cannot fail after the reserve */
	buf_append(out, dict, dlen);
	memset(out->data + out->len, ' ', hlen - dlen - 1);
	out->len += hlen - dlen - 1;
	buf_append(out, "\n", 1);
	return 0;
}

int npy_header_write(struct buf *out, enum token_dtype dtype, uint64_t rows, uint64_t cols)
{
	char shape[48];

	snprintf(shape, sizeof(shape), "%" PRIu64 ", %" PRIu64, rows, cols);
	return header_write(out, dtype, shape);
}

int npy_header_write_3d(struct buf *out, enum token_dtype dtype, uint64_t d0, uint64_t d1,
			uint64_t d2)
{
	char shape[72];

	snprintf(shape, sizeof(shape), "%" PRIu64 ", %" PRIu64 ", %" PRIu64, d0, d1, d2);
	return header_write(out, dtype, shape);
}
