/*
 * claim.c: the life of one claim of next (claim.h). The open-claims count and the
 * table of each process's latest claim are the server's claimtab (claimtab.h).
 */
#include "claim.h"
#include "fault.h"
#include "serve_int.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>

int claim_open(struct server *s, uint64_t rank, uint32_t pid, struct claim **out)
{
	struct claim *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	/* counted before the claim: a clean stop that finds none open and none in progress
	 * knows that every later claim is refused */
	claimtab_enter(server_claimtab(s));
	rc = server_claim(s, rank, &c->batch);
	if (rc) {
		claimtab_leave(server_claimtab(s));
		free(c);
		return rc;
	}
	c->s = s;
	c->rank = rank;
	claimtab_note(server_claimtab(s), pid, rank, batch_len(c->batch));
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
	claimtab_leave(server_claimtab(c->s));
	server_batch_free(c->s, c->batch);
	free(c);
}

uint64_t server_claim_size(struct server *s, uint32_t pid, uint64_t rank, int *found)
{
	return claimtab_size(server_claimtab(s), pid, rank, found);
}

int server_wait_claims(struct server *s, double timeout_s, unsigned *left)
{
	return claimtab_wait(server_claimtab(s), timeout_s, left);
}
