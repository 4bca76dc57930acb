/*
 * bench_journal: claims per second of the cursor journal, with sync=normal and sync=full,
 * claim latency percentiles, and the journal's size on disk (database + -wal) after the
 * claims. A benchmark, not a test: it prints, it never fails on a timing.
 *
 * usage: bench_journal [DIR] [CLAIMS_NORMAL] [CLAIMS_FULL] [THREADS] [DELIVERY]
 *   DIR            where the journal is created (default $TMPDIR or /tmp; use a real
 *                  disk: on tmpfs fsync is free and sync=full means nothing)
 *   CLAIMS_NORMAL  claims with sync=normal (default 1000000)
 *   CLAIMS_FULL    claims with sync=full (default 5000: each one is an fsync)
 *   THREADS        claiming threads, each on its own ranks (default 1)
 *   DELIVERY       durable (default): as a mount does when a reader closes its batch,
 *                  each claim's delivery is reported (journal_delivered) and made
 *                  durable (journal_sync_delivered) before the rank's next claim: two
 *                  commits per claim where no other rank's delivery shares one;
 *                  lazy: reported only, written with the rank's next claim (the mount
 *                  before deliveries were durable: one commit per claim)
 * The layout is W=8, B=64, m=1 (8 claims per rank per step), claims round-robin over
 * the ranks: each claim is one journal_claim_next(), i.e. one committed transaction.
 * The latency is the claim's alone; claims/s counts the deliveries' commits too.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "journal.h"
#include "../unit/test_layout.h"

#define W 8

static long long fsize(const char *path)
{
	struct stat st;

	return stat(path, &st) ? 0 : (long long)st.st_size;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct worker {
	struct journal *j;
	struct layout l;
	uint64_t first_rank, nranks, claims;
	int durable;
	double *lat;
	int rc;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t step, micro;

	for (uint64_t i = 0; i < w->claims; i++) {
		double t0 = clock_mono_s();

		uint64_t rank = w->first_rank + i % w->nranks;

		w->rc = journal_claim_next(w->j, rank, &step, &micro);
		if (w->rc)
			return NULL;
		w->lat[i] = clock_mono_s() - t0;
		/* the reader has its batch: what a mount reports at its last byte or close */
		layout_advance(&w->l, &step, &micro);
		w->rc = journal_delivered(w->j, rank, step, micro);
		if (!w->rc && w->durable)
			w->rc = journal_sync_delivered(w->j, rank);
		if (w->rc)
			return NULL;
	}
	return NULL;
}

static int run(const char *dir, enum journal_sync sync, uint64_t claims, unsigned threads,
	       int durable)
{
	struct journal_ident id;
	struct journal *j;
	struct journal_resume auto_rule = { .rule = RESUME_AUTO, .value = 0 };
	struct rankset rs;
	struct layout l = test_layout(W, 64, 1, 0, 0);
	struct worker wk[W];
	pthread_t th[W];
	char path[4096], wal[4200], err[512], why[64], applied[256];
	double t0, dt, *lat;
	uint64_t done = 0;
	long long db_live, wal_live;

	snprintf(path, sizeof(path), "%s/bench-journal-%d.sqlite", dir, (int)getpid());
	snprintf(wal, sizeof(wal), "%s-wal", path);
	unlink(path);
	memset(&id, 0, sizeof(id));
	snprintf(id.fingerprint, sizeof(id.fingerprint), "%s", "00112233445566778899aabbccddeeff");
	id.samples = 1000000000;
	if (journal_open(path, &id, sync, &j, err, sizeof(err))) {
		fprintf(stderr, "bench_journal: %s\n", err);
		return 1;
	}
	if (rankset_parse(NULL, W, &rs, why, sizeof(why)) ||
	    journal_start(j, &auto_rule, &rs, &l, applied, sizeof(applied))) {
		fprintf(stderr, "bench_journal: cannot start a layout\n");
		return 1;
	}
	rankset_release(&rs);
	journal_track_delivery(j);
	lat = calloc(claims, sizeof(*lat));
	if (!lat)
		return 1;
	if (threads < 1 || threads > W || W % threads)
		threads = 1;
	t0 = clock_mono_s();
	for (unsigned t = 0; t < threads; t++) {
		wk[t] = (struct worker){ j, l, t * (W / threads), W / threads, claims / threads,
					 durable, lat + t * (claims / threads), 0 };
		pthread_create(&th[t], NULL, work, &wk[t]);
	}
	for (unsigned t = 0; t < threads; t++) {
		pthread_join(th[t], NULL);
		if (wk[t].rc) {
			fprintf(stderr, "bench_journal: claim failed: %s\n", strerror(-wk[t].rc));
			return 1;
		}
		done += wk[t].claims;
	}
	dt = clock_mono_s() - t0;
	db_live = fsize(path);
	wal_live = fsize(wal);
	qsort(lat, done, sizeof(*lat), cmp_double);
	printf("sync=%-6s delivery=%-7s threads=%u claims=%-8" PRIu64 " %9.0f claims/s  latency "
	       "us: p50 %.1f p99 %.1f p99.9 %.1f max %.1f\n",
	       sync == JOURNAL_SYNC_FULL ? "full" : "normal", durable ? "durable" : "lazy",
	       threads, done, (double)done / dt, lat[done / 2] * 1e6, lat[done * 99 / 100] * 1e6,
	       lat[done * 999 / 1000] * 1e6, lat[done - 1] * 1e6);
	printf("              journal size while mounted: %lld B database + %lld B wal = %lld B\n",
	       db_live, wal_live, db_live + wal_live);
	journal_close(j);
	printf("              after a clean close:        %lld B database + %lld B wal\n",
	       fsize(path), fsize(wal));
	unlink(path);
	free(lat);
	return 0;
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");
	const char *dir = argc > 1 ? argv[1] : tmp && *tmp ? tmp : "/tmp";
	uint64_t normal = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
	uint64_t full = argc > 3 ? strtoull(argv[3], NULL, 10) : 5000;
	unsigned threads = argc > 4 ? (unsigned)atoi(argv[4]) : 1;
	int durable = argc > 5 ? strcmp(argv[5], "lazy") != 0 : 1;

	printf("bench_journal: journal in %s, layout W=8 B=64 m=1\n", dir);
	if (normal && run(dir, JOURNAL_SYNC_NORMAL, normal, threads, durable))
		return 1;
	if (full && run(dir, JOURNAL_SYNC_FULL, full, threads, durable))
		return 1;
	return 0;
}
