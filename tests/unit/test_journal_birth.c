/*
 * test_journal_birth: a journal's creation (core/journal/journal_create.c) and what an
 * interrupted one leaves. A new journal is linked at its path whole, in WAL mode, with
 * no rollback -journal ever beside it; an older zephon's creation killed before it
 * committed (our header beside a hot -journal that would empty the file) reads as empty
 * and is created anew by a mount, saying so; every refusal leaves each file as it was:
 * such a -journal beside a journal with history, a hot -journal beside another
 * program's database, a -wal holding records beside a missing or empty path. The kills
 * themselves, at each fsync of a first mount: tests/fuse/test_journal_birth.py.
 */
#include "test_journal_util.h"

#include <dirent.h>
#include <fcntl.h>

#include <sqlite3.h>

#include "check.h"

static char *dir;
static const struct journal_ident ID = { FP_A, 7, ORDER_SHUFFLE_GLOBAL, 1000, "" };

/* A rollback journal's header (https://www.sqlite.org/fileformat2.html): magic, no page
 * record, a nonce, the database's size in pages before the transaction (`pages`), 512-byte
 * sectors, 1 KiB pages; padded to one sector, as SQLite writes it. */
static void write_rollback_journal(const char *path, uint32_t pages)
{
	static const unsigned char magic[8] = { 0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7 };
	unsigned char h[512] = { 0 };

	memcpy(h, magic, sizeof(magic));
	h[12] = 0x5a; /* nonce */
	h[16] = (unsigned char)(pages >> 24);
	h[17] = (unsigned char)(pages >> 16);
	h[18] = (unsigned char)(pages >> 8);
	h[19] = (unsigned char)pages;
	h[22] = 0x02; /* sector size 512 */
	h[26] = 0x04; /* page size 1024 */
	REQUIRE(spit(path, h, sizeof(h)) == 0);
}

/* What an older zephon's first mount left when killed between its creating
 * transaction's fsync of the file and the removal of its -journal: the whole new file,
 * in rollback mode, beside a hot -journal whose rollback empties it (14,336 + 512 bytes
 * in the report). */
static void make_unfinished(const char *p, const char *rj)
{
	unsigned char *b;
	size_t n;

	unlink(p);
	journal_close(open_id(p, &ID));
	b = slurp(p, &n);
	REQUIRE(b && n > 100);
	b[18] = b[19] = 1; /* still in rollback mode: WAL came after the creation */
	REQUIRE(spit(p, b, n) == 0);
	free(b);
	write_rollback_journal(rj, 0);
}

static int open_rc(const char *p, struct journal **j, char *err, size_t len)
{
	*j = NULL;
	err[0] = 0;
	return journal_open(p, &ID, JOURNAL_SYNC_NORMAL, j, err, len);
}

/* A new journal: WAL from its first byte, no side file but its WAL, nothing left of its
 * making beside it. */
static void test_new_journal_is_whole(void)
{
	char *p = path_in(dir, "new.sqlite"), *rj = path_in(dir, "new.sqlite-journal");
	char err[512];
	struct journal *j;
	unsigned char *b;
	size_t n;
	DIR *d;
	struct dirent *e;

	REQUIRE(open_rc(p, &j, err, sizeof(err)) == 0);
	CHECK(err[0] == 0);
	b = slurp(p, &n);
	REQUIRE(b && n >= 100);
	CHECK(b[18] == 2 && b[19] == 2); /* WAL already as linked */
	CHECK(b[68] == 0x5a && b[69] == 0x50 && b[70] == 0x48 && b[71] == 0x4a);
	free(b);
	CHECK(!exists(rj));
	journal_close(j);
	/* nothing but the journal itself in the directory: no temporary file left */
	d = opendir(dir);
	REQUIRE(d);
	while ((e = readdir(d)))
		CHECK(e->d_name[0] == '.' || !strcmp(e->d_name, "new.sqlite"));
	closedir(d);
	unlink(p);
	free(p);
	free(rj);
}

/* The report's case: read as empty and left as it is by a reader; a mount's open
 * creates the journal anew, says so, and leaves no -journal. */
static void test_unfinished_creation_is_made_anew(void)
{
	char *p = path_in(dir, "unfinished.sqlite"), *rj = path_in(dir, "unfinished.sqlite-journal");
	unsigned char *before, *rj_before;
	size_t n, rn;
	struct journal *j;
	struct journal_ident got;
	char err[512];

	make_unfinished(p, rj);
	before = slurp(p, &n);
	rj_before = slurp(rj, &rn);
	REQUIRE(before && rj_before);
	CHECK(journal_open_readonly(p, &j, err, sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "is empty") && strstr(err, "stopped before it was complete"));
	CHECK(file_equals(p, before, n) && file_equals(rj, rj_before, rn));

	REQUIRE(open_rc(p, &j, err, sizeof(err)) == 0);
	CHECK(strstr(err, "left unfinished") && strstr(err, "created anew") && strstr(err, p));
	CHECK(!exists(rj));
	journal_identity(j, &got);
	CHECK(!strcmp(got.fingerprint, FP_A));
	CHECK(start_text(j, "auto", 1, 1, 1, "", NULL) == 0);
	journal_close(j);
	CHECK(sql_int(p, "PRAGMA application_id") == JOURNAL_APPLICATION_ID);
	CHECK(sql_int(p, "SELECT count(*) FROM layout") == 1);
	/* and from now on an ordinary journal: opened without a note */
	REQUIRE(open_rc(p, &j, err, sizeof(err)) == 0);
	CHECK(err[0] == 0);
	journal_close(j);
	free(before);
	free(rj_before);
	free(p);
	free(rj);
}

