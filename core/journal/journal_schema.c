/*
 * journal_schema.c: what a journal file holds (see journal.h): the schema's migration
 * steps, creating a new journal's schema and identity, validating an existing one
 * (application_id, version, quick_check, its meta table), and the identity's text and
 * comparison. journal_open.c decides when each runs.
 */
#include "journal_int.h"
#include "parse.h"
#include "sqlite_errno.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zephon_config.h"

/* schema/journal.sql, embedded by schema/embed.py. */
extern const char schema_journal_sql[];

/*
 * Migration steps: journal_migrations[k] takes a database at user_version k to k + 1.
 * A new journal runs every step from 0. To change the schema: append a step (ALTER ...,
 * data conversion), bump JOURNAL_SCHEMA_VERSION; never edit a released step.
 */
static const char *const journal_migrations[] = {
	schema_journal_sql, /* 0 -> 1: the first schema */
	/* 1 -> 2: each cursor row also holds its rank's delivered position: every claim
	 * below it reached its reader (read to its end, or closed). A version-1 journal
	 * recorded claims only, and counted each as consumed once claimed: its rows keep
	 * that meaning. */
	"ALTER TABLE cursor ADD COLUMN delivered_step INTEGER NOT NULL DEFAULT 0 "
	"CHECK (delivered_step >= 0);"
	"ALTER TABLE cursor ADD COLUMN delivered_micro INTEGER NOT NULL DEFAULT 0 "
	"CHECK (delivered_micro >= 0);"
	"UPDATE cursor SET delivered_step = step, delivered_micro = micro;",
	/* 2 -> 3: a layout of a mixture records its integer weights in source order,
	 * "7,3,0"; NULL: a single dataset (every row before this step). */
	"ALTER TABLE layout ADD COLUMN weights TEXT;",
};
_Static_assert(sizeof(journal_migrations) / sizeof(journal_migrations[0]) ==
	       JOURNAL_SCHEMA_VERSION, "one migration step per schema version");

/* An existing file SQLite cannot read as a journal: busy, out of memory, or bad. */
int jnl_bad_file(sqlite3 *db, int src, const char *path, char *err, size_t errlen)
{
	int e = sqlite_errno(src);

	if (e == -EBUSY)
		return err_set(err, errlen, -EBUSY, "journal %s is in use by another process (a "
			    "running mount holds it): read that mount's /status, or unmount it "
			    "first; two mounts need two journal=PATHs", path);
	if (e == -ENOMEM)
		return err_set(err, errlen, -ENOMEM, "out of memory reading journal %s", path);
	return err_set(err, errlen, -EBADMSG, "journal %s cannot be read (%s): it is corrupt or "
		    "not a Zephon journal; nothing was written to it: keep it for inspection and "
		    "pass a new journal=PATH (resume=samples:G keeps the position)", path,
		    sqlite3_errmsg(db));
}

static int read_meta(sqlite3 *db, const char *path, struct journal_ident *id,
		     char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc, have = 0, bad_split = 0;

	memset(id, 0, sizeof(*id));
	rc = sqlite3_prepare_v2(db, "SELECT key, value FROM meta", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return jnl_bad_file(db, rc, path, err, errlen);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *k = (const char *)sqlite3_column_text(st, 0);
		const char *v = (const char *)sqlite3_column_text(st, 1);

		if (!k || !v)
			continue;
		if (!strcmp(k, "fingerprint") && strlen(v) < sizeof(id->fingerprint)) {
			jnl_copy_str(id->fingerprint, sizeof(id->fingerprint), v);
			have |= 1;
		} else if (!strcmp(k, "seed") && !parse_u64(v, &id->seed)) {
			have |= 2;
		} else if (!strcmp(k, "shuffle") && !order_shuffle_parse(v, &id->shuffle)) {
			have |= 4;
		} else if (!strcmp(k, "samples") && !journal_parse_u62(v, &id->samples)) {
			have |= 8;
		} else if (!strcmp(k, "split")) {
			/* journal_open() writes it only non-empty, and it fits */
			bad_split = !*v || strlen(v) >= sizeof(id->split);
			jnl_copy_str(id->split, sizeof(id->split), v);
		}
	}
	if (rc != SQLITE_DONE) {
		rc = jnl_bad_file(db, rc, path, err, errlen);
		sqlite3_finalize(st);
		return rc;
	}
	sqlite3_finalize(st);
	if (have != 15)
		return err_set(err, errlen, -EBADMSG,
			    "%s is not a Zephon journal (its meta table lacks the "
			    "fingerprint, seed, shuffle or samples); nothing was written to it", path);
	if (bad_split)
		return err_set(err, errlen, -EBADMSG,
			    "journal %s has a damaged validation split in its meta table (empty, "
			    "or longer than %zu characters); nothing was written to it: keep it "
			    "for inspection and pass a new journal=PATH", path, sizeof(id->split) - 1);
	return 0;
}

void journal_ident_text(const struct journal_ident *id, char *out, size_t len)
{
	snprintf(out, len, "fingerprint %s, seed %" PRIu64 ", shuffle %s%s%s", id->fingerprint,
		 id->seed, order_shuffle_name(id->shuffle), id->split[0] ? ", split " : "",
		 id->split);
}

