/*
 * bench_scale: how the costs that a larger job meets grow (issue 27, part 2), simulated
 * on one machine with no data and no FUSE. A benchmark, not a test: it prints, it never
 * fails on a timing. Each row is "SERIES X VALUE UNIT", for tests/bench/scale_plot.sh.
 *
 * usage: bench_scale [DIR] [SERIES...]
 *   DIR     where the journals are written (default $TMPDIR or /tmp): a real disk
 *   SERIES  any of order, mix, resume, steps (default all)
 *
 *   order   one order of N = 10^3 .. 10^10 samples: order_init() time, the first batch
 *           (1,024 ids at gsn 0), the cost per gsn at random gsns (micro-batches of 8),
 *           and the process's peak RSS after it (the order holds O(1) state)
 *   mix     a mixture of k = 2 .. 1024 sources (MIX_MAX_SOURCES) of 10^9 samples each,
 *           equal weights: mixture_new() time, cost per gsn (random, micro-batches of
 *           8), peak RSS
 *   resume  J = 10, 100, 1000 node journals (one per node, 8 ranks each, world_size
 *           8 J), 10 layouts each with one claim per rank (10^4 layouts in all at
 *           J = 1000): the best of 3 times of
 *           journal_resume_point_files_ex() over all of them, what `zephon journal
 *           resume-point` does (the files are in the page cache); and their total size
 *   steps   one journal, world_size 1, one claim per step, 10^6 steps, a checkpoint
 *           mark every 1,000 steps: claims/s per block of 10^5 steps, database + WAL
 *           size after each block (the cursor row is updated in place; marks add rows)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../unit/xorshift.h"
#include "journal.h"
#include "mix.h"
#include "order.h"
#include "../unit/test_layout.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double peak_rss_mib(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_maxrss / 1024.0;
}

static long long fsize(const char *path)
{
	struct stat st;

	return stat(path, &st) ? 0 : (long long)st.st_size;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
	return xorshift64(&rng_state);
}

#define GSNS (1u << 18)   /* gsns per cost measurement */

static void series_order(void)
{
	uint64_t ids[1024];

	for (uint64_t n = 1000; n <= UINT64_C(10000000000); n *= 10) {
		struct order o;
		double t0 = now(), t_init, t_first, t_gsn;
		uint64_t sink = 0;

		if (order_init(&o, n, 7, ORDER_SHUFFLE_GLOBAL)) {
			fprintf(stderr, "bench_scale: order_init(%" PRIu64 ") failed\n", n);
			exit(1);
		}
		t_init = now() - t0;
		t0 = now();
		order_fill(&o, 0, 1024, ids);
		t_first = now() - t0;
		t_gsn = 1e9;
		for (int rep = 0; rep < 3; rep++) { /* best of 3: the machine is shared */
			t0 = now();
			for (unsigned i = 0; i < GSNS / 8; i++) {
				order_fill(&o, rnd() % (n * 100), 8, ids);
				sink += ids[0];
			}
			t_gsn = (now() - t0) / GSNS < t_gsn ? (now() - t0) / GSNS : t_gsn;
		}
		printf("order_init_us %" PRIu64 " %.3f us\n", n, t_init * 1e6);
		printf("order_first_batch_us %" PRIu64 " %.1f us\n", n, t_first * 1e6);
		printf("order_gsn_ns %" PRIu64 " %.1f ns\n", n, t_gsn * 1e9);
		printf("order_peak_rss_mib %" PRIu64 " %.1f MiB (%" PRIu64 ")\n", n,
		       peak_rss_mib(), sink % 2);
	}
}

static void series_mix(void)
{
	static const size_t ks[] = { 2, 10, 50, 100, 255, 1024 };
	static struct order src[MIX_MAX_SOURCES];
	static uint64_t off[MIX_MAX_SOURCES], w[MIX_MAX_SOURCES];
	uint64_t ids[8], sink = 0;

	for (size_t s = 0; s < MIX_MAX_SOURCES; s++) {
		if (order_init(&src[s], 1000000000, 100 + s, ORDER_SHUFFLE_GLOBAL))
			exit(1);
		off[s] = s * UINT64_C(1000000000);
		w[s] = 1;
	}
	for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
		struct mixture *mx;
		double t0 = now(), t_new, t_gsn;

		if (mixture_new(ks[i], src, off, w, &mx)) {
			fprintf(stderr, "bench_scale: mixture_new(%zu) failed\n", ks[i]);
			exit(1);
		}
		t_new = now() - t0;
		t_gsn = 1e9;
		for (int rep = 0; rep < 3; rep++) {
			t0 = now();
			for (unsigned g = 0; g < GSNS / 8; g++) {
				mixture_fill(mx, rnd() % (UINT64_C(1) << 40), 8, ids);
				sink += ids[0];
			}
			t_gsn = (now() - t0) / GSNS < t_gsn ? (now() - t0) / GSNS : t_gsn;
		}
		printf("mix_new_us %zu %.1f us\n", ks[i], t_new * 1e6);
		printf("mix_gsn_ns %zu %.1f ns\n", ks[i], t_gsn * 1e9);
		printf("mix_peak_rss_mib %zu %.1f MiB (%" PRIu64 ")\n", ks[i], peak_rss_mib(),
		       sink % 2);
		mixture_free(mx);
	}
}

static struct journal *open_journal(const char *path, enum journal_sync sync)
{
	struct journal_ident id;
	struct journal *j;
	char err[512];

