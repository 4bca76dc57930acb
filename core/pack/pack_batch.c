/* pack_batch.c: record batches of `zephon pack` (pack_int.h). */
#include "pack_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compressor.h"
#include "json_check.h"
#include "pool.h"
#include "shard_index.h"
#include "shard_writer.h"

struct pack_batch_job {
	struct packer *p;
	struct pack_batch *b;
};

/* The shard writer and one compressor per pool thread, once the dictionary is known. */
int pack_open_writer(struct packer *p)
{
	struct shard_writer_opts wo = {
		.compress = p->o->compress,
		.level = p->o->level,
		.dict = p->dict,
		.dict_len = p->dict_len,
		.shard_bytes = p->o->shard_bytes,
	};
	char why[256];
	int rc = shard_writer_new(p->dirfd, &wo, &p->cat, &p->w, why, sizeof(why));

	if (rc)
		return pack_fail(p, rc, "%s: %s", p->o->out, why);
	if (!p->o->compress)
		return 0;
	p->comp = calloc(pool_size(p->pool), sizeof(*p->comp));
	if (!p->comp)
		return -ENOMEM;
	for (unsigned t = 0; t < pool_size(p->pool); t++) {
		rc = compressor_new(p->o->level, p->dict, p->dict_len, &p->comp[t]);
		if (rc)
			return pack_fail(p, rc, "zstd refused level %d or the trained dictionary",
				    p->o->level);
	}
	return 0;
}

void pack_batch_release(struct pack_batch *b)
{
	for (size_t i = 0; i < b->n; i++)
		free(b->why[i]);
	buf_release(&b->data);
	free(b->off);
	free(b->len);
	free(b->line);
	free(b->status);
	free(b->why);
	free(b->xxh);
	free(b->foff);
	free(b->flen);
	free(b->fthr);
	if (b->frames)
		for (unsigned t = 0; t < b->nthreads; t++)
			buf_release(&b->frames[t]);
	free(b->frames);
	free(b->bounds);
	memset(b, 0, sizeof(*b));
}

int pack_batch_grow(struct pack_batch *b, unsigned nthreads)
{
	size_t want = b->cap ? b->cap * 2 : 1024;
	int rc = b->cap > SIZE_MAX / 2 ? -EOVERFLOW : 0;

	/* Parallel arrays of one capacity: each grows from b->cap to want. */
#define GROW(f) do { size_t c_ = b->cap; if (!rc) rc = ARRAY_GROW(b->f, c_, want); } while (0)
	GROW(off);
	GROW(len);
	GROW(line);
	GROW(status);
	GROW(why);
	GROW(xxh);
	GROW(foff);
	GROW(flen);
	GROW(fthr);
#undef GROW
	if (rc)
		return rc;
	b->cap = want;
	if (!b->frames) {
		b->frames = calloc(nthreads, sizeof(*b->frames));
		b->bounds = calloc(nthreads + 1, sizeof(*b->bounds));
		if (!b->frames || !b->bounds)
			return -ENOMEM;
		b->nthreads = nthreads;
	}
	return 0;
}

/* Copy one record into the batch. */
int pack_batch_add(struct packer *p, const void *data, size_t len, uint64_t line)
{
	struct pack_batch *b = &p->b;
	int rc;

	if (len > SAMPLE_MAX_BYTES)
		return pack_fail(p, -EFBIG, "%s: a sample of %zu bytes exceeds the %u-byte limit",
			    p->cur_path, len, (unsigned)SAMPLE_MAX_BYTES);
	if (b->n == b->cap && (rc = pack_batch_grow(b, pool_size(p->pool))))
		return rc;
	b->off[b->n] = b->data.len;
	b->len[b->n] = len;
	b->line[b->n] = line;
	b->why[b->n] = NULL;
	rc = buf_append(&b->data, data, len);
	if (rc)
		return rc;
	b->n++;
	return 0;
}

/* On pool thread t: validate, checksum and compress t's share of the batch. */
static void pack_batch_work(void *arg, unsigned t, unsigned n)
{
	struct pack_batch_job *job = arg;
	struct pack_batch *b = job->b;
	struct buf *frames = &b->frames[t];
	char why[300];

	(void)n;
	frames->len = 0;
	for (size_t i = b->bounds[t]; i < b->bounds[t + 1]; i++) {
		const uint8_t *d = b->data.data + b->off[i];

		b->status[i] = 0;
		if (b->validate && jsonl_check_line(d, b->len[i], why, sizeof(why))) {
			b->status[i] = 1;
			b->why[i] = strdup(why);
			continue;
		}
		b->xxh[i] = shard_index_checksum(d, b->len[i]);
		if (b->compress) {
			b->foff[i] = frames->len;
			b->fthr[i] = t;
			b->status[i] = compressor_frame(job->p->comp[t], d, b->len[i], frames);
			b->flen[i] = frames->len - b->foff[i];
		}
	}
}

