#include "mix.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "order_one.h"
#include "prp.h"

static uint64_t gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/* The fraction p/q of x >= 0 with q <= 10^6 within MIX_WEIGHT_TOLERANCE of it: a decimal
 * p/10^k first (weights are written in decimal: 0.999999 is 999999/10^6, although
 * 999998/999999 is as close to the double), else the convergent of x's continued
 * fraction of smallest q (0.3333333333 is 1/3). 0, or -1 when there is none. */
static int as_fraction(double x, uint64_t *p, uint64_t *q)
{
	double r = x;
	uint64_t p0 = 0, q0 = 1, p1 = 1, q1 = 0;

	for (uint64_t k = 1; k <= 1000000; k *= 10) {
		double v = nearbyint(x * (double)k);

		if (v < 1e15 && fabs(v / (double)k - x) <= MIX_WEIGHT_TOLERANCE * fmax(x, 1e-300)) {
			uint64_t g = gcd((uint64_t)v, k);

			*p = (uint64_t)v / (g ? g : 1);
			*q = k / (g ? g : 1);
			return 0;
		}
	}

	for (int i = 0; i < 64; i++) {
		double fl = floor(r);
		uint64_t a, p2, q2;

		if (fl > 1e15)
			return -1;
		a = (uint64_t)fl;
		p2 = a * p1 + p0;
		q2 = a * q1 + q0;
		if (q2 > 1000000)
			return -1;
		if (fabs((double)p2 / (double)q2 - x) <= MIX_WEIGHT_TOLERANCE * fmax(x, 1e-300)) {
			*p = p2;
			*q = q2;
			return 0;
		}
		if (r - fl <= 0)
			return -1;
		r = 1.0 / (r - fl);
		p0 = p1;
		q0 = q1;
		p1 = p2;
		q1 = q2;
	}
	return -1;
}

int mix_weights_exact(const double *w, size_t k, uint64_t *a, char *why, size_t why_len)
{
	uint64_t p[MIX_MAX_SOURCES], q[MIX_MAX_SOURCES], lcm = 1, g = 0, sum = 0;

	if (k == 0 || k > MIX_MAX_SOURCES)
		return err_set(why, why_len, -EINVAL, "a mixture has 1 to %d sources, not %zu",
				MIX_MAX_SOURCES, k);
	for (size_t s = 0; s < k; s++) {
		if (!isfinite(w[s]) || w[s] < 0)
			return err_set(why, why_len, -EINVAL, "weight %zu (%g) must be a "
					"finite number >= 0", s + 1, w[s]);
		if (w[s] == 0) {
			p[s] = 0;
			q[s] = 1;
			continue;
		}
		if (as_fraction(w[s], &p[s], &q[s]))
			return err_set(why, why_len, -EINVAL, "weight %zu (%.17g) is no "
					"fraction with a denominator up to 10^6: round it to "
					"fewer digits", s + 1, w[s]);
		if (__builtin_mul_overflow(lcm / gcd(lcm, q[s]), q[s], &lcm) ||
		    lcm > MIX_MAX_PERIOD * MIX_MAX_PERIOD)
			return err_set(why, why_len, -EINVAL,
					"the weights need a period above %" PRIu64 " slots: "
					"round them to fewer digits",
					MIX_MAX_PERIOD);
	}
	for (size_t s = 0; s < k; s++) {
		if (__builtin_mul_overflow(p[s], lcm / q[s], &a[s]))
			return err_set(why, why_len, -EINVAL,
					"the weights need a period above %" PRIu64 " slots: "
					"round them to fewer digits",
					MIX_MAX_PERIOD);
		g = gcd(g, a[s]);
	}
	if (g == 0)
		return err_set(why, why_len, -EINVAL, "the weights sum to 0: at least one must "
				"be above 0");
	for (size_t s = 0; s < k; s++) {
		a[s] /= g;
		if (__builtin_add_overflow(sum, a[s], &sum) || sum > MIX_MAX_PERIOD)
			return err_set(why, why_len, -EINVAL,
					"the weights need a period above %" PRIu64 " slots "
					"(their ratios in smallest integers must sum to at "
					"most that): round them to fewer digits",
					MIX_MAX_PERIOD);
	}
	return 0;
}

