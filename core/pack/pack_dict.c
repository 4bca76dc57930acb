/* pack_dict.c: the zstd dictionary of `zephon pack` (pack_int.h): the first samples held
 * back, and the training on them. Writing the held samples is pack_batch.c's
 * (pack_batch_write_held()), so this file calls no other step. */
#include "pack_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zdict.h>

int pack_dict_train(struct packer *p)
{
	size_t cap = p->o->dict_size;

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
	return 0;
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
		return 1;
	return 0;
}
