#include "dataset.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>
#include <xxhash.h>

#include "catalog.h"
#include "filegroup.h"
#include "guard.h"
#include "shard_index.h"

struct ds_shard {
	const char *file;        /* points into ds->cat */
	int fd;
	const uint8_t *data;     /* the payload file mapped read-only, or NULL (then pread) */
	const uint8_t *index;    /* mmapped .idx */
	size_t index_len;
	uint64_t first_sample;
	uint64_t count;
	uint64_t bytes;          /* payload file size */
};

struct dataset {
	char *dir;
	struct dataset_info info;
	struct catalog cat;
	ZSTD_DDict *ddict;       /* NULL without a dictionary */
	struct ds_shard *shards;
	size_t nshards;
	uint64_t warm_window;    /* see WARM_WINDOW; 0: the payload's own pages */
};

struct sample_reader {
	const struct dataset *ds;
	ZSTD_DCtx *dctx;
	struct buf scratch;      /* compressed payload */
	unsigned warm_hot;       /* sample_reader_warm(): probes in a row that found all in memory */
	unsigned warm_skip;      /* batches it lets pass before its next probe */
	char err[320];
};

static const char *const kind_names[] = { "records", "tokens" };
static const char *const content_names[] = { "text", "files", "tokens" };
static const char *const dtype_names[] = { "uint8", "uint16", "uint32", "int32" };
static const unsigned dtype_sizes[] = { 1, 2, 4, 4 };

const char *dataset_kind_name(enum dataset_kind k)
{
	return (unsigned)k < 2 ? kind_names[k] : "?";
}

const char *dataset_content_name(enum dataset_content c)
{
	return (unsigned)c < 3 ? content_names[c] : "?";
}

const char *dataset_dtype_name(enum token_dtype d)
{
	return (unsigned)d < 4 ? dtype_names[d] : "?";
}

int dataset_dtype_parse(const char *s, enum token_dtype *out)
{
	for (unsigned i = 0; i < 4; i++) {
		if (!strcmp(s, dtype_names[i])) {
			*out = (enum token_dtype)i;
			return 0;
		}
	}
	return -EINVAL;
}

static int name_index(const char *s, const char *const *names, unsigned n)
{
	for (unsigned i = 0; s && i < n; i++)
		if (!strcmp(s, names[i]))
			return (int)i;
	return -1;
}

