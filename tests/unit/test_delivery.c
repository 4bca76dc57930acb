/*
 * test_delivery.c: the delivered prefix of a rank's claims (core/serve/delivery.h). Every order
 * of delivering 8 claims (40,320), each delivery given twice, against a brute-force
 * prefix; deliveries far ahead of the prefix (the ring grows and keeps its marks); reset.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "delivery.h"

#define N 8

/* The first index of done[] that is 0, from start. */
static uint64_t brute_prefix(const int *done, uint64_t start, int n)
{
	uint64_t p = start;

	while (p < start + (uint64_t)n && done[p - start])
		p++;
	return p;
}

static int next_perm(int *a, int n)
{
	int i = n - 2, k = n - 1;

	while (i >= 0 && a[i] >= a[i + 1])
		i--;
	if (i < 0)
		return 0;
	while (a[k] <= a[i])
		k--;
	int t = a[i]; a[i] = a[k]; a[k] = t;
	for (int l = i + 1, r = n - 1; l < r; l++, r--) {
		t = a[l]; a[l] = a[r]; a[r] = t;
	}
	return 1;
}

static void every_order(uint64_t start)
{
	int perm[N], bad = 0;
	long orders = 0;

	for (int i = 0; i < N; i++)
		perm[i] = i;
	do {
		struct delivery d;
		int done[N] = { 0 };

		delivery_init(&d, start);
		for (int i = 0; i < N && !bad; i++) {
			uint64_t ci = start + (uint64_t)perm[i];

			bad |= delivery_mark(&d, ci) != 1;
			done[perm[i]] = 1;
			bad |= d.prefix != brute_prefix(done, start, N);
			bad |= delivery_mark(&d, ci) != 0; /* a second delivery counts nothing */
			bad |= d.prefix != brute_prefix(done, start, N);
		}
		bad |= d.prefix != start + N;
		bad |= delivery_mark(&d, start) != 0; /* below the prefix */
		delivery_release(&d);
		orders++;
	} while (!bad && next_perm(perm, N));
	CHECK(!bad);
	CHECK(orders == 40320);
}

static void far_ahead(void)
{
	struct delivery d;
	uint64_t far;

	delivery_init(&d, 100);
	/* claim 100 is held by a slow reader; 5,000 later claims come back first */
	for (uint64_t ci = 101; ci < 5101; ci++)
		CHECK(delivery_mark(&d, ci) == 1);
	CHECK_EQ_U64(d.prefix, 100);
	CHECK(d.cap >= 5001);
	CHECK(delivery_mark(&d, 100) == 1);
	CHECK_EQ_U64(d.prefix, 5101);
	/* after the ring exists, in-order deliveries still move the prefix */
	CHECK(delivery_mark(&d, 5101) == 1);
	CHECK_EQ_U64(d.prefix, 5102);
	/* a delivery past the ring's wrap point, then the ones before it */
	far = 5102 + 3 * d.cap;
	CHECK(delivery_mark(&d, far) == 1);
	for (uint64_t ci = 5102; ci < far; ci++)
		CHECK(delivery_mark(&d, ci) == 1);
	CHECK_EQ_U64(d.prefix, far + 1);
	CHECK(delivery_mark(&d, d.prefix + ((uint64_t)1 << 40)) == -EOVERFLOW);

	/* reset: a rewind forgets every mark */
	CHECK(delivery_mark(&d, d.prefix + 2) == 1);
	delivery_reset(&d, 7);
	CHECK_EQ_U64(d.prefix, 7);
	CHECK(delivery_mark(&d, 8) == 1);
	CHECK_EQ_U64(d.prefix, 7);
	CHECK(delivery_mark(&d, 7) == 1);
	CHECK_EQ_U64(d.prefix, 9);
	delivery_release(&d);
}

int main(void)
{
	every_order(0);
	every_order(1000003);
	far_ahead();
	return check_status();
}
