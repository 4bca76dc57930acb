/*
 * test_journal: unit tests of the journal (core/journal/journal*.c), one function at a time,
 * and every refusal: identity mismatch, foreign/corrupt/truncated files (left
 * byte-identical), a newer
 * schema, unwritable paths (ENOTDIR, EISDIR, ENOENT, a read-only tmpfs), a journal held
 * by a live mount. The resume rules of journal.h over one and several journals.
 */
#include "test_journal_util.h"
#include "xorshift.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <sqlite3.h>

#include "check.h"
#include "test_layout.h"

static char *dir;
static const struct journal_ident ID = { FP_A, 7, ORDER_SHUFFLE_GLOBAL, 1000, "" };

static struct journal *open_ok(const char *path)
{
	return open_id(path, &ID);
}

/* A journal with a little history: two layouts, claims, a mark. Returns its path. */
static char *make_history(const char *name)
{
	char *p = path_in(dir, name);
	struct journal *j;
	uint64_t s, m;

	unlink(p);
	j = open_ok(p);
	REQUIRE(start_text(j, "auto", 2, 8, 2, "", NULL) == 0);
	for (int i = 0; i < 9; i++)
		REQUIRE(journal_claim_next(j, (uint64_t)i % 2, &s, &m) == 0);
	REQUIRE(journal_checkpoint(j, 1) == 0);
	REQUIRE(start_text(j, "auto", 4, 16, 1, "", NULL) == 0);
	for (int i = 0; i < 40; i++)
		REQUIRE(journal_claim_next(j, (uint64_t)i % 4, &s, &m) == 0);
	journal_close(j);
	return p;
}

static void test_resume_parse(void)
{
	struct journal_resume r;
	char buf[64];
	static const char *bad[] = { "", "Auto", "samples:", "samples:-1", "samples:1x",
		"samples: 1", "step:", "step:x", "samples:4611686018427387904", "resume",
		"fresh:1", "samples:99999999999999999999999", "samples:@3", "samples:3@",
		"samples:3@x", "samples:3@4@5", "samples:3@4611686018427387904", "step:3@4" };

	CHECK(journal_resume_parse("auto", &r) == 0 && r.rule == RESUME_AUTO);
	CHECK(journal_resume_parse("fresh", &r) == 0 && r.rule == RESUME_FRESH);
	CHECK(journal_resume_parse("samples:0", &r) == 0 && r.rule == RESUME_SAMPLES && r.value == 0);
	CHECK(journal_resume_parse("samples:1024", &r) == 0 && r.value == 1024);
	CHECK(journal_resume_parse("samples:4611686018427387903", &r) == 0 &&
	      r.value == ORDER_MAX_GSN - 1);
	CHECK(journal_resume_parse("step:12", &r) == 0 && r.rule == RESUME_STEP && r.value == 12);
	CHECK(journal_resume_parse("samples:1024", &r) == 0 && !r.has_step);
	CHECK(journal_resume_parse("samples:384@12", &r) == 0 && r.rule == RESUME_SAMPLES &&
	      r.value == 384 && r.has_step && r.step == 12);
	journal_resume_format(&r, buf, sizeof(buf));
	CHECK(!strcmp(buf, "samples:384@12"));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r.rule = RESUME_FRESH;
		CHECK(journal_resume_parse(bad[i], &r) == -EINVAL);
		CHECK(r.rule == RESUME_FRESH); /* untouched on failure */
	}
	CHECK(journal_resume_parse(NULL, &r) == -EINVAL);
	/* samples:G@S pins the step number of G (what resume-point prints) */
	CHECK(journal_resume_parse("samples:96@12", &r) == 0 && r.rule == RESUME_SAMPLES &&
	      r.value == 96 && r.has_step && r.step == 12);
	journal_resume_format(&r, buf, sizeof(buf));
	CHECK(!strcmp(buf, "samples:96@12"));
	CHECK(journal_resume_parse("samples:96@", &r) == -EINVAL);
	CHECK(journal_resume_parse("samples:@3", &r) == -EINVAL);
	CHECK(journal_resume_parse("samples:1@2@3", &r) == -EINVAL);
	r = (struct journal_resume){ .rule = RESUME_SAMPLES, .value = 384 };
	journal_resume_format(&r, buf, sizeof(buf));
	CHECK(!strcmp(buf, "samples:384"));
	r = (struct journal_resume){ .rule = RESUME_STEP, .value = 5 };
	journal_resume_format(&r, buf, sizeof(buf));
	CHECK(!strcmp(buf, "step:5"));
	r = (struct journal_resume){ .rule = RESUME_AUTO, .value = 0 };
	journal_resume_format(&r, buf, sizeof(buf));
	CHECK(!strcmp(buf, "auto"));
	r = (struct journal_resume){ .rule = RESUME_FRESH, .value = 0 };
	journal_resume_format(&r, buf, sizeof(buf));
	CHECK(!strcmp(buf, "fresh"));
	journal_resume_format(&(struct journal_resume){ .rule = RESUME_SAMPLES, .value = 123456 }, buf, 4);
	CHECK(!strcmp(buf, "sam"));
}

static void test_create_and_reopen(void)
{
	char *p = path_in(dir, "new.sqlite"), *wal = path_in(dir, "new.sqlite-wal");
	struct journal *j;
	struct journal_ident got;
	unsigned char hdr[100];
	size_t n;
	unsigned char *b;

	j = open_ok(p);
	journal_identity(j, &got);
	CHECK(!strcmp(got.fingerprint, FP_A) && got.seed == 7 && got.shuffle == ORDER_SHUFFLE_GLOBAL);
	CHECK(exists(wal)); /* WAL mode */
	journal_close(j);
	CHECK(!exists(wal)); /* a clean close checkpoints and removes the WAL */
	b = slurp(p, &n);
	REQUIRE(b && n >= 100);
	memcpy(hdr, b, 100);
	free(b);
	CHECK(hdr[18] == 2 && hdr[19] == 2); /* WAL read/write versions */
	CHECK(sql_int(p, "PRAGMA application_id") == JOURNAL_APPLICATION_ID);
	CHECK(sql_int(p, "PRAGMA user_version") == JOURNAL_SCHEMA_VERSION);
	CHECK(sql_int(p, "SELECT count(*) FROM meta WHERE key = 'fingerprint' AND value = '" FP_A "'") == 1);
	CHECK(sql_int(p, "SELECT count(*) FROM meta WHERE key = 'seed' AND value = '7'") == 1);

	/* reopen: same identity is accepted, the identity is the stored one */
	j = open_ok(p);
	journal_identity(j, &got);
	CHECK(got.samples == 1000);
	journal_close(j);

	/* an empty (0-byte) file is created in place */
	free(p);
	p = path_in(dir, "empty.sqlite");
	REQUIRE(spit(p, "", 0) == 0);
	j = open_ok(p);
	journal_close(j);
	CHECK(sql_int(p, "PRAGMA application_id") == JOURNAL_APPLICATION_ID);

	/* sync=full opens too */
	CHECK(journal_open(p, &ID, JOURNAL_SYNC_FULL, &j, NULL, 0) == 0);
	journal_close(j);
	journal_close(NULL);
	free(p);
	free(wal);
}

