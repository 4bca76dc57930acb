/*
 * claimtab.c: the claims open and each process's latest claim (claimtab.h).
 */
#include "claimtab.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct pid_claim {
	uint32_t pid;
	uint64_t rank;
	uint64_t size;
};

struct claimtab {
	pthread_mutex_t lock;       /* guards the fields below */
	pthread_cond_t done;        /* open reached 0; CLOCK_MONOTONIC */
	unsigned open;
	struct pid_claim pids[CLAIMTAB_PID_SLOTS];
	unsigned next;              /* the slot the next new pair takes, mod the slots */
};

int claimtab_new(struct claimtab **out)
{
	struct claimtab *t = calloc(1, sizeof(*t));
	pthread_condattr_t ca;

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->done, &ca);
	pthread_condattr_destroy(&ca);
	*out = t;
	return 0;
}

void claimtab_free(struct claimtab *t)
{
	if (!t)
		return;
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->done);
	free(t);
}

void claimtab_enter(struct claimtab *t)
{
	pthread_mutex_lock(&t->lock);
	t->open++;
	pthread_mutex_unlock(&t->lock);
}

void claimtab_leave(struct claimtab *t)
{
	pthread_mutex_lock(&t->lock);
	if (--t->open == 0)
		pthread_cond_broadcast(&t->done);
	pthread_mutex_unlock(&t->lock);
}

int claimtab_wait(struct claimtab *t, double timeout_s, unsigned *left)
{
	struct timespec until;
	int rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)timeout_s;
	until.tv_nsec += (long)((timeout_s - (double)(time_t)timeout_s) * 1e9);
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&t->lock);
	while (t->open && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&t->done, &t->lock, &until);
	*left = t->open;
	pthread_mutex_unlock(&t->lock);
	return *left ? -ETIMEDOUT : 0;
}

void claimtab_note(struct claimtab *t, uint32_t pid, uint64_t rank, uint64_t size)
{
	unsigned slot;

	pthread_mutex_lock(&t->lock);
	for (slot = 0; slot < CLAIMTAB_PID_SLOTS; slot++)
		if (t->pids[slot].pid == pid && t->pids[slot].rank == rank)
			break;
	if (slot == CLAIMTAB_PID_SLOTS)
		slot = t->next++ % CLAIMTAB_PID_SLOTS;
	t->pids[slot] = (struct pid_claim){ pid, rank, size };
	pthread_mutex_unlock(&t->lock);
}

uint64_t claimtab_size(struct claimtab *t, uint32_t pid, uint64_t rank, int *found)
{
	uint64_t size = 0;

	*found = 0;
	pthread_mutex_lock(&t->lock);
	for (unsigned i = 0; i < CLAIMTAB_PID_SLOTS && pid; i++)
		if (t->pids[i].pid == pid && t->pids[i].rank == rank) {
			size = t->pids[i].size;
			*found = 1;
			break;
		}
	pthread_mutex_unlock(&t->lock);
	return size;
}
