#include "order_one.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

int order_init(struct order *o, uint64_t n, uint64_t seed, enum order_shuffle shuffle)
{
	if (n == 0 || n > ORDER_MAX_GSN)
		return -EINVAL;
	if (shuffle != ORDER_SHUFFLE_GLOBAL && shuffle != ORDER_SHUFFLE_NONE)
		return -EINVAL;
	memset(o, 0, sizeof *o);
	o->n = n;
	o->seed = seed;
	o->shuffle = shuffle;
	return 0;
}

int order_set_holdout(struct order *o, uint64_t holdout, uint64_t split_key)
{
	if (o->holdout || o->mix || holdout >= o->n)
		return -EINVAL;
	if (holdout == 0)
		return 0;
	prp_init(&o->split, o->n, split_key, 0);
	o->n -= holdout;
	o->holdout = holdout;
	return 0;
}

uint64_t order_split_key(const char *fingerprint)
{
	uint64_t key = 0;

	for (int i = 0; i < 16 && fingerprint[i]; i++) {
		char c = fingerprint[i];

		key = key << 4 | (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
	}
	return prp_mix64(key ^ UINT64_C(0x73706c6974)); /* "split" */
}

uint64_t order_validation_sample(const struct order *o, uint64_t j)
{
	assert(j < o->holdout);
	return prp_apply(&o->split, j);
}

int order_shuffle_parse(const char *s, enum order_shuffle *out)
{
	if (!strcmp(s, "global"))
		*out = ORDER_SHUFFLE_GLOBAL;
	else if (!strcmp(s, "none"))
		*out = ORDER_SHUFFLE_NONE;
	else
		return -EINVAL;
	return 0;
}

const char *order_shuffle_name(enum order_shuffle s)
{
	return s == ORDER_SHUFFLE_NONE ? "none" : "global";
}

uint64_t order_one_sample(const struct order *o, uint64_t gsn, uint64_t *epoch)
{
	struct prp p;
	uint64_t e = gsn / o->n, pos = gsn % o->n;

	assert(gsn < ORDER_MAX_GSN);
	if (epoch)
		*epoch = e;
	if (o->shuffle != ORDER_SHUFFLE_NONE) {
		prp_init(&p, o->n, o->seed, e);
		pos = prp_apply(&p, pos);
	}
	return o->holdout ? prp_apply(&o->split, o->holdout + pos) : pos;
}

int order_one_fill(const struct order *o, uint64_t gsn, size_t count, uint64_t *ids)
{
	uint64_t end, e, pos;
	struct prp p;

	if (__builtin_add_overflow(gsn, (uint64_t)count, &end) || end > ORDER_MAX_GSN)
		return -EOVERFLOW;
	e = gsn / o->n;
	pos = gsn % o->n;
	while (count) {
		/* the part of the run inside epoch e */
		size_t run = o->n - pos < count ? (size_t)(o->n - pos) : count;

		if (o->shuffle == ORDER_SHUFFLE_NONE) {
			for (size_t i = 0; i < run; i++)
				ids[i] = pos + i;
		} else {
			prp_init(&p, o->n, o->seed, e);
			prp_apply_run(&p, pos, run, ids);
		}
		for (size_t i = 0; o->holdout && i < run; i++)
			ids[i] = prp_apply(&o->split, o->holdout + ids[i]);
		ids += run;
		count -= run;
		pos = 0; /* crossing into the next epoch: new key schedule */
		e++;
	}
	return 0;
}

uint64_t order_one_limit(const struct order *o, uint64_t epochs)
{
	uint64_t lim;

	if (epochs == 0 || __builtin_mul_overflow(epochs, o->n, &lim) || lim > ORDER_MAX_GSN)
		return ORDER_MAX_GSN;
	return lim;
}