/* A file name from the (untrusted) catalog must stay inside the dataset directory. */
static int plain_name(const char *s)
{
	return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Fill ds->info from the catalog's meta table. */
static int read_meta(struct dataset *ds, char *err, size_t errlen)
{
	const struct catalog *c = &ds->cat;
	struct dataset_info *in = &ds->info;
	const char *v;
	uint64_t u;
	int i;

	if (c->user_version != CATALOG_FORMAT_VERSION ||
	    catalog_meta_u64(c, "format_version", &u) || u != CATALOG_FORMAT_VERSION) {
		v = catalog_meta_get(c, "format_version");
		err_printf(err, errlen, "catalog format version %s is not supported (this zephon "
			"reads version %d); repack the inputs with this zephon",
			v ? v : "(missing)", CATALOG_FORMAT_VERSION);
		return -EPROTO;
	}
#define BAD(...) do { err_printf(err, errlen, __VA_ARGS__); return -EBADMSG; } while (0)
	if ((i = name_index(catalog_meta_get(c, "kind"), kind_names, 2)) < 0)
		BAD("catalog meta 'kind' is missing or unknown");
	in->kind = (enum dataset_kind)i;
	if ((i = name_index(catalog_meta_get(c, "content"), content_names, 3)) < 0)
		BAD("catalog meta 'content' is missing or unknown");
	in->content = (enum dataset_content)i;
	if ((in->kind == DATASET_TOKENS) != (in->content == CONTENT_TOKENS))
		BAD("catalog kind '%s' does not fit content '%s'", dataset_kind_name(in->kind),
		    dataset_content_name(in->content));
	if (catalog_meta_u64(c, "samples", &in->samples) || in->samples == 0)
		BAD("catalog meta 'samples' is missing or zero");
	if (in->kind == DATASET_TOKENS) {
		if ((i = name_index(catalog_meta_get(c, "dtype"), dtype_names, 4)) < 0)
			BAD("catalog meta 'dtype' is missing or unknown");
		in->dtype = (enum token_dtype)i;
		in->itemsize = dtype_sizes[i];
		if (catalog_meta_u64(c, "seq_len", &in->seq_len) || in->seq_len == 0 ||
		    in->seq_len * in->itemsize > SAMPLE_MAX_BYTES)
			BAD("catalog meta 'seq_len' is missing, zero or too large");
		if (catalog_meta_get(c, "overlap") &&
		    (catalog_meta_u64(c, "overlap", &in->overlap) || in->overlap > 1 ||
		     in->overlap >= in->seq_len))
			BAD("catalog meta 'overlap' is not 0 or 1 (below seq_len)");
	}
	v = catalog_meta_get(c, "compress");
	if (!v || (strcmp(v, "zstd") && strcmp(v, "none")))
		BAD("catalog meta 'compress' is missing or unknown");
	in->compressed = !strcmp(v, "zstd");
	if (catalog_meta_u64(c, "raw_bytes", &in->raw_bytes) ||
	    catalog_meta_u64(c, "stored_bytes", &in->stored_bytes))
		BAD("catalog meta 'raw_bytes' or 'stored_bytes' is missing");
	v = catalog_meta_get(c, "fingerprint");
	if (!v || strlen(v) != 32 || strspn(v, "0123456789abcdef") != 32)
		BAD("catalog meta 'fingerprint' is missing or not 32 hex digits");
	memcpy(in->fingerprint, v, 33);
	v = catalog_meta_get(c, "record_ext");
	if (in->content == CONTENT_TEXT) {
		if (!v || !*v || strlen(v) >= sizeof(in->record_ext) || strchr(v, '/'))
			BAD("catalog meta 'record_ext' is missing or invalid");
		memcpy(in->record_ext, v, strlen(v) + 1);
	}
	in->shards = c->nshards;
	return 0;
#undef BAD
}

/* An open of a dataset file failed for a reason that is not corruption: say so (the
 * dataset keeps one open file per shard). 0 when errno means the file is bad. */
static int open_error(const struct dataset *ds, const char *what, const char *file,
		      char *err, size_t errlen)
{
	if (errno == EMFILE || errno == ENFILE) {
		err_printf(err, errlen, "%s %s: %s: the dataset has %zu shards and keeps one file "
			"open per shard; raise the open-file limit (ulimit -n, LimitNOFILE=) or "
			"repack with a larger --shard-size", what, file, strerror(errno),
			ds->cat.nshards);
		return -EMFILE;
	}
	if (errno == EACCES) {
		err_printf(err, errlen, "%s %s: %s", what, file, strerror(errno));
		return -EACCES;
	}
	return 0;
}

/* The read-around sample_reader_warm() gives each payload of a cold batch when the whole
 * dataset fits in memory: the kernel's default for a fault in a file mapping (128 KiB). */
#define WARM_WINDOW (128u << 10)

/* What sample_reader_warm() reads around each payload of a batch that is not in memory.
 * A dataset that fits in half the machine's memory gets WARM_WINDOW: each of its bytes
 * is read within the epoch and stays cached until then, so larger reads fill the cache
 * sooner (a cold 256 MiB shard of 4 KiB samples: first batch 33 ms, then 20-28 ms each
 * until it is all in, about a second; with only the payloads' pages every batch is 256
 * random reads, 8 ms, for a whole epoch). A larger one gets only the payloads' pages:
 * around them the window would read 32 times the bytes of 4 KiB samples, evicted before
 * they are used. */
static uint64_t warm_window(const struct dataset *ds)
{
	uint64_t bytes = 0, mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);

	for (size_t k = 0; k < ds->nshards; k++)
		bytes += ds->shards[k].bytes;
	return bytes <= mem / 2 ? WARM_WINDOW : 0;
}

