/*
 * run.c: the geometry of a run of shares (run.h).
 */
#include "run.h"

void run_piece(uint64_t unit, uint64_t pos, uint64_t end, struct run_piece *out)
{
	out->share = pos / unit;
	out->within = pos % unit;
	out->len = unit - out->within < end - pos ? unit - out->within : end - pos;
}

void run_completed(uint64_t unit, uint64_t off, uint64_t len, uint64_t *first,
		   uint64_t *end)
{
	*first = off / unit;
	*end = (off + len) / unit;
	if (*end < *first)
		*end = *first;
}

uint64_t run_bytes(uint64_t unit, uint64_t steps)
{
	if (unit && steps > RUN_MAX_BYTES / unit)
		steps = RUN_MAX_BYTES / unit;
	return steps * unit;
}

uint64_t run_shares(uint64_t unit, uint64_t size)
{
	return unit ? size / unit : 0;
}

uint64_t run_shares_up(uint64_t unit, uint64_t size)
{
	return size / unit + (size % unit != 0);
}
