/*
 * Layout arithmetic (docs/design.md §3): rank shares tile every step for every
 * W dividing B and every m; the rank-order concatenation of a step is the same for every
 * (W, m); epochs cover every sample once; validation gives one message per rule; 64-bit
 * overflow is caught.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "order.h"
#include "test_layout.h"

/* Sample ids of step `step` as rank-order concatenation of all micro-batches. */
static void step_ids(const struct order *o, const struct layout *l, uint64_t step,
		     uint64_t *ids)
{
	size_t k = 0;

	for (uint64_t r = 0; r < layout_world_size(l); r++)
		for (uint64_t mi = 0; mi < layout_micros(l); mi++) {
			uint64_t g;

			REQUIRE(layout_micro_gsn(l, r, step, mi, &g) == 0);
			REQUIRE(order_fill(o, g, layout_micro_batch(l), ids + k) == 0);
			k += layout_micro_batch(l);
		}
	REQUIRE(k == layout_global_batch(l));
}

static void test_shares_tile(void)
{
	for (uint64_t b = 1; b <= 48; b++)
		for (uint64_t w = 1; w <= b; w++) {
			if (b % w)
				continue;
			for (uint64_t m = 1; m <= b / w; m++) {
				struct layout l;
				uint8_t seen[48];

				if ((b / w) % m)
					continue;
				l = test_layout(w, b, m, 5, 1000);
				for (uint64_t t = 5; t < 8; t++) {
					uint64_t start;

					memset(seen, 0, sizeof(seen));
					REQUIRE(layout_step_gsn(&l, t, &start) == 0);
					CHECK_EQ_U64(start, 1000 + (t - 5) * b);
					for (uint64_t r = 0; r < w; r++)
						for (uint64_t mi = 0; mi < layout_micros(&l); mi++) {
							uint64_t g;

							REQUIRE(layout_micro_gsn(&l, r, t, mi, &g) == 0);
							for (uint64_t i = 0; i < m; i++) {
								CHECK(g + i >= start && g + i < start + b);
								if (g + i >= start && g + i < start + b)
									seen[g + i - start]++;
							}
							/* rank r's share is contiguous */
							CHECK(g >= start + r * (b / w));
							CHECK(g + m <= start + (r + 1) * (b / w));
						}
					for (uint64_t i = 0; i < b; i++)
						CHECK(seen[i] == 1);
				}
			}
		}
}

static void test_concat_invariant(void)
{
	const uint64_t b = 24;
	struct order o;
	uint64_t ref[24], got[24];

	REQUIRE(order_init(&o, 37, 11, ORDER_SHUFFLE_GLOBAL) == 0);
	for (uint64_t t = 0; t < 10; t++) { /* 10 steps of 24 cross several epochs of 37 */
		struct layout one = test_layout(1, b, b, 0, 0);

		step_ids(&o, &one, t, ref);
		for (uint64_t w = 1; w <= b; w++) {
			if (b % w)
				continue;
			for (uint64_t m = 1; m <= b / w; m++) {
				struct layout l;

				if ((b / w) % m)
					continue;
				l = test_layout(w, b, m, 0, 0);
				step_ids(&o, &l, t, got);
				CHECK(memcmp(ref, got, sizeof(ref)) == 0);
			}
		}
	}
}

static void test_epoch_coverage(void)
{
	static const uint64_t ns[] = { 1, 2, 3, 37, 100, 1000, 4099 };

	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		uint64_t n = ns[i];
		uint64_t *ids = malloc(n * 3 * sizeof(*ids));
		uint8_t *seen = malloc(n);
		struct order o;

		REQUIRE(ids && seen);
		for (int mode = 0; mode < 2; mode++) {
			REQUIRE(order_init(&o, n, 5, mode ? ORDER_SHUFFLE_NONE : ORDER_SHUFFLE_GLOBAL) == 0);
			/* order_fill across epoch boundaries equals order_sample one by one */
			REQUIRE(order_fill(&o, 0, n * 3, ids) == 0);
			for (uint64_t e = 0; e < 3; e++) {
				memset(seen, 0, n);
				for (uint64_t p = 0; p < n; p++) {
					uint64_t epoch, id = order_sample(&o, e * n + p, &epoch);

					CHECK_EQ_U64(id, ids[e * n + p]);
					CHECK_EQ_U64(epoch, e);
					CHECK(id < n);
					if (id < n)
						seen[id]++;
					if (mode)
						CHECK_EQ_U64(id, p);
				}
				for (uint64_t s = 0; s < n; s++)
					CHECK(seen[s] == 1);
			}
		}
		free(ids);
		free(seen);
	}
}

