/*
 * jobq.c: the job queue (jobq.h). One mutex guards the list and the counts; a job runs
 * with it released.
 */
#include "jobq.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

struct jobq {
	struct jobq_config cfg;
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct jobq_job *head, *tail;
	unsigned queued;      /* jobs in the list */
	unsigned idle;        /* threads waiting for work */
	unsigned nthreads;    /* started */
	int stop;
	pthread_t *threads;   /* cfg.max_threads entries, nthreads started */
};

static void *jobq_main(void *arg)
{
	struct jobq *q = arg;
	void *ctx = NULL;

	if (q->cfg.name)
		pthread_setname_np(pthread_self(), q->cfg.name);
	if (q->cfg.thread_init)
		ctx = q->cfg.thread_init(q->cfg.arg);
	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct jobq_job *job = q->head;

		if (job) {
			q->head = job->next;
			if (!q->head)
				q->tail = NULL;
			q->queued--;
			pthread_mutex_unlock(&q->lock);
			job->run(job, ctx, 0);
			pthread_mutex_lock(&q->lock);
			continue;
		}
		if (q->stop)
			break;
		q->idle++;
		pthread_cond_wait(&q->work, &q->lock);
		q->idle--;
	}
	pthread_mutex_unlock(&q->lock);
	if (q->cfg.thread_fini)
		q->cfg.thread_fini(q->cfg.arg, ctx);
	return NULL;
}

/* Start one thread; with q->lock held (or before any thread runs). 0 or -errno. */
static int start_one(struct jobq *q)
{
	sigset_t all, old;
	int rc;

	if (q->cfg.block_signals) {
		/* The new thread inherits the mask: blocked from its first instruction. */
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
	}
	rc = pthread_create(&q->threads[q->nthreads], NULL, jobq_main, q);
	if (q->cfg.block_signals)
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return -rc;
	q->nthreads++;
	return 0;
}

int jobq_new(const struct jobq_config *cfg, struct jobq **out)
{
	struct jobq *q;
	int rc;

	if (cfg->max_threads == 0 || cfg->max_threads > JOBQ_MAX_THREADS)
		return -EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->cfg = *cfg;
	q->threads = calloc(cfg->max_threads, sizeof(*q->threads));
	if (!q->threads) {
		free(q);
		return -ENOMEM;
	}
	if ((rc = pthread_mutex_init(&q->lock, NULL)))
		goto err_free;
	if ((rc = pthread_cond_init(&q->work, NULL)))
		goto err_mutex;
	*out = q;
	return 0;

err_mutex:
	pthread_mutex_destroy(&q->lock);
err_free:
	free(q->threads);
	free(q);
	return -rc;
}

int jobq_start(struct jobq *q, unsigned n)
{
	int rc = 0;

	if (n > q->cfg.max_threads)
		return -EINVAL;
	pthread_mutex_lock(&q->lock);
	while (q->nthreads < n && !rc)
		rc = start_one(q);
	if (rc)
		q->cfg.max_threads = q->nthreads;
	pthread_mutex_unlock(&q->lock);
	return rc;
}

unsigned jobq_threads(struct jobq *q)
{
	unsigned n;

	pthread_mutex_lock(&q->lock);
	n = q->nthreads;
	pthread_mutex_unlock(&q->lock);
	return n;
}

int jobq_submit(struct jobq *q, struct jobq_job *job)
{
	pthread_mutex_lock(&q->lock);
	if (q->stop) { /* a job queueing its sequel while jobq_free() runs */
		pthread_mutex_unlock(&q->lock);
		return -ESHUTDOWN;
	}
	/* A thread woken for an earlier job still counts as idle until it takes it: compare
	 * the queue with the idle threads, not with zero. */
	if (q->queued + 1 > q->idle && q->nthreads < q->cfg.max_threads)
		start_one(q); /* a failure leaves the job to the threads already running */
	if (q->nthreads == 0) {
		pthread_mutex_unlock(&q->lock);
		return -EAGAIN;
	}
	job->next = NULL;
	if (q->tail)
		q->tail->next = job;
	else
		q->head = job;
	q->tail = job;
	q->queued++;
	pthread_cond_signal(&q->work);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

void jobq_free(struct jobq *q)
{
	struct jobq_job *job;

	if (!q)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = 1;
	job = q->head;
	q->head = q->tail = NULL;
	q->queued = 0;
	pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->lock);
	while (job) {
		struct jobq_job *next = job->next;

		job->run(job, NULL, 1);
		job = next;
	}
	for (unsigned i = 0; i < q->nthreads; i++)
		pthread_join(q->threads[i], NULL);
	pthread_cond_destroy(&q->work);
	pthread_mutex_destroy(&q->lock);
	free(q->threads);
	free(q);
}
