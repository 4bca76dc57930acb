/*
 * claim.h: the life of one claim of a rank's next, from the open that claims it to the
 * last reference's free (docs/design.md §5, §9). The mount's handle of next holds one;
 * everything the claim's lifecycle decides is here: deliver-once, the durable delivery
 * of a close, the refill pacing of a release, the count of claims still open (a clean
 * stop waits for it) and the size of each process's latest claim (a GETATTR without a
 * file handle answers it).
 *
 *   claim_open ─ reads (claim_tail_begin/end around each reply, claim_delivered when a
 *   reply holds the last byte) ─ claim_finish at each close(2) ─ claim_release at the
 *   last close ─ claim_free when the last reference goes.
 *
 * Thread-safety: every function may be called from any thread; the reads of one claim
 * may run on several threads at once.
 */
#ifndef ZEPHON_CLAIM_H
#define ZEPHON_CLAIM_H

#include <stddef.h>
#include <stdint.h>

#include "serve.h"

struct claim {
	struct server *s;
	struct batch *batch;    /* the claimed micro-batch: read-only for the holder */
	uint64_t rank;
	int delivered;          /* reported (atomic): read to its end, or released */
	int tail_replies;       /* replies holding the last byte being sent (atomic): a
	                         * close waits for them (claim_finish) */
};

/* Claim rank's next micro-batch for process pid (0: not known): server_claim(), counted
 * as open from before the claim (a clean stop that finds none open and none in progress
 * knows every later claim is refused) until claim_free(), and pid's latest claim of the
 * rank for server_claim_size(). *out malloc'd. 0, or server_claim()'s errors, -ENOMEM. */
int claim_open(struct server *s, uint64_t rank, uint32_t pid, struct claim **out);

/* A read of [off, off + size) is about to be replied: 1 when it holds the claim's last
 * byte (or asks past it), counted until claim_tail_end(c, 1) so that a close right
 * behind it waits for its report; else 0. off < 0 counts as 0. */
int claim_tail_begin(struct claim *c, int64_t off, size_t size);
void claim_tail_end(struct claim *c, int tail);

/* The claim reached its reader (a reply holding its last byte was sent, or the handle
 * was released): server_delivered(), once per claim whatever calls it again. */
void claim_delivered(struct claim *c);

/* A close(2) of a descriptor of the claim: once a read has returned the last byte (the
 * reader has it whole), the delivery is made durable in the journal before this returns
 * (server_finished(); may wait for the journal: call it where blocking is allowed, or
 * when server_journal_stalled(), which returns at once). A close before that changes
 * nothing. Failures are logged by the server; 0 or server_finished()'s errors. */
int claim_finish(struct claim *c);

/* The last descriptor of the claim was closed: the refill of a paced reader's prefetch
 * ring, left by its claim, starts now (server_release()). Never waits. */
void claim_release(struct claim *c);

/* Free the claim (c may be NULL). deliver: it was released, or never reached the opener
 * (interrupted: consumed within the mount either way); claims freed at unmount without
 * a release are not delivered. */
void claim_free(struct claim *c, int deliver);

/* Bytes of process pid's latest claim of rank (0 when pid is 0): *found 1, else 0 and
 * returns 0. Remembers the latest 256 (process, rank) pairs (CLAIMTAB_PID_SLOTS). */
uint64_t server_claim_size(struct server *s, uint32_t pid, uint64_t rank, int *found);

/* Wait up to timeout_s seconds until no claim_open() is in progress and every claim was
 * freed. 0 or -ETIMEDOUT; *left receives how many are still open. Call after
 * server_stop_claims(). */
int server_wait_claims(struct server *s, double timeout_s, unsigned *left);

#endif
