/*
 * journal_history.c: reading a journal's history: the rows the resume rules see
 * (hist_load), the resume point over one journal or several, and the history queries
 * of `zephon journal show` and /status.
 */
#include "journal_int.h"
#include "sqlite_errno.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

/* Why hist_load() failed: SQLite's message, or, when SQLite saw nothing wrong, that a
 * recorded value failed our range checks (SQLite would say "not an error"). */
const char *hist_errmsg(sqlite3 *db)
{
	int c = sqlite3_errcode(db);

	if (c == SQLITE_OK || c == SQLITE_ROW || c == SQLITE_DONE)
		return "a recorded value is out of range (the journal was edited or is corrupt; "
		       "start a new one with journal=PATH)";
	return sqlite3_errmsg(db);
}

/* Rows (rank, step, micro[, delivered_step, delivered_micro]) of `sql` with ?1 = key,
 * into a malloc'd array; without the delivered columns the delivered position is the
 * cursor (a version-1 journal, a rewind's cursors). 0 or -errno; a read that found
 * impossible values is reported as corruption. */
int jnl_load_cursor_rows(sqlite3 *db, const char *sql, int64_t key,
			    struct journal_cursor **out, size_t *count)
{
	sqlite3_stmt *st;
	struct journal_cursor *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	*out = NULL;
	*count = 0;
	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return sqlite_errno(rc);
	sqlite3_bind_int64(st, 1, key);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (ARRAY_GROW(v, cap, n + 1)) {
			rc = SQLITE_NOMEM;
			break;
		}
		if (jnl_u64_col(st, 0, &v[n].rank) || jnl_u64_col(st, 1, &v[n].step) ||
		    jnl_u64_col(st, 2, &v[n].micro)) {
			rc = SQLITE_CORRUPT;
			break;
		}
		v[n].delivered_step = v[n].step;
		v[n].delivered_micro = v[n].micro;
		if (sqlite3_column_count(st) == 5 &&
		    (jnl_u64_col(st, 3, &v[n].delivered_step) || jnl_u64_col(st, 4, &v[n].delivered_micro))) {
			rc = SQLITE_CORRUPT;
			break;
		}
		n++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		free(v);
		return sqlite_errno(rc) ? sqlite_errno(rc) : -EIO;
	}
	*out = v;
	*count = n;
	return 0;
}

int jnl_load_cursors(sqlite3 *db, int version, int64_t layout_id,
			struct journal_cursor **out, size_t *count)
{
	return jnl_load_cursor_rows(db, version >= 2 ?
				"SELECT rank, step, micro, delivered_step, delivered_micro "
				"FROM cursor WHERE layout = ?1 ORDER BY rank" :
				"SELECT rank, step, micro FROM cursor WHERE layout = ?1 "
				"ORDER BY rank", layout_id, out, count);
}

int hist_load(sqlite3 *db, int version, size_t src, struct hist *h)
{
	sqlite3_stmt *st;
	size_t cap = 0;
	int64_t eff = INT64_MIN;
	int rc;

	memset(h, 0, sizeof(*h));
	rc = sqlite3_prepare_v2(db,
		"SELECT 0, seq, time_us, start_step, start_samples, id, world_size, "
		"global_batch, micro_batch, rule FROM layout "
		"UNION ALL SELECT 1, seq, time_us, step, gsn, layout, 0, 0, 0, '' FROM mark "
		"UNION ALL SELECT 2, seq, time_us, step, gsn, layout, 0, 0, 0, '' FROM rewind "
		"ORDER BY 2", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return sqlite_errno(rc);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct hev *e;
		struct journal_resume r;
		int64_t t;

		if (ARRAY_GROW(h->ev, cap, h->nev + 1)) {
			rc = SQLITE_NOMEM;
			break;
		}
		e = &h->ev[h->nev];
		memset(e, 0, sizeof(*e));
		e->kind = (enum hev_kind)sqlite3_column_int(st, 0);
		e->seq = sqlite3_column_int64(st, 1);
		t = sqlite3_column_int64(st, 2);
		eff = t > eff ? t : eff;
		e->eff_us = eff;
		e->layout_id = sqlite3_column_int64(st, 5);
		e->src = src;
		if (jnl_u64_col(st, 3, &e->step) || jnl_u64_col(st, 4, &e->gsn)) {
			rc = SQLITE_CORRUPT;
			break;
		}
		if (e->kind == HEV_LAYOUT) {
			const char *rule = (const char *)sqlite3_column_text(st, 9);

			if (jnl_layout_cols(st, (const int[]){ 6, 7, 8, 3, 4 }, &e->l) || !rule ||
			    journal_resume_parse(rule, &r)) {
				rc = SQLITE_CORRUPT;
				break;
			}
			e->rule = r.rule;
		}
		h->nev++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		hist_release(h);
		return sqlite_errno(rc) ? sqlite_errno(rc) : -EIO;
	}
	for (size_t i = h->nev; i-- > 0;)
		if (h->ev[i].kind == HEV_LAYOUT) {
			h->last = &h->ev[i];
			break;
		}
	if (h->last) {
		rc = jnl_load_cursors(db, version, h->last->layout_id, &h->cur, &h->ncur);
		if (rc) {
			hist_release(h);
			return rc;
		}
	}
	return 0;
}

