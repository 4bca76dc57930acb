/*
 * Properties of the permutation: bijection (exhaustive for every N in 1..4096
 * and for awkward N), epochs differ, positions are uniform over keys, adjacent pairs show
 * no bias.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "prp.h"

/* Is perm(seed, epoch) a bijection on [0, n)? Uses a bitmap of n bits. */
static int is_bijection(uint64_t n, uint64_t seed, uint64_t epoch)
{
	struct prp p;
	uint8_t *seen = calloc(n / 8 + 1, 1);
	int ok = 1;

	REQUIRE(seen);
	REQUIRE(prp_init(&p, n, seed, epoch) == 0);
	for (uint64_t x = 0; x < n && ok; x++) {
		uint64_t y = prp_apply(&p, x);

		if (y >= n || (seen[y / 8] >> (y % 8)) & 1)
			ok = 0;
		else
			seen[y / 8] |= (uint8_t)(1u << (y % 8));
	}
	free(seen);
	return ok;
}

static void test_bijection_small(void)
{
	for (uint64_t n = 1; n <= 4096; n++) {
		int ok = is_bijection(n, 0, 0) && is_bijection(n, 0x1234567, n);

		if (!ok)
			fprintf(stderr, "not a bijection for n=%" PRIu64 "\n", n);
		CHECK(ok);
	}
}

static void test_bijection_awkward(void)
{
	static const uint64_t primes[] = { 999953, 999959, 999961, 999979, 999983,
					   1000003, 1000033, 1000037 };

	for (unsigned k = 1; k <= 21; k++) {
		uint64_t p2 = UINT64_C(1) << k;

		CHECK(is_bijection(p2 - 1, 7, 3));
		CHECK(is_bijection(p2, 7, 3));
		CHECK(is_bijection(p2 + 1, 7, 3));
	}
	for (size_t i = 0; i < sizeof(primes) / sizeof(primes[0]); i++)
		CHECK(is_bijection(primes[i], 42, i));
}

static void test_init_rejects(void)
{
	struct prp p;

	CHECK(prp_init(&p, 0, 0, 0) == -EINVAL);
	CHECK(prp_init(&p, PRP_MAX_N + 1, 0, 0) == -EINVAL);
	CHECK(prp_init(&p, PRP_MAX_N, 0, 0) == 0);
	/* The largest domain still maps into range, and distinct inputs stay distinct. */
	CHECK(prp_apply(&p, PRP_MAX_N - 1) < PRP_MAX_N);
	CHECK(prp_apply(&p, 0) != prp_apply(&p, 1));
}

/* Epochs 0..9 give pairwise different permutations; for N >= 100 they agree on few
 * positions (a random pair agrees on 1 position in expectation). */
static void test_epochs_differ(void)
{
	static const uint64_t ns[] = { 100, 101, 1000, 4097, 65536 };

	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		uint64_t n = ns[i];
		struct prp p[10];

		for (unsigned e = 0; e < 10; e++)
			REQUIRE(prp_init(&p[e], n, 99, e) == 0);
		for (unsigned a = 0; a < 10; a++)
			for (unsigned b = a + 1; b < 10; b++) {
				uint64_t same = 0;

				for (uint64_t x = 0; x < n; x++)
					same += prp_apply(&p[a], x) == prp_apply(&p[b], x);
				if (same > 10)
					fprintf(stderr, "n=%" PRIu64 " epochs %u,%u agree on %" PRIu64 "\n",
						n, a, b, same);
				CHECK(same <= 10);
			}
	}
	/* Different seeds differ too. */
	{
		struct prp a, b;
		uint64_t same = 0;

		prp_init(&a, 1000, 1, 0);
		prp_init(&b, 1000, 2, 0);
		for (uint64_t x = 0; x < 1000; x++)
			same += prp_apply(&a, x) == prp_apply(&b, x);
		CHECK(same <= 10);
	}
}

/*
 * Chi-square of a table of counts against a uniform expectation. The thresholds below
 * are the mean plus 6 standard deviations of the chi-square distribution (dof + 6 *
 * sqrt(2 dof)); the keys are fixed, so the test is deterministic, and a sound
 * permutation is far below it (printed for the record).
 */
static double chi_square(const uint64_t *counts, size_t cells, double expected)
{
	double chi = 0;

	for (size_t i = 0; i < cells; i++) {
		double d = (double)counts[i] - expected;

		chi += d * d / expected;
	}
	return chi;
}

static double chi_threshold(double dof)
{
	return dof + 6 * sqrt(2 * dof);
}

