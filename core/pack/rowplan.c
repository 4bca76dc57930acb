/* rowplan.c: best-fit decreasing over whole documents (rowplan.h). */
#include "rowplan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define LEVELS_MAX 6       /* 64^6 > ROWPLAN_CAPACITY_MAX + 1 */

/* A set of room values 0..n-1 as a bitmap of 64-bit words with a bitmap above it for
 * the non-empty words, and so on up to one word: the least member >= i in O(levels). */
struct hbits {
	int levels;
	uint64_t n[LEVELS_MAX];
	uint64_t *w[LEVELS_MAX];
};

static int hbits_init(struct hbits *h, uint64_t n)
{
	memset(h, 0, sizeof(*h));
	for (;;) {
		uint64_t words = (n + 63) / 64;

		h->n[h->levels] = n;
		if (!(h->w[h->levels] = calloc(words, sizeof(uint64_t))))
			return -ENOMEM;
		h->levels++;
		if (words <= 1)
			return 0;
		n = words;
	}
}

static void hbits_free(struct hbits *h)
{
	for (int l = 0; l < h->levels; l++)
		free(h->w[l]);
}

static void hbits_set(struct hbits *h, uint64_t i)
{
	for (int l = 0; l < h->levels; l++, i /= 64)
		h->w[l][i / 64] |= UINT64_C(1) << (i % 64);
}

static void hbits_clear(struct hbits *h, uint64_t i)
{
	for (int l = 0; l < h->levels; l++, i /= 64) {
		h->w[l][i / 64] &= ~(UINT64_C(1) << (i % 64));
		if (h->w[l][i / 64])
			return; /* the word still has members: the levels above keep its bit */
	}
}

/* The least member >= i at level l, or -1. */
static int64_t hbits_next(const struct hbits *h, int l, uint64_t i)
{
	uint64_t m;
	int64_t up;

	if (i >= h->n[l])
		return -1;
	m = h->w[l][i / 64] & (~UINT64_C(0) << (i % 64));
	if (m)
		return (int64_t)(i / 64 * 64 + (uint64_t)__builtin_ctzll(m));
	if (l + 1 == h->levels)
		return -1; /* the top level is one word */
	up = hbits_next(h, l + 1, i / 64 + 1);
	if (up < 0)
		return -1;
	return up * 64 + __builtin_ctzll(h->w[l][up]);
}

/* Items by size, longest first, ties by index: a counting sort (sizes <= capacity). */
static uint32_t *order_by_size(const uint32_t *sizes, uint32_t n, uint32_t capacity)
{
	uint32_t *count = calloc((size_t)capacity + 2, sizeof(*count));
	uint32_t *order = malloc((size_t)n * sizeof(*order) + 1);

	if (!count || !order) {
		free(count);
		free(order);
		return NULL;
	}
	/* bucket k holds size capacity - k, so ascending buckets are descending sizes */
	for (uint32_t i = 0; i < n; i++)
		count[capacity - sizes[i] + 1]++;
	for (uint32_t k = 1; k <= capacity + 1; k++)
		count[k] += count[k - 1];
	for (uint32_t i = 0; i < n; i++)
		order[count[capacity - sizes[i]]++] = i;
	free(count);
	return order;
}

/* Place the items in order: row_of[i] for each; the rows opened. -ENOMEM or >= 0. */
static int64_t place(const uint32_t *sizes, const uint32_t *order, uint32_t n,
		     uint32_t capacity, uint32_t *row_of)
{
	struct hbits room = { 0 };  /* the room values some open row has */
	uint32_t *head = malloc(((size_t)capacity + 1) * sizeof(*head)); /* room -> last row */
	uint32_t *next = malloc((size_t)n * sizeof(*next) + 1);          /* row -> row below */
	uint32_t rows = 0;
	int64_t rc = -ENOMEM;

	if (!head || !next || hbits_init(&room, (uint64_t)capacity + 1))
		goto out;
	for (uint32_t c = 0; c <= capacity; c++)
		head[c] = NONE;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = order[k], s = sizes[i], r, left;
		int64_t c = hbits_next(&room, 0, s);

		if (c < 0) {
			r = rows++;
			left = capacity - s;
		} else {
			r = head[c];
			head[c] = next[r];
			if (head[c] == NONE)
				hbits_clear(&room, (uint64_t)c);
			left = (uint32_t)c - s;
		}
		row_of[i] = r;
		if (left) {         /* a full row takes no more */
			next[r] = head[left];
			if (head[left] == NONE)
				hbits_set(&room, left);
			head[left] = r;
		}
	}
	rc = rows;
out:
	hbits_free(&room);
	free(head);
	free(next);
	return rc;
}

int rowplan_make(const uint32_t *sizes, size_t n, uint32_t capacity, struct rowplan *out)
{
	uint32_t *order = NULL, *row_of = NULL;
	int64_t rows;

	memset(out, 0, sizeof(*out));
	if (capacity == 0 || capacity > ROWPLAN_CAPACITY_MAX || n >= UINT32_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (sizes[i] == 0 || sizes[i] > capacity)
			return -EINVAL;
		out->used += sizes[i];
	}
	if (!(order = order_by_size(sizes, (uint32_t)n, capacity)) ||
	    !(row_of = malloc(n * sizeof(*row_of) + 1)) ||
	    (rows = place(sizes, order, (uint32_t)n, capacity, row_of)) < 0)
		goto nomem;
	out->rows = (uint64_t)rows;
	out->first = calloc((size_t)rows + 2, sizeof(*out->first));
	out->members = malloc(n * sizeof(*out->members) + 1);
	if (!out->first || !out->members)
		goto nomem;
	/* members by row, each row's in index order (a counting sort by row) */
	for (size_t i = 0; i < n; i++)
		out->first[row_of[i] + 1]++;
	for (uint64_t r = 0; r < out->rows; r++)
		out->first[r + 1] += out->first[r];
	memcpy(order, out->first, (size_t)out->rows * sizeof(*order)); /* the next free slot */
	for (size_t i = 0; i < n; i++)
		out->members[order[row_of[i]]++] = (uint32_t)i;
	free(order);
	free(row_of);
	return 0;
nomem:
	free(order);
	free(row_of);
	rowplan_release(out);
	return -ENOMEM;
}

void rowplan_release(struct rowplan *p)
{
	free(p->first);
	free(p->members);
	memset(p, 0, sizeof(*p));
}
