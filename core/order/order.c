#include "order.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "mix.h"
#include "parse.h"

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

#define WHY(...) (snprintf(why_buf, why_len, __VA_ARGS__), -EINVAL)

int layout_check(const struct layout *l, char *why_buf, size_t why_len)
{
	uint64_t share;

	if (l->world_size == 0)
		return WHY("world_size must be at least 1");
	if (l->global_batch == 0)
		return WHY("global_batch must be at least 1");
	if (l->global_batch % l->world_size)
		return WHY("global_batch (%" PRIu64 ") must be a multiple of world_size (%" PRIu64 ")",
			   l->global_batch, l->world_size);
	share = l->global_batch / l->world_size;
	if (l->micro_batch == 0)
		return WHY("micro_batch must be at least 1");
	if (share % l->micro_batch)
		return WHY("micro_batch (%" PRIu64 ") must divide global_batch/world_size (%" PRIu64
			   " = %" PRIu64 "/%" PRIu64 ")",
			   l->micro_batch, share, l->global_batch, l->world_size);
	if (l->global_batch >= ORDER_MAX_GSN)
		return WHY("global_batch (%" PRIu64 ") must be below 2^62", l->global_batch);
	if (l->start_samples >= ORDER_MAX_GSN)
		return WHY("start_samples (%" PRIu64 ") must be below 2^62", l->start_samples);
	if (l->start_step >= ORDER_MAX_GSN)
		return WHY("start_step (%" PRIu64 ") must be below 2^62", l->start_step);
	return 0;
}

#undef WHY

uint64_t layout_world_size(const struct layout *l)
{
	return l->world_size;
}

uint64_t layout_global_batch(const struct layout *l)
{
	return l->global_batch;
}

uint64_t layout_micro_batch(const struct layout *l)
{
	return l->micro_batch;
}

uint64_t layout_start_step(const struct layout *l)
{
	return l->start_step;
}

uint64_t layout_start_samples(const struct layout *l)
{
	return l->start_samples;
}

uint64_t layout_whole_steps(const struct layout *l, uint64_t n)
{
	return n / l->global_batch;
}

uint64_t layout_share(const struct layout *l)
{
	return l->global_batch / l->world_size;
}

uint64_t layout_micros(const struct layout *l)
{
	return layout_share(l) / l->micro_batch;
}

int layout_step_gsn(const struct layout *l, uint64_t step, uint64_t *gsn)
{
	uint64_t off, g;

	if (step < l->start_step)
		return -EINVAL;
	if (__builtin_mul_overflow(step - l->start_step, l->global_batch, &off) ||
	    __builtin_add_overflow(off, l->start_samples, &g) || g >= ORDER_MAX_GSN)
		return -EOVERFLOW;
	*gsn = g;
	return 0;
}

int layout_micro_gsn(const struct layout *l, uint64_t rank, uint64_t step,
		     uint64_t micro, uint64_t *gsn)
{
	uint64_t g;
	int rc;

	if (rank >= l->world_size || micro >= layout_micros(l))
		return -EINVAL;
	rc = layout_step_gsn(l, step, &g);
	if (rc)
		return rc;
	/* rank * share + micro * m < B < 2^62 and g < 2^62: the sum cannot wrap. */
	g += rank * layout_share(l) + micro * l->micro_batch;
	if (g + l->micro_batch > ORDER_MAX_GSN)
		return -EOVERFLOW;
	*gsn = g;
	return 0;
}

uint64_t layout_step_of(const struct layout *l, uint64_t gsn)
{
	assert(gsn >= l->start_samples);
	return l->start_step + (gsn - l->start_samples) / l->global_batch;
}

void layout_advance(const struct layout *l, uint64_t *step, uint64_t *micro)
{
	if (++*micro == layout_micros(l)) {
		*micro = 0;
		++*step;
	}
}

int layout_pos_ci(const struct layout *l, uint64_t step, uint64_t micro, uint64_t *ci)
{
	uint64_t a = layout_micros(l), v;

	if (step < l->start_step || micro >= a)
		return -EINVAL;
	if (__builtin_mul_overflow(step - l->start_step, a, &v) ||
	    __builtin_add_overflow(v, micro, &v))
		return -EOVERFLOW;
	*ci = v;
	return 0;
}

void layout_ci_pos(const struct layout *l, uint64_t ci, uint64_t *step, uint64_t *micro)
{
	uint64_t a = layout_micros(l);

	if (__builtin_add_overflow(l->start_step, ci / a, step))
		*step = UINT64_MAX;
	*micro = ci % a;
}

int layout_step_in_stream(const struct layout *l, uint64_t limit, uint64_t step)
{
	uint64_t g;

	if (layout_step_gsn(l, step, &g))
		return 0;
	return g <= limit && l->global_batch <= limit - g;
}

int layout_at(const struct layout *l, uint64_t gsn, struct layout *out)
{
	if (gsn >= ORDER_MAX_GSN || l->global_batch > ORDER_MAX_GSN - gsn)
		return -EOVERFLOW;
	*out = *l;
	out->start_step = 0;
	out->start_samples = gsn;
	return 0;
}