int journal_ident_same(const struct journal_ident *a, const struct journal_ident *b)
{
	return !strcmp(a->fingerprint, b->fingerprint) && a->seed == b->seed &&
	       a->shuffle == b->shuffle && !strcmp(a->split, b->split);
}

/* Steps from user_version `from` to JOURNAL_SCHEMA_VERSION, inside the caller's
 * transaction. */
int jnl_migrate(sqlite3 *db, int from)
{
	char sql[64];
	int rc;

	for (int v = from; v < JOURNAL_SCHEMA_VERSION; v++) {
		rc = jnl_exec(db, journal_migrations[v]);
		if (rc != SQLITE_OK)
			return rc;
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", v + 1);
		rc = jnl_exec(db, sql);
		if (rc != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

static int insert_meta(sqlite3 *db, const char *key, const char *value)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(db, "INSERT INTO meta (key, value) VALUES (?1, ?2)", -1,
				    &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* A new journal: application_id, every migration step and the identity, in one
 * transaction of the rollback journal (so page 1 with the application_id is in the main
 * file before WAL is switched on, and a crash leaves either nothing or a whole journal). */
int jnl_create_schema(sqlite3 *db, const struct journal_ident *id)
{
	char num[32], app[64];
	int64_t tables = -1;
	int rc;

	snprintf(app, sizeof(app), "PRAGMA application_id = %d", (int)JOURNAL_APPLICATION_ID);
	rc = jnl_exec(db, "BEGIN IMMEDIATE");
	if (rc != SQLITE_OK)
		return rc;
	rc = jnl_query_i64(db, "SELECT count(*) FROM sqlite_master", &tables);
	if (rc == SQLITE_OK && tables != 0)
		rc = SQLITE_NOTADB; /* someone else wrote to the empty file meanwhile */
	if (rc == SQLITE_OK)
		rc = jnl_exec(db, app);
	if (rc == SQLITE_OK)
		rc = jnl_migrate(db, 0);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "fingerprint", id->fingerprint);
	snprintf(num, sizeof(num), "%" PRIu64, id->seed);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "seed", num);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "shuffle", order_shuffle_name(id->shuffle));
	snprintf(num, sizeof(num), "%" PRIu64, id->samples);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "samples", num);
	if (rc == SQLITE_OK && id->split[0]) /* absent: no split, as in older journals */
		rc = insert_meta(db, "split", id->split);
	snprintf(num, sizeof(num), "%" PRId64, jnl_now_us() / 1000000);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "created", num);
	if (rc == SQLITE_OK)
		rc = insert_meta(db, "zephon_version", ZEPHON_VERSION);
	if (rc == SQLITE_OK)
		rc = jnl_exec(db, "COMMIT");
	if (rc != SQLITE_OK && !sqlite3_get_autocommit(db))
		jnl_exec(db, "ROLLBACK");
	return rc;
}

/* Validate an existing journal inside a transaction the caller opened: application_id,
 * schema version, quick_check, identity. *version receives user_version. */
int jnl_validate(sqlite3 *db, const char *path, struct journal_ident *id, int *version,
		 char *err, size_t errlen)
{
	int64_t app = 0, ver = 0;
	sqlite3_stmt *st;
	const char *res;
	int rc;

	rc = jnl_query_i64(db, "PRAGMA application_id", &app);
	if (rc == SQLITE_OK)
		rc = jnl_query_i64(db, "PRAGMA user_version", &ver);
	if (rc != SQLITE_OK)
		return jnl_bad_file(db, rc, path, err, errlen);
	if (app != JOURNAL_APPLICATION_ID)
		return err_set(err, errlen, -EBADMSG, "%s is not a Zephon journal (application_id "
			    "0x%08" PRIx64 "); nothing was written to it", path, (uint64_t)app);
	if (ver > JOURNAL_SCHEMA_VERSION)
		return err_set(err, errlen, -EBADMSG,
			    "journal %s has schema version %" PRId64 " but this zephon reads "
			    "versions up to %d; use a newer zephon (nothing was written to it)",
			    path, ver, JOURNAL_SCHEMA_VERSION);
	if (ver < 1)
		return err_set(err, errlen, -EBADMSG, "%s is not a Zephon journal (schema "
			    "version %" PRId64 "); nothing was written to it", path, ver);
	rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		res = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
		if (rc == SQLITE_ROW && res && strcmp(res, "ok")) {
			err_set(err, errlen, -EBADMSG, "journal %s is corrupt (quick_check: %s); "
			     "nothing was written to it: keep it for inspection and pass a new "
			     "journal=PATH with resume=samples:G", path, res);
			sqlite3_finalize(st);
			return -EBADMSG;
		}
		rc = rc == SQLITE_ROW ? SQLITE_OK : rc;
		sqlite3_finalize(st);
	}
	if (rc != SQLITE_OK)
		return jnl_bad_file(db, rc, path, err, errlen);
	*version = (int)ver;
	return read_meta(db, path, id, err, errlen);
}