static void test_identity_mismatch(void)
{
	char *p = make_history("ident.sqlite");
	struct journal *j = NULL;
	char err[512];
	size_t n;
	unsigned char *before = slurp(p, &n);
	struct journal_ident other = ID;

	snprintf(other.fingerprint, sizeof(other.fingerprint), "%s", FP_B);
	CHECK(journal_open(p, &other, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -ESTALE);
	CHECK(j == NULL);
	CHECK(strstr(err, FP_A) && strstr(err, FP_B));
	CHECK(strstr(err, "journal=PATH") != NULL);
	CHECK(strstr(err, p) != NULL);
	/* the ways out that work: no resume= rule can use this file */
	CHECK(strstr(err, "resume=fresh") == NULL);
	CHECK(strstr(err, "delete") != NULL);
	other = ID;
	other.seed = 8;
	CHECK(journal_open(p, &other, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -ESTALE);
	CHECK(strstr(err, "seed 7") && strstr(err, "seed 8"));
	other = ID;
	other.shuffle = ORDER_SHUFFLE_NONE;
	CHECK(journal_open(p, &other, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -ESTALE);
	CHECK(strstr(err, "shuffle global") && strstr(err, "shuffle none"));
	/* N is not part of the identity (the fingerprint covers it) */
	other = ID;
	other.samples = 5;
	CHECK(journal_open(p, &other, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == 0);
	journal_close(j);
	/* journal_open_readonly takes any identity and tells it */
	CHECK(journal_open_readonly(p, &j, err, sizeof(err)) == 0);
	journal_close(j);
	CHECK(file_equals(p, before, n));
	free(before);
	free(p);
}

/* Every refusal leaves the file byte-identical and creates no side file. */
static void expect_refused(const char *p, int want, const char *needle)
{
	struct journal *j = NULL;
	char err[512] = "";
	size_t n;
	unsigned char *before = slurp(p, &n);
	char *wal, *shm;
	int rc;

	if (asprintf(&wal, "%s-wal", p) < 0 || asprintf(&shm, "%s-shm", p) < 0)
		exit(1);
	rc = journal_open(p, &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err));
	if (rc != want || !strstr(err, needle) || !strstr(err, p))
		fprintf(stderr, "journal_open(%s) = %d (want %d): %s\n", p, rc, want, err);
	CHECK(rc == want);
	CHECK(j == NULL);
	CHECK(strstr(err, needle) != NULL);
	CHECK(strstr(err, p) != NULL);
	CHECK(file_equals(p, before, n));
	CHECK(!exists(wal) && !exists(shm));
	err[0] = 0;
	rc = journal_open_readonly(p, &j, err, sizeof(err));
	if (want != -ESTALE) {
		CHECK(rc == want);
		CHECK(strstr(err, needle) != NULL);
	}
	CHECK(file_equals(p, before, n));
	CHECK(!exists(wal) && !exists(shm));
	free(before);
	free(wal);
	free(shm);
}

static void test_foreign_and_corrupt(void)
{
	char *p = path_in(dir, "random.bin"), *q;
	unsigned char junk[8192];
	size_t n;
	unsigned char *good;
	uint64_t x = 0x9e3779b97f4a7c15;

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)xorshift64(&x);
	REQUIRE(spit(p, junk, sizeof(junk)) == 0);
	expect_refused(p, -EBADMSG, "not a Zephon journal");
	REQUIRE(spit(p, "hello\n", 6) == 0);
	expect_refused(p, -EBADMSG, "not a Zephon journal");
	free(p);

	/* SQLite, but another application's database (rollback and WAL mode) */
	p = path_in(dir, "other.db");
	sql_exec(p, "CREATE TABLE t (x); INSERT INTO t VALUES (1);");
	expect_refused(p, -EBADMSG, "not a Zephon journal");
	free(p);
	p = path_in(dir, "otherwal.db");
	sql_exec(p, "PRAGMA journal_mode = WAL; PRAGMA application_id = 42; CREATE TABLE t (x);");
	expect_refused(p, -EBADMSG, "application_id 0x0000002a");
	free(p);
	/* our application_id but no schema, and our schema without its meta rows */
	p = path_in(dir, "appid-only.db");
	sql_exec(p, "PRAGMA application_id = 1515210826; CREATE TABLE t (x);");
	expect_refused(p, -EBADMSG, "not a Zephon journal");
	free(p);
	p = make_history("nometa.sqlite");
	sql_exec(p, "DELETE FROM meta WHERE key = 'seed';");
	expect_refused(p, -EBADMSG, "meta table lacks");
	free(p);

	/* truncated journals: header cut, first page only, half */
	p = make_history("full.sqlite");
	good = slurp(p, &n);
	REQUIRE(good && n > 3 * 4096);
	q = path_in(dir, "trunc.sqlite");
	REQUIRE(spit(q, good, 60) == 0);
	expect_refused(q, -EBADMSG, "not a Zephon journal");
	REQUIRE(spit(q, good, 4096) == 0);
	expect_refused(q, -EBADMSG, "corrupt");
	REQUIRE(spit(q, good, n / 2) == 0);
	expect_refused(q, -EBADMSG, "corrupt");
	/* a b-tree page overwritten with garbage */
	memcpy(good + 2 * 4096 + 8, junk, 2000);
	REQUIRE(spit(q, good, n) == 0);
	expect_refused(q, -EBADMSG, "corrupt");
	free(good);
	free(q);
	free(p);
}

static void test_newer_schema(void)
{
	char *p = make_history("newer.sqlite");
	char err[512], sql[64], want[64];
	struct journal *j = NULL;

	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d;", JOURNAL_SCHEMA_VERSION + 1);
	snprintf(want, sizeof(want), "schema version %d", JOURNAL_SCHEMA_VERSION + 1);
	sql_exec(p, sql);
	expect_refused(p, -EBADMSG, want);
	CHECK(journal_open(p, &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "newer zephon") != NULL);
	CHECK(sql_int(p, "PRAGMA user_version") == JOURNAL_SCHEMA_VERSION + 1);
	sql_exec(p, "PRAGMA user_version = 0;");
	expect_refused(p, -EBADMSG, "schema version 0");
	free(p);
}

static void test_unwritable_paths(void)
{
	char *file = path_in(dir, "plainfile"), *p;
	struct journal *j = NULL;
	char err[512];

	REQUIRE(spit(file, "x", 1) == 0);
	p = path_in(file, "journal.sqlite");
	CHECK(journal_open(p, &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -ENOTDIR);
	CHECK(strstr(err, p) && strstr(err, "journal=PATH"));
	CHECK(journal_open_readonly(p, &j, err, sizeof(err)) == -ENOTDIR);
	free(p);
	p = path_in(dir, "no/such/dir/journal.sqlite");
	CHECK(journal_open(p, &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, p) != NULL);
	free(p);
	CHECK(journal_open(dir, &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -EISDIR);
	CHECK(journal_open("/dev/null", &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "not a regular file") != NULL);
	CHECK(journal_open_readonly("/dev/zero", &j, err, sizeof(err)) == -EINVAL);
	CHECK(journal_open("", &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -EINVAL);
	CHECK(journal_open("/proc/self/journal.sqlite", &ID, JOURNAL_SYNC_NORMAL, &j, err,
			   sizeof(err)) < 0);
	CHECK(j == NULL);
	p = path_in(dir, "missing.sqlite");
	CHECK(journal_open_readonly(p, &j, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, p) != NULL);
	CHECK(!exists(p));
	free(p);
	free(file);
}

/* A read-only tmpfs: an existing journal cannot be opened for writing, nor a new one
 * created; reading it works. Skipped (with a note) where tmpfs cannot be mounted. */
static void test_readonly_fs(void)
{
	char *mnt = path_in(dir, "rofs"), *p, *q, *w;
	struct journal *j = NULL;
	char err[512];
	uint64_t g, s;
	pid_t pid;
	int status;

	REQUIRE(mkdir(mnt, 0755) == 0);
	if (mount("zephon-test", mnt, "tmpfs", 0, "size=4m")) {
		fprintf(stderr, "note: cannot mount tmpfs (%s): read-only file system case "
			"not run\n", strerror(errno));
		free(mnt);
		return;
	}
	p = path_in(mnt, "j.sqlite");
	q = path_in(mnt, "new.sqlite");
	w = path_in(mnt, "killed.sqlite");
	j = open_ok(p);
	REQUIRE(start_text(j, "auto", 1, 4, 4, "", NULL) == 0);
	REQUIRE(journal_claim(j, 0, 0, 0) == 0);
	journal_close(j);
	/* a journal whose writer died: its claims are in killed.sqlite-wal */
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		j = open_ok(w);
		if (start_text(j, "auto", 1, 4, 4, "", NULL) || journal_claim(j, 0, 0, 0))
			_exit(1);
		_exit(0);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && !WEXITSTATUS(status));
	if (mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL)) {
		fprintf(stderr, "note: cannot remount read-only (%s)\n", strerror(errno));
	} else {
		CHECK(journal_open(p, &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -EROFS);
		CHECK(strstr(err, p) && strstr(err, "journal=PATH"));
		CHECK(journal_open(q, &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -EROFS);
		CHECK(!exists(q));
		CHECK(journal_open_readonly(p, &j, err, sizeof(err)) == 0);
		if (j) {
			struct layout one = test_layout(1, 1, 1, 0, 0);

			CHECK(journal_resume_point(j, &g, &s) == 0);
			CHECK(g == 4 && s == 1);
			CHECK(journal_start(j, &(struct journal_resume){ .rule = RESUME_AUTO, .value = 0 }, NULL,
					    &one, NULL, 0) == -EROFS);
			journal_close(j);
		}
		/* its WAL cannot be replayed without writing: a clear refusal, not stale data */
		j = NULL;
		CHECK(journal_open_readonly(w, &j, err, sizeof(err)) == -EROFS);
		CHECK(j == NULL);
		CHECK(strstr(err, "killed.sqlite-wal") != NULL);
	}
	CHECK(umount2(mnt, MNT_DETACH) == 0);
	free(w);
	free(p);
	free(q);
	free(mnt);
}

static void test_busy(void)
{
	char *p = path_in(dir, "busy.sqlite");
	struct journal *j = open_ok(p), *k = NULL;
	char err[512];

	CHECK(journal_open(p, &ID, JOURNAL_SYNC_NORMAL, &k, err, sizeof(err)) == -EBUSY);
	CHECK(strstr(err, "in use") && strstr(err, p));
	CHECK(journal_open_readonly(p, &k, err, sizeof(err)) == -EBUSY);
	CHECK(k == NULL);
	journal_close(j);
	/* a reader holds it too, briefly; after it closes a mount opens */
	CHECK(journal_open_readonly(p, &k, err, sizeof(err)) == 0);
	CHECK(journal_open(p, &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -EBUSY);
	journal_close(k);
	j = open_ok(p);
	journal_close(j);
	free(p);
}

static void test_start_and_claims(void)
{
	char *p = path_in(dir, "claims.sqlite");
	struct journal *j = open_ok(p);
	struct journal_layout cur;
	struct layout l;
	struct rankset rs = { NULL, 0 };
	uint64_t s, m, ranks2[] = { 3, 1 };
	char applied[256], err[512];
	int rc;

	/* before journal_start */
	CHECK(journal_claim(j, 0, 0, 0) == -EINVAL);
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "no mount started") != NULL);
	CHECK(journal_cursor(j, 0, &s, &m) == -EINVAL);
	CHECK(journal_current(j, &cur) == -ENOENT);
	CHECK(journal_consumed(j) == 0);
	CHECK(journal_checkpoint(j, 0) == -EINVAL);
	CHECK(journal_rewind(j, 0) == -EINVAL);
	CHECK(journal_resume_point(j, &s, &m) == -ENOENT && s == 0 && m == 0);

	/* invalid starts change nothing */
	l = test_layout(4, 16, 2, 0, 0);
	CHECK(journal_start(j, &(struct journal_resume){ .rule = RESUME_AUTO, .value = 0 }, &rs, &l, applied,
			    sizeof(applied)) == -EINVAL);
	rs.ranks = ranks2;
	rs.count = 2;
	CHECK(journal_start(j, &(struct journal_resume){ .rule = RESUME_AUTO, .value = 0 }, &rs, &l, applied,
			    sizeof(applied)) == -EINVAL); /* not sorted */
	/* W, B and m that break a rule make no struct layout (layout_make, test_order.c); one
	 * never made is refused */
	rs.ranks = ranks2 + 1;
	rs.count = 1;
	CHECK(journal_start(j, &(struct journal_resume){ .rule = RESUME_AUTO, .value = 0 }, &rs,
			    &(struct layout){ { 0 } }, applied, sizeof(applied)) == -EINVAL);
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "no layout") != NULL);
	CHECK(start_text(j, "step:3", 4, 16, 1, "", NULL) == -EINVAL); /* no history */
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "step:3") && strstr(err, "samples:G"));
	CHECK(journal_current(j, &cur) == -ENOENT);

	/* W=4, B=16, m=2: A = 2 micro-batches per rank per step; serve ranks 1 and 3 */
	rc = start_text(j, "auto", 4, 16, 2, "1,3", &l);
	CHECK(rc == 0);
	CHECK(layout_start_step(&l) == 0 && layout_start_samples(&l) == 0);
	CHECK(journal_current(j, &cur) == 0);
	CHECK(layout_world_size(&cur.layout) == 4 && layout_global_batch(&cur.layout) == 16 && layout_micro_batch(&cur.layout) == 2);
	CHECK(!strcmp(cur.ranks, "1,3"));
	CHECK(!strcmp(cur.rule, "auto"));
	CHECK(strstr(cur.resume, "auto") != NULL);
	CHECK(cur.host[0] != 0);
	CHECK(cur.time > 1600000000);
	CHECK(journal_cursor(j, 1, &s, &m) == 0 && s == 0 && m == 0);
	CHECK(journal_cursor(j, 0, &s, &m) == -EINVAL); /* not served */
	CHECK(journal_claim(j, 0, 0, 0) == -EINVAL);
	CHECK(journal_claim(j, 1, 0, 1) == -EINVAL); /* not the cursor */
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "not its cursor") != NULL);
	CHECK(journal_claim(j, 1, 0, 0) == 0);
	CHECK(journal_cursor(j, 1, &s, &m) == 0 && s == 0 && m == 1);
	CHECK(journal_claim(j, 1, 0, 0) == -EINVAL); /* no double claim */
	CHECK(journal_claim(j, 1, 0, 1) == 0);
	CHECK(journal_cursor(j, 1, &s, &m) == 0 && s == 1 && m == 0);
	CHECK(journal_consumed(j) == 0); /* rank 3 has not completed step 0 */
	CHECK(journal_claim_next(j, 3, &s, &m) == 0 && s == 0 && m == 0);
	CHECK(journal_claim_next(j, 3, &s, &m) == 0 && s == 0 && m == 1);
	CHECK(journal_consumed(j) == 16);
	CHECK(journal_claim_next(j, 3, &s, &m) == 0 && s == 1 && m == 0);
	CHECK(journal_consumed(j) == 16); /* a partly claimed step is not complete */
	CHECK(journal_claim_next(j, 7, &s, &m) == -EINVAL);
	journal_close(j);

	/* reopen: the claims are there; the resume point covers the 2 served ranks of 4 */
	j = open_ok(p);
	{
		struct journal_point pt;
		struct journal_layout *ls;
		struct journal_cursor *cs;
		size_t nl, nc;

		CHECK(journal_resume_point_ex(j, &pt) == 0);
		CHECK(pt.basis == JOURNAL_POINT_CURSORS);
		CHECK(pt.samples == 0 && pt.step == 0); /* ranks 0 and 2 are unknown */
		CHECK(strstr(pt.warning, "ranks 0,2") != NULL);
		CHECK(journal_layouts(j, &ls, &nl) == 0 && nl == 1);
		CHECK(journal_cursors(j, ls[0].id, &cs, &nc) == 0 && nc == 2);
		if (nc == 2) {
			CHECK(cs[0].rank == 1 && cs[0].step == 1 && cs[0].micro == 0);
			CHECK(cs[1].rank == 3 && cs[1].step == 1 && cs[1].micro == 1);
		}
		free(cs);
		CHECK(journal_cursors(j, ls[0].id + 100, &cs, &nc) == -ENOENT);
		free(ls);
	}
	/* auto on a journal with history, for some of the ranks only: the other ranks'
	 * progress is in journals it cannot see, so it is refused (a launcher passes
	 * samples:G@S from all of them); nothing is recorded */
	CHECK(start_text(j, "auto", 4, 16, 2, "1,3", &l) == -EINVAL);
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "2 of the 4 ranks") && strstr(err, "journal resume-point") &&
	      strstr(err, "or resume=fresh")); /* whole: the remedy ends the message */
	CHECK(start_text(j, "auto", 4, 16, 2, "0", &l) == -EINVAL);
	CHECK(journal_current(j, &cur) == -ENOENT);
	{
		struct journal_layout *ls;
		size_t nl;

		CHECK(journal_layouts(j, &ls, &nl) == 0 && nl == 1);
		free(ls);
	}
	/* serving every rank now: auto resumes at the min over ranks 0-3 of the last layout,
	 * and the claims of the new layout continue from there */
	CHECK(start_text(j, "auto", 4, 16, 2, "0-3", &l) == 0);
	CHECK(layout_start_step(&l) == 0 && layout_start_samples(&l) == 0);
	for (int i = 0; i < 4 * 2 * 3; i++)
		CHECK(journal_claim_next(j, (uint64_t)i % 4, &s, &m) == 0);
	CHECK(journal_claim_next(j, 2, &s, &m) == 0 && s == 3 && m == 0);
	CHECK(journal_consumed(j) == 48);
	journal_close(j);
	free(p);
}