int journal_resume_point_ex(struct journal *j, struct journal_point *info)
{
	struct hist h;
	int rc;

	pthread_mutex_lock(&j->mu);
	rc = hist_load(j->db, j->version, 0, &h);
	if (!rc) {
		rc = hist_point(&h, 1, NULL, info);
		hist_release(&h);
	} else {
		jfail(j, rc, "journal %s: cannot read the history: %s", j->path,
		      hist_errmsg(j->db));
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_resume_point(struct journal *j, uint64_t *samples, uint64_t *step)
{
	struct journal_point p;
	int rc = journal_resume_point_ex(j, &p);

	if (rc)
		return rc;
	*samples = p.samples;
	*step = p.step;
	return p.basis == JOURNAL_POINT_EMPTY ? -ENOENT : 0;
}

int journal_resume_point_files_ex(const char *const *paths, size_t npaths,
				  struct journal_point *info, char *err, size_t errlen)
{
	struct hist *hs;
	struct journal_ident first = { 0 };
	char a[JOURNAL_IDENT_TEXT_MAX], b[JOURNAL_IDENT_TEXT_MAX];
	int rc = 0;
	size_t loaded = 0;

	if (!npaths)
		return err_set(err, errlen, -EINVAL, "no journal given");
	hs = calloc(npaths, sizeof(*hs));
	if (!hs)
		return -ENOMEM;
	for (size_t i = 0; i < npaths && !rc; i++) {
		struct journal *j;

		rc = journal_open_readonly(paths[i], &j, err, errlen);
		if (rc)
			break;
		if (i == 0) {
			first = j->ident;
		} else if (!journal_ident_same(&first, &j->ident)) {
			journal_ident_text(&first, a, sizeof(a));
			journal_ident_text(&j->ident, b, sizeof(b));
			rc = err_set(err, errlen, -ESTALE, "journals %s (%s) and %s (%s) belong to "
				  "different datasets, orders or splits; pass the journals of one job",
				  paths[0], a, paths[i], b);
		}
		if (!rc) {
			rc = hist_load(j->db, j->version, i, &hs[i]);
			if (rc)
				err_set(err, errlen, rc, "cannot read journal %s: %s", paths[i],
				     hist_errmsg(j->db));
			else
				loaded = i + 1;
		}
		journal_close(j);
	}
	if (!rc) {
		rc = hist_point(hs, npaths, paths, info);
		if (err && errlen)
			err[0] = 0;
	}
	for (size_t i = 0; i < loaded; i++)
		hist_release(&hs[i]);
	free(hs);
	return rc;
}

int journal_resume_point_files(const char *const *paths, size_t npaths,
			       uint64_t *samples, uint64_t *step, char *err, size_t errlen)
{
	struct journal_point p;
	int rc = journal_resume_point_files_ex(paths, npaths, &p, err, errlen);

	if (!rc) {
		*samples = p.samples;
		*step = p.step;
	}
	return rc;
}

/* ---- reading the history ---- */

int journal_layouts(struct journal *j, struct journal_layout **out, size_t *count)
{
	sqlite3_stmt *st;
	struct journal_layout *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&j->mu);
	/* a read-only handle reads an older schema as is: no weights before version 3 */
	rc = sqlite3_prepare_v2(j->db, j->version >= 3 ?
				"SELECT id, world_size, global_batch, micro_batch, ranks, "
				"start_step, start_samples, time_us, host, rule, applied, weights "
				"FROM layout ORDER BY id" :
				"SELECT id, world_size, global_batch, micro_batch, ranks, "
				"start_step, start_samples, time_us, host, rule, applied, NULL "
				"FROM layout ORDER BY id", -1, &st, NULL);
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot read the layouts");
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct journal_layout *e;
		const char *w;

		if (ARRAY_GROW(v, cap, n + 1)) {
			rc = SQLITE_NOMEM;
			break;
		}
		e = &v[n];
		memset(e, 0, sizeof(*e));
		e->id = sqlite3_column_int64(st, 0);
		if (jnl_layout_cols(st, (const int[]){ 1, 2, 3, 5, 6 }, &e->layout)) {
			rc = SQLITE_CORRUPT;
			break;
		}
		jnl_copy_str(e->ranks, sizeof(e->ranks), (const char *)sqlite3_column_text(st, 4));
		e->time = sqlite3_column_int64(st, 7) / 1000000;
		jnl_copy_str(e->host, sizeof(e->host), (const char *)sqlite3_column_text(st, 8));
		jnl_copy_str(e->rule, sizeof(e->rule), (const char *)sqlite3_column_text(st, 9));
		jnl_copy_str(e->resume, sizeof(e->resume), (const char *)sqlite3_column_text(st, 10));
		w = (const char *)sqlite3_column_text(st, 11);
		if (w && (!*w || journal_weights_parse(w, NULL, NULL, NULL, 0))) { /* not what we write */
			rc = SQLITE_CORRUPT;
			break;
		}
		jnl_copy_str(e->weights, sizeof(e->weights), w);
		n++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		free(v);
		rc = sqlite_errno(rc) ? sqlite_errno(rc) : -EIO;
		jfail(j, rc, "journal %s: cannot read the layouts", j->path);
		goto out;
	}
	rc = 0;
	*out = v;
	*count = n;
out:
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_cursors(struct journal *j, int64_t layout_id, struct journal_cursor **out,
		    size_t *count)
{
	int64_t one = 0;
	sqlite3_stmt *st;
	int rc;

	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&j->mu);
	rc = sqlite3_prepare_v2(j->db, "SELECT 1 FROM layout WHERE id = ?1", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, layout_id);
		rc = sqlite3_step(st);
		one = rc == SQLITE_ROW;
		rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
		sqlite3_finalize(st);
	}
	if (rc != SQLITE_OK)
		rc = jfail_sql(j, rc, "cannot read the cursors");
	else if (!one)
		rc = jfail(j, -ENOENT, "journal %s has no layout %" PRId64, j->path, layout_id);
	else
		rc = jnl_load_cursors(j->db, j->version, layout_id, out, count);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

