/*
 * test_journal_elastic: the elastic property test of the journal, at core level.
 *
 * Each history is a sequence of "mounts" drawn from a seeded generator: global batch B
 * (changed at some remounts), W from the divisors of B, m from the divisors of B/W, the
 * ranks served by one journal or spread over several node journals (some nodes sit out
 * some mounts, so their journals go stale), random claim interleavings, checkpoint marks
 * and rewinds, and crashes: every mount runs in a forked child that reports each claim it
 * handed out through a pipe, and some children SIGKILL themselves mid-way (sometimes
 * between a committed claim and its report). The next mount starts from the resume point:
 * `auto` or an explicit rule for one journal, `samples:G@S` from
 * journal_resume_point_files() over every node journal (what a launcher does).
 *
 * The parent keeps a model (docs/design.md §3 and the rules of journal.h) and asserts:
 *  - every resume point the journal computes equals the model's;
 *  - step numbers continue across remounts (S0 of a mount is the model's step);
 *  - nothing handed out is forgotten: after each mount, even after SIGKILL, every rank's
 *    journaled cursor is exactly past its last reported claim (or one claim further: a
 *    claim committed just before the kill, which then counts as handed out);
 *  - the final serving of every step (after rewinds and resumes), concatenated over
 *    ranks in rank order, is the uninterrupted W=1 stream from gsn 0: every gsn once, in
 *    order, with the sample id perm(seed, g / N)(g % N) the order module defines, and
 *    each step's content at the gsn range the layout formula gives;
 *  - every epoch the history covers contains every sample exactly once.
 *
 * History i uses seed S + i: ZEPHON_ELASTIC_SEED=S (default 1, so every run checks the
 * same histories; set another to explore) and ZEPHON_ELASTIC_HISTORIES=H (default 60;
 * 50 in the sanitizer build) choose them; a failure prints the seed of its history.
 */
#include "test_journal_util.h"

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>

#include "check.h"
#include "test_layout.h"

#define MAX_NODES 3
#define MAX_B 12
#define MAX_W MAX_B

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
	return z ^ (z >> 31);
}

static uint64_t below(uint64_t n)
{
	return rnd() % n;
}

static int chance(unsigned pct)
{
	return below(100) < pct;
}

static uint64_t pick_divisor(uint64_t n)
{
	uint64_t d[MAX_B];
	size_t k = 0;

	for (uint64_t i = 1; i <= n; i++)
		if (n % i == 0)
			d[k++] = i;
	return d[below(k)];
}

/* ---- child -> parent reports ---- */

enum rep_type { REP_START = 1, REP_CLAIM, REP_MARK, REP_REWIND, REP_DONE, REP_FAIL };

struct rep {
	uint32_t type;
	uint32_t node;
	uint64_t rank, step, micro, gsn;
	uint64_t a, b;              /* START: S0, G0 */
	uint64_t ids[MAX_B];
	char msg[96];
};
_Static_assert(sizeof(struct rep) <= 512, "one report is one atomic pipe write");

static int rep_fd = -1;

static void report(const struct rep *r)
{
	if (write(rep_fd, r, sizeof(*r)) != (ssize_t)sizeof(*r))
		_exit(90);
}

__attribute__((format(printf, 1, 2)))
static void child_fail(const char *fmt, ...)
{
	struct rep r;
	va_list ap;

	memset(&r, 0, sizeof(r));
	r.type = REP_FAIL;
	va_start(ap, fmt);
	vsnprintf(r.msg, sizeof(r.msg), fmt, ap);
	va_end(ap);
	report(&r);
	_exit(91);
}

/* ---- one mount as the parent plans it ---- */

struct mount_plan {
	struct layout l;            /* W, B, m */
	size_t nnodes;
	size_t node[MAX_NODES];     /* journal index of each used node */
	uint64_t nranks[MAX_NODES];
	uint64_t ranks[MAX_NODES][MAX_W];
	struct journal_resume rule;
	uint64_t seed;              /* the child's generator */
	int crash;                  /* SIGKILL itself at claim number kill_at */
	uint64_t kill_at;
	int kill_before_report;
	uint64_t claims;            /* claims to make (if no crash first) */
};

