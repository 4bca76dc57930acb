/*
 * readloop: the one reader loop of benchmarks B1, B2 and B4 (tests/bench/run), so that
 * Zephon's `next`, the static FUSE file (fuse_static) and a page-cached file are read
 * by exactly the same code.
 *
 * One thread per PATH argument (give a path several times for several readers of one
 * file). Each thread repeats: open(PATH, O_RDONLY); read FIRST bytes; read BS bytes at a
 * time until EOF; close. It records the open() latency and the open->first byte latency
 * (open() start to the return of the first read that returned data) of every cycle.
 * The first WARMUP cycles of each thread are not counted; then all threads start
 * together and run COUNT cycles each, or for SECONDS of wall time.
 *
 * usage: readloop [-b BS] [-f FIRST] [-n COUNT | -t SECONDS] [-w WARMUP] [-e BYTES] [-l]
 *                 [-p USEC] PATH...
 *   -b BS       read size in bytes (default 1 MiB); K/M suffixes accepted
 *   -f FIRST    size of the first read of each open (default BS)
 *   -e BYTES    every open must read exactly BYTES (exit 1 otherwise)
 *   -l          also count '\n' bytes (records of the lines encoding)
 *   -p USEC     sleep USEC microseconds after each cycle (a paced reader: a training
 *               step that computes between batches; latency then measures the hand-over
 *               of a prefetched batch rather than the producer's throughput)
 * An open() failing with ENODATA (end of a finite Zephon stream) ends that thread.
 * Prints one JSON object on stdout: bytes/s, opens/s, records/s and latency
 * percentiles in microseconds. A benchmark, not a test: it never judges timings.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct loop_opts {
	size_t bs, first;
	uint64_t count;      /* cycles per thread, 0 = use seconds */
	double seconds;
	uint64_t warmup;
	int64_t expect;      /* -1: no check */
	int lines;
	unsigned pause_us;
};

struct reader {
	pthread_t tid;
	const char *path;
	const struct loop_opts *o;
	pthread_barrier_t *start;
	double *open_us, *first_us; /* per counted cycle */
	uint64_t n, cap;
	uint64_t bytes, records;
	int err;                    /* errno of a failure, 0 = fine */
	int eod;                    /* stopped at ENODATA */
	double t_end;
};


static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	else if (*end)
		v = 0;
	return (size_t)v;
}

static uint64_t count_newlines(const char *p, size_t n)
{
	uint64_t c = 0;
	const char *end = p + n;

	while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		c++;
		p++;
	}
	return c;
}

