/*
 * order.h: the global order of samples (docs/design.md §2).
 *
 * Owns the pure function that every other module and every test relies on:
 *   gsn -> (epoch e = g / N, position p = g % N, sample id = perm(seed, e)(p)).
 * Which gsns a step, a rank or a micro-batch covers is layout.h's.
 *
 * struct order and the order of one dataset are order_one.h's; the functions here take
 * any order, a mixture's too: they hand off to mix.h when o->mix is set, so order stands
 * above both order_one and mix (neither calls back up).
 *
 * All arithmetic is 64-bit with overflow checks; N and every gsn stay below 2^62.
 * Pure, no globals, thread-safe.
 */
#ifndef ZEPHON_ORDER_H
#define ZEPHON_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"        /* what a user of the order steps through it with */
#include "order_one.h"

/* The validation stream of o (a split, or a mixture whose sources have splits) as an
 * order of its own: gsn j is validation position j (mixture_validation_sample() for a
 * mixture), n the stream's length. 0, or -ENOENT (no sample is held out). */
int order_validation(const struct order *o, struct order *out);

/* Sample id at gsn g (g < ORDER_MAX_GSN, asserted); *epoch receives g / N when non-NULL. */
uint64_t order_sample(const struct order *o, uint64_t gsn, uint64_t *epoch);

/* The epoch a batch from gsn is in: g / N (on the validation stream N is V: 0 within
 * it); for a mixture mixture_epoch(), as its sources' epochs differ and g over the
 * union's samples is the epoch of none of them. */
uint64_t order_epoch(const struct order *o, uint64_t gsn);

/* ids[i] = order_sample(o, gsn + i) for i < count, keying each epoch once.
 * 0, or -EOVERFLOW when gsn + count > ORDER_MAX_GSN. */
int order_fill(const struct order *o, uint64_t gsn, size_t count, uint64_t *ids);

/* First gsn past the end of a stream of `epochs` epochs (0 = endless: ORDER_MAX_GSN). */
uint64_t order_limit(const struct order *o, uint64_t epochs);

#endif
