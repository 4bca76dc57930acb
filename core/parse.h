/*
 * parse.h: the one strict parser of decimal numbers that options, control commands and
 * journals share: digits only (no sign, space or suffix), the whole string, 64 bits.
 */
#ifndef ZEPHON_PARSE_H
#define ZEPHON_PARSE_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* 0 and *out = the value, or -EINVAL (NULL, empty, a non-digit, or above 2^64 - 1). */
static inline int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

#endif
