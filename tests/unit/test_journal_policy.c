/*
 * The resume policy as pure logic (core/journal/journal_policy.h), without SQLite: histories
 * are stated event by event, and the resume point (hist_point) and the start of a new
 * layout (hist_resolve) are checked against the rules of journal.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "journal_policy.h"
#include "test_layout.h"

/* A history under construction; events get seq 1, 2, ... and time_us 100 * seq + t0. */
struct hb {
	struct hist h;
	size_t cap;
	int64_t t0;
	size_t src;
};

static struct hev *hb_add(struct hb *b, enum hev_kind kind, uint64_t step, uint64_t gsn)
{
	struct hev *e;

	if (b->h.nev == b->cap) {
		b->cap = b->cap ? 2 * b->cap : 8;
		b->h.ev = realloc(b->h.ev, b->cap * sizeof(*b->h.ev));
		REQUIRE(b->h.ev);
	}
	e = &b->h.ev[b->h.nev++];
	memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->seq = (int64_t)b->h.nev;
	e->eff_us = b->t0 + 100 * e->seq;
	e->step = step;
	e->gsn = gsn;
	e->layout_id = e->seq;
	e->src = b->src;
	return e;
}

/* A layout row (W, B, m at S0/G0, started by rule); it becomes the last layout, with
 * no cursors yet. */
static void hb_layout(struct hb *b, uint64_t w, uint64_t gb, uint64_t m, uint64_t s0,
		      uint64_t g0, enum resume_rule rule)
{
	struct hev *e = hb_add(b, HEV_LAYOUT, s0, g0);

	e->l = test_layout(w, gb, m, s0, g0);
	e->rule = rule;
	free(b->h.cur);
	b->h.cur = NULL;
	b->h.ncur = 0;
	b->h.last = e; /* ev may move: hb_fix_last() after the last hb_add */
}

static void hb_fix_last(struct hb *b)
{
	b->h.last = NULL;
	for (size_t i = b->h.nev; i-- > 0;)
		if (b->h.ev[i].kind == HEV_LAYOUT) {
			b->h.last = &b->h.ev[i];
			break;
		}
}

/* A cursor of the last layout: rank delivered every claim before (dstep, 0). */
static void hb_cursor(struct hb *b, uint64_t rank, uint64_t dstep)
{
	b->h.cur = realloc(b->h.cur, (b->h.ncur + 1) * sizeof(*b->h.cur));
	REQUIRE(b->h.cur);
	b->h.cur[b->h.ncur++] = (struct journal_cursor){ rank, dstep, 0, dstep, 0 };
}

static struct journal_point point1(struct hb *b)
{
	struct journal_point p;

	hb_fix_last(b);
	REQUIRE(hist_point(&b->h, 1, NULL, &p) == 0);
	return p;
}

static void test_empty(void)
{
	struct hb b = { 0 };
	struct journal_point p = point1(&b);

	CHECK(p.basis == JOURNAL_POINT_EMPTY && p.samples == 0 && p.step == 0);
	CHECK(strstr(p.why, "no layout yet") != NULL);
	hist_release(&b.h);
}

/* Rule 3, exhaustively over W <= 3 and delivered steps S0..S0+3 per rank: the point is
 * the slowest rank's completed steps; a rank with no cursor counts as none. */
static void test_cursors_exhaustive(void)
{
	for (uint64_t w = 1; w <= 3; w++) {
		uint64_t combos = 1;

		for (uint64_t r = 0; r < w; r++)
			combos *= 5; /* 4 delivered steps, or no cursor */
		for (uint64_t c = 0; c < combos; c++) {
			struct hb b = { 0 };
			struct journal_point p;
			uint64_t x = c, minc = UINT64_MAX, s0 = 7, g0 = 50, gb = 4 * w;
			int missing = 0;

			hb_layout(&b, w, gb, 2, s0, g0, RESUME_AUTO);
			for (uint64_t r = 0; r < w; r++, x /= 5) {
				if (x % 5 == 4) {
					missing = 1;
					continue;
				}
				hb_cursor(&b, r, s0 + x % 5);
				minc = x % 5 < minc ? x % 5 : minc;
			}
			p = point1(&b);
			CHECK(p.basis == JOURNAL_POINT_CURSORS);
			if (missing) {
				minc = 0;
				CHECK(strstr(p.warning, "in none of the journals") != NULL);
			} else {
				CHECK(p.warning[0] == 0);
			}
			CHECK_EQ_U64(p.min_completed, minc);
			CHECK_EQ_U64(p.step, s0 + minc);
			CHECK_EQ_U64(p.samples, g0 + minc * gb);
			hist_release(&b.h);
		}
	}
}

