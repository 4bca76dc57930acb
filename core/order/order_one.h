/*
 * order_one.h: the order of one dataset (docs/design.md §2): struct order, and gsn ->
 * (epoch e = g / N, position p = g % N, sample id = perm(seed, e)(p)) with its validation
 * split.
 *
 * The functions order_one_*() serve a plain order (o->mix == NULL, o->validation == 0):
 * the source orders of a mixture (mix.h) and every single dataset. order.h's
 * order_sample(), order_fill() and order_limit() take any order and hand off to these or
 * to the mixture; this file calls neither, so mix.c stands on it without a circle.
 *
 * All arithmetic is 64-bit with overflow checks; N and every gsn stay below 2^62.
 * Pure, no globals, thread-safe.
 */
#ifndef ZEPHON_ORDER_ONE_H
#define ZEPHON_ORDER_ONE_H

#include <stddef.h>
#include <stdint.h>

#include "prp.h"

/* Largest gsn + 1 ever produced (and largest N). */
#define ORDER_MAX_GSN PRP_MAX_N

enum order_shuffle {
	ORDER_SHUFFLE_GLOBAL = 0, /* perm(seed, epoch): a new permutation per epoch */
	ORDER_SHUFFLE_NONE = 1,   /* identity: sample id = position in epoch */
};

struct mixture;

/*
 * The validation split (docs/design.md §11): V = holdout samples of a dataset of `total`
 * samples never appear in training. Sample id x is held out when its position under the
 * split permutation, split(x)^-1, is below V; split is the PRP of [0, total) keyed by the
 * dataset's fingerprint alone (order_split_key()), so the held-out set is the same for
 * every seed, world size and layout. Training position p of an epoch (p < n = total - V)
 * is then sample split(V + perm(seed, epoch)(p)), and validation position j (j < V) is
 * sample split(j): a fixed validation stream.
 */
struct order {
	uint64_t n;               /* training samples per epoch, N (the dataset's samples
	                           * without a validation split) */
	uint64_t seed;
	enum order_shuffle shuffle;
	uint64_t holdout;         /* V: samples held out for validation (0: no split) */
	struct prp split;         /* keyed over [0, n + V) when holdout > 0 */
	const struct mixture *mix;/* a mixture of sources (mix.h): n is then the union's
	                           * id space, and order.h's calls defer to it. Not owned. */
	int validation;           /* the validation stream instead (order_validation()):
	                           * gsn j is validation position j, epoch 0 */
};

/* 0, or -EINVAL when n == 0, n > ORDER_MAX_GSN, or shuffle is unknown. No split, no
 * mixture. */
int order_init(struct order *o, uint64_t n, uint64_t seed, enum order_shuffle shuffle);

/* Hold out V = holdout of the o->n samples for validation (o has no split yet and
 * holdout < o->n): afterwards o->n = N - V. 0, or -EINVAL. */
int order_set_holdout(struct order *o, uint64_t holdout, uint64_t split_key);

/* The split key of a dataset: its fingerprint's first 16 hex digits. */
uint64_t order_split_key(const char *fingerprint);

/* The sample id of validation position j < o->holdout (no mixture). */
uint64_t order_validation_sample(const struct order *o, uint64_t j);

/* Parse "global" | "none". 0 or -EINVAL. */
int order_shuffle_parse(const char *s, enum order_shuffle *out);
const char *order_shuffle_name(enum order_shuffle s);

/* Sample id at gsn g of a plain order (g < ORDER_MAX_GSN, asserted); *epoch receives
 * g / N when non-NULL. */
uint64_t order_one_sample(const struct order *o, uint64_t gsn, uint64_t *epoch);

/* ids[i] = order_one_sample(o, gsn + i) for i < count of a plain order, keying each
 * epoch once. 0, or -EOVERFLOW when gsn + count > ORDER_MAX_GSN. */
int order_one_fill(const struct order *o, uint64_t gsn, size_t count, uint64_t *ids);

/* First gsn past the end of a plain order of `epochs` epochs (0 = endless:
 * ORDER_MAX_GSN). */
uint64_t order_one_limit(const struct order *o, uint64_t epochs);

#endif
