/*
 * layout.c: struct layout's fields and every rule of its arithmetic (layout.h). The
 * fields live in the opaque array under the names below; nothing outside this file
 * reads them.
 */
#include "layout.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "parse.h"

/* The fields of struct layout (layout.h keeps them opaque). */
#define W(l) ((l)->opaque_[0])  /* world_size */
#define B(l) ((l)->opaque_[1])  /* global_batch */
#define M(l) ((l)->opaque_[2])  /* micro_batch */
#define S0(l) ((l)->opaque_[3]) /* start_step */
#define G0(l) ((l)->opaque_[4]) /* start_samples */

int layout_make(const struct layout_values *v, struct layout *out, char *why, size_t why_len)
{
	uint64_t share;

	if (v->world_size == 0)
		return err_set(why, why_len, -EINVAL, "world_size must be at least 1");
	if (v->global_batch == 0)
		return err_set(why, why_len, -EINVAL, "global_batch must be at least 1");
	if (v->global_batch % v->world_size)
		return err_set(why, why_len, -EINVAL, "global_batch (%" PRIu64 ") must be a "
			       "multiple of world_size (%" PRIu64 ")", v->global_batch, v->world_size);
	share = v->global_batch / v->world_size;
	if (v->micro_batch == 0)
		return err_set(why, why_len, -EINVAL, "micro_batch must be at least 1");
	if (share % v->micro_batch)
		return err_set(why, why_len, -EINVAL, "micro_batch (%" PRIu64 ") must divide "
			       "global_batch/world_size (%" PRIu64 " = %" PRIu64 "/%" PRIu64 ")",
			       v->micro_batch, share, v->global_batch, v->world_size);
	if (v->global_batch >= ORDER_MAX_GSN)
		return err_set(why, why_len, -EINVAL, "global_batch (%" PRIu64 ") must be below "
			       "2^62", v->global_batch);
	if (v->start_samples >= ORDER_MAX_GSN)
		return err_set(why, why_len, -EINVAL, "start_samples (%" PRIu64 ") must be below "
			       "2^62", v->start_samples);
	if (v->start_step >= ORDER_MAX_GSN)
		return err_set(why, why_len, -EINVAL, "start_step (%" PRIu64 ") must be below 2^62",
			       v->start_step);
	W(out) = v->world_size;
	B(out) = v->global_batch;
	M(out) = v->micro_batch;
	S0(out) = v->start_step;
	G0(out) = v->start_samples;
	return 0;
}

uint64_t layout_default_micro_batch(uint64_t world_size, uint64_t global_batch)
{
	return world_size && global_batch % world_size == 0 ? global_batch / world_size : 1;
}

int layout_start_at(const struct layout *l, uint64_t start_step, uint64_t start_samples,
		    struct layout *out, char *why, size_t why_len)
{
	struct layout_values v = { W(l), B(l), M(l), start_step, start_samples };
	struct layout nl;
	uint64_t g;
	int rc = layout_make(&v, &nl, why, why_len);

	if (rc)
		return rc;
	/* its first step must have a gsn, and so must the step after it */
	if (layout_step_gsn(&nl, start_step + 1, &g))
		return err_set(why, why_len, -EINVAL, "the step after start_step %" PRIu64 " (at "
			       "start_samples %" PRIu64 ") is past 2^62 samples", start_step,
			       start_samples);
	*out = nl;
	return 0;
}

int layout_valid(const struct layout *l)
{
	struct layout_values v;
	struct layout same;

	layout_get(l, &v);
	return layout_make(&v, &same, NULL, 0) == 0;
}

void layout_get(const struct layout *l, struct layout_values *out)
{
	*out = (struct layout_values){ W(l), B(l), M(l), S0(l), G0(l) };
}

uint64_t layout_world_size(const struct layout *l)
{
	return W(l);
}

uint64_t layout_global_batch(const struct layout *l)
{
	return B(l);
}

uint64_t layout_micro_batch(const struct layout *l)
{
	return M(l);
}

uint64_t layout_start_step(const struct layout *l)
{
	return S0(l);
}

uint64_t layout_start_samples(const struct layout *l)
{
	return G0(l);
}

int layout_same_shape(const struct layout *a, const struct layout *b)
{
	return W(a) == W(b) && B(a) == B(b) && M(a) == M(b);
}

uint64_t layout_share(const struct layout *l)
{
	return B(l) / W(l);
}

uint64_t layout_micros(const struct layout *l)
{
	return layout_share(l) / M(l);
}

uint64_t layout_shares_samples(const struct layout *l, uint64_t shares)
{
	uint64_t n;

	return __builtin_mul_overflow(shares, layout_share(l), &n) ? UINT64_MAX : n;
}

uint64_t layout_micros_samples(const struct layout *l, uint64_t micros)
{
	return micros * M(l);
}

uint64_t layout_whole_steps(const struct layout *l, uint64_t n)
{
	return n / B(l);
}

int layout_step_gsn(const struct layout *l, uint64_t step, uint64_t *gsn)
{
	uint64_t off, g;

	if (step < S0(l))
		return -EINVAL;
	if (__builtin_mul_overflow(step - S0(l), B(l), &off) ||
	    __builtin_add_overflow(off, G0(l), &g) || g >= ORDER_MAX_GSN)
		return -EOVERFLOW;
	*gsn = g;
	return 0;
}

/* rank * B/W + micro * m: where micro-batch (rank, micro) starts within its step; below
 * B < 2^62 for rank < W and micro < A. */
static uint64_t micro_offset(const struct layout *l, uint64_t rank, uint64_t micro)
{
	return rank * layout_share(l) + micro * M(l);
}

