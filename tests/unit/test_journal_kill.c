/*
 * test_journal_kill: kill -9 during concurrent claims and durable deliveries, 20 times.
 *
 * A forked child starts a layout (resume=auto), tracks deliveries as a mount does, and
 * runs 8 threads that claim at once: threads 0-3 each own one rank (journal_cursor +
 * journal_claim), threads 4-7 share ranks 4 and 5 two by two (journal_claim_next). Each
 * claim that journal_claim* returned 0 for is written to a pipe (what a reader
 * received); then the thread finishes it as a reader's close does: marks it in the
 * rank's delivered prefix (struct delivery: the two threads of a shared rank finish out
 * of order), reports the prefix (journal_delivered), makes it durable
 * (journal_sync_delivered) and writes the durable prefix to the pipe. After a random
 * delay the parent SIGKILLs the child, then checks: PRAGMA integrity_check is "ok";
 * every reported claim lies below its rank's journaled cursor (nothing handed out is
 * forgotten); no claim was reported twice; at most one claim per thread is journaled
 * but unreported (in flight at the kill), plus one a sync reserved; every rank's
 * journaled delivered position is at or past every prefix reported durable (no
 * finished claim is served again: counted, 0) and at or before its claims received (no
 * skip); and the next round's auto start is the minimum over ranks of delivered steps.
 * Rounds alternate sync=normal and sync=full. The delays come from ZEPHON_KILL_SEED
 * (default 1, printed on failure); where a kill lands still depends on the scheduler.
 */
#include "test_journal_util.h"

#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include <sqlite3.h>

#include "check.h"
#include "clock.h"
#include "delivery.h"
#include "test_layout.h"

#define ROUNDS 20
#define THREADS 8
#define W 6
#define B 12            /* share 2, m 1: A = 2 micro-batches per rank per step */

/* kind MSG_CLAIM: the claim (step, micro) was received; MSG_DURABLE: every claim of
 * rank before (step, micro) is delivered and durable. */
enum { MSG_CLAIM, MSG_DURABLE };
struct msg {
	uint64_t kind, rank, step, micro;
};

static struct journal *cj;
static struct layout cl;
static int out_fd;
/* per rank: which claims were finished (claim index from S0), under dlock */
static pthread_mutex_t dlock = PTHREAD_MUTEX_INITIALIZER;
static struct delivery dv[W];

/* Finish claim m of a reader: the rank's delivered prefix, made durable. */
static void finish(const struct msg *m)
{
	uint64_t ci, prefix;
	struct msg d = { MSG_DURABLE, m->rank, 0, 0 };

	if (layout_pos_ci(&cl, m->step, m->micro, &ci))
		_exit(83);
	pthread_mutex_lock(&dlock);
	if (delivery_mark(&dv[m->rank], ci) < 0)
		_exit(84);
	prefix = dv[m->rank].prefix;
	layout_ci_pos(&cl, prefix, &d.step, &d.micro);
	/* under the lock: a report never goes behind one already made */
	if (journal_delivered(cj, m->rank, d.step, d.micro))
		_exit(85);
	pthread_mutex_unlock(&dlock);
	if (journal_sync_delivered(cj, m->rank))
		_exit(86);
	if (write(out_fd, &d, sizeof(d)) != (ssize_t)sizeof(d))
		_exit(87);
}

static void *claimer(void *arg)
{
	uintptr_t t = (uintptr_t)arg;
	struct msg m;

	for (;;) {
		int rc;

		if (t < 4) {
			m.rank = t;
			if (journal_cursor(cj, m.rank, &m.step, &m.micro))
				_exit(80);
			rc = journal_claim(cj, m.rank, m.step, m.micro);
		} else {
			m.rank = 4 + (t & 1);
			rc = journal_claim_next(cj, m.rank, &m.step, &m.micro);
		}
		if (rc)
			_exit(81);
		m.kind = MSG_CLAIM;
		if (write(out_fd, &m, sizeof(m)) != (ssize_t)sizeof(m))
			_exit(82);
		finish(&m);
	}
	return NULL;
}

