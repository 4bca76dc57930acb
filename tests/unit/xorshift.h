/*
 * xorshift.h: the pseudo-random numbers of the C tests and benchmarks, Marsaglia's
 * xorshift64 (shifts 13, 7, 17): the same sequence from the same seed on every machine,
 * for test inputs only. The state is the caller's (any value but 0); header-only, static.
 */
#ifndef ZEPHON_XORSHIFT_H
#define ZEPHON_XORSHIFT_H

#include <stdint.h>

/* Advance *state and return its new value. */
static inline uint64_t xorshift64(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *state = x;
}

#endif
