/*
 * claim.h: the life of one claim of a rank's next, from the open that claims it to the
 * last reference's free (docs/design.md §5, §6, §9). The mount's handle of next holds one;
 * everything the claim's lifecycle decides is here: deliver-once, the delivery of a
 * close and its commit, the refill pacing of a release, the count of claims still open
 * (a clean stop waits for it) and the size of each process's latest claim (a GETATTR
 * without a file handle answers it).
 *
 *   claim_open ─ reads (claim_tail_begin/end around each reply, claim_read_end when a
 *   reply holds the last byte) ─ at each close(2): claim_closing, its reply,
 *   claim_closed and, when that says so, claim_finish ─ claim_release at the last
 *   close ─ claim_free when the last reference goes.
 *
 * The delivery rule: a claim counts as delivered (server_delivered) only once its reader
 * can no longer see an error for it: a close(2) answered after a read returned its last
 * byte (claim_closed, once the reply was sent), its release, or an open that
 * never reached its opener. A read of the last byte alone is not enough: a kill before
 * the close's reply fails that close (or the read at end of file), and a reader that
 * sees it may not use the batch (Python's `with open(...) as f: f.read()` raises at the
 * close). So the journal, which writes only delivered claims, never counts a batch its
 * reader may have dropped; a kill between a close's reply and its commit serves that
 * one batch again.
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
	int delivered;          /* reported (atomic): a close answered after its last byte
	                         * was read, its release, or an interrupted open */
	int read_end;           /* a reply holding its last byte was sent (atomic) */
	uint64_t read_owner;    /* the FUSE lock owner (the reader's file table) of the
	                         * first such read; 0: not known (atomic) */
	int tail_replies;       /* replies holding the last byte being sent (atomic): a
	                         * close waits for them (claim_closing) */
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

/* A reply holding the claim's last byte (or asking past it) was sent to the read of
 * lock owner `owner` (FUSE's id of the reader's file table, shared by its threads; 0:
 * not known): the reader can have the batch whole. Not yet a delivery (see the delivery
 * rule above). 1 the first time, else 0. */
int claim_read_end(struct claim *c, uint64_t owner);

/* The claim is delivered (server_delivered()), once per claim whatever calls it again:
 * its release, an open that never reached its opener, or claim_closed(). */
void claim_delivered(struct claim *c);

/* A close(2) by lock owner `owner` of a descriptor of the claim is about to be
 * answered. When a read by the same owner (or by one not known, or when `owner` is 0)
 * had returned the last byte before it (a read replying it on another thread is waited
 * for), the reader finishes the batch with this close: 1, and the rank's claims wait
 * (server_claim) until claim_closed() says whether the reply was sent. Else 0: a close
 * before the last byte was read (a partial read), or a close by another process (a
 * forked child's exec closing what it inherited), whose success says nothing of the
 * reader's own close. Never waits for the journal. */
int claim_closing(struct claim *c, uint64_t owner);

/* The reply to that close was sent (replied: 1) or failed (0); closing: what
 * claim_closing() returned. A close that finished the batch and was answered delivers
 * the claim (claim_delivered) and returns 1: make the delivery durable with
 * claim_finish(). Else 0. So a claim is never delivered before the reply to its close
 * was sent (a kill before it fails that close, and the journal must not count the
 * batch), and a claim of the rank that follows it, whose opener may have seen that
 * close return, commits the delivery with itself. */
int claim_closed(struct claim *c, int closing, int replied);

/* After claim_closed() returned 1: the rank's delivered position is committed in the
 * journal before this returns (server_finished(); may wait for the journal: call it
 * where blocking is allowed, or when server_journal_stalled(), which returns at once).
 * Failures are logged by the server; 0 or server_finished()'s errors. */
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
