/*
 * dtype.h: the token dtypes Zephon stores, and the one table that names them: the
 * catalog's and the CLI's name, the size in bytes, numpy's descr and the Megatron-LM
 * .idx dtype code. Tokens are stored little-endian. Pure, no globals but the constant
 * table, thread-safe.
 */
#ifndef ZEPHON_DTYPE_H
#define ZEPHON_DTYPE_H

#include <stdint.h>

/* The values are array indexes of the table, never stored on disk (the catalog stores
 * the name). */
enum token_dtype { DTYPE_UINT8, DTYPE_UINT16, DTYPE_UINT32, DTYPE_INT32 };
#define DTYPE_COUNT 4

/* "uint8", "uint16", "uint32", "int32"; "?" for a value outside the enum. */
const char *dtype_name(enum token_dtype d);
/* Bytes per token: 1, 2, 4, 4; 0 for a value outside the enum. */
unsigned dtype_size(enum token_dtype d);
/* The largest token id the dtype holds: 255, 65535, 2^32 - 1, 2^31 - 1; 0 outside the
 * enum. */
uint64_t dtype_max(enum token_dtype d);
/* numpy's little-endian descr: "|u1", "<u2", "<u4", "<i4"; NULL outside the enum. */
const char *dtype_npy_descr(enum token_dtype d);
/* Parse a name of dtype_name(). 0, or -EINVAL (not one of them). */
int dtype_parse(const char *name, enum token_dtype *out);
/* The dtype of numpy kind ('u', 'i') and itemsize. 0, or -EINVAL (not one we store). */
int dtype_from_npy(char kind, unsigned size, enum token_dtype *out);
/* The dtype of a Megatron-LM .idx dtype code (megatron/core/datasets/indexed_dataset.py,
 * DType: 1 uint8, 4 int32, 8 uint16). 0, or -EINVAL (a code we do not store). */
int dtype_from_megatron(unsigned code, enum token_dtype *out);

#endif
