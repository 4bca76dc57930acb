#include "delivery.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Past this many claims ahead of the prefix a delivery is refused rather than given a
 * ring of 2^40 bits (128 GiB): no reader holds a batch for that long. */
#define DELIVERY_MAX_AHEAD ((uint64_t)1 << 40)

void delivery_init(struct delivery *d, uint64_t start)
{
	d->prefix = start;
	d->bits = NULL;
	d->cap = 0;
}

void delivery_release(struct delivery *d)
{
	free(d->bits);
	d->bits = NULL;
	d->cap = 0;
}

void delivery_reset(struct delivery *d, uint64_t start)
{
	if (d->bits)
		memset(d->bits, 0, d->cap / 8);
	d->prefix = start;
}

static int bit_get(const struct delivery *d, uint64_t ci)
{
	uint64_t k = ci & (d->cap - 1);

	return (int)(d->bits[k / 64] >> (k % 64) & 1);
}

static void bit_set(struct delivery *d, uint64_t ci, int on)
{
	uint64_t k = ci & (d->cap - 1), m = (uint64_t)1 << (k % 64);

	if (on)
		d->bits[k / 64] |= m;
	else
		d->bits[k / 64] &= ~m;
}

/* Make the ring hold [prefix, prefix + need]: a larger power of two, the marks moved to
 * their new places. 0 or -ENOMEM. */
static int grow(struct delivery *d, uint64_t need)
{
	struct delivery n = { d->prefix, NULL, d->cap ? d->cap : 64 };

	while (n.cap <= need)
		n.cap *= 2;
	n.bits = calloc(n.cap / 64, sizeof(uint64_t));
	if (!n.bits)
		return -ENOMEM;
	for (uint64_t ci = d->prefix; d->cap && ci < d->prefix + d->cap; ci++)
		if (bit_get(d, ci))
			bit_set(&n, ci, 1);
	free(d->bits);
	*d = n;
	return 0;
}

int delivery_mark(struct delivery *d, uint64_t ci)
{
	uint64_t ahead;

	if (ci < d->prefix)
		return 0;
	ahead = ci - d->prefix;
	if (ahead >= DELIVERY_MAX_AHEAD)
		return -EOVERFLOW;
	if (ahead == 0 && !d->cap) { /* in order, nothing pending: no ring needed */
		d->prefix++;
		return 1;
	}
	if (ahead >= d->cap) {
		int rc = grow(d, ahead);

		if (rc)
			return rc;
	}
	if (bit_get(d, ci))
		return 0;
	bit_set(d, ci, 1);
	while (bit_get(d, d->prefix)) {
		bit_set(d, d->prefix, 0);
		d->prefix++;
	}
	return 1;
}