static struct order ord;
static char *paths[MAX_NODES];
static const struct journal_ident *ident;

/* The child: start every node's layout, claim, mark, rewind, maybe die. */
static void run_mount(const struct mount_plan *mp)
{
	struct journal *j[MAX_NODES];
	struct layout nl[MAX_NODES];
	char err[512];
	int agree = 1;

	rng_state = mp->seed;
	for (size_t n = 0; n < mp->nnodes; n++) {
		struct rankset rs = { (uint64_t *)mp->ranks[n], mp->nranks[n] };
		struct rep r;
		char applied[512];
		int rc;

		rc = journal_open(paths[mp->node[n]], ident, JOURNAL_SYNC_NORMAL, &j[n], err,
				  sizeof(err));
		if (rc)
			child_fail("open %s: %d %s", paths[mp->node[n]], rc, err);
		nl[n] = mp->l;
		rc = journal_start(j[n], &mp->rule, &rs, &nl[n], applied, sizeof(applied));
		if (rc) {
			journal_last_error(j[n], err, sizeof(err));
			child_fail("start: %d %s", rc, err);
		}
		memset(&r, 0, sizeof(r));
		r.type = REP_START;
		r.node = (uint32_t)n;
		r.a = layout_start_step(&nl[n]);
		r.b = layout_start_samples(&nl[n]);
		report(&r);
		if (layout_start_step(&nl[n]) != layout_start_step(&nl[0]))
			agree = 0;
	}
	for (uint64_t c = 0; c < mp->claims; c++) {
		size_t n = below(mp->nnodes);
		uint64_t rank = mp->ranks[n][below(mp->nranks[n])], step, micro;
		struct rep r;
		int rc;

		if (agree && chance(4)) { /* a mark or a rewind, at a step every rank reached */
			uint64_t smin = UINT64_MAX, t;
			int rewind = chance(40);

			for (size_t k = 0; k < mp->nnodes; k++)
				for (size_t i = 0; i < mp->nranks[k]; i++) {
					if (journal_cursor(j[k], mp->ranks[k][i], &step, &micro))
						child_fail("cursor");
					smin = step < smin ? step : smin;
				}
			/* mostly a recent step (as a trainer does), sometimes any */
			t = chance(75) ? smin - below(smin - layout_start_step(&nl[0]) < 2 ?
						 smin - layout_start_step(&nl[0]) + 1 : 2) :
					 layout_start_step(&nl[0]) + below(smin - layout_start_step(&nl[0]) + 1);
			memset(&r, 0, sizeof(r));
			r.type = rewind ? REP_REWIND : REP_MARK;
			r.step = t;
			if (layout_step_gsn(&nl[0], t, &r.gsn))
				child_fail("gsn of step %" PRIu64, t);
			for (size_t k = 0; k < mp->nnodes; k++) {
				if (!rewind && k > 0 && chance(50))
					continue; /* a mark need not reach every node */
				rc = rewind ? journal_rewind(j[k], t) : journal_checkpoint(j[k], t);
				if (rc) {
					journal_last_error(j[k], err, sizeof(err));
					child_fail("%s %" PRIu64 ": %d %s", rewind ? "rewind" :
						   "checkpoint", t, rc, err);
				}
			}
			report(&r);
		}
		if (chance(50)) {
			if (journal_cursor(j[n], rank, &step, &micro))
				child_fail("cursor of rank %" PRIu64, rank);
			rc = journal_claim(j[n], rank, step, micro);
		} else {
			rc = journal_claim_next(j[n], rank, &step, &micro);
		}
		if (rc) {
			journal_last_error(j[n], err, sizeof(err));
			child_fail("claim rank %" PRIu64 ": %d %s", rank, rc, err);
		}
		if (mp->crash && c == mp->kill_at && mp->kill_before_report)
			raise(SIGKILL);
		memset(&r, 0, sizeof(r));
		r.type = REP_CLAIM;
		r.node = (uint32_t)n;
		r.rank = rank;
		r.step = step;
		r.micro = micro;
		if (layout_micro_gsn(&nl[n], rank, step, micro, &r.gsn) ||
		    order_fill(&ord, r.gsn, layout_micro_batch(&mp->l), r.ids))
			child_fail("gsn of rank %" PRIu64 " step %" PRIu64, rank, step);
		report(&r);
		if (mp->crash && c == mp->kill_at)
			raise(SIGKILL);
	}
	for (size_t n = 0; n < mp->nnodes; n++)
		journal_close(j[n]);
	{
		struct rep r;

		memset(&r, 0, sizeof(r));
		r.type = REP_DONE;
		report(&r);
	}
	_exit(0);
}

