/*
 * npy.h: .npy file headers (NumPy NEP 1, "A Simple File Format for NumPy Arrays"), read
 * by the npy pack input (1-D integer token arrays, format versions 1.0-3.0) and written by
 * the npy batch encoding (version 1.0, C order, data aligned to 64 bytes as numpy >= 1.14
 * writes it). Pure, no globals, thread-safe.
 */
#ifndef ZEPHON_NPY_H
#define ZEPHON_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "dtype.h"

/* The longest header dict npy_header_parse() takes (numpy itself refuses headers past
 * 10 KB to load); a reader needs at most NPY_HEADER_MAX + 12 bytes of a file. */
#define NPY_HEADER_MAX (1u << 20)

struct npy_header {
	enum token_dtype dtype;
	int swap;                /* stored big-endian: swap each token */
	uint64_t count;          /* elements of the 1-D array */
	size_t data_offset;      /* where the array data starts in the file */
};
/* Parse the header of a .npy file from its first len bytes (NEP 1: magic "\x93NUMPY",
 * version, header length, a Python dict literal with descr, fortran_order, shape).
 * 0, or -EINVAL (not a .npy, or a dtype/shape zephon does not take: object, float,
 * 2-D ...), -EBADMSG (malformed or truncated header), with the reason in why. */
int npy_header_parse(const uint8_t *p, size_t len, struct npy_header *out,
		     char *why, size_t why_len);

/* numpy >= 1.14 pads the header so the data starts at a multiple of 64 bytes
 * (numpy/lib/format.py, ARRAY_ALIGN); version 1.0 keeps the header length in a u16, so a
 * header npy_header_write() makes is at most a few NPY_ALIGN long. */
#define NPY_ALIGN 64

/* Append to out a .npy v1.0 header for a C-order array of dtype and shape (rows, cols),
 * padded with spaces and a '\n' so that the data starts at a multiple of 64 bytes.
 * 0, -EINVAL (dtype outside the enum), -EOVERFLOW (the header would not fit version 1.0's
 * 16-bit length), -ENOMEM (out unchanged). */
int npy_header_write(struct buf *out, enum token_dtype dtype, uint64_t rows, uint64_t cols);
/* The same for a 3-D array of shape (d0, d1, d2): a batch of rows (rowindex.h), (samples,
 * 3 planes, row_len). */
int npy_header_write_3d(struct buf *out, enum token_dtype dtype, uint64_t d0, uint64_t d1,
			uint64_t d2);

#endif