static void test_checkpoint_rewind(void)
{
	char *p = path_in(dir, "marks.sqlite");
	struct journal *j = open_ok(p);
	struct journal_event *ev;
	struct journal_cursor *cs;
	struct layout l;
	size_t n, nc;
	uint64_t s, m, g;
	char err[256];

	CHECK(start_text(j, "samples:80", 2, 8, 2, "", &l) == 0);
	CHECK(layout_start_step(&l) == 10 && layout_start_samples(&l) == 80); /* no history: G / B */
	for (int i = 0; i < 2 * 2 * 3 + 1; i++) /* rank 0: step 13 micro 1; rank 1: step 13 */
		CHECK(journal_claim_next(j, (uint64_t)i % 2, &s, &m) == 0);
	CHECK(journal_cursor(j, 0, &s, &m) == 0 && s == 13 && m == 1);
	CHECK(journal_cursor(j, 1, &s, &m) == 0 && s == 13 && m == 0);
	CHECK(journal_checkpoint(j, 9) == -EINVAL);
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "before step 10") != NULL);
	CHECK(journal_checkpoint(j, 14) == -EINVAL);
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "furthest, by next or step/, is step 13") != NULL);
	CHECK(journal_checkpoint(j, 10) == 0);
	CHECK(journal_checkpoint(j, 13) == 0);
	CHECK(journal_rewind(j, 9) == -EINVAL);
	CHECK(journal_rewind(j, 14) == -EINVAL);
	/* step/ reads reach further than the cursors: step/14 read, so 15 is accepted */
	journal_note_reached(j, 15);
	journal_note_reached(j, 12); /* a late report of an earlier read lowers nothing */
	CHECK(journal_checkpoint(j, 16) == -EINVAL);
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "is step 15") != NULL);
	CHECK(journal_checkpoint(j, 15) == 0);
	CHECK(journal_rewind(j, 15) == -EINVAL); /* a rewind never moves past the cursors */
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "is step 13") != NULL);
	CHECK(journal_cursor(j, 0, &s, &m) == 0 && s == 13 && m == 1); /* unchanged */
	CHECK(journal_rewind(j, 11) == 0);
	CHECK(journal_cursor(j, 0, &s, &m) == 0 && s == 11 && m == 0);
	CHECK(journal_cursor(j, 1, &s, &m) == 0 && s == 11 && m == 0);
	CHECK(journal_consumed(j) == 80 + 8);
	CHECK(journal_claim(j, 0, 11, 0) == 0);

	CHECK(journal_marks(j, &ev, &n) == 0 && n == 3);
	if (n == 3) {
		CHECK(ev[0].step == 10 && ev[0].gsn == 80);
		CHECK(ev[1].step == 13 && ev[1].gsn == 104);
		CHECK(ev[2].step == 15 && ev[2].gsn == 120);
		CHECK(ev[1].time_us >= ev[0].time_us && ev[0].time_us > 0);
	}
	free(ev);
	CHECK(journal_rewinds(j, &ev, &n) == 0 && n == 1);
	if (n == 1) {
		CHECK(ev[0].step == 11 && ev[0].gsn == 88);
		CHECK(journal_rewind_cursors(j, ev[0].id, &cs, &nc) == 0 && nc == 2);
		if (nc == 2) {
			CHECK(cs[0].rank == 0 && cs[0].step == 13 && cs[0].micro == 1);
			CHECK(cs[1].rank == 1 && cs[1].step == 13 && cs[1].micro == 0);
		}
		free(cs);
		CHECK(journal_rewind_cursors(j, ev[0].id + 9, &cs, &nc) == -ENOENT);
	}
	free(ev);
	/* marks are in use: the latest statement (the rewind, at 11) is the point */
	CHECK(journal_resume_point(j, &g, &s) == 0 && g == 88 && s == 11);
	journal_close(j);
	/* all of it is durable */
	j = open_ok(p);
	CHECK(journal_resume_point(j, &g, &s) == 0 && g == 88 && s == 11);
	CHECK(start_text(j, "auto", 1, 4, 4, "", &l) == 0);
	CHECK(layout_start_step(&l) == 11 && layout_start_samples(&l) == 88);
	journal_close(j);
	free(p);
}