static int open_shards(struct dataset *ds, int dirfd, char *err, size_t errlen)
{
	uint64_t next = 0;
	char why[256];
	int rc;

	ds->shards = calloc(ds->cat.nshards ? ds->cat.nshards : 1, sizeof(*ds->shards));
	if (!ds->shards)
		return -ENOMEM;
	for (size_t k = 0; k < ds->cat.nshards; k++) {
		const struct catalog_shard *cs = &ds->cat.shards[k];
		struct ds_shard *s = &ds->shards[ds->nshards];
		struct shard_index_header h;
		struct stat sb;
		int ifd;
		void *map;

		s->fd = -1;
		ds->nshards++;
		s->file = cs->file;
		s->first_sample = cs->first_sample;
		s->count = cs->samples;
		s->bytes = cs->bytes;
		if (!plain_name(cs->file) || !plain_name(cs->index_file)) {
			err_printf(err, errlen, "catalog names shard file '%s' outside the dataset",
				cs->file);
			return -EBADMSG;
		}
		if (cs->first_sample != next || cs->samples == 0) {
			err_printf(err, errlen, "catalog shard %zu (%s) starts at sample %" PRIu64
				" with %" PRIu64 " samples; expected a non-empty shard at %" PRIu64,
				k, cs->file, cs->first_sample, cs->samples, next);
			return -EBADMSG;
		}
		next += cs->samples;
		if (next > ds->info.samples) {
			err_printf(err, errlen, "catalog shards hold more samples than its %" PRIu64,
				ds->info.samples);
			return -EBADMSG;
		}

		s->fd = openat(dirfd, cs->file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (s->fd < 0 && (rc = open_error(ds, "shard", cs->file, err, errlen)))
			return rc;
		if (s->fd < 0 || fstat(s->fd, &sb) != 0) {
			err_printf(err, errlen, "shard %s: %s", cs->file, strerror(errno));
			return -EBADMSG;
		}
		if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != cs->bytes) {
			err_printf(err, errlen, "shard %s has %jd bytes but the catalog says %" PRIu64
				" (truncated or replaced)", cs->file, (intmax_t)sb.st_size, cs->bytes);
			return -EBADMSG;
		}

		/* Samples are copied straight out of a mapping of the shard (raw samples into
		 * the batch, zstd frames into the reader's scratch buffer, which zstd then
		 * decodes: zstd itself never reads the mapping, a fault could not be caught
		 * there): one pread syscall per sample was the largest cost of serving
		 * batches. Uncompressed token batches are even served from it without a copy
		 * (sample_reader_views). Faults (truncation, I/O errors) become EIO through
		 * guard_copy() and guard_run(). */
		if (cs->bytes) {
			void *d = mmap(NULL, (size_t)cs->bytes, PROT_READ, MAP_SHARED, s->fd, 0);

			s->data = d == MAP_FAILED ? NULL : d;
		}

		ifd = openat(dirfd, cs->index_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (ifd < 0 && (rc = open_error(ds, "index", cs->index_file, err, errlen)))
			return rc;
		if (ifd < 0 || fstat(ifd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
			err_printf(err, errlen, "index %s: %s", cs->index_file,
				ifd < 0 ? strerror(errno) : "not a regular file");
			if (ifd >= 0)
				close(ifd);
			return -EBADMSG;
		}
		if (sb.st_size < (off_t)sizeof(h)) {
			close(ifd);
			err_printf(err, errlen, "index %s is truncated: %jd bytes", cs->index_file,
				(intmax_t)sb.st_size);
			return -EBADMSG;
		}
		map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, ifd, 0);
		close(ifd);
		if (map == MAP_FAILED) {
			err_printf(err, errlen, "index %s: mmap: %s", cs->index_file, strerror(errno));
			return -EIO;
		}
		s->index = map;
		s->index_len = (size_t)sb.st_size;
		/* Lookups jump around the index: no readahead around each. (Pages already in
		 * the page cache in large folios, e.g. just after a pack, are still mapped a
		 * folio at a time: see B3 in tests/bench/RESULTS.md.) */
		madvise(map, s->index_len, MADV_RANDOM);
		if (shard_index_parse_header(map, s->index_len, &h, why, sizeof(why))) {
			err_printf(err, errlen, "index %s: %s", cs->index_file, why);
			return -EBADMSG;
		}
		if (h.count != cs->samples || h.first_sample != cs->first_sample) {
			err_printf(err, errlen, "index %s holds samples [%" PRIu64 ", +%" PRIu64 ") but "
				"the catalog says [%" PRIu64 ", +%" PRIu64 ")", cs->index_file,
				h.first_sample, h.count, cs->first_sample, cs->samples);
			return -EBADMSG;
		}
	}
	if (next != ds->info.samples) {
		err_printf(err, errlen, "catalog shards hold %" PRIu64 " samples but it says %" PRIu64,
			next, ds->info.samples);
		return -EBADMSG;
	}
	ds->warm_window = warm_window(ds);
	return 0;
}

int dataset_open(const char *dir, struct dataset **out, char *err, size_t errlen)
{
	struct dataset *ds;
	char *path = NULL;
	char why[512];
	int dirfd = -1, rc;

	ds = calloc(1, sizeof(*ds));
	if (!ds)
		return -ENOMEM;
	ds->dir = strdup(dir);
	if (!ds->dir || asprintf(&path, "%s/%s", dir, CATALOG_FILE) < 0) {
		path = NULL;
		rc = -ENOMEM;
		goto err_free;
	}
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		rc = -errno;
		err_printf(err, errlen, "%s: %s", dir, strerror(errno));
		if (rc == -ENOTDIR)
			rc = -ENOENT;
		goto err_free;
	}
	rc = catalog_load(path, &ds->cat, why, sizeof(why));
	if (rc) {
		if (rc == -ENOENT)
			err_printf(err, errlen, "%s is not a zephon dataset (no %s); make one with "
				"zephon pack", dir, CATALOG_FILE);
		else
			err_printf(err, errlen, "%s", why);
		goto err_free;
	}
	rc = read_meta(ds, why, sizeof(why));
	if (rc == 0)
		rc = open_shards(ds, dirfd, why, sizeof(why));
	if (rc) {
		err_printf(err, errlen, "%s: %s", dir, why);
		goto err_free;
	}
	if (ds->info.compressed && ds->cat.dict) {
		ds->ddict = ZSTD_createDDict(ds->cat.dict, ds->cat.dict_len);
		if (!ds->ddict) {
			rc = -EBADMSG;
			err_printf(err, errlen, "%s: the catalog's zstd dictionary is unusable", dir);
			goto err_free;
		}
	}
	close(dirfd);
	free(path);
	*out = ds;
	return 0;

err_free:
	if (dirfd >= 0)
		close(dirfd);
	free(path);
	dataset_close(ds);
	return rc;
}

