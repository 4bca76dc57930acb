/*
 * journal_policy.h: the resume policy of journal.h as pure logic over loaded histories,
 * internal to core/journal/journal*.c and the unit tests. No SQLite here: journal_history.c
 * loads a journal's rows into a struct hist (hist_load), and these functions decide
 * where a mount starts (hist_resolve) and what the resume point is (hist_point), so a
 * test can state a history and check the decision without a database.
 *
 * A struct hist owns its arrays (hist_release frees them). Pure, no globals,
 * thread-safe.
 */
#ifndef ZEPHON_JOURNAL_POLICY_H
#define ZEPHON_JOURNAL_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "journal.h"
#include "order.h"

/* One history event: a layout row, a checkpoint mark or a rewind. */
enum hev_kind { HEV_LAYOUT, HEV_MARK, HEV_REWIND };

struct hev {
	enum hev_kind kind;
	int64_t seq;                /* record order within its journal */
	int64_t eff_us;             /* time_us made non-decreasing along seq */
	uint64_t step;              /* S0 for a layout */
	uint64_t gsn;               /* G0 for a layout */
	int64_t layout_id;          /* the layout's own id for HEV_LAYOUT, else its layout */
	struct layout l;            /* HEV_LAYOUT only (S0 = step, G0 = gsn) */
	enum resume_rule rule;      /* HEV_LAYOUT only: the rule it was started with */
	size_t src;                 /* which journal (an index into the caller's list) */
};

/* One journal's history, events in seq order. */
struct hist {
	struct hev *ev;             /* malloc'd */
	size_t nev;
	struct hev *last;           /* the last layout (by seq) or NULL; points into ev */
	struct journal_cursor *cur; /* its cursors, malloc'd */
	size_t ncur;
};

void hist_release(struct hist *h);

/* The resume point (rules 1-4 of journal.h) over n histories; names[i] names hs[i] in
 * p->why when n > 1 (names may be NULL). 0 (also for an empty history: basis
 * JOURNAL_POINT_EMPTY) or -ENOMEM. */
int hist_point(const struct hist *hs, size_t n, const char *const *names,
	       struct journal_point *p);

/* Did some rank of layout e get as far as step (its cursor at step or beyond)? The
 * cursors of earlier layouts are not in a struct hist: the caller looks them up. */
typedef int (*hist_reached_fn)(void *ctx, const struct hev *e, uint64_t step);

/* What a mount starts by: the rule; nranks, the ranks it serves (auto needs all W when
 * there is a history); reached(ctx, ...) answers for step:S (see map_rule in
 * journal_policy.c); path names the journal in messages; desc receives what was done
 * ("auto: ... -> step 12, samples:384"), desc_len bytes. */
struct hist_start {
	const struct journal_resume *rule;
	size_t nranks;
	hist_reached_fn reached;
	void *ctx;
	const char *path;
	char *desc;
	size_t desc_len;
};

/* Where a mount that starts as `start` says over history h begins: *l (W, B, m are the
 * caller's) gets its start_step and start_samples as journal_start() documents. 0, or
 * -EINVAL with the reason in why (a partial auto, step:S unmappable, a value or resulting
 * start out of range), -ENOMEM. *l is changed only on success. */
int hist_resolve(const struct hist *h, const struct hist_start *start, struct layout *l,
		 char *why, size_t why_len);

/* A decimal (parse_u64) below 2^62, as resume rules and the meta table hold gsns, steps
 * and sample counts. 0 or -EINVAL. */
int journal_parse_u62(const char *s, uint64_t *out);

#endif
