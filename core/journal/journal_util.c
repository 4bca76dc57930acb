/*
 * journal_util.c: the small helpers around the connection that every journal file uses
 * (journal_int.h): the clock of history rows (journal_set_clock), error texts, one-row
 * queries and column checks.
 */
#include "journal_int.h"
#include "sqlite_errno.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* journal_set_clock()'s clock (NULL: CLOCK_REALTIME), and the last time given out. */
static int64_t (*clock_now_us)(void);
static int64_t clock_last;

void journal_set_clock(int64_t (*now_us)(void))
{
	__atomic_store_n(&clock_now_us, now_us, __ATOMIC_RELAXED);
	__atomic_store_n(&clock_last, 0, __ATOMIC_RELAXED);
}

/* Unix microseconds for history rows, strictly increasing within the process, so the
 * rows of several journals written by one process keep their order across journals. */
int64_t jnl_now_us(void)
{
	int64_t (*now_us)(void) = __atomic_load_n(&clock_now_us, __ATOMIC_RELAXED);
	int64_t t, prev;

	if (now_us) {
		t = now_us();
	} else {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		t = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	}
	prev = __atomic_load_n(&clock_last, __ATOMIC_RELAXED);
	do {
		if (t <= prev)
			t = prev + 1;
	} while (!__atomic_compare_exchange_n(&clock_last, &prev, t, 0, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return t;
}

void jnl_copy_str(char *dst, size_t len, const char *src)
{
	err_printf(dst, len, "%s", src ? src : "");
}

int jfail(struct journal *j, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vset(j->err, sizeof(j->err), rc, fmt, ap);
	va_end(ap);
	return rc;
}

/* A failed SQLite call on j's connection: keep its message, undo an open transaction,
 * return the translated errno. */
int jfail_sql(struct journal *j, int rc, const char *what)
{
	int e = sqlite_errno(rc);

	snprintf(j->err, sizeof(j->err), "journal %s: %s: %s", j->path, what,
		 sqlite3_errmsg(j->db));
	if (!sqlite3_get_autocommit(j->db))
		sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
	return e ? e : -EIO;
}

int jnl_exec(sqlite3 *db, const char *sql)
{
	return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* One integer from a one-row query; rc of SQLite. */
int jnl_query_i64(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(st, 0);
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		rc = SQLITE_EMPTY;
	}
	sqlite3_finalize(st);
	return rc;
}

int jnl_u64_col(sqlite3_stmt *st, int col, uint64_t *out)
{
	int64_t v = sqlite3_column_int64(st, col);

	if (v < 0)
		return -EBADMSG;
	*out = (uint64_t)v;
	return 0;
}

int jnl_layout_cols(sqlite3_stmt *st, const int col[5], struct layout *out)
{
	struct layout_values v;

	if (jnl_u64_col(st, col[0], &v.world_size) || jnl_u64_col(st, col[1], &v.global_batch) ||
	    jnl_u64_col(st, col[2], &v.micro_batch) || jnl_u64_col(st, col[3], &v.start_step) ||
	    jnl_u64_col(st, col[4], &v.start_samples) || layout_make(&v, out, NULL, 0))
		return -EBADMSG;
	return 0;
}

void jnl_ranks_set(struct journal *j, struct rankset *ranks, struct jrank *rk)
{
	pthread_mutex_lock(&j->dmu);
	rankset_release(&j->ranks);
	free(j->rk);
	j->ranks = ranks ? *ranks : (struct rankset){ NULL, 0 };
	j->rk = rk;
	pthread_mutex_unlock(&j->dmu);
	if (ranks)
		*ranks = (struct rankset){ NULL, 0 };
}

/* "file:" URI for sqlite3_open_v2 (https://www.sqlite.org/uri.html): '%', '?', '#' of
 * the path are escaped. */
char *jnl_file_uri(const char *path, const char *query)
{
	size_t n = strlen(path), q = strlen(query);
	char *u = malloc(5 + 3 * n + 1 + q + 1), *o = u;

	if (!u)
		return NULL;
	o += sprintf(o, "file:");
	for (const char *c = path; *c; c++) {
		if (*c == '%' || *c == '?' || *c == '#')
			o += sprintf(o, "%%%02X", (unsigned char)*c);
		else
			*o++ = *c;
	}
	*o++ = '?';
	memcpy(o, query, q + 1);
	return u;
}