static void expect_why(struct layout_values v, const char *needle)
{
	struct layout l;
	char why[256] = "";

	CHECK(layout_make(&v, &l, why, sizeof(why)) == -EINVAL);
	if (!strstr(why, needle)) {
		fprintf(stderr, "message \"%s\" lacks \"%s\"\n", why, needle);
		CHECK(0);
	}
}

static void test_validation(void)
{
	expect_why((struct layout_values){ 0, 8, 1, 0, 0 }, "world_size must be at least 1");
	expect_why((struct layout_values){ 1, 0, 1, 0, 0 }, "global_batch must be at least 1");
	expect_why((struct layout_values){ 3, 8, 1, 0, 0 }, "global_batch (8) must be a multiple of world_size (3)");
	expect_why((struct layout_values){ 2, 8, 0, 0, 0 }, "micro_batch must be at least 1");
	expect_why((struct layout_values){ 2, 8, 3, 0, 0 }, "micro_batch (3) must divide global_batch/world_size (4 = 8/2)");
	expect_why((struct layout_values){ 1, 8, 8, 0, ORDER_MAX_GSN }, "start_samples");
}

static void test_overflow(void)
{
	struct layout l = test_layout(4, 1024, 64, 0, ORDER_MAX_GSN - 2048); /* share 256, A = 4 */
	struct order o;
	uint64_t g, ids[4];

	CHECK(layout_micro_gsn(&l, 3, 1, 3, &g) == 0);
	CHECK_EQ_U64(g, ORDER_MAX_GSN - 64);
	CHECK(layout_micro_gsn(&l, 0, 2, 0, &g) == -EOVERFLOW);
	CHECK(layout_step_gsn(&l, UINT64_MAX, &g) == -EOVERFLOW);
	CHECK(layout_micro_gsn(&l, 4, 0, 0, &g) == -EINVAL);   /* rank >= W */
	CHECK(layout_micro_gsn(&l, 0, 0, 4, &g) == -EINVAL);   /* micro >= A */
	REQUIRE(layout_start_at(&l, 10, layout_start_samples(&l) - 4096, &l, NULL, 0) == 0);
	CHECK(layout_micro_gsn(&l, 0, 9, 0, &g) == -EINVAL);   /* step < S0 */

	/* N and gsn up to 2^62 */
	REQUIRE(order_init(&o, ORDER_MAX_GSN, 1, ORDER_SHUFFLE_GLOBAL) == 0);
	CHECK(order_fill(&o, ORDER_MAX_GSN - 4, 4, ids) == 0);
	CHECK(order_fill(&o, ORDER_MAX_GSN - 3, 4, ids) == -EOVERFLOW);
	for (int i = 0; i < 4; i++)
		CHECK(ids[i] < ORDER_MAX_GSN);
	CHECK(order_init(&o, ORDER_MAX_GSN + 1, 1, ORDER_SHUFFLE_GLOBAL) == -EINVAL);
	REQUIRE(order_init(&o, 1000, 1, ORDER_SHUFFLE_GLOBAL) == 0);
	CHECK_EQ_U64(order_limit(&o, 0), ORDER_MAX_GSN);
	CHECK_EQ_U64(order_limit(&o, 3), 3000);
	CHECK_EQ_U64(order_limit(&o, UINT64_MAX), ORDER_MAX_GSN);
}

static void test_advance(void)
{
	struct layout l = test_layout(2, 8, 2, 3, 0); /* A = 2 */
	uint64_t step = 3, micro = 0;

	layout_advance(&l, &step, &micro);
	CHECK(step == 3 && micro == 1);
	layout_advance(&l, &step, &micro);
	CHECK(step == 4 && micro == 0);
	CHECK_EQ_U64(layout_step_of(&l, 15), 4);
	CHECK_EQ_U64(layout_step_of(&l, 16), 5);
}

