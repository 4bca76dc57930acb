/*
 * journal_policy.c: the resume rules as pure logic (journal_policy.h): parsing a rule,
 * the resume point over loaded histories, and where a new layout starts.
 */
#include "journal_policy.h"
#include "buf.h"
#include "parse.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hist_release(struct hist *h)
{
	free(h->ev);
	free(h->cur);
	memset(h, 0, sizeof(*h));
}

/* ---- resume rules ---- */

int journal_parse_u62(const char *s, uint64_t *out)
{
	uint64_t v;

	if (parse_u64(s, &v) || v >= ORDER_MAX_GSN)
		return -EINVAL;
	*out = v;
	return 0;
}

int journal_resume_parse(const char *s, struct journal_resume *out)
{
	struct journal_resume r = { .rule = RESUME_AUTO };
	char *at;

	if (!s)
		return -EINVAL;
	if (!strcmp(s, "auto"))
		r.rule = RESUME_AUTO;
	else if (!strcmp(s, "fresh"))
		r.rule = RESUME_FRESH;
	else if (!strncmp(s, "samples:", 8)) {
		char g[32];

		r.rule = RESUME_SAMPLES;
		at = strchr(s + 8, '@');
		if (at) {
			if ((size_t)(at - (s + 8)) >= sizeof(g) || journal_parse_u62(at + 1, &r.step))
				return -EINVAL;
			memcpy(g, s + 8, (size_t)(at - (s + 8)));
			g[at - (s + 8)] = 0;
			r.has_step = 1;
		} else {
			snprintf(g, sizeof(g), "%.31s", s + 8);
			if (strlen(s + 8) >= sizeof(g))
				return -EINVAL;
		}
		if (journal_parse_u62(g, &r.value))
			return -EINVAL;
	} else if (!strncmp(s, "step:", 5)) {
		r.rule = RESUME_STEP;
		if (journal_parse_u62(s + 5, &r.value))
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	*out = r;
	return 0;
}

void journal_resume_format(const struct journal_resume *r, char *out, size_t len)
{
	if (!len)
		return;
	switch (r->rule) {
	case RESUME_FRESH:
		snprintf(out, len, "fresh");
		break;
	case RESUME_SAMPLES:
		if (r->has_step)
			snprintf(out, len, "samples:%" PRIu64 "@%" PRIu64, r->value, r->step);
		else
			snprintf(out, len, "samples:%" PRIu64, r->value);
		break;
	case RESUME_STEP:
		snprintf(out, len, "step:%" PRIu64, r->value);
		break;
	default:
		snprintf(out, len, "auto");
		break;
	}
}

/* ---- the resume point ---- */

/* Order of events: within a journal by seq (eff_us never decreases along it), across
 * journals by time. */
static int hev_cmp(const struct hev *a, const struct hev *b)
{
	if (a->src == b->src)
		return a->seq < b->seq ? -1 : a->seq > b->seq;
	if (a->eff_us != b->eff_us)
		return a->eff_us < b->eff_us ? -1 : 1;
	if (a->seq != b->seq)
		return a->seq < b->seq ? -1 : 1;
	return a->src < b->src ? -1 : a->src > b->src;
}

static int is_statement(const struct hev *e)
{
	return e->kind != HEV_LAYOUT || e->rule != RESUME_AUTO;
}

/* Rows of one job layout on several nodes: same G0, W and B. S0 is left out on purpose:
 * a node whose journal missed some restarts maps samples:G to another step number, but
 * serves the same gsns (its c_r is taken against its own S0). */
static int same_key(const struct layout *a, const struct layout *b)
{
	return layout_start_samples(a) == layout_start_samples(b) &&
	       layout_world_size(a) == layout_world_size(b) &&
	       layout_global_batch(a) == layout_global_batch(b);
}

struct rank_claim {
	uint64_t rank;
	uint64_t step;
	const struct hev *row;
};

static int rank_claim_cmp(const void *pa, const void *pb)
{
	const struct rank_claim *a = pa, *b = pb;

	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	return -hev_cmp(a->row, b->row); /* newest row first */
}

/* Append "a-b" or "a" to a rank list text. */
static void range_append(char *out, size_t len, uint64_t lo, uint64_t hi)
{
	size_t used = strlen(out);

	if (used + 1 >= len)
		return;
	if (lo == hi)
		snprintf(out + used, len - used, "%s%" PRIu64, used ? "," : "", lo);
	else
		snprintf(out + used, len - used, "%s%" PRIu64 "-%" PRIu64, used ? "," : "", lo, hi);
}

static const char *src_name(const char *const *names, size_t n, size_t i, char *buf,
			    size_t len)
{
	if (n <= 1 || !names) {
		buf[0] = 0;
		return buf;
	}
	snprintf(buf, len, " in %s", names[i]);
	return buf;
}

/* The latest `fresh` start and the latest layout over the n histories (NULL: none). */
static void find_last(const struct hist *hs, size_t n, const struct hev **fresh,
		      const struct hev **last)
{
	*fresh = *last = NULL;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < hs[i].nev; k++) {
			const struct hev *e = &hs[i].ev[k];

			if (e->kind == HEV_LAYOUT && e->rule == RESUME_FRESH &&
			    (!*fresh || hev_cmp(e, *fresh) > 0))
				*fresh = e;
			if (e->kind == HEV_LAYOUT && (!*last || hev_cmp(e, *last) > 0))
				*last = e;
		}
}

