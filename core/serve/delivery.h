/*
 * delivery.h: the delivered prefix of one rank's claims. Claims are numbered by their
 * claim index ci (0, 1, 2, ... in the order they were handed out); each is delivered
 * once its reader has it (read to its end, or its file closed), in any order, since
 * several readers of one rank may hold batches at once. The prefix is the first ci not
 * yet delivered: every claim below it was delivered. This is what a restart may count
 * as consumed; a claim at or past it may only be served again, never skipped.
 *
 * Memory: nothing while deliveries come in order (the common case: one reader per
 * rank); one bit per claim between the prefix and the furthest delivery otherwise.
 * Invariant: prefix never decreases except by delivery_reset().
 * Thread-safety: none; the caller serializes (serve.c holds the rank's view lock).
 */
#ifndef ZEPHON_DELIVERY_H
#define ZEPHON_DELIVERY_H

#include <stddef.h>
#include <stdint.h>

struct delivery {
	uint64_t prefix;        /* every ci below it was delivered */
	uint64_t *bits;         /* ring of cap bits: bit (ci % cap) for ci in [prefix, prefix + cap) */
	size_t cap;             /* bits, a power of two (0: no ring yet) */
};

/* Start at ci `start` (claims below it count as delivered). No allocation. */
void delivery_init(struct delivery *d, uint64_t start);

/* Free the ring (d may be reused after delivery_init). */
void delivery_release(struct delivery *d);

/* Forget every delivery and start over at `start` (a rewind). */
void delivery_reset(struct delivery *d, uint64_t start);

/* Claim ci was delivered. Returns 1 when this is its first delivery (the prefix may have
 * moved: read d->prefix), 0 when it was already counted (below the prefix, or marked
 * before), -ENOMEM when an out-of-order delivery could not be recorded (the prefix then
 * stops below ci for good: a restart serves it again, which is safe), -EOVERFLOW when ci
 * lies 2^40 or more claims past the prefix. */
int delivery_mark(struct delivery *d, uint64_t ci);

#endif