static int name_at(const char *const *names, size_t k, const char *s, size_t len)
{
	for (size_t i = 0; i < k; i++)
		if (names[i] && strlen(names[i]) == len && !memcmp(names[i], s, len))
			return (int)i;
	return -1;
}

int mix_weights_parse(const char *text, const char *const *names, size_t k, double *w,
		      char *why, size_t why_len)
{
	unsigned char seen[MIX_MAX_SOURCES] = {0};
	const char *p = text;
	size_t n = 0;
	int named = -1;

	if (k == 0 || k > MIX_MAX_SOURCES)
		return err_set(why, why_len, -EINVAL, "a mixture has 1 to %d sources, not %zu",
				MIX_MAX_SOURCES, k);
	for (;;) {
		const char *end = p + strcspn(p, ",+"), *colon = memchr(p, ':', (size_t)(end - p));
		char num[64], *stop;
		size_t idx = n;

		if ((colon != NULL) != (named == 1) && named != -1)
			return err_set(why, why_len, -EINVAL, "weights \"%s\": give a name to "
					"every weight or to none", text);
		named = colon != NULL;
		if (colon) {
			int i = name_at(names, k, p, (size_t)(colon - p));

			if (i < 0)
				return err_set(why, why_len, -EINVAL, "weights \"%s\": no "
						"source is named \"%.*s\"", text,
						(int)(colon - p), p);
			if (seen[i])
				return err_set(why, why_len, -EINVAL, "weights \"%s\": source "
						"\"%s\" is given twice", text, names[i]);
			idx = (size_t)i;
			p = colon + 1;
		} else if (n >= k) {
			return err_set(why, why_len, -EINVAL, "weights \"%s\": more weights "
					"than the %zu sources", text, k);
		}
		if ((size_t)(end - p) >= sizeof num || end == p)
			return err_set(why, why_len, -EINVAL, "weights \"%s\": \"%.*s\" is not "
					"a number", text, (int)(end - p), p);
		memcpy(num, p, (size_t)(end - p));
		num[end - p] = 0;
		errno = 0;
		w[idx] = strtod(num, &stop);
		if (*stop || errno)
			return err_set(why, why_len, -EINVAL, "weights \"%s\": \"%s\" is not a "
					"number", text, num);
		seen[idx] = 1;
		n++;
		if (!*end)
			break;
		p = end + 1;
	}
	if (n != k)
		return err_set(why, why_len, -EINVAL, "weights \"%s\": %zu weights for %zu "
				"sources", text, n, k);
	return 0;
}

struct mix_schedule {
	size_t k;
	uint64_t period;   /* D */
	uint64_t *a;       /* [k] integer weights */
	uint64_t *first;   /* [k + 1]: prefix sums of a: source s's slots are slot[first[s]..] */
	uint16_t *src;     /* [D]: the source of each slot of the period */
	uint32_t *rank;    /* [D]: the slot's index among its source's slots in the period */
	uint32_t *slot;    /* [D]: slot[first[s] + j] = the period slot of source s's j-th */
};

void mix_schedule_free(struct mix_schedule *m)
{
	if (!m)
		return;
	free(m->a);
	free(m->first);
	free(m->src);
	free(m->rank);
	free(m->slot);
	free(m);
}

/* A binary min-heap of (key, source), ordered by key then source. */
struct heap {
	uint64_t key[MIX_MAX_SOURCES];
	uint16_t s[MIX_MAX_SOURCES];
	size_t n;
};

static int heap_less(const struct heap *h, size_t i, size_t j)
{
	return h->key[i] < h->key[j] || (h->key[i] == h->key[j] && h->s[i] < h->s[j]);
}