/* Each refusal leaves every file as it was: path and its -journal. */
static void expect_untouched(const char *p, const char *rj, int want, const char *needle)
{
	size_t n, rn;
	unsigned char *before = slurp(p, &n), *rj_before = slurp(rj, &rn);
	struct journal *j;
	char err[512];

	REQUIRE(before && rj_before);
	CHECK(open_rc(p, &j, err, sizeof(err)) == want);
	CHECK(j == NULL);
	CHECK(strstr(err, needle) != NULL);
	CHECK(file_equals(p, before, n) && file_equals(rj, rj_before, rn));
	CHECK(journal_open_readonly(p, &j, err, sizeof(err)) == want);
	CHECK(file_equals(p, before, n) && file_equals(rj, rj_before, rn));
	free(before);
	free(rj_before);
}

/* A -journal that would empty a journal with history is no creation's: refused. */
static void test_history_beside_an_emptying_journal_is_refused(void)
{
	char *p = path_in(dir, "history.sqlite"), *rj = path_in(dir, "history.sqlite-journal");
	struct journal *j = open_id(p, &ID);
	uint64_t s, m;

	REQUIRE(start_text(j, "auto", 1, 1, 1, "", NULL) == 0);
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0);
	journal_close(j);
	write_rollback_journal(rj, 0);
	expect_untouched(p, rj, -EBADMSG, "has a history");
	free(p);
	free(rj);
}

/* Another program's database with a hot -journal (a real one: copied in the middle of
 * a transaction, and a crafted one that would empty it): refused before SQLite could
 * roll either back. */
static void test_foreign_hot_journal_is_left_alone(void)
{
	char *src = path_in(dir, "live.db"), *p = path_in(dir, "foreign.db");
	char *rj = path_in(dir, "foreign.db-journal"), *srj = path_in(dir, "live.db-journal");
	unsigned char *b;
	size_t n;
	sqlite3 *db;

	sql_exec(src, "PRAGMA page_size = 1024; CREATE TABLE t (x); "
		 "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 500) "
		 "INSERT INTO t SELECT randomblob(100) FROM c;");
	REQUIRE(sqlite3_open(src, &db) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, "PRAGMA cache_size = 2; BEGIN; UPDATE t SET x = zeroblob(100);",
			     NULL, NULL, NULL) == SQLITE_OK);
	/* mid-transaction: the database as it is and its hot -journal, as a crash leaves */
	b = slurp(src, &n);
	REQUIRE(b && spit(p, b, n) == 0);
	free(b);
	b = slurp(srj, &n);
	REQUIRE(b && n > 512 && spit(rj, b, n) == 0);
	free(b);
	sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(db);
	expect_untouched(p, rj, -EBADMSG, "not a Zephon journal");
	write_rollback_journal(rj, 0);
	expect_untouched(p, rj, -EBADMSG, "not a Zephon journal");
	free(src);
	free(srj);
	free(p);
	free(rj);
}

/* Beside a missing or empty path: a -journal goes (nothing rolls back into an empty
 * file), an empty -wal goes, a -wal holding records refuses; the empty file's mode
 * stays. */
static void test_sides_of_a_new_journal(void)
{
	char *p = path_in(dir, "sides.sqlite"), *rj = path_in(dir, "sides.sqlite-journal");
	char *wal = path_in(dir, "sides.sqlite-wal");
	unsigned char *recs;
	struct journal *j;
	struct stat st;
	size_t n;
	char err[512];

	/* a -journal beside no file (a kill between the two removals of a discard) */
	write_rollback_journal(rj, 0);
	REQUIRE(open_rc(p, &j, err, sizeof(err)) == 0);
	CHECK(!exists(rj));
	journal_close(j);
	unlink(p);
	/* a -journal beside an empty file of mode 0600 */
	REQUIRE(spit(p, "", 0) == 0 && chmod(p, 0600) == 0);
	write_rollback_journal(rj, 3);
	REQUIRE(open_rc(p, &j, err, sizeof(err)) == 0);
	CHECK(!exists(rj));
	journal_close(j);
	CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0600 && st.st_size > 0);
	unlink(p);
	/* an empty -wal beside no file */
	REQUIRE(spit(wal, "", 0) == 0);
	REQUIRE(open_rc(p, &j, err, sizeof(err)) == 0);
	journal_close(j);
	CHECK(!exists(wal));
	unlink(p);
	/* a -wal holding records (a killed mount's, its journal deleted without it), beside
	 * no file, then beside an empty one */
	j = open_id(p, &ID);
	REQUIRE(start_text(j, "auto", 1, 1, 1, "", NULL) == 0);
	recs = slurp(wal, &n);
	REQUIRE(recs && n > 32);
	journal_close(j);
	unlink(p);
	REQUIRE(spit(wal, recs, n) == 0);
	CHECK(open_rc(p, &j, err, sizeof(err)) == -EEXIST && j == NULL);
	CHECK(strstr(err, "holds records") && strstr(err, wal));
	CHECK(!exists(p) && file_equals(wal, recs, n));
	REQUIRE(spit(p, "", 0) == 0);
	CHECK(open_rc(p, &j, err, sizeof(err)) == -EEXIST);
	CHECK(file_equals(p, (const unsigned char *)"", 0) && file_equals(wal, recs, n));
	free(recs);
	free(p);
	free(rj);
	free(wal);
}

int main(void)
{
	dir = scratch_dir("journal-birth");
	test_new_journal_is_whole();
	test_unfinished_creation_is_made_anew();
	test_history_beside_an_emptying_journal_is_refused();
	test_foreign_hot_journal_is_left_alone();
	test_sides_of_a_new_journal();
	rm_rf(dir);
	free(dir);
	return check_status();
}