/* The resume rules of journal.h on one journal. */
static void test_resume_rules(void)
{
	char *p = path_in(dir, "rules.sqlite");
	struct journal *j = open_ok(p);
	struct journal_point pt;
	struct layout l;
	uint64_t s, m, g;
	char applied[512];

	/* layout 1: B=8, W=2, m=4 (A=1), from 0. rank 0 claims 5 steps, rank 1 claims 3 */
	CHECK(start_text(j, "auto", 2, 8, 4, "", &l) == 0);
	for (int i = 0; i < 5; i++)
		CHECK(journal_claim_next(j, 0, &s, &m) == 0);
	for (int i = 0; i < 3; i++)
		CHECK(journal_claim_next(j, 1, &s, &m) == 0);
	CHECK(journal_resume_point_ex(j, &pt) == 0);
	CHECK(pt.basis == JOURNAL_POINT_CURSORS && pt.step == 3 && pt.samples == 24);
	CHECK(pt.min_completed == 3 && pt.warning[0] == 0);
	CHECK(strstr(pt.why, "rank 1 is the slowest") != NULL);

	/* layout 2 by auto, B changes to 12 (W=3, m=2: A=2): continues at step 3, gsn 24 */
	{
		struct journal_resume r = { .rule = RESUME_AUTO, .value = 0 };
		struct rankset rs;
		char why[64];

		REQUIRE(rankset_parse(NULL, 3, &rs, why, sizeof(why)) == 0);
		l = test_layout(3, 12, 2, 0, 0);
		CHECK(journal_start(j, &r, &rs, &l, applied, sizeof(applied)) == 0);
		rankset_release(&rs);
		CHECK(layout_start_step(&l) == 3 && layout_start_samples(&l) == 24);
		CHECK(strstr(applied, "auto:") && strstr(applied, "samples:24"));
	}
	/* two full steps by every rank, one more micro by rank 2 */
	for (int i = 0; i < 3 * 2 * 2; i++)
		CHECK(journal_claim_next(j, (uint64_t)i % 3, &s, &m) == 0);
	CHECK(journal_claim_next(j, 2, &s, &m) == 0 && s == 5 && m == 0);
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 5 && g == 24 + 2 * 12);

	/* samples:G maps S0 through the history: G=35 is the last gsn of step 3 of layout 2
	 * (G0 24, B 12), rounded down; G=30 is inside step 3 too */
	CHECK(start_text(j, "samples:35", 1, 6, 6, "", &l) == 0);
	CHECK(layout_start_samples(&l) == 35 && layout_start_step(&l) == 3);
	CHECK(start_text(j, "samples:30", 1, 6, 6, "", &l) == 0);
	CHECK(layout_start_samples(&l) == 30 && layout_start_step(&l) == 3);
	/* G=16 lies before layout 2 (G0 24) but after layout 1 (G0 0): step 2 of layout 1
	 * ... except layout 3 (G0 30) and 2 come later; the latest layout with G0 <= 16 is
	 * layout 1 */
	CHECK(start_text(j, "samples:16", 1, 6, 6, "", &l) == 0);
	CHECK(layout_start_samples(&l) == 16 && layout_start_step(&l) == 2);
	/* now the latest layout with G0 <= 40 is the one just started (G0 16, B 6, S0 2) */
	CHECK(start_text(j, "samples:40", 1, 6, 6, "", &l) == 0);
	CHECK(layout_start_step(&l) == 2 + (40 - 16) / 6 && layout_start_samples(&l) == 40);
	/* samples:G@S pins the step number whatever the history says */
	CHECK(start_text(j, "samples:40@77", 1, 6, 6, "", &l) == 0);
	CHECK(layout_start_samples(&l) == 40 && layout_start_step(&l) == 77);
	CHECK(start_text(j, "samples:40@6", 1, 6, 6, "", &l) == 0);
	CHECK(layout_start_samples(&l) == 40 && layout_start_step(&l) == 6);
	/* step:S takes G0 from the latest layout with S0 <= S: S0 6 (G0 40, B 6) */
	CHECK(start_text(j, "step:9", 2, 4, 1, "", &l) == 0);
	CHECK(layout_start_step(&l) == 9 && layout_start_samples(&l) == 40 + 3 * 6);
	CHECK(start_text(j, "step:9", 2, 4, 1, "", &l) == 0); /* S0 9, G0 58, B 4 */
	CHECK(start_text(j, "step:11", 2, 4, 1, "", &l) == 0);
	CHECK(layout_start_step(&l) == 11 && layout_start_samples(&l) == 58 + 2 * 4);
	CHECK(start_text(j, "step:1", 2, 4, 1, "", &l) == 0); /* only layout 1 has S0 <= 1 */
	CHECK(layout_start_step(&l) == 1 && layout_start_samples(&l) == 8);
	/* no marks yet: auto = cursors of the last layout (nothing claimed: its start) */
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 1 && g == 8);

	/* marks in use: a mark, then later statements */
	for (int i = 0; i < 2 * 4 * 3; i++) /* 3 steps of W=2, m=1, B=4: A=2 */
		CHECK(journal_claim_next(j, (uint64_t)i % 2, &s, &m) == 0);
	CHECK(journal_checkpoint(j, 3) == 0);
	CHECK(journal_resume_point_ex(j, &pt) == 0);
	CHECK(pt.basis == JOURNAL_POINT_STATEMENT && pt.step == 3 && pt.samples == 16);
	CHECK(strstr(pt.why, "checkpoint mark at step 3") != NULL);
	/* auto from the mark, progress, a crash without a newer mark: still the mark */
	CHECK(start_text(j, "auto", 2, 4, 2, "", &l) == 0);
	CHECK(layout_start_step(&l) == 3 && layout_start_samples(&l) == 16);
	for (int i = 0; i < 10; i++)
		CHECK(journal_claim_next(j, (uint64_t)i % 2, &s, &m) == 0);
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 3 && g == 16);
	/* a launcher falls back to an older training checkpoint: samples:8 is a statement */
	CHECK(start_text(j, "samples:8", 2, 4, 2, "", &l) == 0);
	CHECK(layout_start_step(&l) == 1 && layout_start_samples(&l) == 8);
	for (int i = 0; i < 10; i++)
		CHECK(journal_claim_next(j, (uint64_t)i % 2, &s, &m) == 0);
	CHECK(journal_resume_point_ex(j, &pt) == 0);
	CHECK(pt.basis == JOURNAL_POINT_STATEMENT && pt.step == 1 && pt.samples == 8);
	CHECK(journal_checkpoint(j, 4) == 0);
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 4 && g == 20);
	CHECK(journal_rewind(j, 2) == 0);
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 2 && g == 12);

	/* fresh: 0, history kept but ignored (the old marks no longer count) */
	{
		struct journal_layout *ls;
		size_t nls;

		CHECK(start_text(j, "fresh", 2, 4, 2, "", &l) == 0);
		CHECK(layout_start_step(&l) == 0 && layout_start_samples(&l) == 0);
		for (int i = 0; i < 2 * 2 * 2; i++)
			CHECK(journal_claim_next(j, (uint64_t)i % 2, &s, &m) == 0);
		CHECK(journal_resume_point_ex(j, &pt) == 0);
		CHECK(pt.basis == JOURNAL_POINT_CURSORS && pt.step == 4 && pt.samples == 16);
		CHECK(journal_layouts(j, &ls, &nls) == 0 && nls == 15);
		if (nls == 15) {
			CHECK(!strcmp(ls[14].rule, "fresh"));
			CHECK(ls[0].id < ls[14].id);
			CHECK(!strcmp(ls[3].rule, "samples:30"));
			CHECK(!strcmp(ls[6].rule, "samples:40@77"));
		}
		free(ls);
		CHECK(journal_checkpoint(j, 1) == 0);
		CHECK(journal_resume_point(j, &g, &s) == 0 && s == 1 && g == 4);
	}
	journal_close(j);
	free(p);
}