/* ---- the parent's model ---- */

struct mstep {
	uint64_t B;
	uint64_t ids[MAX_B];
	unsigned char filled[MAX_B];
	int used;
};

struct model {
	struct mstep *steps;        /* by model step number */
	size_t cap;
	int have_layout;
	struct layout last;         /* the last mount's layout in model numbering */
	uint64_t cur_step[MAX_W], cur_micro[MAX_W]; /* model cursor per rank */
	int marks;                  /* a mark since the last fresh start */
	uint64_t stmt_step, stmt_gsn; /* the latest statement */
	int node_used[MAX_NODES];   /* journal file exists */
};

static struct mstep *mstep_at(struct model *md, uint64_t t)
{
	if (t >= md->cap) {
		size_t ncap = md->cap ? md->cap : 64;

		while (ncap <= t)
			ncap *= 2;
		md->steps = realloc(md->steps, ncap * sizeof(*md->steps));
		REQUIRE(md->steps);
		memset(md->steps + md->cap, 0, (ncap - md->cap) * sizeof(*md->steps));
		md->cap = ncap;
	}
	return &md->steps[t];
}

static void truncate_from(struct model *md, uint64_t t)
{
	for (size_t k = t; k < md->cap; k++)
		memset(&md->steps[k], 0, sizeof(md->steps[k]));
}

static uint64_t cur_seed;
static int hist_failed;

#define HCHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "history seed %" PRIu64 ": %s:%d: CHECK failed: %s\n", \
			cur_seed, __FILE__, __LINE__, #cond); \
		check_failures++; \
		hist_failed = 1; \
	} \
} while (0)

/* Record one served micro-batch in the model: (rank, model step t, micro). */
static void model_fill(struct model *md, uint64_t rank, uint64_t t, uint64_t micro,
		       const uint64_t *ids)
{
	const struct layout *l = &md->last;
	struct mstep *s = mstep_at(md, t);
	uint64_t off = rank * layout_share(l) + micro * layout_micro_batch(l);

	if (!s->used) {
		s->used = 1;
		s->B = layout_global_batch(l);
	}
	HCHECK(s->B == layout_global_batch(l));
	for (uint64_t i = 0; i < layout_micro_batch(l) && off + i < MAX_B; i++) {
		HCHECK(!s->filled[off + i]); /* never served twice without a rewind/resume */
		s->filled[off + i] = 1;
		s->ids[off + i] = ids[i];
	}
}

static void model_expected_point(const struct model *md, uint64_t *step, uint64_t *gsn)
{
	uint64_t minc = UINT64_MAX;

	if (md->marks) {
		*step = md->stmt_step;
		*gsn = md->stmt_gsn;
		return;
	}
	if (!md->have_layout) {
		*step = *gsn = 0;
		return;
	}
	for (uint64_t r = 0; r < layout_world_size(&md->last); r++) {
		uint64_t c = md->cur_step[r] - layout_start_step(&md->last);

		minc = c < minc ? c : minc;
	}
	*step = layout_start_step(&md->last) + minc;
	*gsn = layout_start_samples(&md->last) + minc * layout_global_batch(&md->last);
}

/* The journal's resume point: one journal read-only, or every node journal. */
static void journal_point(int multi, size_t njournals, const struct model *md,
			  struct journal_point *pt)
{
	const char *ps[MAX_NODES];
	size_t n = 0;
	char err[512];
	int rc;