/* Rule 2: with a mark after the latest fresh start, the latest statement (mark, rewind,
 * explicit start) is the point; auto starts are not statements; a mark before the
 * latest fresh start does not count. */
static void test_statements(void)
{
	struct hb b = { 0 };
	struct journal_point p;

	hb_layout(&b, 1, 4, 4, 0, 0, RESUME_AUTO);
	hb_add(&b, HEV_MARK, 3, 12);
	hb_add(&b, HEV_REWIND, 2, 8);
	hb_layout(&b, 2, 8, 2, 2, 8, RESUME_AUTO);
	hb_cursor(&b, 0, 9);
	hb_cursor(&b, 1, 9);
	p = point1(&b);
	CHECK(p.basis == JOURNAL_POINT_STATEMENT);
	CHECK(p.step == 2 && p.samples == 8);
	CHECK(strstr(p.why, "rewind to step 2") != NULL);

	hb_layout(&b, 2, 8, 2, 30, 500, RESUME_SAMPLES);
	p = point1(&b);
	CHECK(p.step == 30 && p.samples == 500);
	CHECK(strstr(p.why, "samples:G start at step 30") != NULL);
	hb_add(&b, HEV_MARK, 31, 508);
	p = point1(&b);
	CHECK(p.step == 31 && p.samples == 508);
	CHECK(strstr(p.why, "checkpoint mark at step 31") != NULL);

	/* fresh: the marks before it are history; with none after it, rule 3 */
	hb_layout(&b, 1, 4, 4, 0, 0, RESUME_FRESH);
	hb_cursor(&b, 0, 5);
	p = point1(&b);
	CHECK(p.basis == JOURNAL_POINT_CURSORS);
	CHECK(p.step == 5 && p.samples == 20);
	hb_add(&b, HEV_MARK, 4, 16);
	p = point1(&b);
	CHECK(p.basis == JOURNAL_POINT_STATEMENT && p.step == 4 && p.samples == 16);
	hist_release(&b.h);
}

/* Several journals: rows of the same (G0, W, B) belong to one layout whatever their S0;
 * the newest row of a rank counts; a journal whose last layout is another is left out;
 * a mark in any journal makes rule 2 apply to all. */
static void test_several_journals(void)
{
	struct hb a = { .t0 = 0, .src = 0 }, b = { .t0 = 1000, .src = 1 }, c = { .t0 = 0, .src = 2 };
	struct hist hs[3];
	const char *names[] = { "A", "B", "C" };
	struct journal_point p;

	hb_layout(&a, 4, 8, 2, 10, 80, RESUME_SAMPLES);
	hb_cursor(&a, 0, 14);
	hb_cursor(&a, 1, 13);
	hb_cursor(&a, 2, 12);  /* older row of rank 2: b's counts */
	hb_layout(&b, 4, 8, 2, 11, 80, RESUME_SAMPLES); /* same key, another S0 */
	hb_cursor(&b, 2, 16);
	hb_cursor(&b, 3, 15);
	hb_layout(&c, 2, 8, 4, 0, 0, RESUME_AUTO);       /* older, another layout */
	hb_cursor(&c, 0, 1);
	hb_fix_last(&a);
	hb_fix_last(&b);
	hb_fix_last(&c);
	hs[0] = a.h;
	hs[1] = b.h;
	hs[2] = c.h;
	REQUIRE(hist_point(hs, 3, names, &p) == 0);
	/* completed: r0 4, r1 3 (against S0 10), r2 5, r3 4 (against S0 11): min 3 */
	CHECK(p.basis == JOURNAL_POINT_CURSORS);
	CHECK_EQ_U64(p.min_completed, 3);
	CHECK_EQ_U64(p.step, 14);      /* S0 of the most recent row */
	CHECK_EQ_U64(p.samples, 80 + 3 * 8);
	CHECK(strstr(p.why, "rank 1 is the slowest") != NULL);

	hb_add(&c, HEV_MARK, 1, 8);    /* before b's start in time, after c's last layout */
	hb_fix_last(&c);
	hs[2] = c.h;
	REQUIRE(hist_point(hs, 3, names, &p) == 0);
	/* the latest statement is b's samples:G start, after the mark */
	CHECK(p.basis == JOURNAL_POINT_STATEMENT && p.step == 11 && p.samples == 80);
	CHECK(strstr(p.why, " in B") != NULL);
	hist_release(&a.h);
	hist_release(&b.h);
	hist_release(&c.h);
}

