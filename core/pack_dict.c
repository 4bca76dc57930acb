/* pack_dict.c: the zstd dictionary of `zephon pack` (pack_int.h). */
#include "pack_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zdict.h>

#include "pool.h"

/* Train the dictionary on what was held back, then write the held samples. */
int pack_dict_finish(struct packer *p)
{
	struct pack_batch sb = { 0 };
	size_t cap = p->o->dict_size;
	uint64_t off = 0;
	int rc;

	p->training = 0;
	if (p->train.len / 8 < cap)
		cap = p->train.len / 8;
	if (cap >= 1024 && p->nstash >= 8) {
		size_t n;

		p->dict = malloc(cap);
		if (!p->dict)
			return -ENOMEM;
		n = ZDICT_trainFromBuffer(p->dict, cap, p->train.data, p->train_sizes,
					  (unsigned)p->nstash);
		if (ZDICT_isError(n)) {
			/* too little or too uniform data: packed without a dictionary */
			free(p->dict);
			p->dict = NULL;
		} else {
			p->dict_len = n;
		}
	}
	buf_release(&p->train);
	free(p->train_sizes);
	p->train_sizes = NULL;
	p->train_cap = 0;
	rc = pack_open_writer(p);
	if (rc)
		return rc;
	/* The held samples become a batch of their own, compressed on every thread. */
	while (sb.cap < p->nstash)
		if ((rc = pack_batch_grow(&sb, pool_size(p->pool))))
			goto out;
	sb.data = p->stash;
	memset(&p->stash, 0, sizeof(p->stash));
	for (size_t i = 0; i < p->nstash; i++) {
		sb.off[i] = off;
		sb.len[i] = p->stash_sizes[i];
		sb.why[i] = NULL;
		off += p->stash_sizes[i];
	}
	sb.n = p->nstash;
	pack_batch_run(p, &sb, 0, p->o->compress);
	for (size_t i = 0; !rc && i < sb.n; i++) {
		if (sb.status[i])
			rc = pack_fail(p, sb.status[i], "zstd failed on a sample");
		else
			rc = pack_write_record(p, &sb, i);
	}
out:
	pack_batch_release(&sb);
	free(p->stash_sizes);
	p->stash_sizes = NULL;
	p->nstash = p->stash_cap = 0;
	return rc;
}

int pack_dict_hold(struct packer *p, const void *data, size_t len)
{
	size_t t = len < PACK_DICT_SAMPLE_BYTES ? len : PACK_DICT_SAMPLE_BYTES;

	if (ARRAY_GROW(p->stash_sizes, p->stash_cap, p->nstash + 1) ||
	    ARRAY_GROW(p->train_sizes, p->train_cap, p->nstash + 1))
		return -ENOMEM;
	if (buf_append(&p->stash, data, len) || buf_append(&p->train, data, t))
		return -ENOMEM;
	p->stash_sizes[p->nstash] = len;
	p->train_sizes[p->nstash] = t;
	p->nstash++;
	if (p->train.len >= PACK_DICT_TRAIN_BYTES || p->stash.len >= 8 * PACK_DICT_TRAIN_BYTES ||
	    p->nstash >= (1u << 20))
		return pack_dict_finish(p);
	return 0;
}
