/*
 * Weighted mixtures (core/order/mix.h) and the validation split (order.h): the prefix bound
 * |c_s(n) - n a_s / D| < 1 over every prefix of random weight vectors; the schedule's
 * three views (slot -> source, count, inverse) agree; exact weights from reals; weight
 * lists; per-source coverage and per-epoch orders; curricula keep the stream before the
 * change; the rank-order step concatenation is the same for every (W, B, m) layout; the
 * validation split is disjoint from training and independent of the seed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mix.h"
#include "order.h"
#include "xorshift.h"
#include "test_layout.h"

static uint64_t rng = 88172645463325252u;

static uint64_t rnd(void)
{
	return xorshift64(&rng);
}

/* Every prefix n <= 2D + 7 of the sequence keeps the bound, and the three views agree. */
static void check_schedule(const uint64_t *a, size_t k)
{
	struct mix_schedule *m;
	uint64_t d = 0, count[MIX_MAX_SOURCES] = {0};

	for (size_t s = 0; s < k; s++)
		d += a[s];
	REQUIRE(mix_schedule_new(a, k, &m) == 0);
	CHECK_EQ_U64(mix_schedule_period(m), d);
	for (uint64_t n = 0; n <= 2 * d + 7; n++) {
		uint64_t j;
		size_t src;

		for (size_t s = 0; s < k; s++) {
			/* |c*D - n*a| < D, in integers */
			uint64_t lhs = count[s] * d, rhs = n * a[s];

			CHECK((lhs > rhs ? lhs - rhs : rhs - lhs) < d);
			CHECK_EQ_U64(mix_schedule_count(m, s, n), count[s]);
		}
		src = mix_schedule_at(m, n, &j);
		REQUIRE(src < k);
		CHECK(a[src] > 0);
		CHECK_EQ_U64(j, count[src]);
		CHECK_EQ_U64(mix_schedule_slot(m, src, j), n);
		count[src]++;
	}
	mix_schedule_free(m);
}

static void test_bound(void)
{
	static const uint64_t fixed[][4] = {
		{7, 3, 0, 0}, {1, 1, 1, 0}, {1, 2, 3, 4}, {99, 1, 0, 0}, {3, 4, 3, 0},
		{1, 0, 5, 0}, {13, 17, 19, 23},
	};

	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
		check_schedule(fixed[i], 4);
	for (int t = 0; t < 400; t++) {
		size_t k = 1 + rnd() % (t < 300 ? 6 : 40);
		uint64_t a[64], sum = 0;

		for (size_t s = 0; s < k; s++) {
			/* some zeros, some skewed */
			a[s] = rnd() % 5 == 0 ? 0 : 1 + rnd() % (rnd() % 3 ? 9 : 300);
			sum += a[s];
		}
		if (!sum)
			a[0] = 1;
		check_schedule(a, k);
	}
	{
		/* the most sources, near the largest period */
		uint64_t a[MIX_MAX_SOURCES];
		struct mix_schedule *m;

		for (size_t s = 0; s < MIX_MAX_SOURCES; s++)
			a[s] = 1 + rnd() % (MIX_MAX_PERIOD / MIX_MAX_SOURCES);
		CHECK(mix_schedule_new(a, MIX_MAX_SOURCES, &m) == 0);
		mix_schedule_free(m);
		a[0] = MIX_MAX_PERIOD;
		CHECK(mix_schedule_new(a, 1, &m) == 0);
		mix_schedule_free(m);
		a[1] = 1;
		CHECK(mix_schedule_new(a, 2, &m) == -EINVAL);
		a[0] = 0;
		CHECK(mix_schedule_new(a, 1, &m) == -EINVAL);
	}
}

static void test_weights(void)
{
	static const struct {
		double w[4];
		size_t k;
		uint64_t a[4];
	} ok[] = {
		{{0.7, 0.3}, 2, {7, 3}},
		{{1, 2, 3}, 3, {1, 2, 3}},
		{{0.5, 0.5}, 2, {1, 1}},
		{{0.3333333333, 0.6666666667}, 2, {1, 2}},
		{{0.25, 0, 0.75}, 3, {1, 0, 3}},
		{{40, 60}, 2, {2, 3}},
		{{0.001, 0.999}, 2, {1, 999}},
		{{0.000001, 0.999999}, 2, {1, 999999}},
		{{0.1, 0.2, 0.7}, 3, {1, 2, 7}},
	};
	static const struct {
		double w[3];
		size_t k;
		const char *why;
	} bad[] = {
		{{-1, 1}, 2, ">= 0"},
		{{0, 0}, 2, "sum to 0"},
		{{1.0 / 999983, 1.0 / 999979}, 2, "period"},
		{{0.1234567, 0.7654321}, 2, "fraction"},
	};
	uint64_t a[4];
	char why[256];

	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		REQUIRE(mix_weights_exact(ok[i].w, ok[i].k, a, why, sizeof why) == 0);
		for (size_t s = 0; s < ok[i].k; s++)
			CHECK_EQ_U64(a[s], ok[i].a[s]);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		why[0] = 0;
		CHECK(mix_weights_exact(bad[i].w, bad[i].k, a, why, sizeof why) == -EINVAL);
		CHECK(strstr(why, bad[i].why) != NULL);
	}
	{
		double nan = strtod("nan", NULL), w[2] = {nan, 1};

		CHECK(mix_weights_exact(w, 2, a, why, sizeof why) == -EINVAL);
	}
}

