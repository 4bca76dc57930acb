/*
 * bench_mix: the order's cost per gsn for a weighted mixture against one dataset, with no
 * data and no FUSE (order_fill(), what a claim computes), and the cost of building a
 * mixture's schedule. A benchmark, not a test: it prints, it never fails on a timing.
 *
 * usage: bench_mix [N_PER_SOURCE] [REPS] [GSNS]
 *   N_PER_SOURCE  samples of each of the 10 sources (default 10^9); the single dataset
 *                 has 10 times as many (the same total)
 *   REPS          repetitions of every measurement, the median is printed (default 7)
 *   GSNS          gsns per measurement (default 2^21)
 *
 * Rows, each timed in micro-batches of m = 8 and 256 at random start gsns (what claims
 * after an arbitrary resume, or many ranks far apart, do) and at sequential ones:
 *   (a)  one order of N = 10 * N_PER_SOURCE
 *   (a') one order of N = N_PER_SOURCE (the cycle walk of the permutation costs
 *        2^ceil_even(log2 N) / N evaluations per index, so N alone moves the figure)
 *   (b)  a mixture of 10 sources of N_PER_SOURCE each, weights 0.3,0.2,0.1,0.1,0.08,0.07,
 *        0.05,0.04,0.03,0.03 (D = 100)
 *   (c)  (b) with a second weight segment (the weights reversed) from gsn 2 * N_total,
 *        the middle of the random range; the sequential runs cross it
 * The repetitions alternate (a), (a'), (b), (c), so that a noisy second falls on all.
 * Then the time of mix_schedule_new() and mixture_new() for periods D = 10, 1000, 2^20.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "mix.h"
#include "order.h"

#define K 10

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t sink;

/* ns per gsn of order_fill() over `gsns` gsns in micro-batches of m, starting at random
 * gsns below `range` (random != 0) or at `first` and on. */
static double time_fill(const struct order *o, size_t m, int random, uint64_t range,
			uint64_t first, uint64_t gsns)
{
	uint64_t *ids = malloc(m * sizeof *ids), x = 0x9e3779b97f4a7c15u;
	uint64_t batches = gsns / m;
	double t0 = clock_mono_s();

	if (!ids)
		abort();
	for (uint64_t b = 0; b < batches; b++) {
		uint64_t g;

		if (random) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			g = x % range;
		} else {
			g = first + b * m;
		}
		if (order_fill(o, g, m, ids))
			abort();
		sink += ids[b % m];
	}
	t0 = clock_mono_s() - t0;
	free(ids);
	return t0 * 1e9 / (double)(batches * m);
}

static struct mixture *make_mixture(const uint64_t *a, uint64_t n_src, uint64_t seed)
{
	struct order src[K];
	uint64_t off[K];
	struct mixture *mx;

	for (size_t s = 0; s < K; s++) {
		if (order_init(&src[s], n_src, mixture_source_seed(seed, s), ORDER_SHUFFLE_GLOBAL))
			abort();
		off[s] = s * n_src;
	}
	if (mixture_new(K, src, off, a, &mx))
		abort();
	return mx;
}

/* Integer weights of K sources summing to d >= 100: the skewed split of the timed rows;
 * d < 100 gets weights 1 each (d = K). */
static void weights_summing_to(uint64_t d, uint64_t *a)
{
	static const unsigned pct[K] = {30, 20, 10, 10, 8, 7, 5, 4, 3, 3};
	uint64_t sum = 0;

	for (size_t s = 0; s < K; s++) {
		a[s] = d < 100 ? 1 : d * pct[s] / 100;
		sum += a[s];
	}
	a[0] += d - sum; /* the rounding; d >= sum */
}

