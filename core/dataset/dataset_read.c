/* dataset_read.c: reading the samples of an open dataset (dataset.h): the sample
 * reader, its reads (whole samples, views into the mapping, lengths) and the prefetch
 * hints. dataset.c opens the dataset and finds a sample's shard and index entry. */
#include "dataset.h"
#include "dataset_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guard.h"

struct sample_reader *sample_reader_new(const struct dataset *ds)
{
	struct sample_reader *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->ds = ds;
	if (ds->info.compressed) {
		r->dctx = ZSTD_createDCtx();
		if (!r->dctx) {
			free(r);
			return NULL;
		}
	}
	return r;
}

void sample_reader_free(struct sample_reader *r)
{
	if (!r)
		return;
	ZSTD_freeDCtx(r->dctx);
	buf_release(&r->scratch);
	free(r);
}

const char *sample_reader_last_error(const struct sample_reader *r)
{
	return r->err;
}

static int pread_full(int fd, void *dst, size_t len, uint64_t off)
{
	uint8_t *p = dst;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENODATA; /* the file shrank under us */
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

#define READ_FAIL(...) do { \
	snprintf(r->err, sizeof(r->err), "sample %" PRIu64 " (%s): ", id, s->file); \
	snprintf(r->err + strlen(r->err), sizeof(r->err) - strlen(r->err), __VA_ARGS__); \
	return -EIO; \
} while (0)

/* The shard and the checked index entry of sample id (the common start of a read). */
static int locate(struct sample_reader *r, uint64_t id, const struct ds_shard **shard,
		  struct shard_index_entry *entry)
{
	const struct dataset *ds = r->ds;
	const struct ds_shard *s;
	struct shard_index_entry e;
	char why[200];

	r->err[0] = 0;
	if (id >= ds->info.samples) {
		snprintf(r->err, sizeof(r->err), "sample %" PRIu64 " is out of range (the dataset "
			 "has %" PRIu64 ")", id, ds->info.samples);
		return -ERANGE;
	}
	s = dataset_find_shard(ds, id);
	if (dataset_entry_read(s, id, &e))
		READ_FAIL("index entry read failed: %s (the index file was truncated or its "
			  "disk failed)", strerror(EIO));
	if (shard_index_entry_check(&e, s->bytes, s->compressed, why, sizeof(why)))
		READ_FAIL("bad index entry: %s", why);
	if (ds->info.kind == DATASET_TOKENS && e.raw_len != ds->info.seq_len * ds->info.itemsize)
		READ_FAIL("index says %" PRIu32 " bytes, a window of %" PRIu64 " tokens is %" PRIu64,
			  e.raw_len, ds->info.seq_len, ds->info.seq_len * ds->info.itemsize);
	*shard = s;
	*entry = e;
	return 0;
}

/* Samples located per round of sample_reader_views(): their expected checksums live on
 * the stack. */
#define VIEW_CHUNK 64
/* Cache lines of the next sample prefetched while one is hashed: enough to start its TLB
 * walk and its first DRAM fetches, after which the hardware prefetcher follows the
 * sequential reads of the hash (1 to 4 samples ahead, 8 to 64 lines do alike; figures
 * in tests/bench/RESULTS.md). */
#define VIEW_PREFETCH_LINES 8

/* Prefetch the first VIEW_PREFETCH_LINES cache lines of the len bytes at p. */
static void prefetch_start(const uint8_t *p, uint64_t len)
{
	for (uint64_t k = 0; k < VIEW_PREFETCH_LINES && k * 64 < len; k++)
		__builtin_prefetch(p + k * 64);
}

struct verify_args {
	const struct iovec *views;
	const uint32_t *sums;
	size_t n;
	volatile size_t done; /* samples verified; stored each time, read after a fault */
};

/* Hash views[done..n) in order, prefetching the next one; stops at the first mismatch. */
static void verify_views(void *ctx)
{
	struct verify_args *a = ctx;

	for (size_t i = a->done; i < a->n; i = ++a->done) {
		if (i + 1 < a->n)
			prefetch_start(a->views[i + 1].iov_base, a->views[i + 1].iov_len);
		if (shard_index_checksum(a->views[i].iov_base, a->views[i].iov_len) != a->sums[i])
			return;
	}
}

int sample_reader_views(struct sample_reader *r, const uint64_t *ids, size_t count,
			struct iovec *views, uint64_t *bad_id)
{
	uint32_t sums[VIEW_CHUNK];

	for (size_t base = 0; base < count; base += VIEW_CHUNK) {
		size_t n = count - base < VIEW_CHUNK ? count - base : VIEW_CHUNK;
		struct verify_args a = { views + base, sums, n, 0 };
		int faulted;

		for (size_t i = 0; i < n; i++) {
			const struct ds_shard *s;
			struct shard_index_entry e;
			int rc = locate(r, ids[base + i], &s, &e);

			if (rc || !s->data || s->compressed) {
				if (rc == -EIO && bad_id)
					*bad_id = ids[base + i];
				return rc ? rc : -ENOTSUP;
			}
			views[base + i] = (struct iovec){ (void *)(s->data + e.offset), e.raw_len };
			sums[i] = e.checksum;
		}
		faulted = guard_run(verify_views, &a);
		if (a.done < n) {
			uint64_t id = ids[base + a.done];
			const struct ds_shard *s = dataset_find_shard(r->ds, id);

			if (bad_id)
				*bad_id = id;
			if (faulted)
				READ_FAIL("read failed: %s", strerror(EIO));
			READ_FAIL("checksum mismatch (the sample's bytes differ from what was packed)");
		}
	}
	return 0;
}

