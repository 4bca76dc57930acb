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

static int insert_layout(struct journal *j, const struct layout *l, const char *ranks,
			 const char *host, const char *rule, const char *applied, int64_t t,
			 int64_t *id)
{
	struct layout_values v;
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(j->db,
		"INSERT INTO layout (seq, world_size, global_batch, micro_batch, ranks, "
		"start_step, start_samples, time_us, host, rule, applied, weights) "
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)", -1, &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	layout_get(l, &v);
	sqlite3_bind_int64(st, 1, j->next_seq);
	sqlite3_bind_int64(st, 2, (int64_t)v.world_size);
	sqlite3_bind_int64(st, 3, (int64_t)v.global_batch);
	sqlite3_bind_int64(st, 4, (int64_t)v.micro_batch);
	sqlite3_bind_text(st, 5, ranks, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, (int64_t)v.start_step);
	sqlite3_bind_int64(st, 7, (int64_t)v.start_samples);
	sqlite3_bind_int64(st, 8, t);
	sqlite3_bind_text(st, 9, host, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 10, rule, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 11, applied, -1, SQLITE_STATIC);
	if (j->weights[0])
		sqlite3_bind_text(st, 12, j->weights, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 12);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return rc;
	*id = sqlite3_last_insert_rowid(j->db);
	return SQLITE_OK;
}