uint64_t layout_done(const struct layout *l, uint64_t delivered_step)
{
	return delivered_step > l->start_step ? delivered_step - l->start_step : 0;
}

uint64_t layout_consumed(const struct layout *l, uint64_t done, uint64_t *step)
{
	uint64_t off, g;

	if (l->start_samples >= ORDER_MAX_GSN) {
		done = 0;
		g = l->start_samples;
	} else if (__builtin_mul_overflow(done, l->global_batch, &off) ||
		   __builtin_add_overflow(off, l->start_samples, &g) || g > ORDER_MAX_GSN) {
		/* the last whole step below ORDER_MAX_GSN */
		done = (ORDER_MAX_GSN - l->start_samples) / l->global_batch;
		g = l->start_samples + done * l->global_batch;
	}
	if (step && __builtin_add_overflow(l->start_step, done, step))
		*step = UINT64_MAX;
	return g;
}

uint64_t layout_consumed_at(const struct layout *l, uint64_t slowest, uint64_t *step)
{
	return layout_consumed(l, layout_done(l, slowest), step);
}

uint64_t layout_resume_step(const struct layout *prev, uint64_t global_batch, uint64_t gsn)
{
	if (!prev)
		return gsn / global_batch;
	return layout_step_of(prev, gsn);
}

#define WHY(...) (snprintf(why_buf, why_len, __VA_ARGS__), rc = -EINVAL)

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int rankset_parse(const char *text, uint64_t world_size, struct rankset *out,
		  char *why_buf, size_t why_len)
{
	const char *p = text;
	size_t cap = 0;
	int rc = 0;

	out->ranks = NULL;
	out->count = 0;
	if (!text || !*text) {
		if (world_size > (UINT64_C(1) << 24)) {
			WHY("world_size (%" PRIu64 ") is too large to serve every rank from one mount; "
			    "give ranks=", world_size);
			return rc;
		}
		out->ranks = calloc(world_size, sizeof(*out->ranks));
		if (!out->ranks)
			return -ENOMEM;
		for (uint64_t r = 0; r < world_size; r++)
			out->ranks[r] = r;
		out->count = world_size;
		return 0;
	}
	while (!rc) {
		uint64_t lo, hi;

		if (parse_u64_prefix(&p, &lo)) {
			WHY("ranks: expected a rank number at \"%s\"", p);
			break;
		}
		hi = lo;
		if (*p == '-') {
			p++;
			if (parse_u64_prefix(&p, &hi)) {
				WHY("ranks: expected a rank number after '-' at \"%s\"", p);
				break;
			}
			if (hi < lo) {
				WHY("ranks: range %" PRIu64 "-%" PRIu64 " is reversed", lo, hi);
				break;
			}
		}
		if (hi >= world_size) {
			WHY("ranks: rank %" PRIu64 " is not below world_size (%" PRIu64 ")", hi, world_size);
			break;
		}
		if (hi - lo >= (UINT64_C(1) << 24) || out->count + (hi - lo + 1) > (UINT64_C(1) << 24)) {
			WHY("ranks: more than 2^24 ranks in one mount");
			break;
		}
		for (uint64_t r = lo; r <= hi; r++) {
			if ((rc = ARRAY_GROW(out->ranks, cap, out->count + 1)))
				break;
			out->ranks[out->count++] = r;
		}
		if (rc || !*p)
			break;
		if (*p != ',') {
			WHY("ranks: unexpected \"%s\" (use a list like 0-3,8,9)", p);
			break;
		}
		p++;
	}
	if (!rc) {
		qsort(out->ranks, out->count, sizeof(*out->ranks), cmp_u64);
		for (size_t i = 1; i < out->count; i++)
			if (out->ranks[i] == out->ranks[i - 1]) {
				WHY("ranks: rank %" PRIu64 " is listed twice", out->ranks[i]);
				break;
			}
	}
	if (rc)
		rankset_release(out);
	return rc;
}

#undef WHY

ssize_t rankset_index(const struct rankset *s, uint64_t rank)
{
	size_t lo = 0, hi = s->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->ranks[mid] == rank)
			return (ssize_t)mid;
		if (s->ranks[mid] < rank)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

int rankset_has(const struct rankset *s, uint64_t rank)
{
	return rankset_index(s, rank) >= 0;
}

void rankset_format(const struct rankset *s, char *out, size_t len)
{
	size_t used = 0;

	if (!len)
		return;
	out[0] = 0;
	for (size_t i = 0; i < s->count && used < len;) {
		size_t j = i;
		int n;

		while (j + 1 < s->count && s->ranks[j + 1] == s->ranks[j] + 1)
			j++;
		if (j == i)
			n = snprintf(out + used, len - used, "%s%" PRIu64, i ? "," : "", s->ranks[i]);
		else
			n = snprintf(out + used, len - used, "%s%" PRIu64 "-%" PRIu64, i ? "," : "",
				     s->ranks[i], s->ranks[j]);
		if (n < 0)
			break;
		used += (size_t)n;
		i = j + 1;
	}
}

void rankset_release(struct rankset *s)
{
	free(s->ranks);
	s->ranks = NULL;
	s->count = 0;
}