/* Errors of start for points out of range. */
static void test_start_ranges(void)
{
	char *p = path_in(dir, "range.sqlite");
	struct journal *j = open_ok(p);
	struct journal_resume r = { .rule = RESUME_SAMPLES, .value = ORDER_MAX_GSN };
	struct rankset rs;
	struct layout l = test_layout(1, 1, 1, 0, 0);
	char why[64];

	REQUIRE(rankset_parse(NULL, 1, &rs, why, sizeof(why)) == 0);
	CHECK(journal_start(j, &r, &rs, &l, NULL, 0) == -EINVAL);
	r.value = ORDER_MAX_GSN - 1; /* step S0 fits, step S0 + 1 does not */
	CHECK(journal_start(j, &r, &rs, &l, NULL, 0) == -EINVAL);
	r.value = ORDER_MAX_GSN - 2;
	CHECK(journal_start(j, &r, &rs, &l, NULL, 0) == 0);
	/* a long rule text is stored whole and read back (the history parses it) */
	r = (struct journal_resume){ .rule = RESUME_SAMPLES, .value = 1000000000000000000u,
				     .has_step = 1, .step = 1000000000000000u };
	CHECK(journal_start(j, &r, &rs, &l, NULL, 0) == 0);
	{
		struct journal_layout *ls;
		size_t nls;
		uint64_t g, st;

		CHECK(journal_resume_point(j, &g, &st) == 0);
		CHECK(g == 1000000000000000000u && st == 1000000000000000u);
		CHECK(journal_layouts(j, &ls, &nls) == 0 && nls == 2);
		if (nls == 2)
			CHECK(!strcmp(ls[1].rule, "samples:1000000000000000000@1000000000000000"));
		free(ls);
	}
	r = (struct journal_resume){ .rule = RESUME_STEP, .value = ORDER_MAX_GSN - 1 };
	l = test_layout(1, 4, 1, 0, 0);
	CHECK(journal_start(j, &r, &rs, &l, NULL, 0) == -EINVAL);
	rs.ranks[0] = 1; /* rank >= W */
	CHECK(journal_start(j, &(struct journal_resume){ .rule = RESUME_AUTO, .value = 0 }, &rs, &l, NULL, 0) == -EINVAL);
	rankset_release(&rs);
	journal_close(j);
	free(p);
}

