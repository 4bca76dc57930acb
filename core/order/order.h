/*
 * order.h: the global order of samples and the layout arithmetic of docs/design.md §2-3.
 *
 * Owns the pure functions that every other module and every test relies on:
 *   gsn -> (epoch e = g / N, position p = g % N, sample id = perm(seed, e)(p));
 *   (layout, rank, step, micro) -> the gsn range of that micro-batch.
 * A step t >= S0 of a layout covers gsn [G0 + (t - S0) * B, G0 + (t - S0 + 1) * B);
 * rank r owns [r * B/W, (r + 1) * B/W) of it, served as A = B/(W*m) micro-batches of m.
 *
 * struct order and the order of one dataset are order_one.h's; the functions here take
 * any order, a mixture's too: they hand off to mix.h when o->mix is set, so order stands
 * above both order_one and mix (neither calls back up).
 *
 * All arithmetic is 64-bit with overflow checks; N and every gsn stay below 2^62.
 * Pure, no globals, thread-safe.
 */
#ifndef ZEPHON_ORDER_H
#define ZEPHON_ORDER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "order_one.h"

/* The validation stream of o (a split, or a mixture whose sources have splits) as an
 * order of its own: gsn j is validation position j (mixture_validation_sample() for a
 * mixture), n the stream's length. 0, or -ENOENT (no sample is held out). */
int order_validation(const struct order *o, struct order *out);

/* Sample id at gsn g (g < ORDER_MAX_GSN, asserted); *epoch receives g / N when non-NULL. */
uint64_t order_sample(const struct order *o, uint64_t gsn, uint64_t *epoch);

/* The epoch a batch from gsn is in: g / N (on the validation stream N is V: 0 within
 * it); for a mixture mixture_epoch(), as its sources' epochs differ and g over the
 * union's samples is the epoch of none of them. */
uint64_t order_epoch(const struct order *o, uint64_t gsn);

/* ids[i] = order_sample(o, gsn + i) for i < count, keying each epoch once.
 * 0, or -EOVERFLOW when gsn + count > ORDER_MAX_GSN. */
int order_fill(const struct order *o, uint64_t gsn, size_t count, uint64_t *ids);

/* First gsn past the end of a stream of `epochs` epochs (0 = endless: ORDER_MAX_GSN). */
uint64_t order_limit(const struct order *o, uint64_t epochs);

/* One mount's parallel configuration. */
struct layout {
	uint64_t world_size;    /* W, ranks in the job */
	uint64_t global_batch;  /* B, samples per optimizer step */
	uint64_t micro_batch;   /* m, samples per claim */
	uint64_t start_step;    /* S0, first step number of this layout */
	uint64_t start_samples; /* G0, gsn where step S0 starts */
};

/* Check one rule at a time; on failure return -EINVAL and point *why at a static,
 * one-line message naming the rule ("global_batch (10) must be a multiple of ..." is
 * built into `why_buf` of `why_len` bytes). Rules: W >= 1; B >= 1; B % W == 0;
 * m >= 1; (B/W) % m == 0; G0 < ORDER_MAX_GSN; the gsn of step S0 + 2^62/B fits. */
int layout_check(const struct layout *l, char *why_buf, size_t why_len);

/* The five values a layout was made of (what the journal records and /status shows). */
uint64_t layout_world_size(const struct layout *l);
uint64_t layout_global_batch(const struct layout *l);
uint64_t layout_micro_batch(const struct layout *l);
uint64_t layout_start_step(const struct layout *l);
uint64_t layout_start_samples(const struct layout *l);

/* Whole steps of B samples in n samples: n / B (a validation split's steps). */
uint64_t layout_whole_steps(const struct layout *l, uint64_t n);

/* B / W: samples of one rank per step. */
uint64_t layout_share(const struct layout *l);
/* A = B / (W * m): micro-batches of one rank per step. */
uint64_t layout_micros(const struct layout *l);

/* First gsn of the micro-batch (rank, step, micro); it spans m gsns.
 * 0, or -EINVAL (rank >= W, step < S0, micro >= A), or -EOVERFLOW (past ORDER_MAX_GSN). */
int layout_micro_gsn(const struct layout *l, uint64_t rank, uint64_t step,
		     uint64_t micro, uint64_t *gsn);

/* First gsn of step `step` (= G0 + (step - S0) * B). 0, -EINVAL (step < S0), -EOVERFLOW. */
int layout_step_gsn(const struct layout *l, uint64_t step, uint64_t *gsn);