void dataset_close(struct dataset *ds)
{
	if (!ds)
		return;
	for (size_t k = 0; k < ds->nshards; k++) {
		if (ds->shards[k].fd >= 0)
			close(ds->shards[k].fd);
		if (ds->shards[k].data)
			munmap((void *)ds->shards[k].data, (size_t)ds->shards[k].bytes);
		if (ds->shards[k].index)
			munmap((void *)ds->shards[k].index, ds->shards[k].index_len);
	}
	free(ds->shards);
	ZSTD_freeDDict(ds->ddict);
	catalog_release(&ds->cat);
	free(ds->dir);
	free(ds);
}

const struct dataset_info *dataset_info(const struct dataset *ds)
{
	return &ds->info;
}

const char *dataset_dir(const struct dataset *ds)
{
	return ds->dir;
}

const struct catalog *dataset_catalog(const struct dataset *ds)
{
	return &ds->cat;
}

/* The shard holding id (< N): binary search over first_sample. */
static const struct ds_shard *find_shard(const struct dataset *ds, uint64_t id)
{
	size_t lo = 0, hi = ds->nshards;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (ds->shards[mid].first_sample <= id)
			lo = mid;
		else
			hi = mid;
	}
	return &ds->shards[lo];
}

/* The index entry of sample id (of shard s) in the index mapping. */
static const uint8_t *entry_at(const struct ds_shard *s, uint64_t id)
{
	return s->index + shard_index_size(id - s->first_sample);
}

int dataset_sample_len(const struct dataset *ds, uint64_t id, uint32_t *raw_len)
{
	const struct ds_shard *s;
	struct shard_index_entry e;

	if (id >= ds->info.samples)
		return -ERANGE;
	s = find_shard(ds, id);
	shard_index_entry_get(s->index, id - s->first_sample, &e);
	if (e.raw_len > SAMPLE_MAX_BYTES)
		return -EIO; /* a corrupt index; the read of the sample says more */
	*raw_len = e.raw_len;
	return 0;
}