/* The journal's clock in test_resume_files(): 2026-01-01T00:00:00Z, then one
 * millisecond later at every call, so that each run's rows are later than the run
 * before's on every journal without sleeping. */
static int64_t fake_now_us(void)
{
	static int64_t t = INT64_C(1767225600000000);

	return t += 1000;
}

/* A clock that stands still: the journal still writes increasing times. */
static int64_t still_now_us(void)
{
	return INT64_C(1767225600000000);
}

/* journal_set_clock(): the history's times are the clock's, made strictly increasing. */
static void test_clock(void)
{
	const int64_t t0 = INT64_C(1767225600000000);
	char *p = path_in(dir, "clock.sqlite");
	struct journal_event *ev = NULL;
	struct journal_layout *ls = NULL;
	struct journal *j;
	struct layout l;
	uint64_t s, m;
	size_t n = 0;

	journal_set_clock(still_now_us);
	j = open_ok(p);
	CHECK(start_text(j, "samples:0", 2, 4, 1, "", &l) == 0);
	for (int i = 0; i < 8; i++) /* both ranks to step 2 */
		CHECK(journal_claim_next(j, (uint64_t)i % 2, &s, &m) == 0);
	CHECK(journal_checkpoint(j, 1) == 0);
	CHECK(journal_checkpoint(j, 2) == 0);
	CHECK(journal_layouts(j, &ls, &n) == 0 && n == 1);
	CHECK(n == 1 && ls[0].time == t0 / 1000000);
	free(ls);
	/* a clock that stands still: each time one past the last */
	CHECK(journal_marks(j, &ev, &n) == 0 && n == 2);
	CHECK(n == 2 && ev[0].time_us > t0 && ev[0].time_us < t0 + 10 &&
	      ev[1].time_us == ev[0].time_us + 1);
	free(ev);
	journal_close(j);
	journal_set_clock(NULL);
	j = open_ok(p);
	CHECK(start_text(j, "auto", 2, 4, 1, "", &l) == 0);
	CHECK(journal_checkpoint(j, 2) == 0);
	/* the real clock again: today, not 2026-01-01 */
	CHECK(journal_marks(j, &ev, &n) == 0 && n == 3);
	CHECK(n == 3 && ev[2].time_us > t0 + 1000000);
	free(ev);
	journal_close(j);
	free(p);
}