int layout_micro_gsn(const struct layout *l, uint64_t rank, uint64_t step,
		     uint64_t micro, uint64_t *gsn)
{
	uint64_t g;
	int rc;

	if (rank >= W(l) || micro >= layout_micros(l))
		return -EINVAL;
	rc = layout_step_gsn(l, step, &g);
	if (rc)
		return rc;
	/* the offset is below B < 2^62 and g < 2^62: the sum cannot wrap */
	g += micro_offset(l, rank, micro);
	if (g + M(l) > ORDER_MAX_GSN)
		return -EOVERFLOW;
	*gsn = g;
	return 0;
}

int layout_micro_step_gsn(const struct layout *l, uint64_t rank, uint64_t micro,
			  uint64_t gsn, uint64_t *step_gsn)
{
	uint64_t before;

	if (rank >= W(l) || micro >= layout_micros(l))
		return -EINVAL;
	before = micro_offset(l, rank, micro);
	if (gsn < before)
		return -EINVAL;
	*step_gsn = gsn - before;
	return 0;
}

uint64_t layout_step_of(const struct layout *l, uint64_t gsn)
{
	assert(gsn >= G0(l));
	return S0(l) + (gsn - G0(l)) / B(l);
}

int layout_step_number(const struct layout *l, uint64_t gsn, uint64_t *step)
{
	if (gsn < G0(l) || (gsn - G0(l)) % B(l))
		return -ERANGE;
	*step = layout_step_of(l, gsn);
	return 0;
}

int layout_gsn_after(const struct layout *l, uint64_t gsn, uint64_t k, uint64_t *out)
{
	uint64_t off, g;

	if (__builtin_mul_overflow(k, B(l), &off) || __builtin_add_overflow(gsn, off, &g) ||
	    g >= ORDER_MAX_GSN)
		return -EOVERFLOW;
	*out = g;
	return 0;
}

uint64_t layout_steps_below(const struct layout *l, uint64_t gsn, uint64_t limit)
{
	return limit > gsn ? (limit - gsn) / B(l) : 0;
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

	if (step < S0(l) || micro >= a)
		return -EINVAL;
	if (__builtin_mul_overflow(step - S0(l), a, &v) ||
	    __builtin_add_overflow(v, micro, &v))
		return -EOVERFLOW;
	*ci = v;
	return 0;
}

void layout_ci_pos(const struct layout *l, uint64_t ci, uint64_t *step, uint64_t *micro)
{
	uint64_t a = layout_micros(l);

	if (__builtin_add_overflow(S0(l), ci / a, step))
		*step = UINT64_MAX;
	*micro = ci % a;
}

int layout_step_in_stream(const struct layout *l, uint64_t limit, uint64_t step)
{
	uint64_t g;

	if (layout_step_gsn(l, step, &g))
		return 0;
	return g <= limit && B(l) <= limit - g;
}

int layout_at(const struct layout *l, uint64_t gsn, struct layout *out)
{
	if (gsn >= ORDER_MAX_GSN || B(l) > ORDER_MAX_GSN - gsn)
		return -EOVERFLOW;
	*out = *l;
	S0(out) = 0;
	G0(out) = gsn;
	return 0;
}

uint64_t layout_done(const struct layout *l, uint64_t delivered_step)
{
	return delivered_step > S0(l) ? delivered_step - S0(l) : 0;
}

uint64_t layout_consumed(const struct layout *l, uint64_t done, uint64_t *step)
{
	uint64_t off, g;

	if (G0(l) >= ORDER_MAX_GSN) {
		done = 0;
		g = G0(l);
	} else if (__builtin_mul_overflow(done, B(l), &off) ||
		   __builtin_add_overflow(off, G0(l), &g) || g > ORDER_MAX_GSN) {
		/* the last whole step below ORDER_MAX_GSN */
		done = (ORDER_MAX_GSN - G0(l)) / B(l);
		g = G0(l) + done * B(l);
	}
	if (step && __builtin_add_overflow(S0(l), done, step))
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
			return err_set(why_buf, why_len, -EINVAL, "world_size (%" PRIu64 ") is too large "
				       "to serve every rank from one mount; give ranks=", world_size);
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
			rc = err_set(why_buf, why_len, -EINVAL, "ranks: expected a rank number at \"%s\"", p);
			break;
		}
		hi = lo;
		if (*p == '-') {
			p++;
			if (parse_u64_prefix(&p, &hi)) {
				rc = err_set(why_buf, why_len, -EINVAL, "ranks: expected a rank number after '-' at \"%s\"", p);
				break;
			}
			if (hi < lo) {
				rc = err_set(why_buf, why_len, -EINVAL, "ranks: range %" PRIu64 "-%" PRIu64 " is reversed", lo, hi);
				break;
			}
		}
		if (hi >= world_size) {
			rc = err_set(why_buf, why_len, -EINVAL, "ranks: rank %" PRIu64 " is not below world_size (%" PRIu64 ")", hi, world_size);
			break;
		}
		if (hi - lo >= (UINT64_C(1) << 24) || out->count + (hi - lo + 1) > (UINT64_C(1) << 24)) {
			rc = err_set(why_buf, why_len, -EINVAL, "ranks: more than 2^24 ranks in one mount");
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
			rc = err_set(why_buf, why_len, -EINVAL, "ranks: unexpected \"%s\" (use a list like 0-3,8,9)", p);
			break;
		}
		p++;
	}
	if (!rc) {
		qsort(out->ranks, out->count, sizeof(*out->ranks), cmp_u64);
		for (size_t i = 1; i < out->count; i++)
			if (out->ranks[i] == out->ranks[i - 1]) {
				rc = err_set(why_buf, why_len, -EINVAL, "ranks: rank %" PRIu64 " is listed twice", out->ranks[i]);
				break;
			}
	}
	if (rc)
		rankset_release(out);
	return rc;
}


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