static int insert_cursors(struct journal *j, int64_t layout_id, const uint64_t *ranks,
			  size_t n, uint64_t step)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(j->db, "INSERT INTO cursor (layout, rank, step, micro, "
				    "delivered_step, delivered_micro) VALUES (?1, ?2, ?3, 0, ?3, 0)",
				    -1, &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	for (size_t i = 0; i < n; i++) {
		sqlite3_bind_int64(st, 1, layout_id);
		sqlite3_bind_int64(st, 2, (int64_t)ranks[i]);
		sqlite3_bind_int64(st, 3, (int64_t)step);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
		if (rc != SQLITE_DONE)
			break;
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

/* The new layout's state in memory, built before the commit and swapped in after it. */
struct start_state {
	uint64_t *ranks;
	struct rank_pos *pos, *cpos, *dpos, *dlv, *want, *claimed;
	char *ranks_text;
};

static void start_state_free(struct start_state *st)
{
	free(st->ranks);
	free(st->pos);
	free(st->cpos);
	free(st->dpos);
	free(st->dlv);
	free(st->want);
	free(st->claimed);
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

/* S0 and G0 of *l for rule, from the history (caller holds j->mu); desc receives what
 * was done. 0, -EINVAL, -ENOMEM, -EIO. */
static int start_resolve(struct journal *j, const struct journal_resume *rule, size_t nranks,
			 struct layout *l, char *desc, size_t desc_len)
{
	struct hist h;
	int rc = hist_load(j->db, j->version, 0, &h);

	if (rc)
		return jfail(j, rc == -ENOMEM ? rc : -EIO, "journal %s: cannot read the history: %s",
			     j->path, hist_errmsg(j->db));
	rc = hist_resolve(&h, rule, nranks, layout_reached, j, j->path, l, desc, desc_len,
			  j->err, sizeof(j->err));
	hist_release(&h);
	if (rc == -ENOMEM)
		return jfail(j, rc, "out of memory");
	return rc;
}

/* Every served rank at (S0, 0): the arrays, and the rank list for the row. 0 or -ENOMEM. */
static int start_state_new(const struct rankset *ranks, uint64_t s0, struct start_state *st)
{
	/* the list for the row: whole unless absurdly fragmented (compact ranges are short) */
	size_t n = ranks->count, text_len = n < 3000 ? n * 21 + 1 : 65536;

	st->ranks = malloc(n * sizeof(*st->ranks));
	st->pos = malloc(n * sizeof(*st->pos));
	st->cpos = malloc(n * sizeof(*st->pos));
	st->dpos = malloc(n * sizeof(*st->pos));
	st->dlv = malloc(n * sizeof(*st->pos));
	st->want = malloc(n * sizeof(*st->pos));
	st->claimed = malloc(n * sizeof(*st->pos));
	st->ranks_text = malloc(text_len);
	if (!st->ranks || !st->pos || !st->cpos || !st->dpos || !st->dlv || !st->want || !st->claimed || !st->ranks_text)
		return -ENOMEM;
	memcpy(st->ranks, ranks->ranks, n * sizeof(*st->ranks));
	for (size_t i = 0; i < n; i++) {
		st->pos[i] = (struct rank_pos){ s0, 0 };
		st->cpos[i] = st->dpos[i] = st->dlv[i] = st->want[i] = st->claimed[i] = st->pos[i];
	}
	rankset_format(ranks, st->ranks_text, text_len);
	return 0;
}

/* Make the recorded layout id (row l, st) the handle's current one (caller holds j->mu);
 * st's arrays become j's. */
static void start_install(struct journal *j, int64_t id, const struct layout *l, size_t n,
			  struct start_state *st, int64_t t, const char *host,
			  const char *rule_text, const char *desc)
{
	pthread_mutex_lock(&j->dmu);
	free(j->ranks);
	free(j->pos);
	free(j->cpos);
	free(j->dpos);
	free(j->dlv);
	free(j->want);
	free(j->claimed);
	j->ranks = st->ranks;
	j->pos = st->pos;
	j->cpos = st->cpos;
	j->dpos = st->dpos;
	j->dlv = st->dlv;
	j->want = st->want;
	j->claimed = st->claimed;
	st->ranks = NULL;
	st->pos = st->cpos = st->dpos = st->dlv = st->want = st->claimed = NULL;
	j->nranks = n;
	memset(&j->cur, 0, sizeof(j->cur));
	j->cur.id = id;
	j->cur.layout = *l;
	pthread_mutex_unlock(&j->dmu);
	jnl_copy_str(j->cur.ranks, sizeof(j->cur.ranks), st->ranks_text);
	j->cur.time = t / 1000000;
	jnl_copy_str(j->cur.host, sizeof(j->cur.host), host);
	jnl_copy_str(j->cur.rule, sizeof(j->cur.rule), rule_text);
	jnl_copy_str(j->cur.resume, sizeof(j->cur.resume), desc);
	jnl_copy_str(j->cur.weights, sizeof(j->cur.weights), j->weights);
}

int journal_start(struct journal *j, const struct journal_resume *rule,
		  const struct rankset *ranks, struct layout *l,
		  char *applied, size_t applied_len)
{
	struct start_state st = { 0 };
	struct layout nl;
	char desc[sizeof(j->cur.resume) * 2], rule_text[64], host[64] = "";
	int64_t id = 0, t;
	int rc;

	pthread_mutex_lock(&j->mu);
	rc = start_check(j, rule, ranks, l);
	if (rc)
		goto out;
	nl = *l;
	rc = start_resolve(j, rule, ranks->count, &nl, desc, sizeof(desc));
	if (rc)
		goto out;
	if (start_state_new(ranks, layout_start_step(&nl), &st)) {
		rc = jfail(j, -ENOMEM, "out of memory");
		goto out;
	}
	journal_resume_format(rule, rule_text, sizeof(rule_text));
	if (gethostname(host, sizeof(host) - 1))
		jnl_copy_str(host, sizeof(host), "?");
	t = jnl_now_us();
	rc = jnl_exec(j->db, "BEGIN IMMEDIATE");
	if (rc == SQLITE_OK)
		rc = insert_layout(j, &nl, st.ranks_text, host, rule_text, desc, t, &id);
	if (rc == SQLITE_OK)
		rc = insert_cursors(j, id, st.ranks, ranks->count, layout_start_step(&nl));
	if (rc == SQLITE_OK)
		rc = jnl_exec(j->db, "COMMIT");
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot record the layout");
		rc = rc == -ENOMEM ? rc : -EIO;
		goto out;
	}
	j->next_seq++;
	start_install(j, id, &nl, ranks->count, &st, t, host, rule_text, desc);
	*l = nl;
	jnl_copy_str(applied, applied_len, desc);
	j->err[0] = 0;
out:
	start_state_free(&st);
	pthread_mutex_unlock(&j->mu);
	return rc;
}
