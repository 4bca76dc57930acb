/*
 * offload.c: the offload queue (offload.h). One mutex guards the queue and the counts;
 * a job is run with it released.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "offload.h"

#define OFFLOAD_MAX 1024

struct offload {
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct offload_job *head, *tail;
	unsigned queued;      /* jobs in the queue */
	unsigned idle;        /* threads waiting for work */
	unsigned nthreads, max;
	int stop;
	pthread_t *threads;   /* max entries, nthreads started */
};

static void *offload_main(void *arg)
{
	struct offload *o = arg;

	pthread_setname_np(pthread_self(), "zephon-offload");
	pthread_mutex_lock(&o->lock);
	for (;;) {
		struct offload_job *job = o->head;

		if (job) {
			o->head = job->next;
			if (!o->head)
				o->tail = NULL;
			o->queued--;
			pthread_mutex_unlock(&o->lock);
			job->run(job, 0);
			pthread_mutex_lock(&o->lock);
			continue;
		}
		if (o->stop)
			break;
		o->idle++;
		pthread_cond_wait(&o->work, &o->lock);
		o->idle--;
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

int offload_new(unsigned max, struct offload **out)
{
	struct offload *o;
	int rc;

	if (max == 0 || max > OFFLOAD_MAX)
		return -EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->threads = calloc(max, sizeof(*o->threads));
	if (!o->threads) {
		free(o);
		return -ENOMEM;
	}
	o->max = max;
	if ((rc = pthread_mutex_init(&o->lock, NULL)))
		goto err_free;
	if ((rc = pthread_cond_init(&o->work, NULL)))
		goto err_mutex;
	*out = o;
	return 0;

err_mutex:
	pthread_mutex_destroy(&o->lock);
err_free:
	free(o->threads);
	free(o);
	return -rc;
}

int offload_submit(struct offload *o, struct offload_job *job)
{
	pthread_mutex_lock(&o->lock);
	/* A thread woken for an earlier job still counts as idle until it runs: compare
	 * the queue with the idle threads, not with zero. */
	if (o->queued + 1 > o->idle && o->nthreads < o->max &&
	    pthread_create(&o->threads[o->nthreads], NULL, offload_main, o) == 0)
		o->nthreads++;
	if (o->nthreads == 0) {
		pthread_mutex_unlock(&o->lock);
		return -EAGAIN;
	}
	job->next = NULL;
	if (o->tail)
		o->tail->next = job;
	else
		o->head = job;
	o->tail = job;
	o->queued++;
	pthread_cond_signal(&o->work);
	pthread_mutex_unlock(&o->lock);
	return 0;
}

void offload_free(struct offload *o)
{
	struct offload_job *job;

	if (!o)
		return;
	pthread_mutex_lock(&o->lock);
	o->stop = 1;
	job = o->head;
	o->head = o->tail = NULL;
	o->queued = 0;
	pthread_cond_broadcast(&o->work);
	pthread_mutex_unlock(&o->lock);
	while (job) {
		struct offload_job *next = job->next;

		job->run(job, 1);
		job = next;
	}
	for (unsigned i = 0; i < o->nthreads; i++)
		pthread_join(o->threads[i], NULL);
	pthread_cond_destroy(&o->work);
	pthread_mutex_destroy(&o->lock);
	free(o->threads);
	free(o);
}
