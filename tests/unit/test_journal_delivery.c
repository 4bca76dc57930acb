/*
 * test_journal_delivery: delivered positions in the cursor journal. A journal of schema
 * version 1 (built here from the released version-1 DDL) is read as is by a read-only
 * open and migrated by a writable one, its cursors counting as delivered; with
 * journal_track_delivery() a claim counts as consumed only once journal_delivered()
 * says so, the delivery is written with the rank's next claim, by
 * journal_sync_delivered() (at once, reserving the rank's next claim; a delivery only
 * reported waits for its own sync) or by journal_flush_delivered(), and
 * what a kill leaves on disk only ever repeats claims, never one that was synced.
 */
#include "test_journal_util.h"

#include <sys/stat.h>
#include <time.h>

#include <sqlite3.h>

#include "check.h"


static char *dir;
static const struct journal_ident ID = { FP_A, 7, ORDER_SHUFFLE_GLOBAL, 1000, "" };

static struct journal *open_ok(const char *path)
{
	return open_id(path, &ID);
}

/* A journal as a version-1 zephon left it: W=4, B=8, m=1 (2 claims per rank and step)
 * from step 0; cursors of ranks 0-3 at steps 5.1, 3.0, 4.1, 6.0. */
static char *make_v1(const char *name)
{
	static const char rows[] =
		"INSERT INTO meta VALUES ('fingerprint', '" FP_A "'), ('seed', '7'), "
		"('shuffle', 'global'), ('samples', '1000'), ('created', '1'), "
		"('zephon_version', '0.1');"
		"INSERT INTO layout VALUES (1, 1, 4, 8, 1, '0-3', 0, 0, 1000000, 'h', 'auto', "
		"'auto: the journal has no layout yet -> step 0, samples:0');"
		"INSERT INTO cursor VALUES (1, 0, 5, 1), (1, 1, 3, 0), (1, 2, 4, 1), (1, 3, 6, 0);"
		"PRAGMA user_version = 1;";
	char *p = path_in(dir, name);

	make_old_journal(p, NULL, rows);
	return p;
}

static void test_migration(void)
{
	char *p = make_v1("v1.sqlite"), err[512];
	const char *one[1] = { p };
	struct journal_cursor *cur = NULL;
	struct journal_layout *ls = NULL;
	struct journal *j = NULL;
	struct layout l;
	size_t n = 0;
	uint64_t g, s;

	/* read as is: no migration, the cursors count as delivered */
	REQUIRE(journal_open_readonly(p, &j, err, sizeof(err)) == 0);
	CHECK(journal_cursors(j, 1, &cur, &n) == 0 && n == 4);
	for (size_t i = 0; i < n; i++)
		CHECK(cur[i].delivered_step == cur[i].step && cur[i].delivered_micro == cur[i].micro);
	free(cur);
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 3 && g == 24);
	journal_close(j);
	CHECK(sql_int(p, "PRAGMA user_version") == 1);
	CHECK(journal_resume_point_files(one, 1, &g, &s, err, sizeof(err)) == 0 && s == 3 && g == 24);

	/* a writable open migrates: same history, same point, delivered = cursor */
	j = open_ok(p);
	CHECK(journal_cursors(j, 1, &cur, &n) == 0 && n == 4);
	CHECK(n == 4 && cur[0].delivered_step == 5 && cur[0].delivered_micro == 1 &&
	      cur[3].delivered_step == 6 && cur[3].delivered_micro == 0);
	free(cur);
	CHECK(journal_layouts(j, &ls, &n) == 0 && n == 1);
	free(ls);
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 3 && g == 24);
	CHECK(start_text(j, "auto", 4, 8, 1, "", &l) == 0);
	CHECK(layout_start_step(&l) == 3 && layout_start_samples(&l) == 24);
	CHECK(journal_claim(j, 2, 3, 0) == 0);
	journal_close(j);
	CHECK(sql_int(p, "PRAGMA user_version") == JOURNAL_SCHEMA_VERSION);
	CHECK(sql_int(p, "SELECT count(*) FROM cursor WHERE delivered_step = step AND "
		      "delivered_micro = micro") == 8);
	/* and opens again as the current version */
	j = open_ok(p);
	journal_close(j);
	CHECK(sql_int(p, "PRAGMA user_version") == JOURNAL_SCHEMA_VERSION);
	free(p);
}

/* Rank's row as written in the journal (read through j: the mount's lock keeps other
 * connections out): step * 10 + micro of its cursor (delivered = 0) or its delivered
 * position (delivered = 1). */
static int64_t row(struct journal *j, int64_t layout, uint64_t rank, int delivered)
{
	struct journal_cursor *cur = NULL;
	size_t n = 0;
	int64_t v = -1;

	if (journal_cursors(j, layout, &cur, &n) == 0)
		for (size_t i = 0; i < n; i++)
			if (cur[i].rank == rank)
				v = delivered ? (int64_t)(cur[i].delivered_step * 10 + cur[i].delivered_micro) :
				    (int64_t)(cur[i].step * 10 + cur[i].micro);
	free(cur);
	return v;
}

