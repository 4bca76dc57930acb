#include "batch.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void batch_free(struct batch *b)
{
	if (!b)
		return;
	buf_release(&b->data);
	free(b->views);
	free(b->ids);
	free(b);
}

uint64_t batch_len(const struct batch *b)
{
	return b->data.len + b->views_len;
}

size_t batch_slice(const struct batch *b, uint64_t off, size_t size, struct iovec *iov,
		   size_t max, size_t *bytes)
{
	size_t n = 0, got = 0;
	uint64_t pos = 0;

	/* the segments: data, then each view; take the part of each inside the window */
	for (size_t k = 0; k <= b->nviews && got < size && n < max; k++) {
		const uint8_t *base = k ? b->views[k - 1].iov_base : b->data.data;
		uint64_t len = k ? b->views[k - 1].iov_len : b->data.len;

		if (off < pos + len && len) {
			uint64_t from = off > pos ? off - pos : 0;
			uint64_t take = len - from < size - got ? len - from : size - got;

			iov[n++] = (struct iovec){ (void *)(base + from), (size_t)take };
			got += (size_t)take;
		}
		pos += len;
	}
	*bytes = got;
	return n;
}

int batch_encode(struct sample_reader *r, const struct batch_spec *sp, int views,
		 struct buf data, struct batch **out, uint64_t *bad_id)
{
	const struct layout *l = sp->layout;
	uint64_t micro = sp->micro, micros = sp->micros;
	struct batch *b;
	uint64_t gsn, count;
	int rc;

	if (micros == 0 || micro >= layout_micros(l) || micros > layout_micros(l) - micro) {
		buf_release(&data);
		return -EINVAL;
	}
	rc = layout_micro_gsn(l, sp->rank, sp->step, micro, &gsn);
	count = layout_micros_samples(l, micros); /* <= B/W < 2^62 */
	if (!rc && count > SIZE_MAX / sizeof(uint64_t))
		rc = -ENOMEM;
	b = rc ? NULL : calloc(1, sizeof(*b));
	if (b) {
		b->ids = malloc(count * sizeof(*b->ids));
		if (views)
			b->views = malloc(count * sizeof(*b->views));
	}
	if (!b || !b->ids || (views && !b->views)) {
		batch_free(b);
		buf_release(&data);
		return rc ? rc : -ENOMEM;
	}
	data.len = 0;
	b->data = data;
	b->rank = sp->rank;
	b->step = sp->step;
	b->micro = micro;
	b->micros = micros;
	b->gsn = gsn;
	b->count = count;
	b->epoch = order_epoch(sp->order, gsn);
	rc = order_fill(sp->order, gsn, count, b->ids);
	if (!rc && views) {
		rc = encode_batch_views(&(struct encode_in){ r, sp->info, sp->format, b->ids,
					count }, &b->data, b->views,
					bad_id);
		b->nviews = rc ? 0 : count;
		for (size_t i = 0; i < b->nviews; i++)
			b->views_len += b->views[i].iov_len;
	} else if (!rc) {
		rc = encode_batch(&(struct encode_in){ r, sp->info, sp->format, b->ids, count },
				  &b->data, bad_id);
	}
	if (rc) {
		batch_free(b);
		return rc;
	}
	*out = b;
	return 0;
}

int batch_build(struct sample_reader *r, const struct batch_spec *sp, struct batch **out,
		uint64_t *bad_id)
{
	return batch_encode(r, sp, 0, (struct buf)BUF_INIT, out, bad_id);
}

struct batch *batch_copy(const struct batch *b)
{
	struct batch *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	*c = *b;
	c->data = (struct buf)BUF_INIT;
	c->views = b->nviews ? malloc(b->nviews * sizeof(*c->views)) : NULL;
	c->ids = malloc(b->count * sizeof(*c->ids));
	if (!c->ids || (b->nviews && !c->views) ||
	    buf_append(&c->data, b->data.data, b->data.len)) {
		batch_free(c);
		return NULL;
	}
	if (b->nviews)
		memcpy(c->views, b->views, b->nviews * sizeof(*c->views));
	memcpy(c->ids, b->ids, b->count * sizeof(*c->ids));
	return c;
}