/* Every valid small layout (W, B, m) with S0 and G0 from a few values: f(l) for each. */
static void each_small_layout(void (*f)(const struct layout *l))
{
	static const uint64_t starts[][2] = { { 0, 0 }, { 3, 0 }, { 0, 7 }, { 5, 1000 } };

	for (uint64_t b = 1; b <= 12; b++)
		for (uint64_t w = 1; w <= b; w++)
			for (uint64_t m = 1; w <= b && m <= b / w; m++)
				for (size_t k = 0; k < sizeof(starts) / sizeof(starts[0]); k++) {
					struct layout l;

					if (b % w || (b / w) % m)
						continue;
					l = test_layout(w, b, m, starts[k][0], starts[k][1]);
					f(&l);
				}
}

/* Claim indices: ci counts the claims of layout_advance() from (S0, 0); the two
 * conversions are inverses; positions outside the layout are refused. */
static void ci_props(const struct layout *l)
{
	uint64_t step = layout_start_step(l), micro = 0, a = layout_micros(l), ci, s, mi;

	for (uint64_t k = 0; k < 5 * a + 3; k++) {
		REQUIRE(layout_pos_ci(l, step, micro, &ci) == 0);
		CHECK_EQ_U64(ci, k);
		layout_ci_pos(l, k, &s, &mi);
		CHECK(s == step && mi == micro);
		layout_advance(l, &step, &micro);
	}
	CHECK(layout_pos_ci(l, layout_start_step(l), a, &ci) == -EINVAL);
	if (layout_start_step(l))
		CHECK(layout_pos_ci(l, layout_start_step(l) - 1, 0, &ci) == -EINVAL);
	CHECK(layout_pos_ci(l, UINT64_MAX, 0, &ci) == (a > 1 ? -EOVERFLOW : 0));
}

static void test_claim_index(void)
{
	struct layout big = test_layout(1, 4, 1, 0, 0);   /* A = 4 */
	uint64_t step, micro;

	each_small_layout(ci_props);
	layout_ci_pos(&big, UINT64_MAX, &step, &micro);
	CHECK_EQ_U64(step, UINT64_MAX / 4);
	CHECK_EQ_U64(micro, 3);
	big = test_layout(1, 1, 1, ORDER_MAX_GSN - 1, 0);  /* the step saturates */
	layout_ci_pos(&big, UINT64_MAX, &step, &micro);
	CHECK_EQ_U64(step, UINT64_MAX);
}

/* A step is in a stream ending at `limit` iff it is at or past S0 and each of its B
 * gsns lies below limit: against that definition, gsn by gsn. */
static void stream_props(const struct layout *l)
{
	for (uint64_t limit = 0; limit <= layout_start_samples(l) + 4 * layout_global_batch(l) + 2; limit++)
		for (uint64_t t = 0; t < layout_start_step(l) + 6; t++) {
			int want = t >= layout_start_step(l);

			for (uint64_t i = 0; want && i < layout_global_batch(l); i++)
				want = layout_start_samples(l) + (t - layout_start_step(l)) * layout_global_batch(l) + i < limit;
			CHECK(layout_step_in_stream(l, limit, t) == want);
		}
}

static void test_step_in_stream(void)
{
	struct layout l = test_layout(1, 8, 8, 0, ORDER_MAX_GSN - 16);

	each_small_layout(stream_props);
	CHECK(layout_step_in_stream(&l, ORDER_MAX_GSN, 1) == 1);
	CHECK(layout_step_in_stream(&l, ORDER_MAX_GSN, 2) == 0);       /* no gsn */
	CHECK(layout_step_in_stream(&l, ORDER_MAX_GSN, UINT64_MAX) == 0);
}

/* at/<G>: step 0 of layout_at() starts at G, its ranks and micro-batches as l's. */
static void at_props(const struct layout *l)
{
	for (uint64_t g = 0; g < 3 * layout_global_batch(l) + 2; g++) {
		struct layout at;
		uint64_t x;

		REQUIRE(layout_at(l, g, &at) == 0);
		CHECK(layout_world_size(&at) == layout_world_size(l) && layout_global_batch(&at) == layout_global_batch(l) &&
		      layout_micro_batch(&at) == layout_micro_batch(l) && layout_start_step(&at) == 0 && layout_start_samples(&at) == g);
		for (uint64_t r = 0; r < layout_world_size(l); r++)
			for (uint64_t mi = 0; mi < layout_micros(l); mi++) {
				REQUIRE(layout_micro_gsn(&at, r, 0, mi, &x) == 0);
				CHECK_EQ_U64(x, g + r * layout_share(l) + mi * layout_micro_batch(l));
			}
	}
}