static void test_position_uniformity(void)
{
	/* Over many keys, every input lands on every position equally often. n is not a
	 * power of two (cycle-walking is exercised) and a power of two. */
	static const uint64_t ns[] = { 10, 16, 37 };
	const uint64_t keys = 40000;

	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		uint64_t n = ns[i];
		uint64_t *counts = calloc(n * n, sizeof(*counts));
		double chi, lim;

		REQUIRE(counts);
		for (uint64_t k = 0; k < keys; k++) {
			struct prp p;

			prp_init(&p, n, k, k % 7);
			for (uint64_t x = 0; x < n; x++)
				counts[x * n + prp_apply(&p, x)]++;
		}
		chi = chi_square(counts, n * n, (double)keys / (double)n);
		lim = chi_threshold((double)((n - 1) * (n - 1)));
		fprintf(stderr, "position uniformity n=%" PRIu64 ": chi2=%.1f (limit %.1f)\n",
			n, chi, lim);
		CHECK(chi < lim);
		free(counts);
	}
}

static void test_adjacent_pairs(void)
{
	/* The images of adjacent positions (x, x+1) form every ordered pair of distinct
	 * values equally often over keys: no pair bias, no "neighbours stay neighbours". */
	const uint64_t n = 12, keys = 60000;
	uint64_t *counts = calloc(n * n, sizeof(*counts));
	uint64_t diagonal = 0, successor = 0;
	double chi, lim;

	REQUIRE(counts);
	for (uint64_t k = 0; k < keys; k++) {
		struct prp p;

		prp_init(&p, n, k * 31 + 5, k);
		for (uint64_t x = 0; x + 1 < n; x++) {
			uint64_t a = prp_apply(&p, x), b = prp_apply(&p, x + 1);

			counts[a * n + b]++;
			successor += b == a + 1;
		}
	}
	for (uint64_t a = 0; a < n; a++)
		diagonal += counts[a * n + a];
	CHECK(diagonal == 0);
	/* Only off-diagonal cells are possible: n(n-1) cells. */
	{
		uint64_t *off = calloc(n * (n - 1), sizeof(*off));
		size_t c = 0;

		REQUIRE(off);
		for (uint64_t a = 0; a < n; a++)
			for (uint64_t b = 0; b < n; b++)
				if (a != b)
					off[c++] = counts[a * n + b];
		chi = chi_square(off, c, (double)(keys * (n - 1)) / (double)c);
		lim = chi_threshold((double)(c - 1));
		free(off);
	}
	fprintf(stderr, "adjacent pairs n=%" PRIu64 ": chi2=%.1f (limit %.1f)\n", n, chi, lim);
	CHECK(chi < lim);
	/* P(b == a + 1) for a uniform pair of distinct values is 1/n. */
	{
		double frac = (double)successor / (double)(keys * (n - 1));

		fprintf(stderr, "successor fraction %.4f (uniform %.4f)\n", frac, 1.0 / (double)n);
		CHECK(fabs(frac - 1.0 / (double)n) < 0.01);
	}
	free(counts);
}

/* prp_apply_run() gives prp_apply()'s values for every run: short runs (fewer than the
 * lanes), runs that end at n, whole domains, and n whose walks are long (n just above a
 * power of 4, where 3 in 4 steps leave [0, n)). */
static void test_apply_run(void)
{
	static const uint64_t ns[] = { 1, 2, 7, 8, 9, 100, 257, 4097, 65537, 68159,
				       UINT64_C(1000000000), PRP_MAX_N };
	uint64_t *out = malloc(70000 * sizeof(*out));

	REQUIRE(out);
	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
		uint64_t n = ns[k];
		struct prp p;

		REQUIRE(prp_init(&p, n, 0x5eed + k, k) == 0);
		for (uint64_t count = 0; count <= 40 && count <= n; count++) {
			uint64_t first = (n - count) / 3;

			prp_apply_run(&p, first, (size_t)count, out);
			for (uint64_t i = 0; i < count; i++)
				CHECK_EQ_U64(out[i], prp_apply(&p, first + i));
		}
		if (n <= 70000) { /* the whole domain in one run */
			prp_apply_run(&p, 0, (size_t)n, out);
			for (uint64_t x = 0; x < n; x++)
				CHECK_EQ_U64(out[x], prp_apply(&p, x));
		} else { /* a run that ends at n */
			prp_apply_run(&p, n - 1000, 1000, out);
			for (uint64_t i = 0; i < 1000; i++)
				CHECK_EQ_U64(out[i], prp_apply(&p, n - 1000 + i));
		}
	}
	free(out);
}

int main(void)
{
	test_apply_run();
	test_init_rejects();
	test_bijection_small();
	test_bijection_awkward();
	test_epochs_differ();
	test_position_uniformity();
	test_adjacent_pairs();
	return check_status();
}
