/*
 * bench_prp: ns per index of the order (gsn -> sample id) at N = 10^9, and the resident
 * memory it costs. A benchmark, not a test: it prints, it never fails on a timing.
 * usage: bench_prp [N] [COUNT]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "clock.h"
#include "order.h"

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kib = strtol(line + 6, NULL, 10);
	fclose(f);
	return kib;
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : UINT64_C(1000000000);
	uint64_t count = argc > 2 ? strtoull(argv[2], NULL, 10) : UINT64_C(20000000);
	struct order o;
	uint64_t sink = 0, batch[1024];
	double t0, t1, t2;
	struct rusage ru;

	if (order_init(&o, n, 1234, ORDER_SHUFFLE_GLOBAL)) {
		fprintf(stderr, "bench_prp: bad N\n");
		return 2;
	}
	/* Random access: each gsn on its own (what a claim at an arbitrary resume point does). */
	t0 = clock_mono_s();
	for (uint64_t i = 0; i < count; i++)
		sink += order_sample(&o, (i * UINT64_C(2654435761)) % (n * 4), NULL);
	t1 = clock_mono_s();
	/* Sequential batches through order_fill (what a micro-batch does). */
	for (uint64_t i = 0; i < count; i += 1024) {
		order_fill(&o, n * 3 + i, 1024, batch);
		sink += batch[i % 1024];
	}
	t2 = clock_mono_s();
	getrusage(RUSAGE_SELF, &ru);
	printf("N=%" PRIu64 " random: %.1f ns/index, sequential: %.1f ns/index, "
	       "RSS %ld KiB (peak %ld KiB) [sink %" PRIu64 "]\n",
	       n, (t1 - t0) * 1e9 / (double)count, (t2 - t1) * 1e9 / (double)count,
	       rss_kib(), ru.ru_maxrss, sink & 1);
	return 0;
}
