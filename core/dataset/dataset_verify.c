/* dataset_verify.c: `zephon verify`: every index entry and every sample checked, and the
 * dataset's fingerprint recomputed (dataset_verify() in dataset.h). */
#include "dataset_int.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "filegroup.h"
#include "guard.h"
#include "instream.h"

static void verify_bad(void (*bad)(void *, uint64_t, const char *), void *ctx,
		       struct dataset_verify_report *rep, uint64_t id, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void verify_bad(void (*bad)(void *, uint64_t, const char *), void *ctx,
		       struct dataset_verify_report *rep, uint64_t id, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	rep->problems++;
	if (!bad)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	bad(ctx, id, msg);
}

struct check_args {
	const struct ds_shard *s;
	int compressed;
	uint64_t *bad_entry;
	char *why;
	size_t why_len;
	int rc;
};

/* shard_index_check_all() over a shard's index mapping, for guard_run(). */
static void check_index(void *ctx)
{
	struct check_args *a = ctx;

	a->rc = shard_index_check_all(a->s->index, a->s->index_len, a->s->bytes, a->compressed,
				      a->bad_entry, a->why, a->why_len);
}

/* What one source's check shares with the whole's. */
struct verify_run {
	const struct dataset *ds;
	void (*bad)(void *ctx, uint64_t id, const char *msg);
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *ctx;
	struct dataset_verify_report *rep;
	struct sample_reader *r;
	struct buf b;
	XXH3_state_t *fp;
};

/* Owns the index half of verify_source(): every index entry of source src's shards
 * checked (each problem reported through v); returns the bytes its shard files hold. */
static uint64_t verify_indexes(struct verify_run *v, const struct ds_source *src)
{
	const struct dataset *ds = v->ds;
	struct dataset_verify_report *rep = v->rep;
	uint64_t stored = 0;
	char why[256];

	for (size_t k = src->first_shard; k < src->first_shard + src->info.shards; k++) {
		const struct ds_shard *s = &ds->shards[k];
		uint64_t e;

		struct check_args a = { s, s->compressed, &e, why, sizeof(why), 0 };

		stored += s->bytes;
		if (guard_run(check_index, &a))
			verify_bad(v->bad, v->ctx, rep, UINT64_MAX, "%s: index read failed: %s (the "
				   "index file was truncated or its disk failed)", s->file,
				   strerror(EIO));
		else if (a.rc)
			verify_bad(v->bad, v->ctx, rep, e < s->count ? s->first_sample + e : UINT64_MAX,
				   "%s: index entry %" PRIu64 ": %s", s->file, e, why);
	}
	return stored;
}

/* Samples of a source in object storage fetched ahead of the reads, a chunk at a time
 * (consecutive ids: coalesced into GETs of up to 1 MiB), the next chunk asked for when
 * the reads enter one, so that verify does not wait a round trip per sample. */
#define VERIFY_AHEAD 4096

static void verify_ahead(const struct dataset *ds, uint64_t from, uint64_t end)
{
	uint64_t ids[VERIFY_AHEAD];
	size_t n = 0;

	for (uint64_t id = from; id < end && n < VERIFY_AHEAD; id++)
		ids[n++] = id;
	dsr_want(ds, ids, n, 1);
}

/* Owns the sample half of verify_source(): every sample of source src read (ids of the
 * whole), a file group's payload parsed, each counted good or bad in v->rep and hashed
 * into v->fp (a bad one as one 0xff byte); *raw receives the good samples' bytes.
 * 0, or -ENOMEM. */
static int verify_samples(struct verify_run *v, const struct ds_source *src, uint64_t *raw)
{
	const struct dataset *ds = v->ds;
	const struct dataset_info *in = &src->info;
	struct dataset_verify_report *rep = v->rep;

	for (uint64_t id = src->offset; id < src->offset + in->samples; id++) {
		struct buf *b = &v->b;
		uint64_t le;
		int rc;

		if (v->progress && (id & 4095) == 0)
			v->progress(v->ctx, id, ds->info.samples);
		if (src->remote && id == src->offset)
			verify_ahead(ds, id, src->offset + in->samples);
		if (src->remote && ((id - src->offset) & (VERIFY_AHEAD - 1)) == 0)
			verify_ahead(ds, id + VERIFY_AHEAD, src->offset + in->samples);
		b->len = 0;
		rc = sample_reader_read(v->r, id, b);
		if (rc == -ENOMEM)
			return rc;
		if (rc) {
			rep->samples_bad++;
			verify_bad(v->bad, v->ctx, rep, id, "%s", sample_reader_last_error(v->r));
			/* keep the fingerprint comparable: a bad sample poisons it anyway */
			XXH3_128bits_update(v->fp, "\xff", 1);
			continue;
		}
		if (in->content == CONTENT_FILES) {
			struct filegroup_iter it;
			struct filegroup_file f;
			int n = 0, fr;

			fr = filegroup_iter_init(&it, b->data, b->len);
			while (!fr && (fr = filegroup_next(&it, &f)) == 1)
				n++;
			if (fr < 0 || n == 0) {
				rep->samples_bad++;
				verify_bad(v->bad, v->ctx, rep, id, "sample %" PRIu64 " (%s): malformed "
					   "file group payload", id, dataset_shard_name(ds, id));
				continue;
			}
		}
		rep->samples_ok++;
		*raw += b->len;
		le = htole64((uint64_t)b->len);
		XXH3_128bits_update(v->fp, &le, 8);
		XXH3_128bits_update(v->fp, b->data, b->len);
	}
	return 0;
}

/* Check source si's index entries and samples (ids of the whole) against its own
 * catalog; its recomputed fingerprint into fp_out. 0, or -ENOMEM. */
static int verify_source(struct verify_run *v, size_t si, char fp_out[33])
{
	const struct dataset *ds = v->ds;
	const struct ds_source *src = &ds->src[si];
	const struct dataset_info *in = &src->info;
	struct dataset_verify_report *rep = v->rep;
	uint64_t stored, raw = 0, bad_before = rep->samples_bad;
	/* a union's problems that are not one sample's name the source */
	const char *pre = ds->nsrc > 1 ? src->dir : "", *sep = ds->nsrc > 1 ? ": " : "";
	char text[256];
	size_t tlen;
	int rc;

	XXH3_128bits_reset(v->fp);
	stored = verify_indexes(v, src);
	if ((rc = verify_samples(v, src, &raw)))
		return rc;
	rep->raw_bytes += raw;
	tlen = dataset_fingerprint_text(in, text, sizeof(text));
	XXH3_128bits_update(v->fp, text, tlen);
	xxh128_hex(XXH3_128bits_digest(v->fp), fp_out);
	if (rep->samples_bad == bad_before) {
		if (strcmp(fp_out, in->fingerprint))
			verify_bad(v->bad, v->ctx, rep, UINT64_MAX, "%s%sfingerprint mismatch: the "
				   "catalog says %s, the samples hash to %s (catalog and shards "
				   "disagree)", pre, sep, in->fingerprint, fp_out);
		if (raw != in->raw_bytes)
			verify_bad(v->bad, v->ctx, rep, UINT64_MAX, "%s%sraw_bytes mismatch: the "
				   "catalog says %" PRIu64 ", the samples hold %" PRIu64, pre, sep,
				   in->raw_bytes, raw);
	}
	if (stored != in->stored_bytes)
		verify_bad(v->bad, v->ctx, rep, UINT64_MAX, "%s%sstored_bytes mismatch: the catalog "
			   "says %" PRIu64 ", the shards hold %" PRIu64, pre, sep, in->stored_bytes,
			   stored);
	return 0;
}

int dataset_verify(const struct dataset *ds,
		   void (*bad)(void *ctx, uint64_t id, const char *msg),
		   void (*progress)(void *ctx, uint64_t done, uint64_t total),
		   void *ctx, struct dataset_verify_report *rep)
{
	struct verify_run v = { ds, bad, progress, ctx, rep, NULL, BUF_INIT, NULL };
	char (*fps)[33] = calloc(ds->nsrc, sizeof(*fps));
	const char **fpp = calloc(ds->nsrc, sizeof(*fpp));
	int rc = -ENOMEM;

	memset(rep, 0, sizeof(*rep));
	v.r = sample_reader_new(ds);
	v.fp = XXH3_createState();
	if (!v.r || !v.fp || !fps || !fpp)
		goto out;
	for (size_t si = 0; si < ds->nsrc; si++) {
		if ((rc = verify_source(&v, si, fps[si])))
			goto out;
		fpp[si] = fps[si];
	}
	if (progress)
		progress(ctx, ds->info.samples, ds->info.samples);
	if (ds->nsrc == 1)
		memcpy(rep->fingerprint, fps[0], 33);
	else if ((rc = dataset_union_fingerprint(fpp, ds->nsrc, rep->fingerprint)))
		goto out;
	rc = rep->problems ? -EBADMSG : 0;
out:
	buf_release(&v.b);
	sample_reader_free(v.r);
	XXH3_freeState(v.fp);
	free(fps);
	free(fpp);
	return rc;
}