	memset(&id, 0, sizeof(id));
	snprintf(id.fingerprint, sizeof(id.fingerprint), "%s", "00112233445566778899aabbccddeeff");
	id.seed = 1;
	id.samples = UINT64_C(1000000000);
	unlink(path);
	if (journal_open(path, &id, sync, &j, err, sizeof(err))) {
		fprintf(stderr, "bench_scale: %s\n", err);
		exit(1);
	}
	return j;
}

/* One node's journal: `layouts` layouts of world_size W (this node serves ranks
 * [first, first + 8)), each started at samples:G@S with a few claims per rank. */
static void make_node_journal(const char *path, uint64_t w, uint64_t first, int layouts)
{
	struct journal *j = open_journal(path, JOURNAL_SYNC_NORMAL);
	uint64_t ranks[8], s, m;
	struct rankset rs = { ranks, 8 };
	char applied[256];

	for (int r = 0; r < 8; r++)
		ranks[r] = first + (uint64_t)r;
	for (int k = 0; k < layouts; k++) {
		struct layout l = test_layout(w, w * 4, 1, 0, 0);
		struct journal_resume rule = { RESUME_SAMPLES, (uint64_t)k * 100 * w * 4, 1,
					       (uint64_t)k * 100 };

		if (journal_start(j, &rule, &rs, &l, applied, sizeof(applied))) {
			fprintf(stderr, "bench_scale: journal_start failed\n");
			exit(1);
		}
		for (int c = 0; c < 8; c++)
			journal_claim_next(j, ranks[c], &s, &m);
	}
	journal_close(j);
}

static void series_resume(const char *dir)
{
	static const int js[] = { 10, 100, 1000 };

	for (size_t i = 0; i < sizeof(js) / sizeof(js[0]); i++) {
		int n = js[i];
		char **paths = calloc((size_t)n, sizeof(char *));
		struct journal_point pt;
		char err[512];
		long long bytes = 0;
		double t0 = now(), t_make, best = 1e9;

		for (int k = 0; k < n; k++) {
			if (asprintf(&paths[k], "%s/scale-node-%04d.sqlite", dir, k) < 0)
				exit(1);
			make_node_journal(paths[k], 8 * (uint64_t)n, 8 * (uint64_t)k, 10);
			bytes += fsize(paths[k]);
		}
		t_make = now() - t0;
		for (int rep = 0; rep < 3; rep++) {
			t0 = now();
			if (journal_resume_point_files_ex((const char *const *)paths, (size_t)n, &pt,
							  err, sizeof(err))) {
				fprintf(stderr, "bench_scale: resume point: %s\n", err);
				exit(1);
			}
			best = now() - t0 < best ? now() - t0 : best;
		}
		printf("resume_point_s %d %.3f s (layouts %d, world_size %d, point samples:%"
		       PRIu64 "@%" PRIu64 ", made in %.1f s)\n", n, best, 10 * n, 8 * n,
		       pt.samples, pt.step, t_make);
		printf("resume_journals_bytes %d %lld B\n", n, bytes);
		for (int k = 0; k < n; k++) {
			unlink(paths[k]);
			free(paths[k]);
		}
		free(paths);
	}
}

static void series_steps(const char *dir)
{
	char path[4096], wal[4200];
	struct journal *j;
	struct journal_resume rule = { RESUME_AUTO, 0, 0, 0 };
	uint64_t ranks[1] = { 0 }, s, m;
	struct rankset rs = { ranks, 1 };
	struct layout l = test_layout(1, 8, 8, 0, 0);
	char applied[256];

	snprintf(path, sizeof(path), "%s/scale-steps.sqlite", dir);
	snprintf(wal, sizeof(wal), "%s-wal", path);
	j = open_journal(path, JOURNAL_SYNC_NORMAL);
	if (journal_start(j, &rule, &rs, &l, applied, sizeof(applied)))
		exit(1);
	journal_track_delivery(j);
	for (uint64_t block = 0; block < 10; block++) {
		double t0 = now();

		for (uint64_t i = 0; i < 100000; i++) {
			if (journal_claim_next(j, 0, &s, &m) ||
			    journal_delivered(j, 0, s + 1, 0) || journal_sync_delivered(j, 0))
				exit(1);
			if ((s + 1) % 1000 == 0 && journal_checkpoint(j, s + 1))
				exit(1);
		}
		printf("steps_claims_per_s %" PRIu64 " %.0f claims/s\n", (block + 1) * 100000,
		       100000 / (now() - t0));
		printf("steps_journal_bytes %" PRIu64 " %lld B (database %lld + wal %lld)\n",
		       (block + 1) * 100000, fsize(path) + fsize(wal), fsize(path), fsize(wal));
	}
	journal_close(j);
	printf("steps_closed_bytes 1000000 %lld B (after a clean close)\n", fsize(path));
	unlink(path);
}

static int wanted(int argc, char **argv, const char *name)
{
	if (argc <= 2)
		return 1;
	for (int i = 2; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");
	const char *dir = argc > 1 ? argv[1] : tmp && *tmp ? tmp : "/tmp";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (wanted(argc, argv, "order"))
		series_order();
	if (wanted(argc, argv, "mix"))
		series_mix();
	if (wanted(argc, argv, "resume"))
		series_resume(dir);
	if (wanted(argc, argv, "steps"))
		series_steps(dir);
	return 0;
}