static void child(const char *path, const struct journal_ident *id, enum journal_sync sync)
{
	struct layout l = test_layout(W, B, 1, 0, 0);
	pthread_t th[THREADS];
	char err[512];
	struct msg start;

	if (journal_open(path, id, sync, &cj, err, sizeof(err))) {
		fprintf(stderr, "child: %s\n", err);
		_exit(70);
	}
	if (start_text(cj, "auto", layout_world_size(&l), layout_global_batch(&l), layout_micro_batch(&l), "", &l))
		_exit(71);
	cl = l;
	journal_track_delivery(cj);
	for (int r = 0; r < W; r++) {
		uint64_t ci;

		if (layout_pos_ci(&cl, layout_start_step(&l), 0, &ci))
			_exit(74);
		delivery_init(&dv[r], ci);
	}
	start.rank = UINT64_MAX; /* the start message: step = S0 */
	start.step = layout_start_step(&l);
	start.micro = layout_start_samples(&l);
	if (write(out_fd, &start, sizeof(start)) != (ssize_t)sizeof(start))
		_exit(72);
	for (uintptr_t t = 0; t < THREADS; t++)
		if (pthread_create(&th[t], NULL, claimer, (void *)t))
			_exit(73);
	for (;;)
		pause();
}

static double now_ms(void)
{
	return clock_mono_s() * 1e3;
}

static int pos_less(uint64_t s1, uint64_t m1, uint64_t s2, uint64_t m2)
{
	return s1 < s2 || (s1 == s2 && m1 < m2);
}

static int cmp_msg(const void *a, const void *b)
{
	const struct msg *x = a, *y = b;

	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return x->micro < y->micro ? -1 : x->micro > y->micro;
}

static void integrity_ok(const char *path)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	const char *res = NULL;

	/* read-write and EXCLUSIVE like the mount: that replays the WAL without -shm */
	REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, "PRAGMA locking_mode = EXCLUSIVE", NULL, NULL, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK);
	CHECK(sqlite3_step(st) == SQLITE_ROW);
	res = (const char *)sqlite3_column_text(st, 0);
	if (!res || strcmp(res, "ok"))
		fprintf(stderr, "integrity_check of %s: %s\n", path, res ? res : "(null)");
	CHECK(res && !strcmp(res, "ok"));
	sqlite3_finalize(st);
	sqlite3_close(db);
}

