/*
 * core/util/jobq and core/util/pool: every job submitted runs exactly once, in order on one thread;
 * jobq_free() cancels what is still queued (on the freeing thread), waits for what
 * runs and refuses what a running job queues meanwhile; each thread's context reaches its jobs and is finished; a pool calls fn once per
 * member.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "clock.h"
#include "jobq.h"
#include "pool.h"

struct tjob {
	struct jobq_job job;
	int id;
	int ran, cancelled;
	void *ctx;
};

static int order[64];
static atomic_int norder;
static atomic_int ncancelled;

static void tjob_run(struct jobq_job *job, void *ctx, int cancelled)
{
	struct tjob *t = (struct tjob *)job;

	t->ctx = ctx;
	if (cancelled) {
		t->cancelled++;
		atomic_fetch_add(&ncancelled, 1);
		return;
	}
	t->ran++;
	order[atomic_fetch_add(&norder, 1)] = t->id;
}

static int ctx_token;
static atomic_int finis;

static void *ctx_init(void *arg)
{
	(void)arg;
	return &ctx_token;
}

static void ctx_fini(void *arg, void *ctx)
{
	(void)arg;
	if (ctx == &ctx_token)
		atomic_fetch_add(&finis, 1);
}

static void test_order_and_context(void)
{
	struct jobq_config cfg = { .max_threads = 1, .thread_init = ctx_init,
				   .thread_fini = ctx_fini };
	struct tjob jobs[40];
	struct jobq *q;
	double deadline;

	REQUIRE(jobq_new(&cfg, &q) == 0);
	CHECK_EQ_U64(jobq_threads(q), 0);
	for (int i = 0; i < 40; i++) {
		jobs[i] = (struct tjob){ .job.run = tjob_run, .id = i };
		CHECK(jobq_submit(q, &jobs[i].job) == 0);
	}
	CHECK_EQ_U64(jobq_threads(q), 1); /* started on demand, never past max */
	deadline = clock_mono_s() + 30;
	while (atomic_load(&norder) < 40 && clock_mono_s() < deadline)
		sched_yield();
	jobq_free(q);
	CHECK_EQ_U64(atomic_load(&norder), 40);
	for (int i = 0; i < 40; i++) {
		CHECK_EQ_U64(order[i], i);
		CHECK_EQ_U64(jobs[i].ran, 1);
		CHECK(jobs[i].ctx == &ctx_token);
	}
	CHECK_EQ_U64(atomic_load(&finis), 1);
}

/* The blocker holds the only thread until released, then queues a sequel (bl_queue,
 * jobq_submit's answer in bl_sequel_rc): refused once jobq_free() has begun. */
static pthread_mutex_t bl_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bl_cv = PTHREAD_COND_INITIALIZER;
static int bl_started, bl_release, bl_sequel_rc = 1;
static struct jobq *bl_queue;
static struct tjob bl_sequel;

static void blocker_run(struct jobq_job *job, void *ctx, int cancelled)
{
	(void)job;
	(void)ctx;
	(void)cancelled;
	pthread_mutex_lock(&bl_mu);
	bl_started = 1;
	pthread_cond_broadcast(&bl_cv);
	while (!bl_release)
		pthread_cond_wait(&bl_cv, &bl_mu);
	pthread_mutex_unlock(&bl_mu);
	bl_sequel = (struct tjob){ .job.run = tjob_run, .id = 99 };
	bl_sequel_rc = jobq_submit(bl_queue, &bl_sequel.job);
}

static void *free_main(void *arg)
{
	jobq_free(arg);
	return NULL;
}

static void test_free_cancels_queued(void)
{
	struct jobq_config cfg = { .max_threads = 1 };
	struct jobq_job blocker = { .run = blocker_run };
	struct tjob jobs[5];
	struct jobq *q;
	pthread_t freer;
	double deadline;

	atomic_store(&norder, 0);
	REQUIRE(jobq_new(&cfg, &q) == 0);
	bl_queue = q;
	REQUIRE(jobq_start(q, 1) == 0);
	CHECK(jobq_start(q, 2) == -EINVAL);
	REQUIRE(jobq_submit(q, &blocker) == 0);
	pthread_mutex_lock(&bl_mu);
	while (!bl_started)
		pthread_cond_wait(&bl_cv, &bl_mu);
	pthread_mutex_unlock(&bl_mu);
	for (int i = 0; i < 5; i++) {
		jobs[i] = (struct tjob){ .job.run = tjob_run, .id = i };
		REQUIRE(jobq_submit(q, &jobs[i].job) == 0);
	}
	REQUIRE(pthread_create(&freer, NULL, free_main, q) == 0);
	/* the queued jobs are cancelled while the blocker still runs */
	deadline = clock_mono_s() + 30;
	while (atomic_load(&ncancelled) < 5 && clock_mono_s() < deadline)
		sched_yield();
	CHECK_EQ_U64(atomic_load(&ncancelled), 5);
	pthread_mutex_lock(&bl_mu);
	bl_release = 1;
	pthread_cond_broadcast(&bl_cv);
	pthread_mutex_unlock(&bl_mu);
	pthread_join(freer, NULL);
	for (int i = 0; i < 5; i++) {
		CHECK_EQ_U64(jobs[i].cancelled, 1);
		CHECK_EQ_U64(jobs[i].ran, 0);
		CHECK(jobs[i].ctx == NULL);
	}
	CHECK_EQ_U64(atomic_load(&norder), 0);
	/* the blocker's sequel, queued while the queue was being freed: refused, not run */
	CHECK(bl_sequel_rc == -ESHUTDOWN);
	CHECK_EQ_U64(bl_sequel.ran + bl_sequel.cancelled, 0);
}

static atomic_int pool_hits[8];
static atomic_int pool_n_seen;

static void pool_fn_count(void *arg, unsigned t, unsigned n)
{
	(void)arg;
	atomic_fetch_add(&pool_hits[t], 1);
	atomic_store(&pool_n_seen, (int)n);
}

static void test_pool(void)
{
	struct pool *p;

	CHECK(pool_new(0, &p) == -EINVAL);
	REQUIRE(pool_new(4, &p) == 0);
	CHECK(pool_size(p) >= 1 && pool_size(p) <= 4);
	for (int r = 0; r < 100; r++)
		pool_run(p, pool_fn_count, NULL);
	for (unsigned t = 0; t < 8; t++)
		CHECK_EQ_U64(atomic_load(&pool_hits[t]), t < pool_size(p) ? 100 : 0);
	CHECK_EQ_U64(atomic_load(&pool_n_seen), pool_size(p));
	pool_free(p);
	REQUIRE(pool_new(1, &p) == 0);
	CHECK_EQ_U64(pool_size(p), 1);
	pool_free(p);
}

int main(void)
{
	struct jobq *q;
	struct jobq_config bad = { .max_threads = 0 };

	CHECK(jobq_new(&bad, &q) == -EINVAL);
	bad.max_threads = JOBQ_MAX_THREADS + 1;
	CHECK(jobq_new(&bad, &q) == -EINVAL);
	test_order_and_context();
	test_free_cancels_queued();
	test_pool();
	return check_status();
}