static void test_tracked(void)
{
	char *p = path_in(dir, "tracked.sqlite"), err[512];
	const char *one[1] = { p };
	struct journal_layout cl;
	struct journal *j;
	uint64_t g, s, m;

	unlink(p);
	j = open_ok(p);
	/* W=2, B=4, m=1: 2 claims per rank and step */
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(journal_delivered(j, 0, 0, 0) == -EINVAL); /* not tracking yet */
	journal_track_delivery(j);
	for (int i = 0; i < 4; i++)
		REQUIRE(journal_claim_next(j, (uint64_t)i % 2, &s, &m) == 0);
	/* both ranks claimed step 0 whole, nothing delivered: nothing consumed */
	CHECK_EQ_U64(journal_consumed(j), 0);
	CHECK(journal_delivered(j, 0, 1, 1) == -EINVAL);  /* past the cursor (1, 0) */
	CHECK(journal_delivered(j, 5, 0, 1) == -EINVAL);  /* not served */
	CHECK(journal_delivered(j, 0, 1, 0) == 0);
	CHECK_EQ_U64(journal_consumed(j), 0);              /* rank 1 is still out */
	CHECK(journal_delivered(j, 1, 0, 1) == 0);
	CHECK(journal_delivered(j, 1, 0, 0) == 0);         /* behind: ignored */
	CHECK_EQ_U64(journal_consumed(j), 0);
	CHECK(journal_delivered(j, 1, 1, 0) == 0);
	CHECK_EQ_U64(journal_consumed(j), 4);
	/* nothing written yet: a kill now leaves step 0 to serve again */
	CHECK(row(j, cl.id, 0, 1) == 0 && row(j, cl.id, 1, 1) == 0);

	/* rank 0's next claim carries its delivery along (same row, same commit) */
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0 && s == 1 && m == 0);
	CHECK(row(j, cl.id, 0, 1) == 10);
	CHECK(row(j, cl.id, 0, 0) == 11);
	CHECK(row(j, cl.id, 1, 1) == 0);
	/* the flush writes rank 1's */
	CHECK(journal_flush_delivered(j) == 0);
	CHECK(row(j, cl.id, 1, 1) == 10);
	CHECK(journal_flush_delivered(j) == 0); /* nothing changed: nothing to do */

	/* a rewind moves the delivered positions with the cursors */
	REQUIRE(journal_claim_next(j, 1, &s, &m) == 0);
	REQUIRE(journal_claim_next(j, 1, &s, &m) == 0); /* rank 1 at (2, 0) */
	CHECK(journal_delivered(j, 1, 2, 0) == 0);
	CHECK(journal_rewind(j, 1) == 0);
	CHECK(row(j, cl.id, 0, 0) == 10 && row(j, cl.id, 0, 1) == 10);
	CHECK(row(j, cl.id, 1, 0) == 10 && row(j, cl.id, 1, 1) == 10);
	CHECK(journal_delivered(j, 1, 2, 0) == -EINVAL); /* beyond the rewound cursor */
	CHECK_EQ_U64(journal_consumed(j), 4);
	journal_close(j);

	/* what resume=auto sees after the close (no flush: as after a kill -9) */
	j = open_ok(p);
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	journal_track_delivery(j);
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0 && s == 1 && m == 0);
	CHECK(journal_delivered(j, 0, 1, 1) == 0);
	journal_close(j); /* rank 0's delivery of (1, 0) was never written */
	CHECK(journal_resume_point_files(one, 1, &g, &s, err, sizeof(err)) == 0);
	CHECK(s == 1 && g == 4);
	free(p);
}

static void test_untracked(void)
{
	char *p = path_in(dir, "untracked.sqlite");
	struct journal_cursor *cur = NULL;
	struct journal_layout cl;
	struct journal *j;
	size_t n = 0;

	unlink(p);
	j = open_ok(p);
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	REQUIRE(journal_claim(j, 0, 0, 0) == 0);
	REQUIRE(journal_claim(j, 0, 0, 1) == 0);
	REQUIRE(journal_claim(j, 1, 0, 0) == 0);
	/* a claim counts as delivered as it commits */
	CHECK(journal_cursors(j, cl.id, &cur, &n) == 0 && n == 2);
	CHECK(n == 2 && cur[0].delivered_step == 1 && cur[0].delivered_micro == 0 &&
	      cur[1].delivered_step == 0 && cur[1].delivered_micro == 1);
	free(cur);
	CHECK(journal_flush_delivered(j) == 0);
	journal_close(j);
	free(p);
}

/* Bytes of p's -wal: each commit appends a frame, so an unchanged size means nothing
 * was committed. */
static long long wal_size(const char *p)
{
	char w[4200];
	struct stat st;

	snprintf(w, sizeof(w), "%s-wal", p);
	return stat(w, &st) ? -1 : (long long)st.st_size;
}