int main(void)
{
	char *dir = scratch_dir("kill"), *path = path_in(dir, "journal.sqlite");
	struct journal_ident id = ident_of(FP_A, 3, ORDER_SHUFFLE_GLOBAL, 1000);
	uint64_t expect_s0 = 0, total = 0, inflight_total = 0, durable_total = 0, repeats = 0;
	const char *seed_env = getenv("ZEPHON_KILL_SEED");
	uint64_t seed0 = seed_env ? strtoull(seed_env, NULL, 0) : 1, seed = seed0;

	printf("kill: seed %" PRIu64 "\n", seed0);
	for (int round = 0; round < ROUNDS; round++) {
		enum journal_sync sync = round % 2 ? JOURNAL_SYNC_FULL : JOURNAL_SYNC_NORMAL;
		int fds[2], status;
		struct msg *got = NULL;
		size_t n = 0, cap = 0, bytes = 0;
		struct msg start;
		struct journal *j;
		struct journal_layout *ls;
		struct journal_cursor *cs;
		size_t nls, ncs;
		char err[512];
		uint64_t minstep = UINT64_MAX;
		double deadline;
		int killed;
		pid_t pid;

		REQUIRE(pipe(fds) == 0);
		pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0) {
			close(fds[0]);
			out_fd = fds[1];
			child(path, &id, sync);
		}
		close(fds[1]);
		/* wait for the start, let the threads run a random while, kill */
		REQUIRE(read(fds[0], &start, sizeof(start)) == (ssize_t)sizeof(start));
		CHECK(start.rank == UINT64_MAX);
		CHECK_EQ_U64(start.step, expect_s0);
		CHECK_EQ_U64(start.micro, expect_s0 * B);
		seed = seed * 6364136223846793005u + 1442695040888963407u;
		deadline = now_ms() + 1 + (double)((seed >> 33) % 40);
		killed = 0;
		for (;;) {
			ssize_t k;

			/* keep reading while the threads run (a full pipe would stall them) */
			if (!killed) {
				struct pollfd pfd = { fds[0], POLLIN, 0 };
				double left = deadline - now_ms();

				if (left <= 0 || poll(&pfd, 1, (int)left + 1) == 0) {
					REQUIRE(kill(pid, SIGKILL) == 0);
					killed = 1;
				}
			}

			if (n == cap) {
				cap = cap ? cap * 2 : 4096;
				got = realloc(got, cap * sizeof(*got));
				REQUIRE(got);
			}
			k = read(fds[0], (char *)&got[n] + bytes, sizeof(*got) - bytes);
			if (k <= 0)
				break;
			bytes += (size_t)k;
			if (bytes == sizeof(*got)) {
				bytes = 0;
				n++;
			}
		}
		close(fds[0]);
		REQUIRE(waitpid(pid, &status, 0) == pid);
		CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

		integrity_ok(path);
		REQUIRE(journal_open_readonly(path, &j, err, sizeof(err)) == 0);
		REQUIRE(journal_layouts(j, &ls, &nls) == 0 && nls == (size_t)round + 1);
		REQUIRE(journal_cursors(j, ls[nls - 1].id, &cs, &ncs) == 0 && ncs == W);
		CHECK_EQ_U64(layout_start_step(&ls[nls - 1].layout), expect_s0);
		journal_close(j);

		qsort(got, n, sizeof(*got), cmp_msg);
		/* the durable prefixes (sorted after the claims): the furthest per rank */
		uint64_t durable[W] = { 0 }, received_end[W] = { 0 };
		size_t nclaims = n;

		for (size_t i = 0; i < n; i++) {
			REQUIRE(got[i].rank < W);
			if (got[i].kind == MSG_DURABLE) {
				uint64_t c = (got[i].step - expect_s0) * 2 + got[i].micro;

				nclaims = i < nclaims ? i : nclaims;
				durable[got[i].rank] = c > durable[got[i].rank] ? c : durable[got[i].rank];
			}
		}
		n = nclaims;
		for (size_t i = 0; i < n; i++) {
			uint64_t c = (got[i].step - expect_s0) * 2 + got[i].micro + 1;

			received_end[got[i].rank] = c > received_end[got[i].rank] ? c :
						    received_end[got[i].rank];
		}
		for (size_t i = 0; i < n; i++) {
			REQUIRE(got[i].rank < W);
			/* received => journaled */
			CHECK(pos_less(got[i].step, got[i].micro, cs[got[i].rank].step,
				       cs[got[i].rank].micro));
			CHECK(got[i].step >= expect_s0);
			/* never handed out twice */
			if (i)
				CHECK(cmp_msg(&got[i - 1], &got[i]) != 0);
		}
		for (uint64_t r = 0; r < W; r++) {
			/* journaled positions from S0 to the cursor vs the ones reported */
			uint64_t journaled = (cs[r].step - expect_s0) * 2 + cs[r].micro, reported = 0;

			for (size_t i = 0; i < n; i++)
				reported += got[i].rank == r;
			uint64_t delivered = (cs[r].delivered_step - expect_s0) * 2 +
					     cs[r].delivered_micro;

			CHECK(journaled >= reported);
			/* in flight at the kill, and one claim a sync reserved */
			CHECK(journaled - reported <= (r < 4 ? 1 : 2) + 1);
			inflight_total += journaled - reported;
			/* finished and durable => delivered after the kill: never served again */
			repeats += durable[r] > delivered ? durable[r] - delivered : 0;
			durable_total += durable[r];
			/* never past what its readers received: no skip */
			CHECK(delivered <= received_end[r]);
			minstep = cs[r].delivered_step < minstep ? cs[r].delivered_step : minstep;
		}
		CHECK_EQ_U64(repeats, 0);
		total += n;
		if (getenv("ZEPHON_KILL_VERBOSE"))
			fprintf(stderr, "round %d (%s): %zu received, cursors %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", round, sync ? "full" : "normal", n, cs[0].step, cs[1].step, cs[2].step, cs[3].step, cs[4].step, cs[5].step);
		expect_s0 = minstep;
		free(cs);
		free(ls);
		free(got);
	}
	printf("kill: %d rounds, %" PRIu64 " claims received by readers, %" PRIu64
	       " journaled but in flight at a kill, %" PRIu64 " finished and durable, %"
	       PRIu64 " of them served again, resume at step %" PRIu64 "\n",
	       ROUNDS, total, inflight_total, durable_total, repeats, expect_s0);
	if (!check_failures)
		rm_rf(dir);
	else
		fprintf(stderr, "journal kept in %s; the delays again: ZEPHON_KILL_SEED=%" PRIu64
			"\n", dir, seed0);
	free(path);
	free(dir);
	return check_status();
}
