/*
 * test_journal_util.h: helpers shared by the journal's C tests (whole-file reads,
 * starting a layout from text arguments; scratch directories are scratch.h's).
 * Header-only, static.
 */
#ifndef ZEPHON_TEST_JOURNAL_UTIL_H
#define ZEPHON_TEST_JOURNAL_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf, nftw (meson passes it; this is for standalone use) */
#endif

#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "check.h"
#include "journal.h"
#include "scratch.h"
#include "test_layout.h"

#define FP_A "0123456789abcdef0123456789abcdef"
#define FP_B "fedcba9876543210fedcba9876543210"

/* journal_open() of path for id that must succeed: exits with its message otherwise. */
static inline struct journal *open_id(const char *path, const struct journal_ident *id)
{
	struct journal *j = NULL;
	char err[512];
	int rc = journal_open(path, id, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err));

	if (rc) {
		fprintf(stderr, "journal_open(%s): %d %s\n", path, rc, err);
		exit(1);
	}
	return j;
}

static inline struct journal_ident ident_of(const char *fp, uint64_t seed,
					    enum order_shuffle sh, uint64_t n)
{
	struct journal_ident id;

	memset(&id, 0, sizeof(id));
	snprintf(id.fingerprint, sizeof(id.fingerprint), "%s", fp);
	id.seed = seed;
	id.shuffle = sh;
	id.samples = n;
	return id;
}

/* The whole file (malloc'd), or NULL with *len = 0 if it cannot be read. */
static inline unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b = NULL;
	long n;

	*len = 0;
	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return NULL;
	}
	b = malloc((size_t)n + 1);
	if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		b = NULL;
	}
	fclose(f);
	if (b)
		*len = (size_t)n;
	return b;
}

static inline int file_equals(const char *path, const unsigned char *data, size_t len)
{
	size_t n;
	unsigned char *b = slurp(path, &n);
	int same = b && n == len && !memcmp(b, data, len);

	free(b);
	return same;
}

static inline int exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* journal_start with the rule and ranks given as text. */
static inline int start_text(struct journal *j, const char *rule, uint64_t W, uint64_t B,
			     uint64_t m, const char *ranks, struct layout *out)
{
	struct journal_resume r;
	struct rankset rs;
	struct layout l = test_layout(W, B, m, 0, 0);
	char why[160], applied[512];
	int rc;

	if (journal_resume_parse(rule, &r))
		return -1000;
	if (rankset_parse(ranks, W, &rs, why, sizeof(why)))
		return -1001;
	rc = journal_start(j, &r, &rs, &l, applied, sizeof(applied));
	rankset_release(&rs);
	if (!rc && out)
		*out = l;
	return rc;
}

/* Run sql on the database at path with a connection of its own; exits on failure. */
static inline void sql_exec(const char *path, const char *sql)
{
	sqlite3 *db;
	char *msg = NULL;

	REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		fprintf(stderr, "sql_exec(%s): %s\n", sql, msg);
		exit(1);
	}
	sqlite3_close(db);
}

extern const char schema_journal_sql[]; /* schema/journal.sql: version 1, never edited */

/* A journal at path (replaced) as an older zephon left it: application_id, the released
 * version-1 DDL, then `steps` (later migration steps, may be NULL) and `rows` (its data,
 * ending with its PRAGMA user_version), in WAL mode like every journal. */
static inline void make_old_journal(const char *path, const char *steps, const char *rows)
{
	char app[64];
	sqlite3 *db;

	unlink(path);
	snprintf(app, sizeof(app), "PRAGMA application_id = %d;", (int)JOURNAL_APPLICATION_ID);
	REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, "PRAGMA page_size = 1024;", NULL, NULL, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, app, NULL, NULL, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, schema_journal_sql, NULL, NULL, NULL) == SQLITE_OK);
	if (steps)
		REQUIRE(sqlite3_exec(db, steps, NULL, NULL, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, rows, NULL, NULL, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, "PRAGMA journal_mode = WAL;", NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(db);
}

/* The first column of the first row of sql, read from the journal at path with a
 * connection of its own; -1 when there is no row. */
static inline int64_t sql_int(const char *path, const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	int64_t v = -1;

	REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

#endif