	for (size_t k = 0; k < njournals; k++)
		if (md->node_used[k])
			ps[n++] = paths[k];
	if (!n) {
		memset(pt, 0, sizeof(*pt));
		return;
	}
	if (!multi) {
		struct journal *j;

		rc = journal_open_readonly(paths[0], &j, err, sizeof(err));
		HCHECK(rc == 0);
		if (rc) {
			fprintf(stderr, "%s\n", err);
			memset(pt, 0, sizeof(*pt));
			return;
		}
		rc = journal_resume_point_ex(j, pt);
		HCHECK(rc == 0);
		journal_close(j);
		return;
	}
	rc = journal_resume_point_files_ex(ps, n, pt, err, sizeof(err));
	HCHECK(rc == 0);
	if (rc)
		fprintf(stderr, "%s\n", err);
}

/* After a mount: each served rank's journaled cursor is past its last reported claim,
 * or one claim further if the child died between a commit and its report. */
static void check_cursors(struct model *md, const struct mount_plan *mp,
			  const struct layout *nl, int crashed)
{
	for (size_t n = 0; n < mp->nnodes; n++) {
		struct journal *j;
		struct journal_layout *ls;
		struct journal_cursor *cs;
		size_t nls, ncs;
		char err[512];

		if (journal_open_readonly(paths[mp->node[n]], &j, err, sizeof(err))) {
			fprintf(stderr, "%s\n", err);
			HCHECK(0);
			continue;
		}
		HCHECK(journal_layouts(j, &ls, &nls) == 0 && nls > 0);
		HCHECK(journal_cursors(j, ls[nls - 1].id, &cs, &ncs) == 0);
		HCHECK(ncs == mp->nranks[n]);
		HCHECK(layout_start_samples(&ls[nls - 1].layout) == layout_start_samples(&nl[n]));
		for (size_t i = 0; i < ncs && i < mp->nranks[n]; i++) {
			uint64_t r = cs[i].rank, es, em;
			/* model cursor is in model numbering; the node's own is offset */
			uint64_t off = layout_start_step(&nl[n]) - layout_start_step(&md->last);

			HCHECK(r == mp->ranks[n][i]);
			es = md->cur_step[r] + off;
			em = md->cur_micro[r];
			if (cs[i].step == es && cs[i].micro == em)
				continue;
			layout_advance(&md->last, &es, &em);
			HCHECK(crashed && cs[i].step == es && cs[i].micro == em);
			if (crashed && cs[i].step == es && cs[i].micro == em) {
				/* committed but not reported: it was handed out */
				uint64_t g, ids[MAX_B], t = md->cur_step[r], mi = md->cur_micro[r];

				REQUIRE(layout_micro_gsn(&md->last, r, t, mi, &g) == 0);
				REQUIRE(order_fill(&ord, g, layout_micro_batch(&md->last), ids) == 0);
				model_fill(md, r, t, mi, ids);
				layout_advance(&md->last, &md->cur_step[r], &md->cur_micro[r]);
			} else {
				fprintf(stderr, "history seed %" PRIu64 ": rank %" PRIu64 " journaled "
					"at %" PRIu64 ".%" PRIu64 ", model at %" PRIu64 ".%" PRIu64 "\n",
					cur_seed, r, cs[i].step, cs[i].micro, md->cur_step[r] + off,
					md->cur_micro[r]);
			}
		}
		free(cs);
		free(ls);
		journal_close(j);
	}
}

struct stats {
	uint64_t mounts, crashes, claims, gsns, epochs, marks, rewinds, multi;
};