int main(int argc, char **argv)
{
	static const double w[K] = {0.3, 0.2, 0.1, 0.1, 0.08, 0.07, 0.05, 0.04, 0.03, 0.03};
	uint64_t n_src = argc > 1 ? strtoull(argv[1], NULL, 10) : UINT64_C(1000000000);
	int reps = argc > 2 ? atoi(argv[2]) : 7;
	uint64_t gsns = argc > 3 ? strtoull(argv[3], NULL, 10) : UINT64_C(1) << 21;
	uint64_t n_all = n_src * K, a[K], rev[K], seg_at = 2 * n_all, range = 4 * n_all;
	static const size_t ms[2] = {8, 256};
	static const char *const row[4] = {"(a)  one order, N = 10 x N_src",
					   "(a') one order, N = N_src",
					   "(b)  mixture of 10, N_src each",
					   "(c)  (b) with 2 weight segments"};
	struct order o[4];
	struct mixture *mx, *mx2;
	double t[4][2][2][64], med[4][2][2];
	char why[160];

	if (reps < 1 || reps > 64 || n_src == 0 || n_all / K != n_src || range / 4 != n_all ||
	    range >= ORDER_MAX_GSN || gsns < 256) {
		fprintf(stderr, "bench_mix: usage: bench_mix [N_PER_SOURCE] [REPS 1-64] [GSNS]\n");
		return 2;
	}
	if (mix_weights_exact(w, K, a, why, sizeof why)) {
		fprintf(stderr, "bench_mix: %s\n", why);
		return 2;
	}
	for (size_t s = 0; s < K; s++)
		rev[s] = a[K - 1 - s];
	mx = make_mixture(a, n_src, 1234);
	mx2 = make_mixture(a, n_src, 1234);
	if (mixture_set_weights(mx2, seg_at, rev))
		abort();
	if (order_init(&o[0], n_all, 1234, ORDER_SHUFFLE_GLOBAL) ||
	    order_init(&o[1], n_src, 1234, ORDER_SHUFFLE_GLOBAL) ||
	    order_init(&o[2], n_all, 1234, ORDER_SHUFFLE_GLOBAL) ||
	    order_init(&o[3], n_all, 1234, ORDER_SHUFFLE_GLOBAL))
		abort();
	o[2].mix = mx;
	o[3].mix = mx2;

	for (int r = 0; r < reps; r++)
		for (size_t mi = 0; mi < 2; mi++)
			for (int rnd = 0; rnd < 2; rnd++)
				for (size_t v = 0; v < 4; v++) {
					uint64_t rg = v == 1 ? 4 * n_src : range;

					t[v][mi][rnd][r] = time_fill(&o[v], ms[mi], !rnd, rg,
								     seg_at - gsns / 2, gsns);
				}
	for (size_t v = 0; v < 4; v++)
		for (size_t mi = 0; mi < 2; mi++)
			for (int rnd = 0; rnd < 2; rnd++)
				med[v][mi][rnd] = median(t[v][mi][rnd], (size_t)reps);

	printf("order_fill, ns per gsn, median of %d x %" PRIu64 " gsns; N_src = %" PRIu64
	       ", weights D = %" PRIu64 "\n", reps, gsns, n_src, (uint64_t)100);
	printf("%-34s %10s %10s %10s %10s\n", "", "m=8 rand", "m=8 seq", "m=256 rand",
	       "m=256 seq");
	for (size_t v = 0; v < 4; v++)
		printf("%-34s %10.1f %10.1f %10.1f %10.1f\n", row[v], med[v][0][0], med[v][0][1],
		       med[v][1][0], med[v][1][1]);
	for (size_t v = 2; v < 4; v++) {
		printf("%-34s", v == 2 ? "ratio (b)/(a)" : "ratio (c)/(a)");
		for (size_t mi = 0; mi < 2; mi++)
			for (int rnd = 0; rnd < 2; rnd++)
				printf(" %10.2f", med[v][mi][rnd] / med[0][mi][rnd]);
		printf("\n");
	}
	printf("%-34s", "ratio (b)/(a')");
	for (size_t mi = 0; mi < 2; mi++)
		for (int rnd = 0; rnd < 2; rnd++)
			printf(" %10.2f", med[2][mi][rnd] / med[1][mi][rnd]);
	printf("\n\nbuilding a schedule of 10 sources, median of %d\n", reps);
	printf("%-10s %16s %16s\n", "period D", "mix_schedule_new", "mixture_new");
	for (size_t di = 0; di < 3; di++) {
		static const uint64_t periods[3] = {K, 1000, UINT64_C(1) << 20};
		uint64_t d = periods[di], ad[K];
		double ts[64], tm[64];

		weights_summing_to(d, ad);
		for (int r = 0; r < reps; r++) {
			struct mix_schedule *sc;
			struct mixture *m;
			double t0 = clock_mono_s();

			if (mix_schedule_new(ad, K, &sc))
				abort();
			ts[r] = clock_mono_s() - t0;
			sink += mix_schedule_period(sc);
			mix_schedule_free(sc);
			t0 = clock_mono_s();
			m = make_mixture(ad, n_src, 99);
			tm[r] = clock_mono_s() - t0;
			mixture_free(m);
		}
		printf("%-10" PRIu64 " %13.3f ms %13.3f ms\n", d, median(ts, (size_t)reps) * 1e3,
		       median(tm, (size_t)reps) * 1e3);
	}
	mixture_free(mx);
	mixture_free(mx2);
	printf("[sink %" PRIu64 "]\n", sink & 1);
	return 0;
}
