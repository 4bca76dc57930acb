#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct pool {
	unsigned n;
	unsigned started;
	pthread_t *th;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	unsigned long gen;       /* bumped by each pool_run */
	unsigned running;        /* workers still inside fn */
	int quit;
	pool_fn fn;
	void *arg;
};

struct worker {
	struct pool *p;
	unsigned t;
};

static void *worker_main(void *v)
{
	struct worker *w = v;
	struct pool *p = w->p;
	unsigned t = w->t;
	unsigned long seen = 0;

	free(w);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (p->gen == seen && !p->quit)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		p->fn(p->arg, t, p->n);
		pthread_mutex_lock(&p->mu);
		if (--p->running == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int pool_new(unsigned n, struct pool **out)
{
	struct pool *p;

	if (n == 0)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->th = calloc(n, sizeof(*p->th));
	if (!p->th) {
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	p->n = 1;
	for (unsigned t = 1; t < n; t++) {
		struct worker *w = malloc(sizeof(*w));

		if (!w)
			break;
		w->p = p;
		w->t = t;
		if (pthread_create(&p->th[t], NULL, worker_main, w) != 0) {
			free(w);
			break;
		}
		p->started++;
		p->n++;
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
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->running = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
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
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (unsigned t = 1; t <= p->started; t++)
		pthread_join(p->th[t], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->th);
	free(p);
}
