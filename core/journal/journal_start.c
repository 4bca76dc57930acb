/*
 * journal_start.c: journal_start(): resolve the resume rule against the history
 * (journal_policy.c decides) and record the new layout and its cursors in one
 * transaction.
 */
#include "journal_int.h"
#include "mix.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

/* hist_reached_fn over j's database: did some rank of layout e get as far as step (its
 * cursor at step or beyond)? A read error counts as no. */
static int layout_reached(void *ctx, const struct hev *e, uint64_t step)
{
	struct journal *j = ctx;
	struct journal_cursor *cur;
	size_t n;
	int yes = e->step == step;

	if (!yes && jnl_load_cursors(j->db, j->version, e->layout_id, &cur, &n) == 0) {
		for (size_t i = 0; i < n && !yes; i++)
			yes = cur[i].step >= step;
		free(cur);
	}
	return yes;
}

int journal_set_weights(struct journal *j, const char *weights)
{
	char why[sizeof(j->err)];
	int rc = 0;

	pthread_mutex_lock(&j->mu);
	if (j->readonly)
		rc = jfail(j, -EROFS, "journal %s is open read-only", j->path);
	else if (weights && *weights && journal_weights_parse(weights, NULL, NULL, why, sizeof(why)))
		rc = jfail(j, -EINVAL, "mixture weights: %s", why);
	else
		jnl_copy_str(j->weights, sizeof(j->weights), weights);
	if (!rc)
		j->err[0] = 0;
	pthread_mutex_unlock(&j->mu);
	return rc;
}

/* A new layout, built before its commit and installed after it: the layout with its
 * resolved start, its row's texts, and its served ranks at (S0, 0). */
struct start_state {
	struct layout layout;
	struct rankset ranks;
	struct jrank *rk;
	char *ranks_text;
	char desc[sizeof(((struct journal_layout *)0)->resume) * 2]; /* what was applied */
	char rule_text[64];
	char host[64];
	int64_t t;                  /* time_us of the row */
	int64_t id;                 /* the row's id, once inserted */
};