/* layout_micro_step_gsn() inverts layout_micro_gsn() for every micro-batch, and refuses
 * what fits no micro-batch. */
static void micro_step_props(const struct layout *l)
{
	for (uint64_t t = layout_start_step(l); t < layout_start_step(l) + 3; t++)
		for (uint64_t r = 0; r < layout_world_size(l); r++)
			for (uint64_t mi = 0; mi < layout_micros(l); mi++) {
				uint64_t g, start, back;

				REQUIRE(layout_micro_gsn(l, r, t, mi, &g) == 0);
				REQUIRE(layout_step_gsn(l, t, &start) == 0);
				CHECK(layout_micro_step_gsn(l, r, mi, g, &back) == 0);
				CHECK_EQ_U64(back, start);
			}
}

static void test_micro_step(void)
{
	struct layout l = test_layout(2, 8, 2, 0, 0);
	uint64_t g;

	each_small_layout(micro_step_props);
	CHECK(layout_micro_step_gsn(&l, 2, 0, 100, &g) == -EINVAL);   /* rank >= W */
	CHECK(layout_micro_step_gsn(&l, 0, 2, 100, &g) == -EINVAL);   /* micro >= A */
	CHECK(layout_micro_step_gsn(&l, 1, 1, 5, &g) == -EINVAL);     /* gsn before its rank */
	CHECK(layout_micro_step_gsn(&l, 1, 1, 6, &g) == 0 && g == 0);
}

static void test_at(void)
{
	struct layout l = test_layout(2, 8, 4, 9, 9), at = l;

	each_small_layout(at_props);
	CHECK(layout_at(&l, ORDER_MAX_GSN - 8, &at) == 0);
	CHECK(layout_at(&l, ORDER_MAX_GSN - 7, &at) == -EOVERFLOW);
	CHECK(layout_at(&l, ORDER_MAX_GSN, &at) == -EOVERFLOW);
	CHECK(layout_at(&l, UINT64_MAX, &at) == -EOVERFLOW);
	CHECK_EQ_U64(layout_start_samples(&at), ORDER_MAX_GSN - 8); /* untouched on failure */
}

/* consumed_samples: the slowest rank's whole delivered steps; the gsn returned is where
 * step S0 + done starts (layout_step_gsn), and a delivered step at or before S0 counts
 * nothing. */
static void consumed_props(const struct layout *l)
{
	for (uint64_t d = 0; d < layout_start_step(l) + 6; d++) {
		uint64_t done = layout_done(l, d), step, g;

		CHECK_EQ_U64(done, d > layout_start_step(l) ? d - layout_start_step(l) : 0);
		CHECK_EQ_U64(layout_consumed(l, done, &step),
			     layout_start_samples(l) + done * layout_global_batch(l));
		CHECK_EQ_U64(step, layout_start_step(l) + done);
		REQUIRE(layout_step_gsn(l, step, &g) == 0);
		CHECK_EQ_U64(layout_consumed(l, done, NULL), g);
		/* from the slowest rank's delivered step: the same, step and all */
		CHECK_EQ_U64(layout_consumed_at(l, d, &step), g);
		CHECK_EQ_U64(step, layout_start_step(l) + done);
	}
}

static void test_consumed(void)
{
	struct layout l = test_layout(1, 10, 10, 4, ORDER_MAX_GSN - 25);
	uint64_t step;

	each_small_layout(consumed_props);
	/* saturation: the last whole step below 2^62 rather than a wrapped gsn */
	CHECK_EQ_U64(layout_consumed(&l, 2, &step), ORDER_MAX_GSN - 5);
	CHECK_EQ_U64(step, 6);
	CHECK_EQ_U64(layout_consumed(&l, 3, &step), ORDER_MAX_GSN - 5);
	CHECK_EQ_U64(step, 6);
	CHECK_EQ_U64(layout_consumed(&l, UINT64_MAX, &step), ORDER_MAX_GSN - 5);
	CHECK_EQ_U64(step, 6);
}

/* S0 from G: the step of the history's layout that holds G (G on its boundary or
 * inside it); with no history, G / B. */
