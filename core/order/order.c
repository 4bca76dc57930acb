#include "order.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mix.h"

int order_validation(const struct order *o, struct order *out)
{
	uint64_t v = o->mix ? mixture_holdout(o->mix) : o->holdout;

	if (!v || o->validation)
		return -ENOENT;
	*out = *o;
	out->validation = 1;
	out->n = v;
	return 0;
}

/* Validation position j of o (o->validation). */
static uint64_t validation_at(const struct order *o, uint64_t j)
{
	return o->mix ? mixture_validation_sample(o->mix, j, NULL)
		      : order_validation_sample(o, j);
}

uint64_t order_sample(const struct order *o, uint64_t gsn, uint64_t *epoch)
{
	assert(gsn < ORDER_MAX_GSN);
	if (o->validation) {
		if (epoch)
			*epoch = 0;
		return validation_at(o, gsn);
	}
	if (o->mix)
		return mixture_sample(o->mix, gsn, epoch, NULL);
	return order_one_sample(o, gsn, epoch);
}

uint64_t order_epoch(const struct order *o, uint64_t gsn)
{
	if (o->validation)
		return gsn / o->n;
	return o->mix ? mixture_epoch(o->mix, gsn) : gsn / o->n;
}

int order_fill(const struct order *o, uint64_t gsn, size_t count, uint64_t *ids)
{
	uint64_t end;

	if (__builtin_add_overflow(gsn, (uint64_t)count, &end) || end > ORDER_MAX_GSN)
		return -EOVERFLOW;
	if (o->validation) {
		if (end > o->n)
			return -EOVERFLOW;
		for (size_t i = 0; i < count; i++)
			ids[i] = validation_at(o, gsn + i);
		return 0;
	}
	if (o->mix)
		return mixture_fill(o->mix, gsn, count, ids);
	return order_one_fill(o, gsn, count, ids);
}

uint64_t order_limit(const struct order *o, uint64_t epochs)
{
	return o->mix ? mixture_limit(o->mix, epochs) : order_one_limit(o, epochs);
}
