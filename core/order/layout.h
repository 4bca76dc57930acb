/*
 * layout.h: one mount's parallel configuration and every rule of its arithmetic
 * (docs/design.md §2-3), in one place: world_size W, global_batch B, micro_batch m,
 * start_step S0, start_samples G0. A step t >= S0 covers gsn [G0 + (t - S0) * B,
 * G0 + (t - S0 + 1) * B); rank r owns [r * B/W, (r + 1) * B/W) of it, served as
 * A = B/(W*m) micro-batches of m.
 *
 * struct layout is opaque outside layout.c: a value (copied, kept in a journal row, held
 * in a config) whose fields nothing else reads, as pthread_mutex_t's are; the only ways
 * in are layout_make() and layout_start_at(), which check every rule, and the only way
 * to a step's gsn, a rank's share, a micro-batch's gsn, the steps left before the end of
 * a stream or whether a gsn is on a step boundary is a function below. A file that
 * reaches for a field (l->global_batch) does not compile; tests/lint/layout_copies.py
 * fails on the copies the compiler cannot see (a getter's value in arithmetic, the walk
 * of a run's bytes by share).
 *
 * Invariant of every struct layout made here: W, B, m >= 1; B % W == 0; (B/W) % m == 0;
 * B, S0 and G0 below 2^62 (ORDER_MAX_GSN). All arithmetic is 64-bit with overflow checks;
 * every gsn stays below ORDER_MAX_GSN. Pure, no globals, thread-safe.
 */
#ifndef ZEPHON_LAYOUT_H
#define ZEPHON_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "order_one.h"

/* Opaque: read through the functions below only (layout.c owns the fields). */
struct layout {
	uint64_t opaque_[5];
};

/* The five values a layout is made of: what a journal row records, an option gives and
 * /status shows. No rule reads them: layout_make() turns them into a layout. */
struct layout_values {
	uint64_t world_size;    /* W, ranks in the job */
	uint64_t global_batch;  /* B, samples per optimizer step */
	uint64_t micro_batch;   /* m, samples per claim */
	uint64_t start_step;    /* S0, first step number of this layout */
	uint64_t start_samples; /* G0, gsn where step S0 starts */
};

/* Make *out of v, checking one rule at a time: W >= 1; B >= 1; B % W == 0; m >= 1;
 * (B/W) % m == 0; B, G0 and S0 below 2^62. 0, or -EINVAL with a one-line message naming
 * the rule in why ("global_batch (10) must be a multiple of world_size (4)"; why may be
 * NULL); *out is set only on success. */
int layout_make(const struct layout_values *v, struct layout *out, char *why, size_t why_len);

/* micro_batch when none is given: one micro-batch per step, B / W (1 when W does not
 * divide B: layout_make() then says what is wrong). */
uint64_t layout_default_micro_batch(uint64_t world_size, uint64_t global_batch);

/* l with S0 = start_step and G0 = start_samples (a start the journal resolved): 0, or
 * -EINVAL with why (S0 or G0 not below 2^62, or the step after S0 past ORDER_MAX_GSN).
 * *out is set only on success; it may be l. */
int layout_start_at(const struct layout *l, uint64_t start_step, uint64_t start_samples,
		    struct layout *out, char *why, size_t why_len);

/* 1 when l holds a layout layout_make() made (its invariant holds), 0 for one never made
 * (a zeroed struct): what an entry point that takes a layout from its caller checks. */
int layout_valid(const struct layout *l);

/* The five values of l (a journal row, /status). */
void layout_get(const struct layout *l, struct layout_values *out);
uint64_t layout_world_size(const struct layout *l);
uint64_t layout_global_batch(const struct layout *l);
uint64_t layout_micro_batch(const struct layout *l);
uint64_t layout_start_step(const struct layout *l);
uint64_t layout_start_samples(const struct layout *l);

/* 1 when a and b have the same W, B and m (whatever their starts), else 0. */
int layout_same_shape(const struct layout *a, const struct layout *b);

/* B / W: samples of one rank per step. */
uint64_t layout_share(const struct layout *l);
/* A = B / (W * m): micro-batches of one rank per step. */
uint64_t layout_micros(const struct layout *l);
/* Samples of `shares` shares of one rank (steps): shares * B/W, saturating at
 * UINT64_MAX. */
uint64_t layout_shares_samples(const struct layout *l, uint64_t shares);
/* Samples of `micros` consecutive micro-batches: micros * m (<= B/W for micros <= A). */
uint64_t layout_micros_samples(const struct layout *l, uint64_t micros);
/* Whole steps of B samples in n samples: n / B (a validation split's steps). */
uint64_t layout_whole_steps(const struct layout *l, uint64_t n);

/* First gsn of step `step` (= G0 + (step - S0) * B). 0, -EINVAL (step < S0), -EOVERFLOW. */
int layout_step_gsn(const struct layout *l, uint64_t step, uint64_t *gsn);

/* First gsn of the micro-batch (rank, step, micro); it spans m gsns.
 * 0, or -EINVAL (rank >= W, step < S0, micro >= A), or -EOVERFLOW (past ORDER_MAX_GSN). */
int layout_micro_gsn(const struct layout *l, uint64_t rank, uint64_t step,
		     uint64_t micro, uint64_t *gsn);

/* The first gsn of the step whose micro-batch (rank, micro) starts at gsn: gsn - (rank *
 * B/W + micro * m), the inverse of layout_micro_gsn() for a step of any start (at/<G>'s
 * too). 0, or -EINVAL (rank >= W, micro >= A, or gsn before that offset). */
int layout_micro_step_gsn(const struct layout *l, uint64_t rank, uint64_t micro,
			  uint64_t gsn, uint64_t *step_gsn);

/* The step containing gsn g >= G0 (g - G0 need not be a multiple of B: rounds down). */
uint64_t layout_step_of(const struct layout *l, uint64_t gsn);

/* The number of the step that starts at gsn: 0, or -ERANGE when gsn is before G0 or not
 * on a step boundary of l (a loader positioned elsewhere reads at/<G> of any G). */
int layout_step_number(const struct layout *l, uint64_t gsn, uint64_t *step);

/* The first gsn of the k-th step after the one that starts at gsn (gsn + k * B, a run's
 * k-th share). 0, or -EOVERFLOW (past ORDER_MAX_GSN). */
int layout_gsn_after(const struct layout *l, uint64_t gsn, uint64_t k, uint64_t *out);

/* Whole steps from gsn (a step's first gsn, of l or of layout_at()) that lie below
 * limit (order_limit(): the end of the stream): (limit - gsn) / B, 0 when gsn >= limit. */
uint64_t layout_steps_below(const struct layout *l, uint64_t gsn, uint64_t limit);

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
 * (prev NULL) gsn / global_batch. global_batch >= 1; prev->G0 <= gsn. */
uint64_t layout_resume_step(const struct layout *prev, uint64_t global_batch, uint64_t gsn);

/* A set of ranks, sorted, unique, each < W. */
struct rankset {
	uint64_t *ranks;
	size_t count;
};

/* Parse "0-3,8,9" (NULL or "" = all of 0..W-1). 0, -ENOMEM, or -EINVAL with a message
 * in why_buf (bad syntax, rank >= W, reversed range, duplicate). The one parser of a
 * rank list: `zephon mount --check --json` gives its result (rank_list) to launchers. */
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
