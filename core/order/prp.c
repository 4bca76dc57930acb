#include "prp.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>

uint64_t prp_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	x ^= x >> 31;
	return x;
}

int prp_init(struct prp *p, uint64_t n, uint64_t seed, uint64_t epoch)
{
	unsigned bits = PRP_MIN_BITS;
	uint64_t state;

	if (n == 0 || n > PRP_MAX_N)
		return -EINVAL;
	while (bits < 64 && (UINT64_C(1) << bits) < n)
		bits++;
	bits += bits & 1; /* a balanced network needs an even number of bits */
	p->n = n;
	p->half_bits = bits / 2;
	p->half_mask = (UINT64_C(1) << p->half_bits) - 1;
	/* Seed and epoch go through the mixer separately so that (seed, epoch) pairs with
	 * equal sums or xors still get unrelated key schedules. */
	state = prp_mix64(seed ^ UINT64_C(0x5a657068) /* "Zeph" */) ^
		prp_mix64(epoch + UINT64_C(0x9e3779b97f4a7c15));
	for (unsigned i = 0; i < PRP_ROUNDS; i++) {
		state += UINT64_C(0x9e3779b97f4a7c15);
		p->keys[i] = prp_mix64(state);
	}
	return 0;
}

static uint64_t feistel(const struct prp *p, uint64_t x)
{
	uint64_t left = x >> p->half_bits;
	uint64_t right = x & p->half_mask;

	for (unsigned i = 0; i < PRP_ROUNDS; i++) {
		uint64_t f = prp_mix64(right ^ p->keys[i]) & p->half_mask;
		uint64_t next = left ^ f;

		left = right;
		right = next;
	}
	return (left << p->half_bits) | right;
}

uint64_t prp_apply(const struct prp *p, uint64_t x)
{
	assert(x < p->n);
	/* Cycle-walking: the Feistel map permutes [0, 2^(2h)); following its cycle from x
	 * until it re-enters [0, n) restricts it to a permutation of [0, n). */
	do
		x = feistel(p, x);
	while (x >= p->n);
	return x;
}

/* feistel() on PRP_LANES values at once; the lane loop is innermost so that the lanes'
 * independent multiply chains interleave. */
static void feistel_lanes(const struct prp *p, uint64_t *x)
{
	uint64_t left[PRP_LANES], right[PRP_LANES];

	for (unsigned l = 0; l < PRP_LANES; l++) {
		left[l] = x[l] >> p->half_bits;
		right[l] = x[l] & p->half_mask;
	}
	for (unsigned i = 0; i < PRP_ROUNDS; i++)
		for (unsigned l = 0; l < PRP_LANES; l++) {
			uint64_t next = left[l] ^ (prp_mix64(right[l] ^ p->keys[i]) & p->half_mask);

			left[l] = right[l];
			right[l] = next;
		}
	for (unsigned l = 0; l < PRP_LANES; l++)
		x[l] = (left[l] << p->half_bits) | right[l];
}

void prp_apply_run(const struct prp *p, uint64_t first, size_t count, uint64_t *out)
{
	uint64_t x[PRP_LANES];
	size_t slot[PRP_LANES];  /* out[] index of the lane's walk, or SIZE_MAX when idle */
	size_t next = 0, live = 0;

	assert(first <= p->n && count <= p->n - first);
	if (count < PRP_LANES) { /* too few to fill the lanes */
		for (size_t i = 0; i < count; i++)
			out[i] = prp_apply(p, first + i);
		return;
	}
	for (unsigned l = 0; l < PRP_LANES; l++) {
		x[l] = first + next;
		slot[l] = next++;
		live++;
	}
	while (live) {
		/* Idle lanes are stepped too (on values inside the domain), and ignored. */
		feistel_lanes(p, x);
		for (unsigned l = 0; l < PRP_LANES; l++) {
			if (slot[l] == SIZE_MAX || x[l] >= p->n)
				continue; /* idle, or still walking its cycle */
			out[slot[l]] = x[l];
			if (next < count) {
				x[l] = first + next;
				slot[l] = next++;
			} else {
				slot[l] = SIZE_MAX;
				live--;
			}
		}
	}
}