/* Several journals, one per node. */
static void test_resume_files(void)
{
	char *a = path_in(dir, "node0.sqlite"), *b = path_in(dir, "node1.sqlite");
	char *c = path_in(dir, "node2.sqlite"), *o = path_in(dir, "othernode.sqlite");
	const char *ab[] = { a, b }, *abc[] = { a, b, c }, *ao[] = { a, o }, *ax[] = { a, "/nonexistent/j.sqlite" };
	struct journal *ja, *jb, *jc;
	struct journal_point pt;
	struct layout l;
	uint64_t s, m, g;
	char err[512];

	journal_set_clock(fake_now_us);
	/* run 1: W=4, B=8, m=1 (A=2); node0 serves 0-1, node1 serves 2-3, node2 serves
	 * nothing of it (its journal exists from an older run with W=2, B=4) */
	jc = open_ok(c);
	CHECK(start_text(jc, "samples:0", 2, 4, 1, "", &l) == 0);
	for (int i = 0; i < 40; i++)
		CHECK(journal_claim_next(jc, (uint64_t)i % 2, &s, &m) == 0);
	journal_close(jc);
	ja = open_ok(a);
	jb = open_ok(b);
	CHECK(start_text(ja, "samples:0", 4, 8, 1, "0-1", &l) == 0);
	CHECK(start_text(jb, "samples:0", 4, 8, 1, "2-3", &l) == 0);
	for (int i = 0; i < 2 * 2 * 5; i++) /* node0: 5 steps per rank */
		CHECK(journal_claim_next(ja, (uint64_t)i % 2, &s, &m) == 0);
	for (int i = 0; i < 2 * 2 * 3 + 1; i++) /* node1: rank 2 at step 3 micro 1, rank 3 at 3 */
		CHECK(journal_claim_next(jb, 2 + (uint64_t)i % 2, &s, &m) == 0);
	journal_close(ja);
	journal_close(jb);
	CHECK(journal_resume_point_files_ex(ab, 2, &pt, err, sizeof(err)) == 0);
	CHECK(pt.basis == JOURNAL_POINT_CURSORS && pt.step == 3 && pt.samples == 24);
	CHECK(pt.warning[0] == 0);
	CHECK(layout_world_size(&pt.last) == 4 && layout_global_batch(&pt.last) == 8);
	/* the stale journal of node2 (older, another layout) changes nothing */
	CHECK(journal_resume_point_files(abc, 3, &g, &s, err, sizeof(err)) == 0);
	CHECK(g == 24 && s == 3);
	/* only node0's journal: ranks 2-3 unknown -> the layout's start, with a warning */
	CHECK(journal_resume_point_files_ex(ab, 1, &pt, err, sizeof(err)) == 0);
	CHECK(pt.step == 0 && pt.samples == 0);
	CHECK(strstr(pt.warning, "ranks 2-3") && strstr(pt.warning, "world_size 4"));
	/* one file gives what journal_resume_point gives */
	ja = open_ok(a);
	CHECK(journal_resume_point(ja, &g, &s) == 0 && g == 0 && s == 0);
	journal_close(ja);

	/* run 2 from samples:24, ranks moved: node1 serves 0-1, node0 serves 2-3 (same key
	 * (S0, G0, W, B) on both nodes); per rank the newer row counts */
	ja = open_ok(a);
	jb = open_ok(b);
	CHECK(start_text(ja, "samples:24", 4, 8, 1, "2-3", &l) == 0);
	CHECK(layout_start_step(&l) == 3);
	CHECK(start_text(jb, "samples:24", 4, 8, 1, "0-1", &l) == 0);
	for (int i = 0; i < 2 * 2 * 4; i++)
		CHECK(journal_claim_next(ja, 2 + (uint64_t)i % 2, &s, &m) == 0);
	for (int i = 0; i < 2 * 2 * 6; i++)
		CHECK(journal_claim_next(jb, (uint64_t)i % 2, &s, &m) == 0);
	journal_close(ja);
	journal_close(jb);
	CHECK(journal_resume_point_files(ab, 2, &g, &s, err, sizeof(err)) == 0);
	CHECK(s == 3 + 4 && g == 24 + 4 * 8);

	/* a run 3 started from the same point on node0 alone, serving 0-3, and not claiming:
	 * its rows are the newest of that key for ranks 2-3 and 0-1 alike */
	ja = open_ok(a);
	CHECK(start_text(ja, "samples:56", 4, 8, 1, "0-3", &l) == 0);
	for (int i = 0; i < 8; i++)
		CHECK(journal_claim_next(ja, (uint64_t)i % 4, &s, &m) == 0);
	journal_close(ja);
	CHECK(journal_resume_point_files(ab, 2, &g, &s, err, sizeof(err)) == 0);
	CHECK(s == 8 && g == 64);

	/* the same key (G0 64, W 4, B 8) on three journals: run A has node2 serve 0-1 (5
	 * steps) and node1 serve 2-3 (nothing), so the point stays 64; run B has node1 serve
	 * 0-1 (1 step) and node0 serve 2-3 (3 steps). For ranks 0-1 the newest row (node1)
	 * counts, not node2's older one. */
	jc = open_ok(c);
	jb = open_ok(b);
	CHECK(start_text(jc, "samples:64", 4, 8, 1, "0-1", &l) == 0);
	CHECK(start_text(jb, "samples:64", 4, 8, 1, "2-3", &l) == 0);
	for (int i = 0; i < 2 * 2 * 5; i++)
		CHECK(journal_claim_next(jc, (uint64_t)i % 2, &s, &m) == 0);
	journal_close(jc);
	journal_close(jb);
	CHECK(journal_resume_point_files(abc, 3, &g, &s, err, sizeof(err)) == 0);
	CHECK(s == 8 && g == 64);
	ja = open_ok(a);
	jb = open_ok(b);
	CHECK(start_text(jb, "samples:64", 4, 8, 1, "0-1", &l) == 0);
	CHECK(start_text(ja, "samples:64", 4, 8, 1, "2-3", &l) == 0);
	for (int i = 0; i < 2 * 2 * 1; i++)
		CHECK(journal_claim_next(jb, (uint64_t)i % 2, &s, &m) == 0);
	for (int i = 0; i < 2 * 2 * 3; i++)
		CHECK(journal_claim_next(ja, 2 + (uint64_t)i % 2, &s, &m) == 0);
	journal_close(ja);
	journal_close(jb);
	CHECK(journal_resume_point_files(abc, 3, &g, &s, err, sizeof(err)) == 0);
	CHECK(s == 9 && g == 72);

	/* a checkpoint mark in any journal wins over cursors */
	jb = open_ok(b);
	CHECK(start_text(jb, "samples:72", 4, 8, 1, "0-3", &l) == 0);
	for (int i = 0; i < 4 * 2 * 3; i++)
		CHECK(journal_claim_next(jb, (uint64_t)i % 4, &s, &m) == 0);
	CHECK(journal_checkpoint(jb, 11) == 0);
	journal_close(jb);
	CHECK(journal_resume_point_files_ex(abc, 3, &pt, err, sizeof(err)) == 0);
	CHECK(pt.basis == JOURNAL_POINT_STATEMENT && pt.step == 11 && pt.samples == 88);
	CHECK(strstr(pt.why, b) != NULL);

	/* errors: another identity, a missing file, no files */
	{
		struct journal *jo;
		struct journal_ident other = ID;

		other.seed = 99;
		REQUIRE(journal_open(o, &other, JOURNAL_SYNC_NORMAL, &jo, err, sizeof(err)) == 0);
		journal_close(jo);
	}
	CHECK(journal_resume_point_files(ao, 2, &g, &s, err, sizeof(err)) == -ESTALE);
	CHECK(strstr(err, a) && strstr(err, o) && strstr(err, "seed 99"));
	CHECK(journal_resume_point_files(ax, 2, &g, &s, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, "/nonexistent/j.sqlite") != NULL);
	CHECK(journal_resume_point_files(ab, 0, &g, &s, err, sizeof(err)) == -EINVAL);
	/* empty journals: point 0 */
	CHECK(journal_resume_point_files_ex(ao + 1, 1, &pt, err, sizeof(err)) == 0);
	CHECK(pt.basis == JOURNAL_POINT_EMPTY && pt.samples == 0 && pt.step == 0);
	journal_set_clock(NULL);
	free(a);
	free(b);
	free(c);
	free(o);
}