/* Rule 2: when a checkpoint mark follows the latest fresh start, the point is the
 * latest position statement. 1 when the rule applied (*p filled), 0 when there is no
 * such mark. */
static int point_statement(const struct hist *hs, size_t n, const char *const *names,
			   const struct hev *fresh, struct journal_point *p)
{
	const struct hev *stmt = NULL;
	int have_mark = 0;
	char where[160];

	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < hs[i].nev; k++) {
			const struct hev *e = &hs[i].ev[k];

			if (fresh && hev_cmp(e, fresh) < 0)
				continue;
			if (e->kind == HEV_MARK)
				have_mark = 1;
			if (is_statement(e) && (!stmt || hev_cmp(e, stmt) > 0))
				stmt = e;
		}
	if (!have_mark)
		return 0;
	p->basis = JOURNAL_POINT_STATEMENT;
	p->step = stmt->step;
	p->samples = stmt->gsn;
	src_name(names, n, stmt->src, where, sizeof(where));
	if (stmt->kind == HEV_MARK)
		snprintf(p->why, sizeof(p->why), "checkpoint mark at step %" PRIu64 "%s",
			 stmt->step, where);
	else if (stmt->kind == HEV_REWIND)
		snprintf(p->why, sizeof(p->why), "rewind to step %" PRIu64 " after the "
			 "latest checkpoint mark%s", stmt->step, where);
	else
		snprintf(p->why, sizeof(p->why), "%s start at step %" PRIu64 " after the "
			 "latest checkpoint mark%s", stmt->rule == RESUME_FRESH ? "fresh" :
			 stmt->rule == RESUME_STEP ? "step:S" : "samples:G", stmt->step, where);
	return 1;
}

/* The delivered steps of every rank of the last layout, over every journal whose last
 * row is of it (same_key), sorted by rank, the newest row of a rank first. *out
 * malloc'd; 0 or -ENOMEM. */
static int gather_claims(const struct hist *hs, size_t n, const struct hev *last,
			 struct rank_claim **out, size_t *count)
{
	size_t total = 0, m = 0;
	struct rank_claim *claims;

	for (size_t i = 0; i < n; i++)
		if (hs[i].last && same_key(&hs[i].last->l, &last->l))
			total += hs[i].ncur;
	claims = calloc(total ? total : 1, sizeof(*claims));
	if (!claims)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (!hs[i].last || !same_key(&hs[i].last->l, &last->l))
			continue;
		for (size_t k = 0; k < hs[i].ncur; k++) {
			if (hs[i].cur[k].rank >= layout_world_size(&last->l))
				continue;
			claims[m].rank = hs[i].cur[k].rank;
			claims[m].step = hs[i].cur[k].delivered_step;
			claims[m].row = hs[i].last;
			m++;
		}
	}
	qsort(claims, m, sizeof(*claims), rank_claim_cmp);
	*out = claims;
	*count = m;
	return 0;
}

/* Rule 3: the slowest rank of the last layout (a rank in no journal counts as having
 * completed nothing, and p->warning names it). 0 or -ENOMEM. */