static void test_parse(void)
{
	const char *names[] = {"web", "code", "books"};
	double w[3];
	char why[256];

	REQUIRE(mix_weights_parse("0.5,0.25,0.25", names, 3, w, why, sizeof why) == 0);
	CHECK(w[0] == 0.5 && w[1] == 0.25 && w[2] == 0.25);
	REQUIRE(mix_weights_parse("books:1+web:2,code:3", names, 3, w, why, sizeof why) == 0);
	CHECK(w[0] == 2 && w[1] == 3 && w[2] == 1);
	static const struct { const char *text, *why; } bad[] = {
		{"0.5,0.5", "2 weights for 3 sources"},
		{"1,1,1,1", "more weights"},
		{"1,x,1", "\"x\" is not a number"},
		{"1,,1", "is not a number"},
		{"web:1,code:1,music:1", "no source is named \"music\""},
		{"web:1,web:1,code:1", "given twice"},
		{"web:1,2,3", "to every weight or to none"},
		{"web:1,code:1", "2 weights for 3 sources"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		why[0] = 0;
		CHECK(mix_weights_parse(bad[i].text, names, 3, w, why, sizeof why) == -EINVAL);
		if (!strstr(why, bad[i].why))
			fprintf(stderr, "%s: got \"%s\"\n", bad[i].text, why);
		CHECK(strstr(why, bad[i].why) != NULL);
	}
}

/* A mixture of sources of sizes n[0..k) with weights a, sources' ids offset by the sum
 * of the sizes before them. */
static struct mixture *make(size_t k, const uint64_t *n, const uint64_t *a, uint64_t seed,
			    struct order *o)
{
	struct order src[8];
	uint64_t off[8], total = 0;
	struct mixture *mx;

	for (size_t s = 0; s < k; s++) {
		REQUIRE(order_init(&src[s], n[s], mixture_source_seed(seed, s),
				   ORDER_SHUFFLE_GLOBAL) == 0);
		off[s] = total;
		total += n[s];
	}
	REQUIRE(mixture_new(k, src, off, a, &mx) == 0);
	REQUIRE(order_init(o, total, seed, ORDER_SHUFFLE_GLOBAL) == 0);
	o->mix = mx;
	return mx;
}

static void test_coverage(void)
{
	const uint64_t n[3] = {50, 7, 20}, a[3] = {5, 3, 2};
	struct order o;
	struct mixture *mx = make(3, n, a, 42, &o);
	uint64_t ids[2000], served[3] = {0};
	uint8_t *seen = calloc(77, 1);

	REQUIRE(order_fill(&o, 0, 2000, ids) == 0);
	for (uint64_t g = 0; g < 2000; g++) {
		uint64_t epoch, k;
		size_t s;
		uint64_t id = mixture_sample(mx, g, &epoch, &s);
		uint64_t off = s == 0 ? 0 : s == 1 ? 50 : 57;

		CHECK_EQ_U64(id, ids[g]);
		CHECK(id >= off && id < off + n[s]);
		CHECK_EQ_U64(mixture_locate(mx, g, &k), s);
		CHECK_EQ_U64(k, served[s]);
		CHECK_EQ_U64(epoch, served[s] / n[s]);
		CHECK_EQ_U64(mixture_gsn_of(mx, s, k), g);
		CHECK_EQ_U64(mixture_count(mx, s, g), served[s]);
		served[s]++;
	}
	/* every sample of every source once per source epoch; epochs in other orders */
	for (size_t s = 0; s < 3; s++) {
		uint64_t off = s == 0 ? 0 : s == 1 ? 50 : 57, first[50];

		for (uint64_t e = 0; e < served[s] / n[s]; e++) {
			memset(seen, 0, 77);
			for (uint64_t p = 0; p < n[s]; p++) {
				uint64_t g = mixture_gsn_of(mx, s, e * n[s] + p);
				uint64_t id = mixture_sample(mx, g, NULL, NULL);

				REQUIRE(g < 2000);
				CHECK(id >= off && id < off + n[s]);
				CHECK(!seen[id]);
				seen[id] = 1;
				if (e == 0)
					first[p] = id;
				else if (e <= 2 && n[s] > 5 && p == n[s] - 1) {
					/* epoch e's order differs from epoch 0's somewhere */
					int same = 1;

					for (uint64_t q = 0; q < n[s]; q++)
						same &= first[q] == mixture_sample(
							mx, mixture_gsn_of(mx, s, e * n[s] + q), NULL, NULL);
					CHECK(!same);
				}
			}
		}
	}
	/* the first source to finish its first epoch ends a 1-epoch stream: source 1 (7
	 * samples at 3/10) needs gsn up to about 23 */
	CHECK_EQ_U64(order_limit(&o, 1), mixture_gsn_of(mx, 1, 7));
	CHECK(order_limit(&o, 1) < mixture_gsn_of(mx, 0, 50));
	free(seen);
	mixture_free(mx);
}

static void test_curriculum(void)
{
	const uint64_t n[3] = {1000, 300, 77}, a0[3] = {5, 3, 2}, a1[3] = {1, 0, 1},
		       a2[3] = {2, 2, 1};
	struct order o, ref;
	struct mixture *mx = make(3, n, a0, 7, &o), *mr = make(3, n, a0, 7, &ref);
	uint64_t before[3], cnt[3] = {0};

	REQUIRE(mixture_set_weights(mx, 600, a1) == 0);
	CHECK_EQ_U64(mixture_segments(mx), 2);
	for (uint64_t g = 0; g < 600; g++)
		CHECK_EQ_U64(order_sample(&o, g, NULL), order_sample(&ref, g, NULL));
	for (size_t s = 0; s < 3; s++)
		before[s] = mixture_count(mr, s, 600);
	/* after the change each source continues where it was; source 1 gets nothing */
	for (uint64_t g = 600; g < 1200; g++) {
		uint64_t k;
		size_t s = mixture_locate(mx, g, &k);

		CHECK(s != 1);
		CHECK_EQ_U64(k, before[s] + cnt[s]);
		cnt[s]++;
	}
	/* the bound holds within the segment */
	CHECK(cnt[0] == 300 && cnt[2] == 300);
	/* a resume before the change forgets it; the same weights again change nothing */
	REQUIRE(mixture_set_weights(mx, 400, a2) == 0);
	CHECK_EQ_U64(mixture_segments(mx), 2);
	CHECK_EQ_U64(mixture_segment_start(mx, 1), 400);
	REQUIRE(mixture_set_weights(mx, 500, a2) == 0);
	CHECK_EQ_U64(mixture_segments(mx), 2);
	REQUIRE(mixture_set_weights(mx, 400, a0) == 0);
	CHECK_EQ_U64(mixture_segments(mx), 1);
	for (uint64_t g = 0; g < 3000; g++)
		CHECK_EQ_U64(order_sample(&o, g, NULL), order_sample(&ref, g, NULL));
	mixture_free(mx);
	mixture_free(mr);
}

/* mixture_fill() equals mixture_sample() one gsn at a time: runs of every length up to
 * past its internal chunk, at random gsns, across weight segments (one that starts a
 * gsn after another and one that gives a source nothing), epochs of small sources and
 * sources with a validation split. */
static void test_fill(void)
{
	const uint64_t n[4] = {1000, 13, 300, 1}, a0[4] = {5, 3, 2, 1}, a1[4] = {1, 0, 1, 7},
		       a2[4] = {2, 2, 1, 1}, a3[4] = {0, 0, 0, 1};
	struct order o;
	struct mixture *mx = make(4, n, a0, 11, &o);
	struct order src[4];
	uint64_t *ids = malloc(3000 * sizeof *ids), off[4];

	REQUIRE(ids);
	REQUIRE(mixture_set_weights(mx, 700, a1) == 0);
	REQUIRE(mixture_set_weights(mx, 701, a2) == 0);
	REQUIRE(mixture_set_weights(mx, 1500, a3) == 0);
	REQUIRE(mixture_set_weights(mx, 1503, a0) == 0);
	CHECK_EQ_U64(mixture_segments(mx), 5);
	for (int t = 0; t < 400; t++) {
		size_t count = t < 40 ? (size_t)t : 1 + (size_t)(rnd() % 2999);
		uint64_t gsn = t % 3 ? rnd() % 2500 : 650 + rnd() % 900;

		REQUIRE(mixture_fill(mx, gsn, count, ids) == 0);
		for (size_t i = 0; i < count; i++)
			CHECK_EQ_U64(ids[i], mixture_sample(mx, gsn + i, NULL, NULL));
	}
	/* far out, and the end of the gsn space */
	REQUIRE(mixture_fill(mx, ORDER_MAX_GSN - 1000, 1000, ids) == 0);
	for (size_t i = 0; i < 1000; i++)
		CHECK_EQ_U64(ids[i], mixture_sample(mx, ORDER_MAX_GSN - 1000 + i, NULL, NULL));
	CHECK(mixture_fill(mx, ORDER_MAX_GSN - 10, 11, ids) == -EOVERFLOW);
	mixture_free(mx);

	/* sources with held-out samples: training ids come through each source's split */
	for (size_t s = 0; s < 3; s++) {
		REQUIRE(order_init(&src[s], n[s] + 10, mixture_source_seed(3, s),
				   ORDER_SHUFFLE_GLOBAL) == 0);
		REQUIRE(order_set_holdout(&src[s], 10, 77 + s) == 0);
		off[s] = s * 2000;
	}
	REQUIRE(mixture_new(3, src, off, a0, &mx) == 0);
	REQUIRE(mixture_fill(mx, 123, 2900, ids) == 0);
	for (size_t i = 0; i < 2900; i++)
		CHECK_EQ_U64(ids[i], mixture_sample(mx, 123 + i, NULL, NULL));
	mixture_free(mx);
	free(ids);
}

/* The rank-order concatenation of a step's micro-batches is the same for every layout. */
static void test_layouts(void)
{
	const uint64_t n[4] = {31, 9, 100, 3}, a[4] = {3, 1, 5, 1};
	struct order o;
	struct mixture *mx = make(4, n, a, 99, &o);

	for (uint64_t b = 1; b <= 24; b++)
		for (uint64_t w = 1; w <= b; w++) {
			if (b % w)
				continue;
			for (uint64_t m = 1; m <= b / w; m++) {
				struct layout l;
				uint64_t ref[24], got[24];

				if ((b / w) % m)
					continue;
				l = test_layout(w, b, m, 3, 17);
				for (uint64_t t = 3; t < 9; t++) {
					size_t at = 0;
					uint64_t g0;

					REQUIRE(layout_step_gsn(&l, t, &g0) == 0);
					REQUIRE(order_fill(&o, g0, b, ref) == 0);
					for (uint64_t r = 0; r < w; r++)
						for (uint64_t mi = 0; mi < layout_micros(&l); mi++) {
							uint64_t g;

							REQUIRE(layout_micro_gsn(&l, r, t, mi, &g) == 0);
							REQUIRE(order_fill(&o, g, m, got + at) == 0);
							at += m;
						}
					CHECK(memcmp(ref, got, b * sizeof *ref) == 0);
				}
			}
		}
	mixture_free(mx);
}

static void test_split(void)
{
	const uint64_t total = 1000, v = 37;
	uint8_t *seen = calloc(total, 1);
	uint64_t ids[1000 - 37];
	struct order o, o2;
	uint64_t key = order_split_key("0123456789abcdef0123456789abcdef");

	REQUIRE(order_init(&o, total, 5, ORDER_SHUFFLE_GLOBAL) == 0);
	REQUIRE(order_set_holdout(&o, v, key) == 0);
	CHECK_EQ_U64(o.n, total - v);
	CHECK(order_set_holdout(&o, 1, key) == -EINVAL);
	REQUIRE(order_init(&o2, total, 6, ORDER_SHUFFLE_NONE) == 0);
	REQUIRE(order_set_holdout(&o2, v, key) == 0);
	for (uint64_t j = 0; j < v; j++) {
		uint64_t id = order_validation_sample(&o, j);

		REQUIRE(id < total);
		CHECK(!seen[id]);
		seen[id] = 2;
		/* the held-out set depends on the dataset alone, not on seed or shuffle */
		CHECK_EQ_U64(order_validation_sample(&o2, j), id);
	}
	for (uint64_t e = 0; e < 3; e++) {
		REQUIRE(order_fill(&o, e * (total - v), total - v, ids) == 0);
		for (uint64_t i = 0; i < total - v; i++) {
			CHECK(ids[i] < total && seen[ids[i]] != 2);
			CHECK(seen[ids[i]] != 1);
			seen[ids[i]] = 1;
			CHECK_EQ_U64(order_sample(&o, e * (total - v) + i, NULL), ids[i]);
		}
		for (uint64_t i = 0; i < total; i++)
			if (seen[i] == 1)
				seen[i] = 0;
	}
	/* a holdout must leave training samples */
	REQUIRE(order_init(&o, 10, 5, ORDER_SHUFFLE_GLOBAL) == 0);
	CHECK(order_set_holdout(&o, 10, key) == -EINVAL);
	free(seen);
}

int main(void)
{
	test_bound();
	test_weights();
	test_parse();
	test_coverage();
	test_curriculum();
	test_fill();
	test_layouts();
	test_split();
	return check_status();
}