static int load_events(struct journal *j, const char *sql, int64_t key,
		       struct journal_event **out, size_t *count)
{
	sqlite3_stmt *st;
	struct journal_event *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&j->mu);
	rc = sqlite3_prepare_v2(j->db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot read the history");
		goto out;
	}
	if (key)
		sqlite3_bind_int64(st, 1, key);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (ARRAY_GROW(v, cap, n + 1)) {
			rc = SQLITE_NOMEM;
			break;
		}
		v[n].id = sqlite3_column_int64(st, 0);
		v[n].layout_id = sqlite3_column_int64(st, 1);
		v[n].time_us = sqlite3_column_int64(st, 4);
		if (jnl_u64_col(st, 2, &v[n].step) || jnl_u64_col(st, 3, &v[n].gsn)) {
			rc = SQLITE_CORRUPT;
			break;
		}
		n++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		free(v);
		rc = sqlite_errno(rc) ? sqlite_errno(rc) : -EIO;
		jfail(j, rc, "journal %s: cannot read the history", j->path);
		goto out;
	}
	rc = 0;
	*out = v;
	*count = n;
out:
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int journal_marks(struct journal *j, struct journal_event **out, size_t *count)
{
	return load_events(j, "SELECT id, layout, step, gsn, time_us FROM mark ORDER BY seq",
			   0, out, count);
}

int journal_rewinds(struct journal *j, struct journal_event **out, size_t *count)
{
	return load_events(j, "SELECT id, layout, step, gsn, time_us FROM rewind ORDER BY seq",
			   0, out, count);
}

int journal_rewind_cursors(struct journal *j, int64_t rewind_id,
			   struct journal_cursor **out, size_t *count)
{
	sqlite3_stmt *st;
	int rc, found = 0;

	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&j->mu);
	rc = sqlite3_prepare_v2(j->db, "SELECT 1 FROM rewind WHERE id = ?1", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, rewind_id);
		found = sqlite3_step(st) == SQLITE_ROW;
		sqlite3_finalize(st);
	}
	if (rc != SQLITE_OK) {
		rc = jfail_sql(j, rc, "cannot read a rewind");
		goto out;
	}
	if (!found) {
		rc = jfail(j, -ENOENT, "journal %s has no rewind %" PRId64, j->path, rewind_id);
		goto out;
	}
	rc = jnl_load_cursor_rows(j->db, "SELECT rank, step, micro FROM rewind_cursor "
			      "WHERE rewind = ?1 ORDER BY rank", rewind_id, out, count);
	if (rc)
		jfail(j, rc, "journal %s: cannot read a rewind", j->path);
out:
	pthread_mutex_unlock(&j->mu);
	return rc;
}