static void heap_swap(struct heap *h, size_t i, size_t j)
{
	uint64_t k = h->key[i];
	uint16_t s = h->s[i];

	h->key[i] = h->key[j];
	h->s[i] = h->s[j];
	h->key[j] = k;
	h->s[j] = s;
}

static void heap_push(struct heap *h, uint64_t key, size_t s)
{
	size_t i = h->n++;

	h->key[i] = key;
	h->s[i] = (uint16_t)s;
	while (i && heap_less(h, i, (i - 1) / 2)) {
		heap_swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_pop(struct heap *h)
{
	size_t i = 0;

	h->n--;
	h->key[0] = h->key[h->n];
	h->s[0] = h->s[h->n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < h->n && heap_less(h, l, m))
			m = l;
		if (r < h->n && heap_less(h, r, m))
			m = r;
		if (m == i)
			return;
		heap_swap(h, i, m);
		i = m;
	}
}

/* Release and deadline (1-based slots) of source s's k-th slot (k >= 1), as in mix.h. */
static uint64_t release_of(uint64_t k, uint64_t a, uint64_t d)
{
	return (k - 1) * d / a + 1;
}

static uint64_t deadline_of(uint64_t k, uint64_t a, uint64_t d)
{
	return (k * d + a - 1) / a;
}

/* Earliest deadline first over the period's slots 1..D. */
static int schedule_fill(struct mix_schedule *m)
{
	/* r[0]: released slots by deadline; r[1]: each source's next slot by release */
	struct heap *r = calloc(2, sizeof *r);
	uint64_t next[MIX_MAX_SOURCES]; /* 1-based index of each source's next slot */

	if (!r)
		return -ENOMEM;
	for (size_t s = 0; s < m->k; s++) {
		next[s] = 1;
		if (m->a[s])
			heap_push(&r[1], release_of(1, m->a[s], m->period), s);
	}
	for (uint64_t n = 1; n <= m->period; n++) {
		size_t s;
		uint64_t k;

		while (r[1].n && r[1].key[0] <= n) {
			s = r[1].s[0];
			heap_pop(&r[1]);
			heap_push(&r[0], deadline_of(next[s], m->a[s], m->period), s);
		}
		if (!r[0].n || r[0].key[0] < n) {
			free(r);
			return -EDOM;
		}
		s = r[0].s[0];
		heap_pop(&r[0]);
		k = next[s]++;
		m->src[n - 1] = (uint16_t)s;
		m->rank[n - 1] = (uint32_t)(k - 1);
		m->slot[m->first[s] + k - 1] = (uint32_t)(n - 1);
		if (k < m->a[s])
			heap_push(&r[1], release_of(k + 1, m->a[s], m->period), s);
	}
	free(r);
	return 0;
}

int mix_schedule_new(const uint64_t *a, size_t k, struct mix_schedule **out)
{
	struct mix_schedule *m;
	uint64_t d = 0;
	int rc;

	if (k == 0 || k > MIX_MAX_SOURCES)
		return -EINVAL;
	for (size_t s = 0; s < k; s++)
		if (a[s] > MIX_MAX_PERIOD || (d += a[s]) > MIX_MAX_PERIOD)
			return -EINVAL;
	if (d == 0)
		return -EINVAL;
	m = calloc(1, sizeof *m);
	if (!m)
		return -ENOMEM;
	m->k = k;
	m->period = d;
	m->a = malloc(k * sizeof *m->a);
	m->first = malloc((k + 1) * sizeof *m->first);
	m->src = malloc(d * sizeof *m->src);
	m->rank = malloc(d * sizeof *m->rank);
	m->slot = malloc(d * sizeof *m->slot);
	if (!m->a || !m->first || !m->src || !m->rank || !m->slot) {
		mix_schedule_free(m);
		return -ENOMEM;
	}
	m->first[0] = 0;
	for (size_t s = 0; s < k; s++) {
		m->a[s] = a[s];
		m->first[s + 1] = m->first[s] + a[s];
	}
	rc = schedule_fill(m);
	if (rc) {
		mix_schedule_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

uint64_t mix_schedule_period(const struct mix_schedule *m)
{
	return m->period;
}

uint64_t mix_schedule_weight(const struct mix_schedule *m, size_t s)
{
	return m->a[s];
}

size_t mix_schedule_at(const struct mix_schedule *m, uint64_t n, uint64_t *j)
{
	uint64_t q = n / m->period, r = n % m->period;
	size_t s = m->src[r];

	*j = q * m->a[s] + m->rank[r];
	return s;
}

uint64_t mix_schedule_count(const struct mix_schedule *m, size_t s, uint64_t n)
{
	uint64_t q = n / m->period, r = n % m->period, lo = 0, hi = m->a[s];
	const uint32_t *slot = m->slot + m->first[s];

	/* the slots of s in the period below r: a lower bound over its sorted slots */
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (slot[mid] < r)
			lo = mid + 1;
		else
			hi = mid;
	}
	return q * m->a[s] + lo;
}

uint64_t mix_schedule_slot(const struct mix_schedule *m, size_t s, uint64_t j)
{
	uint64_t q, n;

	if (m->a[s] == 0)
		return UINT64_MAX;
	q = j / m->a[s];
	if (__builtin_mul_overflow(q, m->period, &n) ||
	    __builtin_add_overflow(n, (uint64_t)m->slot[m->first[s] + j % m->a[s]], &n) ||
	    n >= ORDER_MAX_GSN)
		return UINT64_MAX;
	return n;
}

struct mix_segment {
	uint64_t start;
	struct mix_schedule *sched;
	uint64_t *base;    /* [k]: samples of each source in gsn [0, start) */
};

struct mixture {
	size_t k;
	struct order *src;     /* [k] */
	uint64_t *offset;      /* [k] */
	struct mix_segment *seg;
	size_t nseg, cap;
};

static void segment_release(struct mix_segment *g)
{
	mix_schedule_free(g->sched);
	free(g->base);
}

void mixture_free(struct mixture *mx)
{
	if (!mx)
		return;
	for (size_t i = 0; i < mx->nseg; i++)
		segment_release(&mx->seg[i]);
	free(mx->seg);
	free(mx->src);
	free(mx->offset);
	free(mx);
}

int mixture_new(size_t k, const struct order *src, const uint64_t *offset,
		const uint64_t *weights0, struct mixture **out)
{
	struct mixture *mx;
	int rc;

	if (k == 0 || k > MIX_MAX_SOURCES)
		return -EINVAL;
	mx = calloc(1, sizeof *mx);
	if (!mx)
		return -ENOMEM;
	mx->k = k;
	mx->src = malloc(k * sizeof *mx->src);
	mx->offset = malloc(k * sizeof *mx->offset);
	if (!mx->src || !mx->offset) {
		mixture_free(mx);
		return -ENOMEM;
	}
	memcpy(mx->src, src, k * sizeof *src);
	memcpy(mx->offset, offset, k * sizeof *offset);
	for (size_t s = 0; s < k; s++)
		mx->src[s].mix = NULL;
	rc = mixture_set_weights(mx, 0, weights0);
	if (rc) {
		mixture_free(mx);
		return rc;
	}
	*out = mx;
	return 0;
}

size_t mixture_segment_at(const struct mixture *mx, uint64_t gsn)
{
	size_t lo = 0, hi = mx->nseg;

	/* the last segment with start <= gsn; segment 0 starts at 0 */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (mx->seg[mid].start <= gsn)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

uint64_t mixture_count(const struct mixture *mx, size_t s, uint64_t gsn)
{
	const struct mix_segment *g = &mx->seg[mixture_segment_at(mx, gsn)];

	return g->base[s] + mix_schedule_count(g->sched, s, gsn - g->start);
}

int mixture_set_weights(struct mixture *mx, uint64_t start, const uint64_t *a)
{
	struct mix_segment g = {.start = start};
	size_t keep = 0;
	int rc;

	if (start >= ORDER_MAX_GSN)
		return -EINVAL;
	if (mx->nseg) {
		size_t at = mixture_segment_at(mx, start);

		/* the segments that start before `start` stay */
		keep = mx->seg[at].start < start ? at + 1 : at;
		if (keep > 0 && !memcmp(mx->seg[keep - 1].sched->a, a, mx->k * sizeof *a)) {
			/* the weights in force just before start go on */
			for (size_t i = keep; i < mx->nseg; i++)
				segment_release(&mx->seg[i]);
			mx->nseg = keep;
			return 0;
		}
	} else if (start != 0) {
		return -EINVAL;
	}
	rc = mix_schedule_new(a, mx->k, &g.sched);
	if (rc)
		return rc;
	g.base = malloc(mx->k * sizeof *g.base);
	if (!g.base || ARRAY_GROW(mx->seg, mx->cap, keep + 1)) {
		segment_release(&g);
		return -ENOMEM;
	}
	for (size_t s = 0; s < mx->k; s++)
		g.base[s] = keep ? mixture_count(mx, s, start) : 0;
	for (size_t i = keep; i < mx->nseg; i++)
		segment_release(&mx->seg[i]);
	mx->seg[keep] = g;
	mx->nseg = keep + 1;
	return 0;
}

size_t mixture_sources(const struct mixture *mx)
{
	return mx->k;
}

size_t mixture_segments(const struct mixture *mx)
{
	return mx->nseg;
}

uint64_t mixture_segment_start(const struct mixture *mx, size_t i)
{
	return mx->seg[i].start;
}

const uint64_t *mixture_segment_weights(const struct mixture *mx, size_t i)
{
	return mx->seg[i].sched->a;
}

size_t mixture_locate(const struct mixture *mx, uint64_t gsn, uint64_t *k)
{
	const struct mix_segment *g = &mx->seg[mixture_segment_at(mx, gsn)];
	uint64_t j;
	size_t s = mix_schedule_at(g->sched, gsn - g->start, &j);

	*k = g->base[s] + j;
	return s;
}

uint64_t mixture_gsn_of(const struct mixture *mx, size_t s, uint64_t k)
{
	for (size_t i = 0; i < mx->nseg; i++) {
		const struct mix_segment *g = &mx->seg[i];
		uint64_t end = i + 1 < mx->nseg ? mx->seg[i + 1].start : ORDER_MAX_GSN, n;

		if (k < g->base[s])
			continue;
		n = mix_schedule_slot(g->sched, s, k - g->base[s]);
		if (n != UINT64_MAX && n < end - g->start)
			return g->start + n;
	}
	return ORDER_MAX_GSN;
}

uint64_t mixture_sample(const struct mixture *mx, uint64_t gsn, uint64_t *epoch,
			size_t *source)
{
	uint64_t k;
	size_t s = mixture_locate(mx, gsn, &k);

	if (source)
		*source = s;
	return mx->offset[s] + order_one_sample(&mx->src[s], k, epoch);
}

/* Gsns mixture_fill() sorts by source at once; its buffers live on the stack. */
#define MIX_FILL_CHUNK 512

/* ids[0..run) for gsn [gsn, gsn + run), all in segment g, run <= MIX_FILL_CHUNK. The
 * slots of one source in a segment hold its consecutive source gsns, so each source's
 * share of the run is one order_one_fill() (one key schedule per source and epoch, the
 * permutation's lanes busy) instead of one order_one_sample() per gsn; then the ids go back
 * to their slots. */
static int fill_run(const struct mixture *mx, const struct mix_segment *g, uint64_t gsn,
		    size_t run, uint64_t *ids)
{
	const struct mix_schedule *m = g->sched;
	uint64_t n = gsn - g->start, q = n / m->period, r = n % m->period;
	uint64_t tmp[MIX_FILL_CHUNK], first[MIX_MAX_SOURCES];
	size_t cnt[MIX_MAX_SOURCES] = {0}, at[MIX_MAX_SOURCES], nseen = 0, pos = 0;
	uint16_t src[MIX_FILL_CHUNK], seen[MIX_MAX_SOURCES];

	for (size_t i = 0; i < run; i++) {
		size_t s = m->src[r];

		if (!cnt[s]) {
			first[s] = g->base[s] + q * m->a[s] + m->rank[r];
			seen[nseen++] = (uint16_t)s;
		}
		cnt[s]++;
		src[i] = (uint16_t)s;
		if (++r == m->period) {
			r = 0;
			q++;
		}
	}
	for (size_t i = 0; i < nseen; i++) {
		size_t s = seen[i];
		int rc = order_one_fill(&mx->src[s], first[s], cnt[s], tmp + pos);

		if (rc)
			return rc;
		at[s] = pos;
		pos += cnt[s];
	}
	for (size_t i = 0; i < run; i++) {
		size_t s = src[i];

		ids[i] = mx->offset[s] + tmp[at[s]++];
	}
	return 0;
}

int mixture_fill(const struct mixture *mx, uint64_t gsn, size_t count, uint64_t *ids)
{
	uint64_t end;

	if (__builtin_add_overflow(gsn, (uint64_t)count, &end) || end > ORDER_MAX_GSN)
		return -EOVERFLOW;
	while (count) {
		size_t i = mixture_segment_at(mx, gsn), run = count;
		uint64_t seg_end = i + 1 < mx->nseg ? mx->seg[i + 1].start : ORDER_MAX_GSN;
		int rc;

		if (run > MIX_FILL_CHUNK)
			run = MIX_FILL_CHUNK;
		if (run > seg_end - gsn)
			run = (size_t)(seg_end - gsn);
		rc = fill_run(mx, &mx->seg[i], gsn, run, ids);
		if (rc)
			return rc;
		gsn += run;
		ids += run;
		count -= run;
	}
	return 0;
}

uint64_t mixture_limit(const struct mixture *mx, uint64_t epochs)
{
	uint64_t lim = ORDER_MAX_GSN;

	if (epochs == 0)
		return lim;
	for (size_t s = 0; s < mx->k; s++) {
		uint64_t k, g;

		if (__builtin_mul_overflow(epochs, mx->src[s].n, &k) || k >= ORDER_MAX_GSN)
			continue;
		g = mixture_gsn_of(mx, s, k);
		if (g < lim)
			lim = g;
	}
	return lim;
}

uint64_t mixture_validation_sample(const struct mixture *mx, uint64_t j, size_t *source)
{
	size_t s = 0;

	while (s + 1 < mx->k && j >= mx->src[s].holdout)
		j -= mx->src[s++].holdout;
	if (source)
		*source = s;
	return mx->offset[s] + order_validation_sample(&mx->src[s], j);
}

uint64_t mixture_holdout(const struct mixture *mx)
{
	uint64_t v = 0;

	for (size_t s = 0; s < mx->k; s++)
		v += mx->src[s].holdout;
	return v;
}

uint64_t mixture_epoch(const struct mixture *mx, uint64_t gsn)
{
	const uint64_t *a = mixture_segment_weights(mx, mixture_segment_at(mx, gsn));
	uint64_t e = UINT64_MAX;

	for (size_t s = 0; s < mx->k; s++) {
		uint64_t es = a[s] ? mixture_count(mx, s, gsn) / mx->src[s].n : UINT64_MAX;

		if (es < e)
			e = es;
	}
	return e == UINT64_MAX ? 0 : e;
}

const struct order *mixture_source_order(const struct mixture *mx, size_t s)
{
	return &mx->src[s];
}

uint64_t mixture_source_seed(uint64_t seed, size_t s)
{
	return prp_mix64(seed ^ prp_mix64(UINT64_C(0x6d6978) + s)); /* "mix" */
}