/* The step containing gsn g >= G0 (g - G0 need not be a multiple of B: rounds down). */
uint64_t layout_step_of(const struct layout *l, uint64_t gsn);

/* Advance a rank cursor (step, micro) past one claim. */
void layout_advance(const struct layout *l, uint64_t *step, uint64_t *micro);

/* Claim indices. A rank's claims are numbered ci = 0, 1, 2, ... from (S0, 0) in the order
 * they are handed out: ci = (step - S0) * A + micro. layout_ci_pos() is the inverse of
 * layout_pos_ci() for every ci.
 * layout_pos_ci: 0, or -EINVAL (step < S0, micro >= A), -EOVERFLOW (ci past 2^64). */
int layout_pos_ci(const struct layout *l, uint64_t step, uint64_t micro, uint64_t *ci);
/* The (step, micro) of claim index ci; step saturates at UINT64_MAX (never reached:
 * a step past ORDER_MAX_GSN has no gsn). */
void layout_ci_pos(const struct layout *l, uint64_t ci, uint64_t *step, uint64_t *micro);

/* Is step `step` still in a stream that ends at gsn `limit` (order_limit())? 1 when
 * step >= S0 and all B samples of it lie below limit, else 0 (a step past the end, a
 * step before S0, or one whose gsn is past ORDER_MAX_GSN). The stream stops after the
 * last full step: a step that would cross limit is not in it. */
int layout_step_in_stream(const struct layout *l, uint64_t limit, uint64_t step);

/* The layout a gsn-addressed read uses: l's W, B and m, with step 0 starting at gsn
 * (S0 = 0, G0 = gsn), whatever l's own steps are. 0, or -EOVERFLOW (gsn + B past
 * ORDER_MAX_GSN); *out is set only on success. */
int layout_at(const struct layout *l, uint64_t gsn, struct layout *out);

/* Steps of layout l that a rank has completed when it delivered every claim before
 * (delivered_step, 0): delivered_step - S0, or 0 when delivered_step < S0. */
uint64_t layout_done(const struct layout *l, uint64_t delivered_step);

/* consumed_samples after `done` whole steps of l: G0 + done * B, the gsn below which
 * every sample of those steps lies; *step (may be NULL) receives S0 + done, the step
 * that starts there. Saturates at ORDER_MAX_GSN (and *step at the step that reaches
 * it) rather than wrapping. A job's consumed_samples is this of the minimum of
 * layout_done() over its ranks. */
uint64_t layout_consumed(const struct layout *l, uint64_t done, uint64_t *step);

/* consumed_samples of a job on layout l whose slowest rank has delivered every claim
 * before (slowest, 0), slowest the minimum over its ranks' delivered steps (S0 when it
 * has no rank): layout_consumed(l, layout_done(l, slowest), step). The one rule behind
 * /status, `zephon journal show` and a journal's own count. */
uint64_t layout_consumed_at(const struct layout *l, uint64_t slowest, uint64_t *step);

/* S0 for a layout that starts at gsn (`resume=samples:G`), numbered by the history:
 * with prev (the latest earlier layout whose G0 <= gsn) prev's step that contains gsn,
 * S0' + (gsn - G0') / B' (rounded down when gsn is inside a step of prev); without one
 * (prev NULL) gsn / global_batch. global_batch >= 1; prev->start_samples <= gsn. */
uint64_t layout_resume_step(const struct layout *prev, uint64_t global_batch, uint64_t gsn);

/* A set of ranks, sorted, unique, each < W. */
struct rankset {
	uint64_t *ranks;
	size_t count;
};

/* Parse "0-3,8,9" (NULL or "" = all of 0..W-1). 0, -ENOMEM, or -EINVAL with a message
 * in why_buf (bad syntax, rank >= W, reversed range, duplicate). */
int rankset_parse(const char *text, uint64_t world_size, struct rankset *out,
		  char *why_buf, size_t why_len);
/* Does the set contain rank r? O(log count). */
int rankset_has(const struct rankset *s, uint64_t rank);
/* The index of rank in s->ranks, or -1 when the set does not contain it. O(log count).
 * The one search of a rank for every table kept in the set's order (the server's rank
 * states, the journal's cursors, the progress of each rank). */
ssize_t rankset_index(const struct rankset *s, uint64_t rank);
/* Write the compact form ("0-3,8") into out (always NUL-terminated, truncated). */
void rankset_format(const struct rankset *s, char *out, size_t len);
void rankset_release(struct rankset *s);

#endif
