/*
 * bench_encode: the daemon-side cost of a batch without FUSE: order_fill + encode_batch
 * of micro-batches of m samples in the global shuffled order, as the prefetch workers do.
 * Separates Zephon's own work (read/decode, checksum, encode) from the FUSE transport
 * when a B1/B2 target is missed. A benchmark: prints, never judges.
 *
 * usage: bench_encode DATASET FORMAT M [SECONDS] [THREADS] [fresh]
 * With "fresh" every batch gets a new buffer that is freed after it, as the mount's
 * batches are (handed to the reader, freed on release); otherwise one buffer is reused.
 * Prints one JSON object: batches/s, samples/s, bytes/s over all threads, and the same
 * per CPU-second the threads used (the cost, robust to other load on the machine).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "dataset.h"
#include "encode.h"
#include "order.h"

struct worker {
	pthread_t tid;
	const struct dataset *ds;
	enum encode_format f;
	uint64_t m, first_gsn;
	double seconds;
	int fresh;
	uint64_t batches, bytes;
	double cpu;     /* CPU seconds the thread used: robust to a shared, busy machine */
	int err;
};

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	const struct dataset_info *info = dataset_info(w->ds);
	struct sample_reader *r = sample_reader_new(w->ds);
	uint64_t *ids = malloc(w->m * sizeof(*ids)), gsn = w->first_gsn, bad;
	struct buf out = BUF_INIT;
	struct order o;
	double end = clock_mono_s() + w->seconds, cpu0 = cpu_now();

	if (!r || !ids || order_init(&o, info->samples, 0, ORDER_SHUFFLE_GLOBAL)) {
		w->err = 1;
		goto out;
	}
	while (clock_mono_s() < end) {
		if (order_fill(&o, gsn, w->m, ids)) {
			w->err = 1;
			break;
		}
		out.len = 0;
		if (encode_batch(&(struct encode_in){ r, info, w->f, ids, w->m }, &out, &bad)) {
			fprintf(stderr, "bench_encode: batch at gsn %" PRIu64 " failed (sample %"
				PRIu64 ")\n", gsn, bad);
			w->err = 1;
			break;
		}
		gsn += w->m;
		w->batches++;
		w->bytes += out.len;
		if (w->fresh)
			buf_release(&out);
	}
out:
	w->cpu = cpu_now() - cpu0;
	buf_release(&out);
	free(ids);
	if (r)
		sample_reader_free(r);
	return NULL;
}

int main(int argc, char **argv)
{
	struct dataset *ds;
	enum encode_format f;
	char err[512];
	uint64_t m, batches = 0, bytes = 0;
	double seconds, t0, secs, cpu = 0;
	int threads, failed = 0;

	if (argc < 4 || encode_format_parse(argv[2], &f)) {
		fprintf(stderr, "usage: bench_encode DATASET lines|tar|npy|bin M [SECONDS] "
			"[THREADS] [fresh]\n");
		return 2;
	}
	m = strtoull(argv[3], NULL, 10);
	seconds = argc > 4 ? strtod(argv[4], NULL) : 3.0;
	threads = argc > 5 ? atoi(argv[5]) : 1;
	if (m == 0 || threads < 1 || threads > 64) {
		fprintf(stderr, "bench_encode: M and THREADS must be at least 1\n");
		return 2;
	}
	if (dataset_open(argv[1], &ds, err, sizeof(err))) {
		fprintf(stderr, "bench_encode: %s\n", err);
		return 1;
	}
	struct worker *w = calloc((size_t)threads, sizeof(*w));

	t0 = clock_mono_s();
	for (int i = 0; i < threads; i++) {
		w[i] = (struct worker){ .ds = ds, .f = f, .m = m, .seconds = seconds,
					.first_gsn = (uint64_t)i * (UINT64_C(1) << 40),
					.fresh = argc > 6 && !strcmp(argv[6], "fresh") };
		pthread_create(&w[i].tid, NULL, work, &w[i]);
	}
	for (int i = 0; i < threads; i++) {
		pthread_join(w[i].tid, NULL);
		batches += w[i].batches;
		bytes += w[i].bytes;
		failed |= w[i].err;
		cpu += w[i].cpu;
	}
	secs = clock_mono_s() - t0;
	printf("{\"format\": \"%s\", \"m\": %" PRIu64 ", \"threads\": %d, \"batches_per_s\": %.1f"
	       ", \"samples_per_s\": %.1f, \"bytes_per_s\": %.1f, \"batch_bytes\": %.1f"
	       ", \"cpu_s\": %.3f, \"samples_per_cpu_s\": %.1f, \"bytes_per_cpu_s\": %.1f}\n",
	       argv[2], m, threads, (double)batches / secs, (double)(batches * m) / secs,
	       (double)bytes / secs, batches ? (double)bytes / (double)batches : 0.0, cpu,
	       cpu > 0 ? (double)(batches * m) / cpu : 0.0, cpu > 0 ? (double)bytes / cpu : 0.0);
	free(w);
	dataset_close(ds);
	return failed;
}