static void resume_props(const struct layout *prev)
{
	for (uint64_t g = layout_start_samples(prev); g < layout_start_samples(prev) + 5 * layout_global_batch(prev); g++) {
		uint64_t s = layout_resume_step(prev, 99, g), lo, hi;

		REQUIRE(layout_step_gsn(prev, s, &lo) == 0 && layout_step_gsn(prev, s + 1, &hi) == 0);
		CHECK(lo <= g && g < hi);
		CHECK_EQ_U64(layout_resume_step(NULL, layout_global_batch(prev), g), g / layout_global_batch(prev));
	}
}

/* The rules layout.c gained to take the copies' place: each against its definition, and
 * at the edges the copies never checked (gsn + k B past 2^62, a start that leaves no
 * step). */
static void test_new_rules(void)
{
	struct layout l = test_layout(2, 8, 2, 5, 40), start, zero = { { 0 } };
	struct layout_values v;
	uint64_t g, s = 0;
	char why[160] = "";

	CHECK(layout_gsn_after(&l, 40, 3, &g) == 0 && g == 64);
	CHECK(layout_gsn_after(&l, ORDER_MAX_GSN - 16, 1, &g) == 0);
	CHECK(layout_gsn_after(&l, ORDER_MAX_GSN - 16, 2, &g) == -EOVERFLOW);
	CHECK(layout_gsn_after(&l, 0, UINT64_MAX / 4, &g) == -EOVERFLOW); /* k B wraps */
	CHECK_EQ_U64(layout_steps_below(&l, 40, 40 + 8 * 7 + 5), 7);
	CHECK_EQ_U64(layout_steps_below(&l, 40, 40), 0);
	CHECK_EQ_U64(layout_steps_below(&l, 41, 40), 0);
	CHECK(layout_step_number(&l, 56, &s) == 0 && s == 7);
	CHECK(layout_step_number(&l, 57, &s) == -ERANGE);
	CHECK(layout_step_number(&l, 32, &s) == -ERANGE);
	CHECK_EQ_U64(layout_whole_steps(&l, 23), 2);
	CHECK_EQ_U64(layout_shares_samples(&l, 3), 12);
	CHECK_EQ_U64(layout_shares_samples(&l, UINT64_MAX), UINT64_MAX);
	CHECK_EQ_U64(layout_micros_samples(&l, 2), 4);
	CHECK_EQ_U64(layout_default_micro_batch(4, 16), 4);
	CHECK_EQ_U64(layout_default_micro_batch(4, 10), 1);   /* layout_make says why */
	CHECK_EQ_U64(layout_default_micro_batch(0, 10), 1);
	CHECK(layout_valid(&l) && !layout_valid(&zero));
	CHECK(layout_same_shape(&l, &(struct layout){ { 0 } }) == 0);
	CHECK(layout_start_at(&l, 0, 3, &start, why, sizeof(why)) == 0);
	layout_get(&start, &v);
	CHECK(v.world_size == 2 && v.global_batch == 8 && v.micro_batch == 2 &&
	      v.start_step == 0 && v.start_samples == 3 && layout_same_shape(&l, &start));
	/* a start whose next step has no gsn, and one past 2^62: refused, l unchanged */
	CHECK(layout_start_at(&l, 1, ORDER_MAX_GSN - 4, &start, why, sizeof(why)) == -EINVAL);
	CHECK(strstr(why, "past 2^62") != NULL);
	CHECK(layout_start_at(&l, ORDER_MAX_GSN, 0, &start, why, sizeof(why)) == -EINVAL);
	CHECK(strstr(why, "start_step") != NULL);
	CHECK_EQ_U64(layout_start_samples(&start), 3);
}

static void test_resume_step(void)
{
	struct layout prev = test_layout(2, 8, 4, 40, 13);

	each_small_layout(resume_props);
	CHECK_EQ_U64(layout_resume_step(&prev, 6, 13), 40);
	CHECK_EQ_U64(layout_resume_step(&prev, 6, 20), 40);
	CHECK_EQ_U64(layout_resume_step(&prev, 6, 21), 41);
	CHECK_EQ_U64(layout_resume_step(NULL, 6, 20), 3);
}

