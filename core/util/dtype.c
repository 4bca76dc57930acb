#include "dtype.h"

#include <errno.h>
#include <string.h>

static const struct {
	const char *name;
	unsigned size;
	uint64_t max;
	char npy_kind;
	const char *npy_descr;
	unsigned megatron_code;  /* 0: Megatron has no code for it */
} dtypes[DTYPE_COUNT] = {
	[DTYPE_UINT8] = { "uint8", 1, UINT8_MAX, 'u', "|u1", 1 },
	[DTYPE_UINT16] = { "uint16", 2, UINT16_MAX, 'u', "<u2", 8 },
	[DTYPE_UINT32] = { "uint32", 4, UINT32_MAX, 'u', "<u4", 0 },
	[DTYPE_INT32] = { "int32", 4, INT32_MAX, 'i', "<i4", 4 },
};

const char *dtype_name(enum token_dtype d)
{
	return (unsigned)d < DTYPE_COUNT ? dtypes[d].name : "?";
}

unsigned dtype_size(enum token_dtype d)
{
	return (unsigned)d < DTYPE_COUNT ? dtypes[d].size : 0;
}

uint64_t dtype_max(enum token_dtype d)
{
	return (unsigned)d < DTYPE_COUNT ? dtypes[d].max : 0;
}

const char *dtype_npy_descr(enum token_dtype d)
{
	return (unsigned)d < DTYPE_COUNT ? dtypes[d].npy_descr : NULL;
}

int dtype_parse(const char *name, enum token_dtype *out)
{
	for (unsigned i = 0; i < DTYPE_COUNT; i++) {
		if (!strcmp(name, dtypes[i].name)) {
			*out = (enum token_dtype)i;
			return 0;
		}
	}
	return -EINVAL;
}

int dtype_from_npy(char kind, unsigned size, enum token_dtype *out)
{
	for (unsigned i = 0; i < DTYPE_COUNT; i++) {
		if (dtypes[i].npy_kind == kind && dtypes[i].size == size) {
			*out = (enum token_dtype)i;
			return 0;
		}
	}
	return -EINVAL;
}

int dtype_from_megatron(unsigned code, enum token_dtype *out)
{
	for (unsigned i = 0; i < DTYPE_COUNT; i++) {
		if (code && dtypes[i].megatron_code == code) {
			*out = (enum token_dtype)i;
			return 0;
		}
	}
	return -EINVAL;
}