/* The final serving is the W=1 stream from gsn 0; every epoch is a permutation. */
static void check_stream(struct model *md, struct stats *st)
{
	uint64_t g = 0, n = ord.n, complete_end;
	size_t t = 0;
	unsigned char *seen = calloc(n, 1);
	uint64_t *stream = NULL;
	size_t cap = 0;

	REQUIRE(seen);
	/* complete steps from 0 */
	for (; t < md->cap && md->steps[t].used; t++) {
		const struct mstep *s = &md->steps[t];
		int full = 1;

		for (uint64_t i = 0; i < s->B; i++)
			full &= s->filled[i];
		if (!full)
			break;
		if (g + s->B > cap) {
			cap = (g + s->B) * 2;
			stream = realloc(stream, cap * sizeof(*stream));
			REQUIRE(stream);
		}
		memcpy(stream + g, s->ids, s->B * sizeof(*stream));
		g += s->B;
	}
	complete_end = g;
	for (uint64_t k = 0; k < complete_end; k++)
		HCHECK(stream[k] == order_sample(&ord, k, NULL));
	/* after the complete prefix: partly served steps, each slot at its gsn, no hole */
	for (size_t u = t; u < md->cap; u++) {
		const struct mstep *s = &md->steps[u];

		if (!s->used) {
			for (size_t v = u; v < md->cap; v++)
				HCHECK(!md->steps[v].used);
			break;
		}
		for (uint64_t i = 0; i < s->B; i++)
			if (s->filled[i])
				HCHECK(s->ids[i] == order_sample(&ord, g + i, NULL));
		g += s->B;
	}
	/* every full epoch: each sample once */
	for (uint64_t e = 0; (e + 1) * n <= complete_end; e++) {
		memset(seen, 0, n);
		for (uint64_t k = e * n; k < (e + 1) * n; k++) {
			HCHECK(stream[k] < n);
			if (stream[k] < n) {
				HCHECK(!seen[stream[k]]);
				seen[stream[k]] = 1;
			}
		}
		st->epochs++;
	}
	st->gsns += complete_end;
	free(seen);
	free(stream);
}

