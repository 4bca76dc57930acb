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

int dataset_verify(const struct dataset *ds,
		   void (*bad)(void *ctx, uint64_t id, const char *msg),
		   void (*progress)(void *ctx, uint64_t done, uint64_t total),
		   void *ctx, struct dataset_verify_report *rep)
{
	const struct dataset_info *in = &ds->info;
	struct sample_reader *r;
	struct buf b = BUF_INIT;
	XXH3_state_t *fp;
	uint64_t stored = 0;
	char text[256], why[256];
	size_t tlen;

	memset(rep, 0, sizeof(*rep));
	r = sample_reader_new(ds);
	fp = XXH3_createState();
	if (!r || !fp) {
		sample_reader_free(r);
		XXH3_freeState(fp);
		return -ENOMEM;
	}
	XXH3_128bits_reset(fp);
	for (size_t k = 0; k < ds->nshards; k++) {
		const struct ds_shard *s = &ds->shards[k];
		uint64_t e;

		struct check_args a = { s, in->compressed, &e, why, sizeof(why), 0 };

		stored += s->bytes;
		if (guard_run(check_index, &a))
			verify_bad(bad, ctx, rep, UINT64_MAX, "%s: index read failed: %s (the index "
				   "file was truncated or its disk failed)", s->file, strerror(EIO));
		else if (a.rc)
			verify_bad(bad, ctx, rep, e < s->count ? s->first_sample + e : UINT64_MAX,
				   "%s: index entry %" PRIu64 ": %s", s->file, e, why);
	}
	for (uint64_t id = 0; id < in->samples; id++) {
		uint64_t le;
		int rc;

		if (progress && (id & 4095) == 0)
			progress(ctx, id, in->samples);
		b.len = 0;
		rc = sample_reader_read(r, id, &b);
		if (rc == -ENOMEM) {
			buf_release(&b);
			sample_reader_free(r);
			XXH3_freeState(fp);
			return rc;
		}
		if (rc) {
			rep->samples_bad++;
			verify_bad(bad, ctx, rep, id, "%s", sample_reader_last_error(r));
			/* keep the fingerprint comparable: a bad sample poisons it anyway */
			XXH3_128bits_update(fp, "\xff", 1);
			continue;
		}
		if (in->content == CONTENT_FILES) {
			struct filegroup_iter it;
			struct filegroup_file f;
			int n = 0, fr;

			fr = filegroup_iter_init(&it, b.data, b.len);
			while (!fr && (fr = filegroup_next(&it, &f)) == 1)
				n++;
			if (fr < 0 || n == 0) {
				rep->samples_bad++;
				verify_bad(bad, ctx, rep, id, "sample %" PRIu64 " (%s): malformed file "
					   "group payload", id, dataset_shard_name(ds, id));
				continue;
			}
		}
		rep->samples_ok++;
		rep->raw_bytes += b.len;
		le = htole64((uint64_t)b.len);
		XXH3_128bits_update(fp, &le, 8);
		XXH3_128bits_update(fp, b.data, b.len);
	}
	if (progress)
		progress(ctx, in->samples, in->samples);
	tlen = dataset_fingerprint_text(in, text, sizeof(text));
	XXH3_128bits_update(fp, text, tlen);
	{
		XXH128_hash_t h = XXH3_128bits_digest(fp);

		snprintf(rep->fingerprint, sizeof(rep->fingerprint), "%016" PRIx64 "%016" PRIx64,
			 (uint64_t)h.high64, (uint64_t)h.low64);
	}
	if (rep->samples_bad == 0) {
		if (strcmp(rep->fingerprint, in->fingerprint))
			verify_bad(bad, ctx, rep, UINT64_MAX, "fingerprint mismatch: the catalog "
				   "says %s, the samples hash to %s (catalog and shards disagree)",
				   in->fingerprint, rep->fingerprint);
		if (rep->raw_bytes != in->raw_bytes)
			verify_bad(bad, ctx, rep, UINT64_MAX, "raw_bytes mismatch: the catalog says "
				   "%" PRIu64 ", the samples hold %" PRIu64, in->raw_bytes,
				   rep->raw_bytes);
	}
	if (stored != in->stored_bytes)
		verify_bad(bad, ctx, rep, UINT64_MAX, "stored_bytes mismatch: the catalog says "
			   "%" PRIu64 ", the shards hold %" PRIu64, in->stored_bytes, stored);
	buf_release(&b);
	sample_reader_free(r);
	XXH3_freeState(fp);
	return rep->problems ? -EBADMSG : 0;
}