static int point_cursors(const struct hist *hs, size_t n, const struct hev *last,
			 struct journal_point *p)
{
	size_t m, covered = 0;
	struct rank_claim *claims;
	uint64_t minc = UINT64_MAX, maxc = 0, slow = 0, prev = 0, W = layout_world_size(&last->l);
	int any = 0, rc = gather_claims(hs, n, last, &claims, &m);

	if (rc)
		return rc;
	for (size_t k = 0; k < m; k++) {
		uint64_t c;

		if (k && claims[k].rank == claims[k - 1].rank)
			continue; /* an older row of the same rank */
		if (any ? claims[k].rank > prev + 1 : claims[k].rank > 0)
			range_append(p->warning, sizeof(p->warning), any ? prev + 1 : 0,
				     claims[k].rank - 1);
		any = 1;
		prev = claims[k].rank;
		covered++;
		c = layout_done(&claims[k].row->l, claims[k].step);
		if (c < minc) {
			minc = c;
			slow = claims[k].rank;
		}
		maxc = c > maxc ? c : maxc;
	}
	if (!any || prev + 1 < W)
		range_append(p->warning, sizeof(p->warning), any ? prev + 1 : 0, W - 1);
	free(claims);
	if (covered < W) {
		char ranks[96];

		err_printf(ranks, sizeof(ranks), "%s", p->warning);
		err_printf(p->warning, sizeof(p->warning), "ranks %s of the last layout "
			 "(world_size %" PRIu64 ") are in none of the journals: their progress is "
			 "unknown, so the point is that layout's start", ranks, W);
		minc = 0;
	}
	p->basis = JOURNAL_POINT_CURSORS;
	p->min_completed = minc;
	p->samples = layout_consumed(&last->l, minc, &p->step);
	if (covered < W)
		snprintf(p->why, sizeof(p->why), "start of the last layout (step %" PRIu64 ")",
			 p->step);
	else if (maxc == minc)
		snprintf(p->why, sizeof(p->why), "every rank of the last layout completed the "
			 "steps below %" PRIu64 " (all ranks at the same step)", p->step);
	else
		snprintf(p->why, sizeof(p->why), "every rank of the last layout completed the "
			 "steps below %" PRIu64 " (rank %" PRIu64 " is the slowest)", p->step, slow);
	return 0;
}

int hist_point(const struct hist *hs, size_t n, const char *const *names,
	       struct journal_point *p)
{
	const struct hev *fresh, *last;

	memset(p, 0, sizeof(*p));
	p->basis = JOURNAL_POINT_EMPTY;
	find_last(hs, n, &fresh, &last);
	if (!last) {
		snprintf(p->why, sizeof(p->why), "the journal%s no layout yet",
			 n > 1 ? "s have" : " has");
		return 0;
	}
	p->last = last->l;
	if (point_statement(hs, n, names, fresh, p))
		return 0;
	return point_cursors(hs, n, last, p);
}

/* ---- where a new layout starts ---- */

/* S0 for samples:G, G0 for step:S, from the history. 0 or -EINVAL (why). */
static int map_rule(const struct hist *h, const struct hist_start *start,
		    struct layout_values *l, char *why, size_t wlen)
{
	const struct journal_resume *r = start->rule;
	char *applied = start->desc;
	size_t alen = start->desc_len;
	const struct hev *best = NULL, *reached = NULL;