static void run_history(uint64_t seed, struct stats *st)
{
	struct model md;
	/* tmpfs when there is one: the property does not depend on fsync (a SIGKILL loses
	 * nothing the kernel has), and the ~700 mounts of a run stay fast */
	char *dir = scratch_dir_in("elastic", "/dev/shm");
	struct journal_ident id;
	uint64_t n, B, mounts;
	int multi;
	size_t njournals;

	memset(&md, 0, sizeof(md));
	rng_state = seed;
	cur_seed = seed;
	hist_failed = 0;
	n = 37 + below(100);
	REQUIRE(order_init(&ord, n, rnd(), chance(20) ? ORDER_SHUFFLE_NONE : ORDER_SHUFFLE_GLOBAL) == 0);
	id = ident_of(FP_A, ord.seed, ord.shuffle, n);
	ident = &id;
	multi = chance(50);
	njournals = multi ? 2 + below(2) : 1;
	st->multi += (uint64_t)multi;
	for (size_t k = 0; k < MAX_NODES; k++) {
		free(paths[k]);
		paths[k] = NULL;
	}
	for (size_t k = 0; k < njournals; k++) {
		char name[32];

		snprintf(name, sizeof(name), "node%zu.sqlite", k);
		paths[k] = path_in(dir, name);
	}
	static const uint64_t bs[] = { 2, 3, 4, 6, 8, 12 };
	B = bs[below(6)];
	mounts = 4 + below(5);
	for (uint64_t mi = 0; mi < mounts && !hist_failed; mi++) {
		struct mount_plan mp;
		struct journal_point pt;
		uint64_t es, eg, A;
		struct layout nl[MAX_NODES];
		int fds[2], status, crashed = 0, done = 0, explicit_rule = 0;
		pid_t pid;
		struct rep rp;
		static char rbuf[64 * sizeof(struct rep)];

		memset(&mp, 0, sizeof(mp));
		if (mi > 0 && chance(35))
			B = bs[below(6)];
		{
			uint64_t w = pick_divisor(B);

			mp.l = test_layout(w, B, pick_divisor(B / w), 0, 0);
		}
		A = layout_micros(&mp.l);

		/* the resume point: the journal's must be the model's */
		model_expected_point(&md, &es, &eg);
		journal_point(multi, njournals, &md, &pt);
		HCHECK(pt.samples == eg);
		HCHECK(pt.step == es);
		if (pt.samples != eg || pt.step != es)
			fprintf(stderr, "history seed %" PRIu64 " mount %" PRIu64 ": journal point "
				"step %" PRIu64 " samples %" PRIu64 " (%s), model step %" PRIu64
				" samples %" PRIu64 "\n", seed, mi, pt.step, pt.samples, pt.why, es, eg);

		/* the rule */
		if (chance(6) && mi > 0) {
			mp.rule.rule = RESUME_FRESH;
			es = eg = 0;
		} else if (multi) { /* a launcher: samples:G@S from every node's journal */
			mp.rule.rule = RESUME_SAMPLES;
			mp.rule.value = pt.samples;
			mp.rule.has_step = 1;
			mp.rule.step = pt.step;
		} else {
			uint64_t k = below(10);

			mp.rule.rule = k < 5 ? RESUME_AUTO : k < 8 ? RESUME_SAMPLES : RESUME_STEP;
			mp.rule.value = mp.rule.rule == RESUME_SAMPLES ? eg : es;
			mp.rule.has_step = k == 7;
			mp.rule.step = es;
			if (mp.rule.rule == RESUME_STEP && !md.have_layout)
				mp.rule.rule = RESUME_AUTO;
		}
		explicit_rule = mp.rule.rule != RESUME_AUTO;

		/* nodes and their ranks */
		if (multi) {
			size_t k = 1 + below(njournals < layout_world_size(&mp.l) ? njournals : layout_world_size(&mp.l));
			size_t perm[MAX_NODES] = { 0, 1, 2 };

			for (size_t i = njournals; i > 1; i--) {
				size_t x = below(i), tmp = perm[i - 1];

				perm[i - 1] = perm[x];
				perm[x] = tmp;
			}
			mp.nnodes = k;
			for (size_t i = 0; i < k; i++)
				mp.node[i] = perm[i];
			/* every node gets one rank, the rest go anywhere */
			uint64_t owner[MAX_W];

			for (uint64_t r = 0; r < layout_world_size(&mp.l); r++)
				owner[r] = r < k ? r : below(k);
			for (uint64_t r = layout_world_size(&mp.l); r > 1; r--) {
				uint64_t x = below(r), tmp = owner[r - 1];

				owner[r - 1] = owner[x];
				owner[x] = tmp;
			}
			for (uint64_t r = 0; r < layout_world_size(&mp.l); r++)
				mp.ranks[owner[r]][mp.nranks[owner[r]]++] = r;
		} else {
			mp.nnodes = 1;
			mp.node[0] = 0;
			for (uint64_t r = 0; r < layout_world_size(&mp.l); r++)
				mp.ranks[0][mp.nranks[0]++] = r;
		}
		mp.claims = layout_world_size(&mp.l) * A * (2 + below(16)) + below(layout_world_size(&mp.l) * A);
		mp.crash = chance(35);
		mp.kill_at = mp.claims ? below(mp.claims) : 0;
		mp.kill_before_report = chance(50);
		mp.seed = rnd();
		st->mounts++;

		/* the model at the start of this mount */
		if (mp.rule.rule == RESUME_FRESH) {
			md.marks = 0;
			truncate_from(&md, 0);
		}
		if (explicit_rule) {
			md.stmt_step = es;
			md.stmt_gsn = eg;
		}
		truncate_from(&md, es);
		REQUIRE(layout_start_at(&mp.l, es, eg, &md.last, NULL, 0) == 0);
		md.have_layout = 1;
		for (uint64_t r = 0; r < layout_world_size(&mp.l); r++) {
			md.cur_step[r] = es;
			md.cur_micro[r] = 0;
		}

		REQUIRE(pipe(fds) == 0);
		fflush(stderr);
		pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0) {
			close(fds[0]);
			rep_fd = fds[1];
			run_mount(&mp);
		}
		close(fds[1]);
		for (size_t len = 0, pos = 0;;) {
			/* reports arrive whole (one atomic write each); read many at once */
			if (len - pos < sizeof(rp)) {
				ssize_t k;

				memmove(rbuf, rbuf + pos, len - pos);
				len -= pos;
				pos = 0;
				k = read(fds[0], rbuf + len, sizeof(rbuf) - len);
				if (k <= 0)
					break;
				len += (size_t)k;
				continue;
			}
			memcpy(&rp, rbuf + pos, sizeof(rp));
			pos += sizeof(rp);
			switch (rp.type) {
			case REP_START: {
				size_t node = mp.node[rp.node];

				REQUIRE(layout_start_at(&mp.l, rp.a, rp.b, &nl[rp.node], NULL,
							0) == 0);
				md.node_used[node] = 1;
				HCHECK(rp.b == eg);
				HCHECK(rp.a == es); /* step numbers continue, on every node */
				break;
			}
			case REP_CLAIM: {
				const struct layout *ln = &nl[rp.node];
				uint64_t g, t, off;

				st->claims++;
				/* the layout formula of docs/design.md §3, by hand */
				g = layout_start_samples(ln) + (rp.step - layout_start_step(ln)) * layout_global_batch(ln) +
				    rp.rank * (layout_global_batch(ln) / layout_world_size(ln)) + rp.micro * layout_micro_batch(ln);
				HCHECK(rp.gsn == g);
				t = es + (g - eg) / B;
				off = (g - eg) % B;
				HCHECK(off == rp.rank * (B / layout_world_size(&mp.l)) + rp.micro * layout_micro_batch(&mp.l));
				HCHECK(md.cur_step[rp.rank] == t && md.cur_micro[rp.rank] == rp.micro);
				model_fill(&md, rp.rank, t, rp.micro, rp.ids);
				layout_advance(&md.last, &md.cur_step[rp.rank], &md.cur_micro[rp.rank]);
				break;
			}
			case REP_MARK:
			case REP_REWIND: {
				/* in model numbering (a node's may be offset) */
				uint64_t t = es + (rp.gsn - eg) / B;

				HCHECK(rp.gsn >= eg && (rp.gsn - eg) % B == 0);
				md.stmt_step = t;
				md.stmt_gsn = rp.gsn;
				if (rp.type == REP_MARK) {
					st->marks++;
					md.marks = 1;
					break;
				}
				st->rewinds++;
				truncate_from(&md, t);
				for (uint64_t k2 = 0; k2 < layout_world_size(&mp.l); k2++) {
					md.cur_step[k2] = t;
					md.cur_micro[k2] = 0;
				}
				break;
			}
			case REP_DONE:
				done = 1;
				break;
			case REP_FAIL:
				fprintf(stderr, "history seed %" PRIu64 " mount %" PRIu64 ": child: %s\n",
					seed, mi, rp.msg);
				HCHECK(0);
				break;
			default:
				HCHECK(0);
			}
		}
		close(fds[0]);
		REQUIRE(waitpid(pid, &status, 0) == pid);
		if (WIFSIGNALED(status)) {
			HCHECK(mp.crash && WTERMSIG(status) == SIGKILL);
			crashed = 1;
			st->crashes++;
		} else {
			HCHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && done);
		}
		if (!hist_failed)
			check_cursors(&md, &mp, nl, crashed);
	}
	if (!hist_failed)
		check_stream(&md, st);
	if (hist_failed)
		fprintf(stderr, "FAILED history: reproduce with ZEPHON_ELASTIC_SEED=%" PRIu64
			" ZEPHON_ELASTIC_HISTORIES=1 (journals kept in %s)\n", seed, dir);
	else
		rm_rf(dir);
	free(md.steps);
	free(dir);
}

