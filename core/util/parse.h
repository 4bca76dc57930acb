/*
 * parse.h: the one strict parser of decimal numbers that options, control commands and
 * journals share: digits only (no sign, space or suffix), 64 bits; the whole string
 * (parse_u64(); parse_u64_canonical() with no leading 0) or the number that starts it
 * (parse_u64_prefix(): "0-3", "1/100", "64K"), and sizes with a binary unit (parse_size()).
 * Pure, thread-safe.
 */
#ifndef ZEPHON_PARSE_H
#define ZEPHON_PARSE_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The digits that start *s as a number: 0, *out = the value and *s moved past the
 * digits; or -EINVAL (*s does not start with a digit, or the number is above 2^64 - 1),
 * *s and *out unchanged. */
static inline int parse_u64_prefix(const char **s, uint64_t *out)
{
	const char *p = *s;
	uint64_t v = 0;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	*s = p;
	*out = v;
	return 0;
}

/* 0 and *out = the value, or -EINVAL (NULL, empty, a non-digit, or above 2^64 - 1). */
static inline int parse_u64(const char *s, uint64_t *out)
{
	uint64_t v;

	if (!s || parse_u64_prefix(&s, &v) || *s)
		return -EINVAL;
	*out = v;
	return 0;
}

/* parse_u64() with one spelling per number: also -EINVAL for a leading 0 ("07"; "0"
 * itself is taken), for numbers that name something (a node, a /control command's step)
 * and so compare as text. */
static inline int parse_u64_canonical(const char *s, uint64_t *out)
{
	if (s && s[0] == '0' && s[1])
		return -EINVAL;
	return parse_u64(s, out);
}

/* A size in bytes: digits, then an optional binary unit K, M, G or T (2^10 .. 2^40, either
 * case, "K", "Ki", "KiB" or "KB" alike), and an optional B ("64B", "64KB"): "64M" is
 * 67,108,864. 0 and *out, or -EINVAL (no digits, another suffix such as "64i", or above
 * 2^64 - 1 bytes); *out unchanged on failure. */
static inline int parse_size(const char *s, uint64_t *out)
{
	const char *end = s;
	uint64_t v;
	unsigned shift = 0;

	if (parse_u64_prefix(&end, &v))
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (shift && *end == 'i') /* "Ki", "KiB": not "64i" */
		end++;
	if (*end == 'B')
		end++;
	if (*end || v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* The name of a whitespace byte c for messages; NULL when c is not whitespace. */
static inline const char *parse_space_name(char c)
{
	switch (c) {
	case ' ': return "a space";
	case '\t': return "a tab";
	case '\n': return "a newline";
	case '\r': return "a carriage return";
	case '\v': case '\f': return "a blank";
	default: return NULL;
	}
}

/* Why parse_u64() refuses s, as the end of a message ("it ends with a space; remove
 * it"), written into buf (len bytes, at least 64 for the whole phrase). Returns buf. */
static inline const char *parse_u64_problem(const char *s, char *buf, size_t len)
{
	size_t n = s ? strlen(s) : 0, i;
	const char *sp;

	if (!n) {
		snprintf(buf, len, "it is empty");
	} else if ((sp = parse_space_name(s[0]))) {
		snprintf(buf, len, "it starts with %s; remove it", sp);
	} else if ((sp = parse_space_name(s[n - 1]))) {
		snprintf(buf, len, "it ends with %s; remove it", sp);
	} else if (s[0] == '-') {
		snprintf(buf, len, "it is negative");
	} else if (s[0] == '+') {
		snprintf(buf, len, "it has a sign; write the digits alone");
	} else {
		for (i = 0; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			;
		if (i == n)
			snprintf(buf, len, "it is above %llu", (unsigned long long)UINT64_MAX);
		else if ((sp = parse_space_name(s[i])))
			snprintf(buf, len, "it holds %s", sp);
		else if (s[i] > ' ' && s[i] < 0x7f)
			snprintf(buf, len, "'%c' is not a digit", s[i]);
		else
			snprintf(buf, len, "byte 0x%02x is not a digit", (unsigned char)s[i]);
	}
	return buf;
}

#endif