void sample_reader_prefetch(const struct sample_reader *r, uint64_t id, int payload)
{
	const struct dataset *ds = r->ds;
	const struct ds_shard *s;
	struct shard_index_entry e;

	if (id >= ds->info.samples)
		return;
	s = dataset_find_shard(ds, id);
	if (!payload) {
		const uint8_t *entry = dataset_entry_at(s, id);

		__builtin_prefetch(entry);
		__builtin_prefetch(entry + sizeof(struct shard_index_entry) - 1);
		return;
	}
	if (!s->data || dataset_entry_read(s, id, &e))
		return;
	/* an entry is checked only when the sample is read; a prefetch never faults, but
	 * stay inside the mapping all the same */
	if (e.offset < s->bytes)
		prefetch_start(s->data + e.offset, e.stored_len < s->bytes - e.offset ?
			       e.stored_len : s->bytes - e.offset);
}

int sample_reader_raw_len(struct sample_reader *r, uint64_t id, uint64_t *len)
{
	const struct ds_shard *s;
	struct shard_index_entry e;
	int rc = locate(r, id, &s, &e);

	if (!rc)
		*len = e.raw_len;
	return rc;
}

/* The stored bytes of sample id (entry e of shard s) into dst: from the mapping, the
 * file, or for a shard in object storage the node cache or the network (fresh: not the
 * cache). 0 or -EIO with r->err set. */
static int read_stored(struct sample_reader *r, uint64_t id, const struct ds_shard *s,
		       const struct shard_index_entry *e, uint32_t len, void *dst, int fresh)
{
	char why[320];
	int rc;

	if (s->remote) {
		if (!dsr_read(r->ds, s, id, e, dst, fresh, why, sizeof(why)))
			return 0;
		READ_FAIL("%s", why);
	}
	/* the index entry was checked against the shard's size */
	rc = s->data ? guard_copy(dst, s->data + e->offset, len) :
		       pread_full(s->fd, dst, len, e->offset);
	if (rc)
		READ_FAIL("read failed: %s", strerror(-rc));
	return 0;
}

/* The bytes read failed a check: a sample of object storage is fetched again once, its
 * cached bytes forgotten (the node cache may hold a bad copy; the object cannot differ
 * from what was opened, each fetch is pinned to its ETag). */
#define CHECK_FAIL(...) do { r->check_failed = 1; READ_FAIL(__VA_ARGS__); } while (0)

static int read_sample(struct sample_reader *r, uint64_t id, struct buf *out, int fresh)
{
	const struct ds_shard *s;
	struct shard_index_entry e;
	uint8_t *dst;
	int rc;

	rc = locate(r, id, &s, &e);
	if (rc)
		return rc;
	rc = buf_reserve(out, e.raw_len);
	if (rc)
		return rc;
	dst = out->data + out->len;

	if (!s->compressed) {
		if ((rc = read_stored(r, id, s, &e, e.raw_len, dst, fresh)))
			return rc;
	} else {
		unsigned long long fcs;
		size_t n;

		r->scratch.len = 0;
		rc = buf_reserve(&r->scratch, e.stored_len);
		if (rc)
			return rc;
		if ((rc = read_stored(r, id, s, &e, e.stored_len, r->scratch.data, fresh)))
			return rc;
		/* Bytes from disk are untrusted: the frame must fill its slot exactly and
		 * declare the size the index promises before we decode into out. */
		n = ZSTD_findFrameCompressedSize(r->scratch.data, e.stored_len);
		if (ZSTD_isError(n) || n != e.stored_len)
			CHECK_FAIL("corrupt zstd frame (%s)", ZSTD_isError(n) ? ZSTD_getErrorName(n) :
				   "frame size differs from the index");
		fcs = ZSTD_getFrameContentSize(r->scratch.data, e.stored_len);
		if (fcs != e.raw_len)
			CHECK_FAIL("zstd frame declares %s bytes, the index says %" PRIu32,
				   fcs == ZSTD_CONTENTSIZE_UNKNOWN ? "unknown" :
				   fcs == ZSTD_CONTENTSIZE_ERROR ? "invalid" : "other", e.raw_len);
		if (s->ddict)
			n = ZSTD_decompress_usingDDict(r->dctx, dst, e.raw_len, r->scratch.data,
						       e.stored_len, s->ddict);
		else
			n = ZSTD_decompressDCtx(r->dctx, dst, e.raw_len, r->scratch.data,
						e.stored_len);
		if (ZSTD_isError(n))
			CHECK_FAIL("zstd: %s", ZSTD_getErrorName(n));
		if (n != e.raw_len)
			CHECK_FAIL("decoded %zu bytes, the index says %" PRIu32, n, e.raw_len);
	}
	if (shard_index_checksum(dst, e.raw_len) != e.checksum)
		CHECK_FAIL("checksum mismatch (the sample's bytes differ from what was packed)");
	out->len += e.raw_len;
	out->data[out->len] = 0;
	return 0;
}

int sample_reader_read(struct sample_reader *r, uint64_t id, struct buf *out)
{
	int rc;

	r->check_failed = 0;
	rc = read_sample(r, id, out, 0);
	if (rc == -EIO && r->check_failed && id < r->ds->info.samples &&
	    dataset_find_shard(r->ds, id)->remote)
		rc = read_sample(r, id, out, 1);
	return rc;
}