int main(void)
{
	const char *s = getenv("ZEPHON_ELASTIC_SEED"), *h = getenv("ZEPHON_ELASTIC_HISTORIES");
	uint64_t base = s ? strtoull(s, NULL, 0) : 1;
#ifdef __SANITIZE_ADDRESS__
	uint64_t histories = h ? strtoull(h, NULL, 0) : 50; /* >= 50, and ASan is slow */
#else
	uint64_t histories = h ? strtoull(h, NULL, 0) : 60;
#endif
	struct stats st;

	memset(&st, 0, sizeof(st));
	printf("elastic: %" PRIu64 " histories from seed %" PRIu64 "\n", histories, base);
	for (uint64_t i = 0; i < histories; i++)
		run_history(base + i, &st);
	printf("elastic: %" PRIu64 " histories (%" PRIu64 " over several journals), %" PRIu64
	       " mounts, %" PRIu64 " killed, %" PRIu64 " claims, %" PRIu64 " marks, %" PRIu64
	       " rewinds; final streams %" PRIu64 " samples, %" PRIu64 " full epochs checked\n",
	       histories, st.multi, st.mounts, st.crashes, st.claims, st.marks, st.rewinds,
	       st.gsns, st.epochs);
	for (size_t k = 0; k < MAX_NODES; k++)
		free(paths[k]);
	return check_status();
}
