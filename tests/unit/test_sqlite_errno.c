/*
 * The SQLite-to-errno table that the journal and the catalog share: every primary code
 * (and extended codes, through their low byte), and the codes SQLite really returns for
 * a write on a read-only connection, a file that is not a database and a missing table.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "catalog.h"
#include "check.h"
#include "scratch.h"
#include "sqlite_errno.h"

static void test_table(void)
{
	static const struct { int code, want; } t[] = {
		{ SQLITE_OK, 0 }, { SQLITE_ROW, 0 }, { SQLITE_DONE, 0 },
		{ SQLITE_NOMEM, -ENOMEM },
		{ SQLITE_BUSY, -EBUSY }, { SQLITE_LOCKED, -EBUSY }, { SQLITE_BUSY_SNAPSHOT, -EBUSY },
		{ SQLITE_READONLY, -EROFS }, { SQLITE_READONLY_DBMOVED, -EROFS },
		{ SQLITE_READONLY_DIRECTORY, -EROFS },
		{ SQLITE_PERM, -EACCES }, { SQLITE_AUTH, -EACCES },
		{ SQLITE_FULL, -ENOSPC },
		{ SQLITE_CANTOPEN, -ENOENT }, { SQLITE_CANTOPEN_ISDIR, -ENOENT },
		{ SQLITE_CORRUPT, -EBADMSG }, { SQLITE_NOTADB, -EBADMSG }, { SQLITE_FORMAT, -EBADMSG },
		{ SQLITE_SCHEMA, -EBADMSG }, { SQLITE_MISMATCH, -EBADMSG }, { SQLITE_EMPTY, -EBADMSG },
		{ SQLITE_ERROR, -EBADMSG },
		{ SQLITE_CONSTRAINT, -EINVAL }, { SQLITE_CONSTRAINT_CHECK, -EINVAL },
		{ SQLITE_RANGE, -EINVAL }, { SQLITE_TOOBIG, -EINVAL },
		{ SQLITE_IOERR, -EIO }, { SQLITE_IOERR_WRITE, -EIO }, { SQLITE_IOERR_FSYNC, -EIO },
		{ SQLITE_PROTOCOL, -EIO }, { SQLITE_INTERRUPT, -EIO }, { SQLITE_ABORT, -EIO },
		{ SQLITE_NOLFS, -EIO }, { SQLITE_MISUSE, -EIO }, { SQLITE_INTERNAL, -EIO },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (sqlite_errno(t[i].code) != t[i].want)
			fprintf(stderr, "code %d (%s)\n", t[i].code, sqlite3_errstr(t[i].code));
		CHECK(sqlite_errno(t[i].code) == t[i].want);
	}
}

/* What SQLite itself answers, through the table. */
static void test_real_codes(const char *dir)
{
	char path[512], junk[512], err[256];
	struct catalog c = CATALOG_INIT;
	sqlite3 *db;
	FILE *f;

	snprintf(path, sizeof(path), "%s/t.sqlite", dir);
	REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, "CREATE TABLE x (a)", NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(db);

	/* a write on a read-only connection: the journal's "read-only handle" */
	REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
	CHECK(sqlite_errno(sqlite3_exec(db, "INSERT INTO x VALUES (1)", NULL, NULL, NULL)) == -EROFS);
	/* a statement on a table that is not there: not the file this build wrote */
	CHECK(sqlite_errno(sqlite3_exec(db, "SELECT * FROM meta", NULL, NULL, NULL)) == -EBADMSG);
	sqlite3_close(db);

	/* the catalog of such a file, and of a file that is not SQLite at all */
	CHECK(catalog_load(path, &c, err, sizeof(err)) == -EBADMSG);
	snprintf(junk, sizeof(junk), "%s/junk.sqlite", dir);
	f = fopen(junk, "w");
	REQUIRE(f);
	for (int i = 0; i < 100; i++)
		fputs("garbage", f);
	fclose(f);
	CHECK(catalog_load(junk, &c, err, sizeof(err)) == -EBADMSG);
	unlink(junk);
	unlink(path);
}

int main(void)
{
	char *dir = scratch_dir("sqlerr");

	test_table();
	test_real_codes(dir);
	rm_rf(dir);
	free(dir);
	return check_status();
}
