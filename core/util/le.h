/*
 * le.h: little-endian integers at any alignment, for the on-disk formats (shard index,
 * file groups) and the inputs (.npy, Megatron .idx, compressed-stream headers).
 * Pure and thread-safe; p must point to at least 2, 4 or 8 readable (writable) bytes.
 */
#ifndef ZEPHON_LE_H
#define ZEPHON_LE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t le16_get(const void *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return le16toh(v);
}

static inline uint32_t le32_get(const void *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static inline uint64_t le64_get(const void *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static inline void le16_put(void *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, 2);
}

static inline void le32_put(void *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static inline void le64_put(void *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

#endif