/* One open..close cycle. 0, or an errno (ENODATA: end of stream). */
static int cycle(struct reader *r, char *buf, int counted)
{
	double t0 = now(), t_open, t_first = 0;
	uint64_t got = 0, recs = 0;
	size_t want = r->o->first;
	ssize_t n;
	int fd;

	fd = open(r->path, O_RDONLY);
	if (fd < 0)
		return errno;
	t_open = now();
	for (;;) {
		n = read(fd, buf, want);
		if (n < 0) {
			int e = errno;

			close(fd);
			return e;
		}
		if (n == 0)
			break;
		if (!t_first)
			t_first = now();
		got += (uint64_t)n;
		if (r->o->lines)
			recs += count_newlines(buf, (size_t)n);
		want = r->o->bs;
	}
	close(fd);
	if (r->o->expect >= 0 && got != (uint64_t)r->o->expect) {
		fprintf(stderr, "readloop: %s: read %" PRIu64 " bytes in one open, expected %"
			PRId64 "\n", r->path, got, r->o->expect);
		return EBADMSG;
	}
	if (!counted)
		return 0;
	if (r->n == r->cap) {
		uint64_t cap = r->cap ? r->cap * 2 : 4096;
		double *a = realloc(r->open_us, cap * sizeof(double));
		double *b = a ? realloc(r->first_us, cap * sizeof(double)) : NULL;

		if (a)
			r->open_us = a;
		if (!b)
			return ENOMEM;
		r->first_us = b;
		r->cap = cap;
	}
	r->open_us[r->n] = (t_open - t0) * 1e6;
	r->first_us[r->n] = ((t_first ? t_first : now()) - t0) * 1e6;
	r->n++;
	r->bytes += got;
	r->records += recs;
	return 0;
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char *buf = NULL;
	size_t bufsize = r->o->bs > r->o->first ? r->o->bs : r->o->first;
	double deadline;
	int e = 0;

	if (posix_memalign((void **)&buf, 4096, bufsize)) {
		r->err = ENOMEM;
		buf = NULL;
	}
	for (uint64_t i = 0; buf && !r->err && i < r->o->warmup; i++) {
		e = cycle(r, buf, 0);
		if (e == ENODATA)
			r->eod = 1;
		else if (e)
			r->err = e;
		if (e)
			break;
	}
	pthread_barrier_wait(r->start);
	deadline = now() + r->o->seconds;
	while (buf && !r->err && !r->eod) {
		if (r->o->count && r->n >= r->o->count)
			break;
		if (!r->o->count && now() >= deadline)
			break;
		e = cycle(r, buf, 1);
		if (e == ENODATA)
			r->eod = 1;
		else if (e)
			r->err = e;
		if (r->o->pause_us)
			usleep(r->o->pause_us);
	}
	r->t_end = now();
	free(buf);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static double pct(const double *v, uint64_t n, double p)
{
	uint64_t k;

	if (!n)
		return 0;
	k = (uint64_t)(p / 100.0 * (double)n + 0.999999);
	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return v[k - 1];
}

static int usage(void)
{
	fprintf(stderr, "usage: readloop [-b BS] [-f FIRST] [-n COUNT | -t SECONDS] "
		"[-w WARMUP] [-e BYTES] [-l] [-p USEC] PATH...\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct loop_opts o = { 1 << 20, 0, 0, 3.0, 2, -1, 0, 0 };
	pthread_barrier_t start;
	struct reader *rs;
	double *opens, *firsts, t_start, t_end = 0, secs;
	uint64_t total = 0, bytes = 0, records = 0;
	int c, nr, failed = 0, eod = 0;

	while ((c = getopt(argc, argv, "b:f:n:t:w:e:lp:")) != -1) {
		switch (c) {
		case 'b': o.bs = parse_size(optarg); break;
		case 'f': o.first = parse_size(optarg); break;
		case 'n': o.count = strtoull(optarg, NULL, 10); break;
		case 't': o.seconds = strtod(optarg, NULL); break;
		case 'w': o.warmup = strtoull(optarg, NULL, 10); break;
		case 'e': o.expect = (int64_t)parse_size(optarg); break;
		case 'l': o.lines = 1; break;
		case 'p': o.pause_us = (unsigned)strtoul(optarg, NULL, 10); break;
		default: return usage();
		}
	}
	if (optind >= argc || o.bs == 0 || (o.count == 0 && o.seconds <= 0))
		return usage();
	if (!o.first)
		o.first = o.bs;
	nr = argc - optind;
	rs = calloc((size_t)nr, sizeof(*rs));
	if (!rs || pthread_barrier_init(&start, NULL, (unsigned)nr + 1))
		return 1;
	for (int i = 0; i < nr; i++) {
		rs[i].path = argv[optind + i];
		rs[i].o = &o;
		rs[i].start = &start;
		if (pthread_create(&rs[i].tid, NULL, reader_main, &rs[i])) {
			fprintf(stderr, "readloop: cannot start a thread\n");
			return 1;
		}
	}
	pthread_barrier_wait(&start); /* every warm-up is done */
	t_start = now();
	for (int i = 0; i < nr; i++) {
		pthread_join(rs[i].tid, NULL);
		total += rs[i].n;
		bytes += rs[i].bytes;
		records += rs[i].records;
		if (rs[i].t_end > t_end)
			t_end = rs[i].t_end;
		eod |= rs[i].eod;
		if (rs[i].err) {
			fprintf(stderr, "readloop: %s: %s\n", rs[i].path, strerror(rs[i].err));
			failed = 1;
		}
	}
	secs = t_end - t_start;
	opens = malloc((total + 1) * sizeof(double));
	firsts = malloc((total + 1) * sizeof(double));
	if (!opens || !firsts)
		return 1;
	total = 0;
	for (int i = 0; i < nr; i++) {
		memcpy(opens + total, rs[i].open_us, rs[i].n * sizeof(double));
		memcpy(firsts + total, rs[i].first_us, rs[i].n * sizeof(double));
		total += rs[i].n;
	}
	qsort(opens, total, sizeof(double), cmp_double);
	qsort(firsts, total, sizeof(double), cmp_double);
	printf("{\"readers\": %d, \"bs\": %zu, \"first\": %zu, \"opens\": %" PRIu64
	       ", \"bytes\": %" PRIu64 ", \"records\": %" PRIu64 ", \"seconds\": %.6f"
	       ", \"bytes_per_s\": %.1f, \"opens_per_s\": %.1f, \"records_per_s\": %.1f"
	       ", \"open_p50_us\": %.1f, \"open_p99_us\": %.1f"
	       ", \"first_p50_us\": %.1f, \"first_p99_us\": %.1f, \"first_max_us\": %.1f"
	       ", \"end_of_stream\": %s}\n",
	       nr, o.bs, o.first, total, bytes, records, secs,
	       secs > 0 ? (double)bytes / secs : 0, secs > 0 ? (double)total / secs : 0,
	       secs > 0 ? (double)records / secs : 0,
	       pct(opens, total, 50), pct(opens, total, 99),
	       pct(firsts, total, 50), pct(firsts, total, 99), pct(firsts, total, 100),
	       eod ? "true" : "false");
	return failed;
}