static void test_synced(void)
{
	char *p = path_in(dir, "synced.sqlite"), err[512];
	const char *one[1] = { p };
	struct journal_layout cl;
	struct journal *j;
	uint64_t g, s, m;
	long long w0;

	unlink(p);
	j = open_ok(p);
	/* W=2, B=4, m=1: 2 claims per rank and step */
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(journal_sync_delivered(j, 0) == -EINVAL); /* not tracking yet */
	journal_track_delivery(j);
	CHECK(journal_sync_delivered(j, 5) == -EINVAL); /* not served */
	CHECK(journal_sync_delivered(j, 0) == 0);       /* nothing delivered: nothing to do */

	/* a reader reads (0, 0) and closes it: durable at once, with the rank's next claim
	 * (0, 1) reserved in the same commit: the row's cursor is one claim ahead */
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0 && s == 0 && m == 0);
	CHECK(journal_delivered(j, 0, 0, 1) == 0);
	CHECK(journal_sync_delivered(j, 0) == 0);
	CHECK(row(j, cl.id, 0, 1) == 1 && row(j, cl.id, 0, 0) == 10);
	CHECK(journal_cursor(j, 0, &s, &m) == 0 && s == 0 && m == 1); /* as handed out */
	/* the next claim is the reserved one: no commit */
	w0 = wal_size(p);
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0 && s == 0 && m == 1);
	CHECK(wal_size(p) == w0);
	CHECK(journal_sync_delivered(j, 0) == 0);       /* nothing new: no commit */
	CHECK(wal_size(p) == w0);
	/* and the one after it commits again */
	CHECK(journal_delivered(j, 0, 1, 0) == 0);
	CHECK(journal_sync_delivered(j, 0) == 0);
	CHECK(row(j, cl.id, 0, 1) == 10 && row(j, cl.id, 0, 0) == 11);
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0 && s == 1 && m == 0);
	w0 = wal_size(p);
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0 && s == 1 && m == 1); /* not reserved */
	CHECK(wal_size(p) > w0);
	CHECK(row(j, cl.id, 0, 0) == 20);

	/* a sync writes what syncs asked for (theirs, and those of the syncs waiting for
	 * it: a group commit), never a delivery only reported (a last byte read by a reader
	 * that may yet fail): rank 1's waits for its own sync or next claim. A claim still
	 * out (rank 0's (1, 1)) means no reservation for that rank */
	REQUIRE(journal_claim_next(j, 1, &s, &m) == 0 && s == 0 && m == 0);
	CHECK(journal_delivered(j, 1, 0, 1) == 0);
	CHECK(journal_delivered(j, 0, 1, 1) == 0);
	CHECK(journal_sync_delivered(j, 0) == 0);
	CHECK(row(j, cl.id, 0, 1) == 11 && row(j, cl.id, 0, 0) == 20);
	CHECK(row(j, cl.id, 1, 1) == 0 && row(j, cl.id, 1, 0) == 1);
	CHECK(journal_sync_delivered(j, 1) == 0);
	CHECK(row(j, cl.id, 1, 1) == 1 && row(j, cl.id, 1, 0) == 10);
	w0 = wal_size(p);
	CHECK(journal_sync_delivered(j, 1) == 0);       /* nothing new */
	CHECK(wal_size(p) == w0);
	CHECK_EQ_U64(journal_consumed(j), 0);           /* rank 1 has step 0 half done */

	/* a kill now (a close without flush): resume=auto counts every synced delivery */
	CHECK(journal_delivered(j, 1, 0, 1) == 0);
	REQUIRE(journal_claim_next(j, 1, &s, &m) == 0 && s == 0 && m == 1); /* reserved */
	CHECK(journal_delivered(j, 1, 1, 0) == 0);
	CHECK(journal_sync_delivered(j, 1) == 0);
	journal_close(j);
	CHECK(journal_resume_point_files(one, 1, &g, &s, err, sizeof(err)) == 0);
	CHECK(s == 1 && g == 4);

	/* a clean stop (journal_flush_delivered) writes the cursors back as handed out */
	j = open_ok(p);
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	journal_track_delivery(j);
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0 && s == 1 && m == 0);
	CHECK(journal_delivered(j, 0, 1, 1) == 0);
	CHECK(journal_sync_delivered(j, 0) == 0);
	CHECK(row(j, cl.id, 0, 0) == 20);
	CHECK(journal_flush_delivered(j) == 0);
	CHECK(row(j, cl.id, 0, 0) == 11 && row(j, cl.id, 0, 1) == 11);

	/* the journal deleted under the mount: the sync fails (once the path is checked,
	 * every 10 ms), and the delivery stays reported; a crash may repeat it */
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0 && s == 1 && m == 1);
	CHECK(journal_delivered(j, 0, 2, 0) == 0);
	REQUIRE(unlink(p) == 0);
	nanosleep(&(struct timespec){ 0, 20000000 }, NULL);
	CHECK(journal_sync_delivered(j, 0) == -EIO);
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "deleted or replaced") != NULL);
	CHECK_EQ_U64(journal_consumed(j), 4);           /* in memory: rank 1 is at step 1 */
	journal_close(j);
	free(p);
}

int main(void)
{
	dir = scratch_dir("journal-delivery");
	test_migration();
	test_tracked();
	test_untracked();
	test_synced();
	rm_rf(dir);
	free(dir);
	return check_status();
}
