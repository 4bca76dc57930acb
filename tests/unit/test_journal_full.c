/*
 * test_journal_full: the journal on a full file system (a small tmpfs mounted for the
 * test, unmounted in every case). While the disk is full, every claim either commits
 * and advances the cursor or fails with -EIO and leaves the cursor where it was (in
 * memory, and on disk after a reopen); at least one fails. Checkpoint marks and rewinds
 * fail the same way. A journal cannot be created there (-ENOSPC, nothing left behind).
 * Once space returns, claims continue from the cursor with no gap. A durable delivery
 * (journal_sync_delivered) on the full disk commits or fails with -EIO writing nothing,
 * and is written once space returns. Run with sync=normal
 * and sync=full. Exits 77 (skip) with the reason if tmpfs cannot be mounted.
 */
#include "test_journal_util.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sys/mount.h>

#include "check.h"
#include "test_layout.h"

static char *mnt;
static int mounted;

static void unmount_at_exit(void)
{
	if (mounted && umount2(mnt, MNT_DETACH))
		perror("umount");
	mounted = 0;
}

/* Write zeros until the file system refuses; returns the bytes written. */
static long long fill(const char *path)
{
	static char block[4096];
	long long total = 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ssize_t k;

	REQUIRE(fd >= 0);
	while ((k = write(fd, block, sizeof(block))) > 0)
		total += k;
	/* top up the last partial page */
	while ((k = write(fd, block, 1)) > 0)
		total += k;
	close(fd);
	return total;
}

static void round_trip(enum journal_sync sync)
{
	struct journal_ident id = ident_of(FP_A, 1, ORDER_SHUFFLE_GLOBAL, 500);
	char *p = path_in(mnt, "journal.sqlite"), *filler = path_in(mnt, "filler");
	char *p2 = path_in(mnt, "second.sqlite");
	struct journal *j, *k = NULL;
	struct journal_event *ev;
	uint64_t s, m, s1, m1, good = 0, failed = 0;
	size_t nev;
	int marked;
	char err[512];
	int rc;

	unlink(p);
	REQUIRE(journal_open(p, &id, sync, &j, err, sizeof(err)) == 0);
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	for (int i = 0; i < 10; i++)
		REQUIRE(journal_claim_next(j, (uint64_t)i % 2, &s, &m) == 0);
	CHECK(fill(filler) > 0);

	/* a new journal cannot be created, and nothing of it remains */
	rc = journal_open(p2, &id, sync, &k, err, sizeof(err));
	CHECK(rc == -ENOSPC || rc == -EIO);
	CHECK(k == NULL);
	CHECK(!exists(p2));
	if (rc == 0)
		journal_close(k);

	/* full: each claim commits (cursor +1) or fails with EIO (cursor unchanged) */
	for (int i = 0; i < 4000 && failed < 50; i++) {
		uint64_t r = (uint64_t)i % 2;

		REQUIRE(journal_cursor(j, r, &s, &m) == 0);
		rc = journal_claim(j, r, s, m);
		REQUIRE(journal_cursor(j, r, &s1, &m1) == 0);
		if (rc == 0) {
			good++;
			struct layout l = test_layout(2, 4, 1, 0, 0);

			layout_advance(&l, &s, &m);
			CHECK(s1 == s && m1 == m);
		} else {
			failed++;
			CHECK(rc == -EIO);
			CHECK(s1 == s && m1 == m);
		}
	}
	CHECK(failed > 0);
	printf("full (sync=%s): %" PRIu64 " claims committed, %" PRIu64 " refused with EIO\n",
	       sync == JOURNAL_SYNC_FULL ? "full" : "normal", good, failed);
	journal_last_error(j, err, sizeof(err));
	CHECK(strstr(err, "full") != NULL);
	/* marks and rewinds fail too, changing nothing */
	REQUIRE(journal_cursor(j, 0, &s, &m) == 0);
	rc = journal_checkpoint(j, s);
	CHECK(rc == -EIO || rc == 0);
	marked = rc == 0;
	rc = journal_rewind(j, 2);
	CHECK(rc == -EIO || rc == 0);
	if (rc == 0)
		REQUIRE(journal_cursor(j, 0, &s, &m) == 0);
	REQUIRE(journal_cursor(j, 0, &s1, &m1) == 0);
	CHECK(s1 == s && m1 == m);

	/* close on the full disk and reopen: the journaled cursors are the ones in memory */
	REQUIRE(journal_cursor(j, 0, &s, &m) == 0);
	REQUIRE(journal_cursor(j, 1, &s1, &m1) == 0);
	journal_close(j);
	unlink(filler); /* space returns */
	REQUIRE(journal_open(p, &id, sync, &j, err, sizeof(err)) == 0);
	{
		struct journal_layout *ls;
		struct journal_cursor *cs;
		size_t nls, ncs;

		REQUIRE(journal_layouts(j, &ls, &nls) == 0 && nls == 1);
		REQUIRE(journal_cursors(j, ls[0].id, &cs, &ncs) == 0 && ncs == 2);
		CHECK(cs[0].step == s && cs[0].micro == m);
		CHECK(cs[1].step == s1 && cs[1].micro == m1);
		free(cs);
		free(ls);
	}
	/* the mark attempted while full is there only if it committed */
	CHECK(journal_marks(j, &ev, &nev) == 0 && nev == (marked ? 1 : 0));
	free(ev);
	/* a remount (auto) continues at what every rank completed, and claims go on */
	{
		struct layout l;
		uint64_t lo = s < s1 ? s : s1, g, st;

		REQUIRE(journal_resume_point(j, &g, &st) == 0);
		if (!marked)
			CHECK(st == lo && g == lo * 4);
		REQUIRE(start_text(j, "auto", 2, 4, 1, "", &l) == 0);
		CHECK(layout_start_step(&l) == st && layout_start_samples(&l) == g);
		for (int i = 0; i < 16; i++)
			CHECK(journal_claim_next(j, (uint64_t)i % 2, &s, &m) == 0);
		CHECK(s == st + 3 && m == 1);
		journal_close(j);
	}
	unlink(p);
	free(p);
	free(p2);
	free(filler);
}