/* hist_reached_fn for the tests: layout rows reached the steps in reached_to[seq]. */
static uint64_t reached_to[16];

static int reached(void *ctx, const struct hev *e, uint64_t step)
{
	(void)ctx;
	return reached_to[e->seq] >= step;
}

static int resolve(struct hb *b, const char *rule_text, size_t nranks, struct layout *l,
		   char *desc, char *why)
{
	struct journal_resume r;

	REQUIRE(journal_resume_parse(rule_text, &r) == 0);
	hb_fix_last(b);
	return hist_resolve(&b->h, &(struct hist_start){ &r, nranks, reached, NULL, "J", desc,
			    256 }, l, why, 256);
}

static void test_resolve(void)
{
	struct hb b = { 0 };
	struct layout l = test_layout(2, 8, 2, 0, 0);
	char desc[256], why[256];

	/* an empty journal: auto and fresh start at 0; samples:G uses G / B; step:S fails */
	CHECK(resolve(&b, "auto", 1, &l, desc, why) == 0 && layout_start_step(&l) == 0 && layout_start_samples(&l) == 0);
	CHECK(resolve(&b, "fresh", 2, &l, desc, why) == 0);
	CHECK(strcmp(desc, "fresh: step 0, samples:0") == 0);
	CHECK(resolve(&b, "samples:20", 2, &l, desc, why) == 0);
	CHECK(layout_start_step(&l) == 2 && layout_start_samples(&l) == 20);
	CHECK(strstr(desc, "no history: G / global_batch") != NULL);
	l = test_layout(2, 8, 2, 77, 77);
	CHECK(resolve(&b, "step:3", 2, &l, desc, why) == -EINVAL);
	CHECK(strstr(why, "journal J has no layout starting at or before step 3") != NULL);
	CHECK(layout_start_step(&l) == 77 && layout_start_samples(&l) == 77); /* unchanged on failure */

	/* a history: layout 1 at S0 10, G0 100, B 4, which reached step 20; layout 2 (seq 2)
	 * at S0 12 (a restart from an older checkpoint) reached only step 13 */
	hb_layout(&b, 1, 4, 4, 10, 100, RESUME_SAMPLES);
	hb_layout(&b, 1, 4, 4, 12, 108, RESUME_STEP);
	hb_cursor(&b, 0, 13);
	reached_to[1] = 20;
	reached_to[2] = 13;
	CHECK(resolve(&b, "samples:110", 2, &l, desc, why) == 0);
	CHECK(layout_start_step(&l) == 12 && layout_start_samples(&l) == 110);   /* per layout 2: 12 + 2 / 4 */
	CHECK(resolve(&b, "samples:104", 2, &l, desc, why) == 0);
	CHECK(layout_start_step(&l) == 11 && layout_start_samples(&l) == 104);   /* only layout 1 has G0 <= 104 */
	CHECK(resolve(&b, "samples:104@40", 2, &l, desc, why) == 0);
	CHECK(layout_start_step(&l) == 40 && layout_start_samples(&l) == 104);
	CHECK(resolve(&b, "step:13", 2, &l, desc, why) == 0);  /* layout 2 reached 13 */
	CHECK(layout_start_step(&l) == 13 && layout_start_samples(&l) == 112);
	CHECK(resolve(&b, "step:15", 2, &l, desc, why) == 0);  /* only layout 1 reached 15 */
	CHECK(layout_start_step(&l) == 15 && layout_start_samples(&l) == 120);
	CHECK(strstr(desc, "per the layout started at step 10") != NULL);

	/* auto over a history needs every rank; it takes the resume point */
	CHECK(resolve(&b, "auto", 1, &l, desc, why) == -EINVAL);
	CHECK(strstr(why, "cannot resume 1 of the 2 ranks") != NULL);
	l = test_layout(1, 4, 4, 0, 0);
	CHECK(resolve(&b, "auto", 1, &l, desc, why) == 0);
	CHECK(layout_start_step(&l) == 13 && layout_start_samples(&l) == 112);  /* rank 0 delivered up to 13 */
	CHECK(strncmp(desc, "auto: every rank of the last layout", 35) == 0);

	/* a start whose step has no gsn below 2^62 */
	l = test_layout(1, 4, 4, 0, 0);
	CHECK(resolve(&b, "samples:4611686018427387903", 1, &l, desc, why) == -EINVAL);
	CHECK(strstr(why, "is out of range") != NULL);
	hist_release(&b.h);
}

int main(void)
{
	test_empty();
	test_cursors_exhaustive();
	test_statements();
	test_several_journals();
	test_resolve();
	return check_status();
}
