/*
 * pool.c: the fork-join team (pool.h) on a job queue (jobq.h): pool_run() queues one job
 * per member but the caller's, runs member 0 itself, and waits for the count of members
 * still inside fn to reach 0.
 */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "jobq.h"

struct pool_task {
	struct jobq_job job;     /* first: the job is the task */
	struct pool *p;
	unsigned t;
};

struct pool {
	unsigned n;              /* members: 1 + the queue's threads */
	struct jobq *q;          /* NULL when n == 1 */
	struct pool_task *tasks; /* n entries; tasks[0] unused (the caller) */
	pthread_mutex_t mu;
	pthread_cond_t done;
	unsigned running;        /* members other than the caller still inside fn */
	pool_fn fn;
	void *arg;
};

static void task_run(struct jobq_job *job, void *ctx, int cancelled)
{
	struct pool_task *k = (struct pool_task *)job;
	struct pool *p = k->p;

	(void)ctx;
	if (!cancelled)
		p->fn(p->arg, k->t, p->n);
	pthread_mutex_lock(&p->mu);
	if (--p->running == 0)
		pthread_cond_signal(&p->done);
	pthread_mutex_unlock(&p->mu);
}

int pool_new(unsigned n, struct pool **out)
{
	struct pool *p;
	int rc;

	if (n == 0)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->tasks = calloc(n, sizeof(*p->tasks));
	if (!p->tasks) {
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->done, NULL);
	p->n = 1;
	if (n > 1) {
		struct jobq_config cfg = { .max_threads = n - 1 };

		rc = jobq_new(&cfg, &p->q);
		if (rc) {
			pool_free(p);
			return rc;
		}
		/* Threads that cannot be started make a smaller team, not a failure. */
		jobq_start(p->q, n - 1);
		p->n += jobq_threads(p->q);
	}
	*out = p;
	return 0;
}

unsigned pool_size(const struct pool *p)
{
	return p->n;
}

void pool_run(struct pool *p, pool_fn fn, void *arg)
{
	p->fn = fn;
	p->arg = arg;
	p->running = p->n - 1;
	for (unsigned t = 1; t < p->n; t++) {
		p->tasks[t] = (struct pool_task){ .job.run = task_run, .p = p, .t = t };
		if (jobq_submit(p->q, &p->tasks[t].job))
			task_run(&p->tasks[t].job, NULL, 0); /* not queued: the caller runs it */
	}
	fn(arg, 0, p->n);
	pthread_mutex_lock(&p->mu);
	while (p->running)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	jobq_free(p->q);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->done);
	free(p->tasks);
	free(p);
}