/* The plain continuation: on the same open journal, space returns and the next claim is
 * exactly the cursor (no gap), then it goes on. */
static void continue_after_space(enum journal_sync sync)
{
	struct journal_ident id = ident_of(FP_A, 1, ORDER_SHUFFLE_GLOBAL, 500);
	char *p = path_in(mnt, "cont.sqlite"), *filler = path_in(mnt, "filler");
	struct journal *j;
	uint64_t s, m, s1, m1;
	char err[512];
	int rc = 0, i;

	unlink(p);
	REQUIRE(journal_open(p, &id, sync, &j, err, sizeof(err)) == 0);
	REQUIRE(start_text(j, "auto", 1, 3, 1, "", NULL) == 0);
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0);
	CHECK(fill(filler) > 0);
	for (i = 0; i < 4000; i++) {
		REQUIRE(journal_cursor(j, 0, &s, &m) == 0);
		rc = journal_claim(j, 0, s, m);
		if (rc)
			break;
	}
	CHECK(rc == -EIO);
	REQUIRE(journal_cursor(j, 0, &s1, &m1) == 0);
	CHECK(s1 == s && m1 == m);
	unlink(filler);
	/* no gap: the position that failed is the one that succeeds now */
	CHECK(journal_claim(j, 0, s, m) == 0);
	for (i = 0; i < 100; i++)
		CHECK(journal_claim_next(j, 0, &s1, &m1) == 0);
	CHECK(s1 * 3 + m1 == s * 3 + m + 100);
	journal_close(j);
	unlink(p);
	free(p);
	free(filler);
}

/* Durable deliveries on a full disk: a close's sync either commits (the row holds the
 * delivery) or fails with -EIO and writes nothing, the delivery staying reported (a
 * crash then may serve it again); once space returns the next sync writes it. */
static void sync_when_full(enum journal_sync sync)
{
	struct journal_ident id = ident_of(FP_A, 1, ORDER_SHUFFLE_GLOBAL, 500);
	char *p = path_in(mnt, "sync.sqlite"), *filler = path_in(mnt, "filler");
	struct journal_layout cl;
	struct journal_cursor *cs;
	struct journal *j;
	uint64_t s, m, failed = 0;
	size_t ncs;
	char err[512];
	int rc = 0;

	unlink(p);
	REQUIRE(journal_open(p, &id, sync, &j, err, sizeof(err)) == 0);
	REQUIRE(start_text(j, "auto", 1, 3, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	journal_track_delivery(j);
	for (int i = 0; i < 30; i++) /* handed out before the disk fills, read after */
		REQUIRE(journal_claim_next(j, 0, &s, &m) == 0);
	CHECK(fill(filler) > 0);
	s = 0;
	m = 0;
	for (int i = 0; i < 30; i++) {
		struct layout l = test_layout(1, 3, 1, 0, 0);

		layout_advance(&l, &s, &m);
		REQUIRE(journal_delivered(j, 0, s, m) == 0);
		rc = journal_sync_delivered(j, 0);
		CHECK(rc == 0 || rc == -EIO);
		REQUIRE(journal_cursors(j, cl.id, &cs, &ncs) == 0 && ncs == 1);
		if (rc == 0)
			CHECK(cs[0].delivered_step == s && cs[0].delivered_micro == m);
		else
			CHECK(cs[0].delivered_step * 3 + cs[0].delivered_micro < s * 3 + m);
		free(cs);
		failed += rc != 0;
	}
	CHECK(failed > 0);
	unlink(filler); /* space returns: the delivery still reported is written now */
	CHECK(journal_sync_delivered(j, 0) == 0);
	REQUIRE(journal_cursors(j, cl.id, &cs, &ncs) == 0 && ncs == 1);
	CHECK(cs[0].delivered_step == s && cs[0].delivered_micro == m);
	free(cs);
	journal_close(j);
	unlink(p);
	free(p);
	free(filler);
}

int main(void)
{
	char *dir = scratch_dir("full");

	mnt = path_in(dir, "tmpfs");
	REQUIRE(mkdir(mnt, 0755) == 0);
	if (mount("zephon-test", mnt, "tmpfs", 0, "size=256k")) {
		printf("SKIP: cannot mount a tmpfs to fill (%s); run as root where mount(2) "
		       "is allowed\n", strerror(errno));
		rm_rf(dir);
		return 77;
	}
	mounted = 1;
	atexit(unmount_at_exit);
	round_trip(JOURNAL_SYNC_NORMAL);
	round_trip(JOURNAL_SYNC_FULL);
	continue_after_space(JOURNAL_SYNC_NORMAL);
	continue_after_space(JOURNAL_SYNC_FULL);
	sync_when_full(JOURNAL_SYNC_NORMAL);
	sync_when_full(JOURNAL_SYNC_FULL);
	unmount_at_exit();
	rm_rf(dir);
	free(dir);
	free(mnt);
	return check_status();
}