const char *dataset_shard_name(const struct dataset *ds, uint64_t id)
{
	if (id >= ds->info.samples)
		return NULL;
	return find_shard(ds, id)->file;
}

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
	s = find_shard(ds, id);
	shard_index_entry_get(s->index, id - s->first_sample, &e);
	if (shard_index_entry_check(&e, s->bytes, ds->info.compressed, why, sizeof(why)))
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
 * sequential reads of the hash. Measured on random 4 KiB samples of a mapped shard:
 * 9 GB/s hashed without, 17 GB/s with (1 to 4 samples ahead, 8 to 64 lines: alike). */
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

	if (r->ds->info.compressed)
		return -ENOTSUP;
	for (size_t base = 0; base < count; base += VIEW_CHUNK) {
		size_t n = count - base < VIEW_CHUNK ? count - base : VIEW_CHUNK;
		struct verify_args a = { views + base, sums, n, 0 };
		int faulted;

		for (size_t i = 0; i < n; i++) {
			const struct ds_shard *s;
			struct shard_index_entry e;
			int rc = locate(r, ids[base + i], &s, &e);

			if (rc || !s->data) {
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
			const struct ds_shard *s = find_shard(r->ds, id);

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
	s = find_shard(ds, id);
	if (!payload) {
		const uint8_t *entry = entry_at(s, id);

		__builtin_prefetch(entry);
		__builtin_prefetch(entry + sizeof(struct shard_index_entry) - 1);
		return;
	}
	if (!s->data)
		return;
	shard_index_entry_get(s->index, id - s->first_sample, &e);
	/* an entry is checked only when the sample is read; a prefetch never faults, but
	 * stay inside the mapping all the same */
	if (e.offset < s->bytes)
		prefetch_start(s->data + e.offset, e.stored_len < s->bytes - e.offset ?
			       e.stored_len : s->bytes - e.offset);
}

/* Samples whose pages mincore() checks per batch before sample_reader_warm() decides:
 * two index pages and two payload pages, ~4 us of system calls, against 170-450 us to
 * build a batch of 256 samples from memory. One mostly on disk is found cold at once;
 * one partly cached (hit ratio h) gets its read-ahead for all but about h^4 of its
 * batches. */
#define WARM_PROBES 2
/* Batches that pass unprobed after two probes in a row found everything in memory: the
 * probes then cost ~0.5 us per batch instead of ~4 us (4% of a batch of 256 JSONL
 * records copied from memory, measured with bench_encode), and a dataset that leaves the
 * page cache is noticed within 8 batches. (Two, because a batch built twice, a peek then
 * its claim, is found in memory the second time just because the first read it.) */
#define WARM_SKIP 7

/* Whether the page holding p is in memory (mincore(2); an error counts as resident: the
 * read itself reports what is wrong). */
static int page_resident(const void *p)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	unsigned char v = 1;

	if (mincore((void *)((uintptr_t)p & ~(page - 1)), 1, &v) != 0)
		return 1;
	return v & 1;
}

/* Whether some probed page of ids is not in memory (index entry, then the payload the
 * entry points at when that entry is in memory). */
static int batch_cold(const struct dataset *ds, const uint64_t *ids, size_t count)
{
	for (size_t k = 0; k < WARM_PROBES && k < count; k++) {
		uint64_t id = ids[k * count / WARM_PROBES];
		const struct ds_shard *s;
		struct shard_index_entry e;

		if (id >= ds->info.samples)
			continue;
		s = find_shard(ds, id);
		if (!page_resident(entry_at(s, id)))
			return 1;
		shard_index_entry_get(s->index, id - s->first_sample, &e);
		if (s->data && e.offset < s->bytes && !page_resident(s->data + e.offset))
			return 1;
	}
	return 0;
}

void sample_reader_warm(struct sample_reader *r, const uint64_t *ids, size_t count)
{
	const struct dataset *ds;
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), last = 0;
	uint64_t w;

	if (!count)
		return;
	if (r->warm_skip) {
		r->warm_skip--;
		return;
	}
	ds = r->ds;
	if (!batch_cold(ds, ids, count)) {
		if (++r->warm_hot >= 2)
			r->warm_skip = WARM_SKIP;
		return;
	}
	r->warm_hot = 0;
	w = ds->warm_window ? ds->warm_window : page;
	/* every index page first, all of them in flight at once ... */
	for (size_t i = 0; i < count; i++) {
		uintptr_t at, end;

		if (ids[i] >= ds->info.samples)
			continue;
		at = (uintptr_t)entry_at(find_shard(ds, ids[i]), ids[i]);
		end = at + sizeof(struct shard_index_entry); /* it may straddle two pages */
		at &= ~(page - 1);
		if (at != last) /* entries of neighbouring ids share a page */
			madvise((void *)at, end - at, MADV_WILLNEED);
		last = at;
	}
	/* ... then the payloads, whose place the entries give (the first of these reads
	 * waits for its index page; by then the others have arrived or are on their way) */
	last = UINTPTR_MAX;
	for (size_t i = 0, last_shard = SIZE_MAX; i < count; i++) {
		const struct ds_shard *s;
		struct shard_index_entry e;
		uint64_t from, to;

		if (ids[i] >= ds->info.samples)
			continue;
		s = find_shard(ds, ids[i]);
		shard_index_entry_get(s->index, ids[i] - s->first_sample, &e);
		if (e.offset >= s->bytes) /* an entry is checked when its sample is read */
			continue;
		from = e.offset & ~(w - 1);
		to = e.stored_len < s->bytes - e.offset ? e.offset + e.stored_len : s->bytes;
		to = (to + w - 1) & ~(w - 1);
		if (from != last || (size_t)(s - ds->shards) != last_shard) /* samples in order
									     * share windows */
			posix_fadvise(s->fd, (off_t)from, (off_t)(to - from), POSIX_FADV_WILLNEED);
		last = from;
		last_shard = (size_t)(s - ds->shards);
	}
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

int sample_reader_read(struct sample_reader *r, uint64_t id, struct buf *out)
{
	const struct dataset *ds = r->ds;
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

	if (!ds->info.compressed) {
		/* the index entry was checked against the shard's size above */
		rc = s->data ? guard_copy(dst, s->data + e.offset, e.raw_len) :
			       pread_full(s->fd, dst, e.raw_len, e.offset);
		if (rc)
			READ_FAIL("read failed: %s", strerror(-rc));
	} else {
		unsigned long long fcs;
		size_t n;

		r->scratch.len = 0;
		rc = buf_reserve(&r->scratch, e.stored_len);
		if (rc)
			return rc;
		rc = s->data ? guard_copy(r->scratch.data, s->data + e.offset, e.stored_len) :
			       pread_full(s->fd, r->scratch.data, e.stored_len, e.offset);
		if (rc)
			READ_FAIL("read failed: %s", strerror(-rc));
		/* Bytes from disk are untrusted: the frame must fill its slot exactly and
		 * declare the size the index promises before we decode into out. */
		n = ZSTD_findFrameCompressedSize(r->scratch.data, e.stored_len);
		if (ZSTD_isError(n) || n != e.stored_len)
			READ_FAIL("corrupt zstd frame (%s)", ZSTD_isError(n) ? ZSTD_getErrorName(n) :
				  "frame size differs from the index");
		fcs = ZSTD_getFrameContentSize(r->scratch.data, e.stored_len);
		if (fcs != e.raw_len)
			READ_FAIL("zstd frame declares %s bytes, the index says %" PRIu32,
				  fcs == ZSTD_CONTENTSIZE_UNKNOWN ? "unknown" :
				  fcs == ZSTD_CONTENTSIZE_ERROR ? "invalid" : "other", e.raw_len);
		if (ds->ddict)
			n = ZSTD_decompress_usingDDict(r->dctx, dst, e.raw_len, r->scratch.data,
						       e.stored_len, ds->ddict);
		else
			n = ZSTD_decompressDCtx(r->dctx, dst, e.raw_len, r->scratch.data,
						e.stored_len);
		if (ZSTD_isError(n))
			READ_FAIL("zstd: %s", ZSTD_getErrorName(n));
		if (n != e.raw_len)
			READ_FAIL("decoded %zu bytes, the index says %" PRIu32, n, e.raw_len);
	}
	if (shard_index_checksum(dst, e.raw_len) != e.checksum)
		READ_FAIL("checksum mismatch (the sample's bytes differ from what was packed)");
	out->len += e.raw_len;
	out->data[out->len] = 0;
	return 0;
}

size_t dataset_fingerprint_text(const struct dataset_info *info, char *out, size_t len)
{
	int tokens = info->kind == DATASET_TOKENS;
	int n = snprintf(out, len,
			 "zephon-dataset-v1\nkind=%s\ncontent=%s\nrecord_ext=%s\ndtype=%s\n"
			 "seq_len=%" PRIu64 "\nsamples=%" PRIu64 "\n",
			 dataset_kind_name(info->kind), dataset_content_name(info->content),
			 info->content == CONTENT_TEXT ? info->record_ext : "",
			 tokens ? dataset_dtype_name(info->dtype) : "",
			 tokens ? info->seq_len : 0, info->samples);

	return n < 0 ? 0 : (size_t)n;
}

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

		stored += s->bytes;
		if (shard_index_check_all(s->index, s->index_len, s->bytes, in->compressed, &e,
					  why, sizeof(why)))
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