/* The layout row of st (caller holds j->mu, in a transaction): st->id. SQLite's rc. */
static int insert_layout(struct journal *j, struct start_state *st)
{
	struct layout_values v;
	sqlite3_stmt *q;
	int rc = sqlite3_prepare_v2(j->db,
		"INSERT INTO layout (seq, world_size, global_batch, micro_batch, ranks, "
		"start_step, start_samples, time_us, host, rule, applied, weights) "
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)", -1, &q, NULL);

	if (rc != SQLITE_OK)
		return rc;
	layout_get(&st->layout, &v);
	sqlite3_bind_int64(q, 1, j->next_seq);
	sqlite3_bind_int64(q, 2, (int64_t)v.world_size);
	sqlite3_bind_int64(q, 3, (int64_t)v.global_batch);
	sqlite3_bind_int64(q, 4, (int64_t)v.micro_batch);
	sqlite3_bind_text(q, 5, st->ranks_text, -1, SQLITE_STATIC);
	sqlite3_bind_int64(q, 6, (int64_t)v.start_step);
	sqlite3_bind_int64(q, 7, (int64_t)v.start_samples);
	sqlite3_bind_int64(q, 8, st->t);
	sqlite3_bind_text(q, 9, st->host, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 10, st->rule_text, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 11, st->desc, -1, SQLITE_STATIC);
	if (j->weights[0])
		sqlite3_bind_text(q, 12, j->weights, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(q, 12);
	rc = sqlite3_step(q);
	sqlite3_finalize(q);
	if (rc != SQLITE_DONE)
		return rc;
	st->id = sqlite3_last_insert_rowid(j->db);
	return SQLITE_OK;
}

/* The cursor rows of st's ranks, each at (S0, 0). SQLite's rc. */
static int insert_cursors(struct journal *j, const struct start_state *st)
{
	uint64_t s0 = layout_start_step(&st->layout);
	sqlite3_stmt *q;
	int rc = sqlite3_prepare_v2(j->db, "INSERT INTO cursor (layout, rank, step, micro, "
				    "delivered_step, delivered_micro) VALUES (?1, ?2, ?3, 0, ?3, 0)",
				    -1, &q, NULL);

	if (rc != SQLITE_OK)
		return rc;
	for (size_t i = 0; i < st->ranks.count; i++) {
		sqlite3_bind_int64(q, 1, st->id);
		sqlite3_bind_int64(q, 2, (int64_t)st->ranks.ranks[i]);
		sqlite3_bind_int64(q, 3, (int64_t)s0);
		rc = sqlite3_step(q);
		sqlite3_reset(q);
		if (rc != SQLITE_DONE)
			break;
		rc = SQLITE_OK;
	}
	sqlite3_finalize(q);
	return rc;
}

static void start_state_free(struct start_state *st)
{
	rankset_release(&st->ranks);
	free(st->rk);
	free(st->ranks_text);
}

/* The arguments of journal_start (caller holds j->mu). 0, -EROFS, -EINVAL. */
static int start_check(struct journal *j, const struct journal_resume *rule,
		       const struct rankset *ranks, const struct layout *l)
{
	uint64_t w;

	if (j->readonly)
		return jfail(j, -EROFS, "journal %s is open read-only", j->path);
	if (!rule || !l || !layout_valid(l))
		return jfail(j, -EINVAL, "journal_start: no rule or no layout given (one "
			     "layout_make() made)");
	if (!ranks || !ranks->count)
		return jfail(j, -EINVAL, "a mount must serve at least one rank");
	w = layout_world_size(l);
	for (size_t i = 0; i < ranks->count; i++)
		if (ranks->ranks[i] >= w || (i && ranks->ranks[i] <= ranks->ranks[i - 1]))
			return jfail(j, -EINVAL, "ranks must be sorted, unique and below world_size "
				     "(%" PRIu64 ")", w);
	return 0;
}

/* S0 and G0 of st->layout for rule, from the history (caller holds j->mu); st->desc
 * receives what was done. 0, -EINVAL, -ENOMEM, -EIO. */
static int start_resolve(struct journal *j, const struct journal_resume *rule,
			 struct start_state *st)
{
	struct hist h;
	int rc = hist_load(j->db, j->version, 0, &h);

	if (rc)
		return jfail(j, rc == -ENOMEM ? rc : -EIO, "journal %s: cannot read the history: %s",
			     j->path, hist_errmsg(j->db));
	rc = hist_resolve(&h, &(struct hist_start){ rule, st->ranks.count, layout_reached, j,
			  j->path, st->desc, sizeof(st->desc) }, &st->layout, j->err, sizeof(j->err));
	hist_release(&h);
	if (rc == -ENOMEM)
		return jfail(j, rc, "out of memory");
	return rc;
}

/* Every served rank of ranks at (S0, 0) into st: a copy of the set, the positions, and
 * the rank list for the row. 0 or -ENOMEM. */
static int start_state_ranks(const struct rankset *ranks, struct start_state *st)
{
	/* the list for the row: whole unless absurdly fragmented (compact ranges are short) */
	size_t n = ranks->count, text_len = n < 3000 ? n * 21 + 1 : 65536;
	struct rank_pos s0 = { layout_start_step(&st->layout), 0 };

	st->ranks.ranks = malloc(n * sizeof(*st->ranks.ranks));
	st->rk = malloc(n * sizeof(*st->rk));
	st->ranks_text = malloc(text_len);
	if (!st->ranks.ranks || !st->rk || !st->ranks_text)
		return -ENOMEM;
	memcpy(st->ranks.ranks, ranks->ranks, n * sizeof(*st->ranks.ranks));
	st->ranks.count = n;
	for (size_t i = 0; i < n; i++)
		st->rk[i] = (struct jrank){ s0, s0, s0, s0, s0, s0 };
	rankset_format(ranks, st->ranks_text, text_len);
	return 0;
}

/* Make the recorded layout st the handle's current one (caller holds j->mu); st's ranks
 * become j's. */
static void start_install(struct journal *j, struct start_state *st)
{
	jnl_ranks_set(j, &st->ranks, st->rk);
	st->rk = NULL;
	pthread_mutex_lock(&j->dmu);
	memset(&j->cur, 0, sizeof(j->cur));
	j->cur.id = st->id;
	j->cur.layout = st->layout;
	pthread_mutex_unlock(&j->dmu);
	jnl_copy_str(j->cur.ranks, sizeof(j->cur.ranks), st->ranks_text);
	j->cur.time = st->t / 1000000;
	jnl_copy_str(j->cur.host, sizeof(j->cur.host), st->host);
	jnl_copy_str(j->cur.rule, sizeof(j->cur.rule), st->rule_text);
	jnl_copy_str(j->cur.resume, sizeof(j->cur.resume), st->desc);
	jnl_copy_str(j->cur.weights, sizeof(j->cur.weights), j->weights);
}

int journal_start(struct journal *j, const struct journal_resume *rule,
		  const struct rankset *ranks, struct layout *l,
		  char *applied, size_t applied_len)
{
	struct start_state st = { 0 };
	int rc;

	pthread_mutex_lock(&j->mu);
	rc = start_check(j, rule, ranks, l);
	if (rc)
		goto out;
	st.layout = *l;
	st.ranks.count = ranks->count;
	rc = start_resolve(j, rule, &st);
	if (rc)
		goto out;
	if (start_state_ranks(ranks, &st)) {
		rc = jfail(j, -ENOMEM, "out of memory");
		goto out;
	}
	journal_resume_format(rule, st.rule_text, sizeof(st.rule_text));
	if (gethostname(st.host, sizeof(st.host) - 1))
		jnl_copy_str(st.host, sizeof(st.host), "?");
	st.t = jnl_now_us();
	rc = jnl_exec(j->db, "BEGIN IMMEDIATE");
	if (rc == SQLITE_OK)
		rc = insert_layout(j, &st);
	if (rc == SQLITE_OK)
		rc = insert_cursors(j, &st);
	if (rc == SQLITE_OK)
		rc = jnl_exec(j->db, "COMMIT");
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot record the layout");
		rc = rc == -ENOMEM ? rc : -EIO;
		goto out;
	}
	j->next_seq++;
	start_install(j, &st);
	*l = st.layout;
	jnl_copy_str(applied, applied_len, st.desc);
	j->err[0] = 0;
out:
	start_state_free(&st);
	pthread_mutex_unlock(&j->mu);
	return rc;
}