static void test_rankset(void)
{
	struct rankset s;
	char why[128], text[64];

	CHECK(rankset_parse("0-3,8,9", 16, &s, why, sizeof(why)) == 0);
	CHECK(s.count == 6);
	CHECK(rankset_has(&s, 3) && rankset_has(&s, 8) && !rankset_has(&s, 4));
	rankset_format(&s, text, sizeof(text));
	CHECK(!strcmp(text, "0-3,8-9"));
	rankset_release(&s);
	CHECK(rankset_parse(NULL, 4, &s, why, sizeof(why)) == 0 && s.count == 4);
	rankset_release(&s);
	CHECK(rankset_parse("9,1", 10, &s, why, sizeof(why)) == 0 && s.ranks[0] == 1);
	rankset_release(&s);
	CHECK(rankset_parse("0-8", 8, &s, why, sizeof(why)) == -EINVAL && strstr(why, "not below world_size"));
	CHECK(rankset_parse("3-1", 8, &s, why, sizeof(why)) == -EINVAL && strstr(why, "reversed"));
	CHECK(rankset_parse("1,1", 8, &s, why, sizeof(why)) == -EINVAL && strstr(why, "twice"));
	CHECK(rankset_parse("a", 8, &s, why, sizeof(why)) == -EINVAL && strstr(why, "expected a rank"));
	CHECK(rankset_parse("1;2", 8, &s, why, sizeof(why)) == -EINVAL && strstr(why, "unexpected"));
	CHECK(rankset_parse("1-", 8, &s, why, sizeof(why)) == -EINVAL);
}

/* Known answers: the order is part of the contract. A journal written today holds gsn
 * positions, and a later build must map them to the same samples, so any change to the
 * permutation (rounds, mixer, key schedule, domain, cycle-walking) or to how order_fill()
 * crosses epochs fails here. The values were computed by the first release's
 * order_sample() one gsn at a time. The runs of 8 cross an epoch boundary in cases 2-5
 * (in pieces shorter than PRP_LANES, which prp_apply_run() evaluates one by one); the
 * run of 24 crosses one with 10 and 14 ids on each side, both evaluated in lanes. */
static void test_known_order(void)
{
	static const struct {
		uint64_t n, seed, gsn, ids[8];
	} cases[] = {
		{ 10, 0, 0, { 9, 2, 0, 5, 8, 3, 7, 6 } },
		{ 10, 0, 8, { 1, 4, 0, 3, 4, 5, 9, 8 } },
		{ 68159, 1234, 68155, { 44338, 19841, 20290, 29484, 61617, 16741, 46296, 66863 } },
		{ 1000000000, 7, 2999999996, { 916576395, 74138685, 108389835, 633810700,
					       801018665, 199753408, 271800543, 652944978 } },
		{ 4097, UINT64_MAX, 12290, { 2405, 419, 118, 1581, 2712, 1830, 819, 3545 } },
		{ 300, 42, 0, { 271, 246, 11, 208, 40, 113, 73, 281 } },
	};

	static const uint64_t long_run[24] = { 228, 2, 127, 288, 149, 214, 20, 245, 12, 177,
					       279, 187, 79, 221, 69, 198, 257, 217, 193, 135,
					       165, 41, 124, 178 };
	struct order o;
	uint64_t ids[24];

	REQUIRE(order_init(&o, 300, 42, ORDER_SHUFFLE_GLOBAL) == 0);
	REQUIRE(order_fill(&o, 290, 24, ids) == 0);
	for (size_t i = 0; i < 24; i++)
		CHECK_EQ_U64(ids[i], long_run[i]);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		REQUIRE(order_init(&o, cases[k].n, cases[k].seed, ORDER_SHUFFLE_GLOBAL) == 0);
		REQUIRE(order_fill(&o, cases[k].gsn, 8, ids) == 0);
		for (size_t i = 0; i < 8; i++) {
			CHECK_EQ_U64(ids[i], cases[k].ids[i]);
			CHECK_EQ_U64(order_sample(&o, cases[k].gsn + i, NULL), cases[k].ids[i]);
		}
	}
}

int main(void)
{
	test_known_order();
	test_shares_tile();
	test_concat_invariant();
	test_epoch_coverage();
	test_validation();
	test_overflow();
	test_advance();
	test_claim_index();
	test_step_in_stream();
	test_at();
	test_micro_step();
	test_new_rules();
	test_consumed();
	test_resume_step();
	test_rankset();
	return check_status();
}
