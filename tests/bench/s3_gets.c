/* s3_gets: the request rate of core/remote's S3 client against a server: N ranged GETs of
 * LEN bytes at random offsets of one object, CONNS in flight (endpoint and credentials
 * from the AWS environment, s3.h). A benchmark, never a test (tests/bench/RESULTS.md,
 * "Object storage").
 *   s3_gets BUCKET KEY OBJECT_SIZE N LEN CONNS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "s3.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static long left, failed;

static void done(struct s3_req *q, void *ctx)
{
	(void)ctx;
	pthread_mutex_lock(&lock);
	left--;
	failed += q->rc != 0;
	pthread_cond_signal(&cond);
	pthread_mutex_unlock(&lock);
}

int main(int argc, char **argv)
{
	struct s3_config c;
	struct s3_client *cl;
	struct s3_req *q;
	char err[512], *buf;
	long size, n, len;
	double t;

	if (argc != 7) {
		fprintf(stderr, "usage: s3_gets BUCKET KEY OBJECT_SIZE N LEN CONNS\n");
		return 2;
	}
	size = atol(argv[3]), n = atol(argv[4]), len = atol(argv[5]);
	if (s3_config_load(&c, err, sizeof(err)) || size <= len || n < 1 || len < 1 ||
	    s3_client_new(&c, (unsigned)atoi(argv[6]), 60, &cl)) {
		fprintf(stderr, "s3_gets: %s\n", err);
		return 1;
	}
	q = calloc((size_t)n, sizeof(*q));
	buf = malloc((size_t)(n * len));
	if (!q || !buf)
		return 1;
	left = n;
	t = clock_mono_s();
	for (long i = 0; i < n; i++) {
		q[i] = (struct s3_req){ .method = S3_GET, .bucket = argv[1], .key = argv[2],
					.off = (uint64_t)(random() % (size - len)), .len = (uint64_t)len,
					.dst = buf + i * len, .done = done };
		s3_submit(cl, &q[i]);
	}
	pthread_mutex_lock(&lock);
	while (left)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	t = clock_mono_s() - t;
	printf("%ld GETs of %ld B, %s in flight: %.2f s, %.0f GETs/s, %.1f MB/s, %ld failed\n", n,
	       len, argv[6], t, (double)n / t, (double)(n * len) / t / 1e6, failed);
	s3_client_free(cl);
	free(q);
	free(buf);
	return failed != 0;
}
