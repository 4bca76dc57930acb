/*
 * claim.c: the life of one claim of next (claim.h). The open-claims count and the
 * table of each process's latest claim are the server's (serve_int.h), under its
 * claim_lock.
 */
#include "claim.h"
#include "fault.h"
#include "serve_int.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

/* One claim open fewer (see server.open_claims). */
static void claims_sub(struct server *s)
{
	pthread_mutex_lock(&s->claim_lock);
	if (--s->open_claims == 0)
		pthread_cond_broadcast(&s->claims_done);
	pthread_mutex_unlock(&s->claim_lock);
}

static void pid_claim_record(struct server *s, uint32_t pid, uint64_t rank, uint64_t size)
{
	unsigned slot;

	pthread_mutex_lock(&s->claim_lock);
	for (slot = 0; slot < SERVER_PID_SLOTS; slot++)
		if (s->pids[slot].pid == pid && s->pids[slot].rank == rank)
			break;
	if (slot == SERVER_PID_SLOTS)
		slot = s->pid_next++ % SERVER_PID_SLOTS;
	s->pids[slot] = (struct pid_claim){ pid, rank, size };
	pthread_mutex_unlock(&s->claim_lock);
}

int claim_open(struct server *s, uint64_t rank, uint32_t pid, struct claim **out)
{
	struct claim *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	/* counted before the claim: a clean stop that finds none open and none in progress
	 * knows that every later claim is refused */
	pthread_mutex_lock(&s->claim_lock);
	s->open_claims++;
	pthread_mutex_unlock(&s->claim_lock);
	rc = server_claim(s, rank, &c->batch);
	if (rc) {
		claims_sub(s);
		free(c);
		return rc;
	}
	c->s = s;
	c->rank = rank;
	pid_claim_record(s, pid, rank, batch_len(c->batch));
	*out = c;
	return 0;
}

int claim_tail_begin(struct claim *c, int64_t off, size_t size)
{
	if (off < 0 || (uint64_t)off + size < batch_len(c->batch))
		return 0;
	__atomic_add_fetch(&c->tail_replies, 1, __ATOMIC_ACQ_REL);
	return 1;
}

void claim_tail_end(struct claim *c, int tail)
{
	if (tail)
		__atomic_sub_fetch(&c->tail_replies, 1, __ATOMIC_ACQ_REL);
}

int claim_read_end(struct claim *c, uint64_t owner)
{
	if (__atomic_exchange_n(&c->read_end, 1, __ATOMIC_ACQ_REL))
		return 0;
	/* before tail_end: a close that waited for the tail reads the owner */
	__atomic_store_n(&c->read_owner, owner, __ATOMIC_RELEASE);
	return 1;
}

void claim_delivered(struct claim *c)
{
	if (!__atomic_exchange_n(&c->delivered, 1, __ATOMIC_ACQ_REL))
		server_delivered(c->s, c->batch);
}

int claim_closing(struct claim *c, uint64_t owner)
{
	struct rank_state *rs = srv_find_rank(c->s, c->rank);
	uint64_t reader;

	/* a read that holds the last byte may still be inside its reply on another thread
	 * while the reader, which has the bytes, already closes: wait for its report */
	while (__atomic_load_n(&c->tail_replies, __ATOMIC_ACQUIRE))
		sched_yield();
	if (!rs || !__atomic_load_n(&c->read_end, __ATOMIC_ACQUIRE))
		return 0;
	reader = __atomic_load_n(&c->read_owner, __ATOMIC_ACQUIRE);
	if (owner && reader && owner != reader)
		return 0;
	__atomic_add_fetch(&rs->closing, 1, __ATOMIC_ACQ_REL);
	return 1;
}

int claim_closed(struct claim *c, int closing, int replied)
{
	if (!closing)
		return 0;
	if (replied)
		claim_delivered(c);
	__atomic_sub_fetch(&srv_find_rank(c->s, c->rank)->closing, 1, __ATOMIC_ACQ_REL);
	return replied;
}

int claim_finish(struct claim *c)
{
	int rc = server_finished(c->s, c->batch);

	fault_point(FAULT_DELIVERY_COMMITTED);
	return rc;
}

void claim_release(struct claim *c)
{
	server_release(c->s, c->rank);
}

void claim_free(struct claim *c, int deliver)
{
	if (!c)
		return;
	if (deliver)
		claim_delivered(c);
	claims_sub(c->s);
	server_batch_free(c->s, c->batch);
	free(c);
}

uint64_t server_claim_size(struct server *s, uint32_t pid, uint64_t rank, int *found)
{
	uint64_t size = 0;

	*found = 0;
	pthread_mutex_lock(&s->claim_lock);
	for (unsigned i = 0; i < SERVER_PID_SLOTS; i++)
		if (s->pids[i].pid == pid && s->pids[i].rank == rank && pid) {
			size = s->pids[i].size;
			*found = 1;
			break;
		}
	pthread_mutex_unlock(&s->claim_lock);
	return size;
}

int server_wait_claims(struct server *s, double timeout_s, unsigned *left)
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
	pthread_mutex_lock(&s->claim_lock);
	while (s->open_claims && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&s->claims_done, &s->claim_lock, &until);
	*left = s->open_claims;
	pthread_mutex_unlock(&s->claim_lock);
	return *left ? -ETIMEDOUT : 0;
}