/* Split the batch among the pool's threads by bytes, and run it. */
void pack_batch_run(struct packer *p, struct pack_batch *b, int validate, int compress)
{
	struct pack_batch_job job = { p, b };
	unsigned n = b->nthreads;
	size_t i = 0;
	uint64_t acc = 0;

	b->validate = validate;
	b->compress = compress;
	b->bounds[0] = 0;
	for (unsigned t = 1; t < n; t++) {
		uint64_t goal = b->data.len * t / n;

		while (i < b->n && acc < goal)
			acc += b->len[i++] + 16;
		b->bounds[t] = i;
	}
	b->bounds[n] = b->n;
	pool_run(p->pool, pack_batch_work, &job);
}

/* Write record i of a processed batch. */
int pack_write_record(struct packer *p, struct pack_batch *b, size_t i)
{
	const uint8_t *d = b->data.data + b->off[i];
	const void *payload = d;
	size_t plen = b->len[i];
	char why[300];
	int rc;

	if (p->o->compress && b->compress) {
		payload = b->frames[b->fthr[i]].data + b->foff[i];
		plen = b->flen[i];
	} else if (p->o->compress) {
		/* the dictionary was trained in the middle of this batch */
		p->scratch.len = 0;
		rc = compressor_frame(p->comp[0], d, b->len[i], &p->scratch);
		if (rc)
			return pack_fail(p, rc, "zstd failed on sample %" PRIu64, p->samples);
		payload = p->scratch.data;
		plen = p->scratch.len;
	}
	rc = shard_writer_add_payload(p->w, payload, plen, b->len[i], b->xxh[i], why,
				      sizeof(why));
	if (rc)
		return pack_fail(p, rc, "%s: %s", p->o->out, why);
	return 0;
}

/* Process the batch on every thread, then take its records in order: skip or refuse
 * invalid ones, fingerprint the rest, and hold them (training) or write them. */
int pack_batch_flush(struct packer *p)
{
	struct pack_batch *b = &p->b;
	int rc = 0;

	if (b->n == 0)
		return 0;
	pack_batch_run(p, b, p->validate, p->o->compress && !p->training);
	for (size_t i = 0; i < b->n; i++) {
		const uint8_t *d = b->data.data + b->off[i];
		uint64_t le = htole64(b->len[i]);

		if (b->status[i] == 1) {
			if (!p->o->skip_bad) {
				rc = pack_fail(p, -EINVAL, "%s:%" PRIu64 ": invalid JSON at %s; fix the line, "
					  "or pass --skip-bad to skip bad records", p->cur_path,
					  b->line[i], b->why[i] ? b->why[i] : "?");
				break;
			}
			p->skipped++;
			if (p->o->notice) {
				char msg[600];

				snprintf(msg, sizeof(msg), "%s:%" PRIu64 ": invalid JSON at %s; skipped",
					 p->cur_path, b->line[i], b->why[i] ? b->why[i] : "?");
				p->o->notice(p->o->ctx, msg);
			}
			continue;
		}
		if (b->status[i]) {
			rc = pack_fail(p, b->status[i], "%s: zstd failed on the sample of line/record %"
				  PRIu64, p->cur_path, b->line[i]);
			break;
		}
		XXH3_128bits_update(p->fp, &le, 8);
		XXH3_128bits_update(p->fp, d, b->len[i]);
		p->samples++;
		p->raw_bytes += b->len[i];
		if (!p->training)
			rc = pack_write_record(p, b, i);
		else if ((rc = pack_dict_hold(p, d, b->len[i])) == 1)
			rc = pack_batch_write_held(p); /* enough held: train, then write them */
		if (rc)
			break;
	}
	for (size_t i = 0; i < b->n; i++) {
		free(b->why[i]);
		b->why[i] = NULL;
	}
	b->n = 0;
	b->data.len = 0;
	if (rc == -ENOMEM && !p->err[0])
		pack_fail(p, rc, "out of memory while packing %s", p->cur_path);
	pack_report(p, 0);
	return rc;
}

/* End dictionary training: train on what was held back, open the writer, then write the
 * held samples as a batch of their own, compressed on every thread. */
int pack_batch_write_held(struct packer *p)
{
	struct pack_batch sb = { 0 };
	uint64_t off = 0;
	int rc;

	rc = pack_dict_train(p);
	if (rc)
		return rc;
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

int pack_batch_full(const struct packer *p)
{
	return p->b.data.len >= PACK_BATCH_BYTES || p->b.n >= PACK_BATCH_RECORDS;
}

/* Cut every whole window out of p->window into the batch. */
int pack_cut_windows(struct packer *p)
{
	size_t stride = (size_t)(p->o->seq_len * p->itemsize), off = 0;
	size_t wlen = stride + (size_t)p->o->overlap * p->itemsize;
	int rc = 0;

	while (!rc && p->window.len - off >= wlen) {
		rc = pack_batch_add(p, p->window.data + off, wlen, 0);
		off += stride; /* overlap: the window's last token starts the next one */
		if (!rc && pack_batch_full(p))
			rc = pack_batch_flush(p);
	}
	memmove(p->window.data, p->window.data + off, p->window.len - off);
	p->window.len -= off;
	return rc;
}