	for (size_t k = 0; k < h->nev; k++) {
		const struct hev *e = &h->ev[k];

		if (e->kind != HEV_LAYOUT)
			continue;
		if (r->rule == RESUME_SAMPLES ? e->gsn <= r->value : e->step <= r->value)
			best = e; /* events are in seq order: the latest wins */
		if (r->rule == RESUME_STEP && e->step <= r->value &&
		    (e->step == r->value || start->reached(start->ctx, e, r->value)))
			reached = e;
	}
	/* step:S names a step of the run that saved the checkpoint: the latest layout that
	 * served up to S, not a later one that started below S and stopped short of it
	 * (after a restart from an older checkpoint, step numbers repeat). */
	if (reached)
		best = reached;
	if (r->rule == RESUME_SAMPLES) {
		l->start_samples = r->value;
		if (r->has_step) {
			l->start_step = r->step;
			snprintf(applied, alen, "samples:%" PRIu64 "@%" PRIu64 " -> step %" PRIu64
				 " at samples:%" PRIu64, r->value, r->step, r->step, r->value);
			return 0;
		}
		l->start_step = layout_resume_step(best ? &best->l : NULL, l->global_batch,
						   r->value);
		snprintf(applied, alen, "samples:%" PRIu64 " -> step %" PRIu64 " (%s)", r->value,
			 l->start_step, best ? "step numbers of the layout history" :
			 "no history: G / global_batch");
		return 0;
	}
	if (!best) {
		err_printf(why, wlen, "resume=step:%" PRIu64 " cannot be mapped to a sample position: "
		    "journal %s has no layout starting at or before step %" PRIu64 "; use "
		    "resume=samples:G", r->value, start->path, r->value);
		return -EINVAL;
	}
	l->start_step = r->value;
	if (layout_step_gsn(&best->l, r->value, &l->start_samples)) {
		err_printf(why, wlen, "resume=step:%" PRIu64 " is past the end of the gsn range (2^62)",
		    r->value);
		return -EINVAL;
	}
	snprintf(applied, alen, "step:%" PRIu64 " -> samples:%" PRIu64 " (per the layout "
		 "started at step %" PRIu64 ")", r->value, l->start_samples, best->step);
	return 0;
}

/* resume=auto: the resume point, which one journal knows only when it holds every
 * rank. 0, -EINVAL (why), -ENOMEM. */
static int resolve_auto(const struct hist *h, const struct hist_start *start,
			struct layout_values *l, char *why, size_t wlen)
{
	size_t nranks = start->nranks;
	struct journal_point p;
	int rc;

	/* This journal holds only these ranks' progress: where the job stands is in every
	 * node's journal together (checkpoint marks in one, cursors in all). Resolved here
	 * alone, the nodes of one job would start at different steps. */
	if (nranks < l->world_size && h->nev) {
		err_printf(why, wlen, "resume=auto cannot resume %zu of the %" PRIu64 " ranks from this "
		    "journal alone (the others' progress is in other nodes' journals): pass "
		    "every node the resume=samples:G@S that `zephon journal resume-point` prints "
		    "over all of them (mountscripts/zephon-node resume-point), or resume=fresh",
		    nranks, l->world_size);
		return -EINVAL;
	}
	rc = hist_point(h, 1, NULL, &p);
	if (rc)
		return rc;
	l->start_step = p.step;
	l->start_samples = p.samples;
	err_printf(start->desc, start->desc_len, "auto: %s -> step %" PRIu64 ", samples:%" PRIu64
	    "%s%s", p.why, p.step,
	    p.samples, p.warning[0] ? "; " : "", p.warning);
	return 0;
}

int hist_resolve(const struct hist *h, const struct hist_start *start, struct layout *l,
		 char *why, size_t why_len)
{
	const struct journal_resume *rule = start->rule;
	char *desc = start->desc;
	size_t desc_len = start->desc_len;
	struct layout_values nl;
	struct layout started;
	char bad[128] = "";
	int rc = 0;

	layout_get(l, &nl);
	nl.start_step = 0;
	nl.start_samples = 0;
	err_printf(desc, desc_len, "%s", "");
	switch (rule->rule) {
	case RESUME_AUTO:
		rc = resolve_auto(h, start, &nl, why, why_len);
		break;
	case RESUME_FRESH:
		snprintf(desc, desc_len, "fresh: step 0, samples:0%s",
			 h->nev ? " (earlier history ignored)" : "");
		break;
	case RESUME_SAMPLES:
	case RESUME_STEP:
		if (rule->value >= ORDER_MAX_GSN) {
			err_printf(why, why_len, "resume value %" PRIu64 " is not below 2^62", rule->value);
			return -EINVAL;
		}
		rc = map_rule(h, start, &nl, why, why_len);
		break;
	default:
		err_printf(why, why_len, "unknown resume rule");
		return -EINVAL;
	}
	if (rc)
		return rc;
	if (layout_start_at(l, nl.start_step, nl.start_samples, &started, bad, sizeof(bad))) {
		err_printf(why, why_len, "the resume point (step %" PRIu64 ", samples %" PRIu64 ") is out "
		    "of range: %s", nl.start_step, nl.start_samples, bad);
		return -EINVAL;
	}
	*l = started;
	return 0;
}