/* The WAL left by a killed process (no clean close) is read by every opener. */
static void test_unclean_close(void)
{
	char *p = path_in(dir, "unclean.sqlite"), *wal = path_in(dir, "unclean.sqlite-wal");
	pid_t pid;
	int status;
	uint64_t g, s;
	struct journal *j;
	char err[256];

	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct journal *k = open_ok(p);
		uint64_t a, b;

		if (start_text(k, "auto", 1, 2, 1, "", NULL))
			_exit(3);
		for (int i = 0; i < 7; i++)
			if (journal_claim_next(k, 0, &a, &b))
				_exit(4);
		_exit(0); /* no journal_close */
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(exists(wal));
	CHECK(journal_open_readonly(p, &j, err, sizeof(err)) == 0);
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 3 && g == 6);
	journal_close(j);
	CHECK(exists(wal)); /* a reader does not checkpoint */
	j = open_ok(p);
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 3 && g == 6);
	journal_close(j);
	CHECK(!exists(wal));
	free(p);
	free(wal);
}

int main(void)
{
	dir = scratch_dir("journal");
	test_resume_parse();
	test_create_and_reopen();
	test_identity_mismatch();
	test_foreign_and_corrupt();
	test_newer_schema();
	test_unwritable_paths();
	test_readonly_fs();
	test_busy();
	test_start_and_claims();
	test_checkpoint_rewind();
	test_resume_rules();
	test_start_ranges();
	test_clock();
	test_resume_files();
	test_unclean_close();
	rm_rf(dir);
	free(dir);
	return check_status();
}
