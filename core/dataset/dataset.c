/* dataset.c: one packed dataset, or several as one, opened (dataset.h): catalogs, shard
 * files, the union's info; what it holds, and where a sample's shard and index entry
 * are. Reading the samples is dataset_read.c's. */
#include "dataset.h"
#include "dataset_int.h"
#include "rowindex.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guard.h"
#include "instream.h"
#include "s3.h"

static const char *const kind_names[] = { "records", "tokens" };
static const char *const content_names[] = { "text", "files", "tokens" };

const char *dataset_kind_name(enum dataset_kind k)
{
	return (unsigned)k < 2 ? kind_names[k] : "?";
}

const char *dataset_content_name(enum dataset_content c)
{
	return (unsigned)c < 3 ? content_names[c] : "?";
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

/* Fill *in from catalog c's meta table. */
static int read_meta(const struct catalog *c, struct dataset_info *in, char *err, size_t errlen)
{
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
		v = catalog_meta_get(c, "dtype");
		if (!v || dtype_parse(v, &in->dtype))
			BAD("catalog meta 'dtype' is missing or unknown");
		in->itemsize = dtype_size(in->dtype);
		if (catalog_meta_u64(c, "seq_len", &in->seq_len) || in->seq_len == 0 ||
		    in->seq_len * in->itemsize > SAMPLE_MAX_BYTES)
			BAD("catalog meta 'seq_len' is missing, zero or too large");
		if (catalog_meta_get(c, "overlap") &&
		    (catalog_meta_u64(c, "overlap", &in->overlap) || in->overlap > 1 ||
		     in->overlap >= in->seq_len))
			BAD("catalog meta 'overlap' is not 0 or 1 (below seq_len)");
		if (catalog_meta_get(c, "eod_token")) {
			if (catalog_meta_u64(c, "eod_token", &u) ||
			    u > dtype_max(in->dtype))
				BAD("catalog meta 'eod_token' is not a token id of dtype %s",
				    dtype_name(in->dtype));
			in->have_eod_token = 1;
			in->eod_token = (uint32_t)u;
		}
		if (catalog_meta_get(c, "max_token_id")) {
			if (catalog_meta_u64(c, "max_token_id", &in->max_token_id) ||
			    in->max_token_id > dtype_max(in->dtype))
				BAD("catalog meta 'max_token_id' is not a token id of dtype %s",
				    dtype_name(in->dtype));
			in->have_max_token_id = 1;
		}
		v = catalog_meta_get(c, "tokenizer_sha256");
		if (v && (strlen(v) != 64 || strspn(v, "0123456789abcdef") != 64))
			BAD("catalog meta 'tokenizer_sha256' is not 64 hex digits");
		if (v)
			memcpy(in->tokenizer_sha256, v, 65);
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
static int open_error(const struct ds_source *src, const char *what, const char *file,
		      char *err, size_t errlen)
{
	if (errno == EMFILE || errno == ENFILE) {
		err_printf(err, errlen, "%s %s: %s: the dataset has %zu shards and keeps one file "
			"open per shard; raise the open-file limit (ulimit -n, LimitNOFILE=) or "
			"repack with a larger --shard-size", what, file, strerror(errno),
			src->cat.nshards);
		return -EMFILE;
	}
	if (errno == EACCES) {
		err_printf(err, errlen, "%s %s: %s", what, file, strerror(errno));
		return -EACCES;
	}
	return 0;
}

/* Open shard s's payload file (cs->file in dirfd), check its size against the catalog
 * and map it. 0, or -errno with a reason in err (open_error()'s, -EBADMSG). */
static int open_payload(const struct ds_source *src, int dirfd, const struct catalog_shard *cs,
			struct ds_shard *s, char *err, size_t errlen)
{
	struct stat sb;
	int rc;

	s->fd = openat(dirfd, cs->file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (s->fd < 0 && (rc = open_error(src, "shard", cs->file, err, errlen)))
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
	 * there): one pread syscall per sample would be the largest cost of serving
	 * batches. Uncompressed token batches are even served from it without a copy
	 * (sample_reader_views). Faults (truncation, I/O errors) become EIO through
	 * guard_copy() and guard_run(). */
	if (cs->bytes) {
		void *d = mmap(NULL, (size_t)cs->bytes, PROT_READ, MAP_SHARED, s->fd, 0);

		s->data = d == MAP_FAILED ? NULL : d;
		/* a fault reads its own page, not the read-around (read_ahead_kb, up to
		 * megabytes) of a sequential reader: the pages a batch or the mount's
		 * read-ahead needs are asked for explicitly (dataset_warm.c), and the
		 * rest of a read-around is rarely read before it is evicted */
		if (s->data)
			madvise(d, (size_t)cs->bytes, MADV_RANDOM);
	}
	return 0;
}

/* Open and map shard s's index file (cs->index_file in dirfd) and check its header
 * against the catalog. 0, or -errno with a reason in err (open_error()'s, -EBADMSG,
 * -EIO). */
static int open_index(const struct ds_source *src, int dirfd, const struct catalog_shard *cs,
		      struct ds_shard *s, char *err, size_t errlen)
{
	int ifd, rc;

	ifd = openat(dirfd, cs->index_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (ifd < 0 && (rc = open_error(src, "index", cs->index_file, err, errlen)))
		return rc;
	if (ifd < 0) {
		err_printf(err, errlen, "index %s: %s", cs->index_file, strerror(errno));
		return -EBADMSG;
	}
	return dataset_map_index(ifd, cs->index_file, cs, s, err, errlen);
}

/* dir without its trailing slashes ("/" stays), for "<dir>/<file>" names: its length. */
static int dir_len(const char *dir)
{
	size_t n = strlen(dir);

	while (n > 1 && dir[n - 1] == '/')
		n--;
	return n > INT_MAX ? INT_MAX : (int)n;
}

/* Open the shards of source si (in dirfd) into ds->shards[ds->nshards...]: their files
 * named "<dir>/<file>" when ds is a union. */
static int open_shards(struct dataset *ds, size_t si, int dirfd, char *err, size_t errlen)
{
	struct ds_source *src = &ds->src[si];
	uint64_t next = 0;
	int rc;

	src->first_shard = ds->nshards;
	for (size_t k = 0; k < src->cat.nshards; k++) {
		const struct catalog_shard *cs = &src->cat.shards[k];
		struct ds_shard *s = &ds->shards[ds->nshards];

		s->fd = -1;
		ds->nshards++;
		s->file = cs->file;
		if (ds->nsrc > 1) {
			if (asprintf(&s->file_alloc, "%.*s/%s", dir_len(src->dir), src->dir,
				     cs->file) < 0) {
				s->file_alloc = NULL;
				return -ENOMEM;
			}
			s->file = s->file_alloc;
		}
		s->first_sample = src->offset + cs->first_sample;
		s->count = cs->samples;
		s->bytes = cs->bytes;
		s->compressed = src->info.compressed;
		s->source = si;
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
		if (next > src->info.samples) {
			err_printf(err, errlen, "catalog shards hold more samples than its %" PRIu64,
				src->info.samples);
			return -EBADMSG;
		}
		if (!src->remote && ((rc = open_payload(src, dirfd, cs, s, err, errlen)) ||
				     (rc = open_index(src, dirfd, cs, s, err, errlen))))
			return rc;
	}
	if (src->remote && (rc = dsr_open_shards(ds, si, err, errlen)))
		return rc;
	if (next != src->info.samples) {
		err_printf(err, errlen, "catalog shards hold %" PRIu64 " samples but it says %" PRIu64,
			next, src->info.samples);
		return -EBADMSG;
	}
	return 0;
}

/* Read source dir's catalog into src (its dir opened into *dirfd, left open for
 * open_shards()). 0, or -errno with a line naming dir in err. */
static int load_source(struct dataset *ds, struct ds_source *src, const char *dir, int *dirfd,
		       char *err, size_t errlen)
{
	char why[512], *path = NULL;
	int rc;

	src->dir = strdup(dir);
	if (!src->dir)
		return -ENOMEM;
	if (s3_is_url(dir)) {
		if ((rc = dsr_fetch_catalog(ds, src, dir, &path, err, errlen)))
			return rc;
	} else if (asprintf(&path, "%s/%s", dir, CATALOG_FILE) < 0) {
		return -ENOMEM;
	}
	*dirfd = src->remote ? -1 : open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*dirfd < 0 && !src->remote) {
		rc = -errno;
		err_printf(err, errlen, "%s: %s", dir, strerror(errno));
		free(path);
		return rc == -ENOTDIR ? -ENOENT : rc;
	}
	rc = catalog_load(path, &src->cat, why, sizeof(why));
	free(path);
	if (rc) {
		if (rc == -ENOENT)
			err_printf(err, errlen, "%s is not a zephon dataset (no %s); make one with "
				"zephon pack", dir, CATALOG_FILE);
		else
			err_printf(err, errlen, "%s", why);
		return rc;
	}
	rc = read_meta(&src->cat, &src->info, why, sizeof(why));
	if (!rc && src->info.kind == DATASET_TOKENS)     /* a dataset of rows: rowindex.h */
		rc = rowindex_meta(&src->cat, src->info.dtype, src->info.seq_len,
				   src->info.overlap, &src->info.row_len, &src->info.max_context,
				   why, sizeof(why));
	if (rc)
		err_printf(err, errlen, "%s: %s", dir, why);
	return rc;
}

/* 0 when sources a and b make the same batches (every field of dataset_info that shapes
 * a sample as served); -EINVAL with a line naming both and the first field that differs. */
static int check_compatible(const struct ds_source *a, const struct ds_source *b, char *err,
			    size_t errlen)
{
	const struct dataset_info *x = &a->info, *y = &b->info;
	const char *field = NULL, *vx = "", *vy = "";
	char nx[24], ny[24];

#define DIFF_U64(f, u, v) do { \
	field = f; \
	snprintf(nx, sizeof(nx), "%" PRIu64, (uint64_t)(u)); \
	snprintf(ny, sizeof(ny), "%" PRIu64, (uint64_t)(v)); \
	vx = nx; vy = ny; \
} while (0)
	if (x->kind != y->kind) {
		field = "kind";
		vx = dataset_kind_name(x->kind);
		vy = dataset_kind_name(y->kind);
	} else if (x->content != y->content) {
		field = "content";
		vx = dataset_content_name(x->content);
		vy = dataset_content_name(y->content);
	} else if (x->content == CONTENT_TEXT && strcmp(x->record_ext, y->record_ext)) {
		field = "record_ext";
		vx = x->record_ext;
		vy = y->record_ext;
	} else if (x->kind == DATASET_TOKENS && x->dtype != y->dtype) {
		field = "dtype";
		vx = dtype_name(x->dtype);
		vy = dtype_name(y->dtype);
	} else if (x->kind == DATASET_TOKENS && x->seq_len != y->seq_len) {
		DIFF_U64("seq_len", x->seq_len, y->seq_len);
	} else if (x->kind == DATASET_TOKENS && x->row_len != y->row_len) {
		DIFF_U64("row_len", x->row_len, y->row_len);
	} else if (x->kind == DATASET_TOKENS && x->overlap != y->overlap) {
		DIFF_U64("overlap", x->overlap, y->overlap);
	} else if (x->kind == DATASET_TOKENS && (x->have_eod_token != y->have_eod_token ||
		   x->eod_token != y->eod_token)) {
		DIFF_U64("eod_token", x->eod_token, y->eod_token);
		if (!x->have_eod_token)
			vx = "none";
		if (!y->have_eod_token)
			vy = "none";
	}
#undef DIFF_U64
	if (!field)
		return 0;
	err_printf(err, errlen, "datasets %s and %s differ in %s: %s vs %s: a mixture needs "
		"one batch format; pack them alike", a->dir, b->dir, field, vx, vy);
	return -EINVAL;
}

int dataset_union_fingerprint(const char *const *fps, size_t count, char out[33])
{
	static const char head[] = "zephon-mixture-v1\n";
	size_t len = sizeof(head) - 1;
	char *text = malloc(len + count * 33);

	if (!text)
		return -ENOMEM;
	memcpy(text, head, len);
	for (size_t s = 0; s < count; s++) {
		memcpy(text + len, fps[s], 32);
		text[len + 32] = '\n';
		len += 33;
	}
	xxh128_hex(XXH3_128bits(text, len), out);
	free(text);
	return 0;
}

/* ds->info for a union of several sources (a single source's is its own). */
static int union_info(struct dataset *ds)
{
	const char **fps = malloc(ds->nsrc * sizeof(*fps));
	struct dataset_info *in = &ds->info;
	int rc;

	if (!fps)
		return -ENOMEM;
	*in = ds->src[0].info;
	in->samples = in->raw_bytes = in->stored_bytes = in->shards = 0;
	for (size_t s = 0; s < ds->nsrc; s++) {
		const struct dataset_info *si = &ds->src[s].info;

		in->samples += si->samples;
		in->raw_bytes += si->raw_bytes;
		in->stored_bytes += si->stored_bytes;
		in->shards += si->shards;
		in->compressed |= si->compressed;
		/* the union's largest id is known only when every source's is */
		in->have_max_token_id &= si->have_max_token_id;
		if (si->max_token_id > in->max_token_id)
			in->max_token_id = si->max_token_id;
		if (si->max_context > in->max_context)
			in->max_context = si->max_context;
		fps[s] = si->fingerprint;
	}
	rc = dataset_union_fingerprint(fps, ds->nsrc, in->fingerprint);
	free(fps);
	return rc;
}

/* Owns the first pass of dataset_open_sources(): every source's catalog loaded and
 * checked against the first, its dataset ids placed after the previous source's, before
 * any shard file is opened (a mixture that cannot be served fails here). ds->nsrc counts
 * the sources begun (dataset_close() frees them); dirfd[s] receives each directory;
 * *shards the shard files of all. 0 or -errno with a reason in err. */
static int load_catalogs(struct dataset *ds, const char *const *dirs, size_t count,
			 int *dirfd, size_t *shards, char *err, size_t errlen)
{
	uint64_t total = 0;
	int rc;

	for (size_t s = 0; s < count; s++) {
		struct ds_source *src = &ds->src[s];

		ds->nsrc++;
		if ((rc = load_source(ds, src, dirs[s], &dirfd[s], err, errlen)))
			return rc;
		if (s > 0 && (rc = check_compatible(&ds->src[0], src, err, errlen)))
			return rc;
		src->offset = total;
		if (__builtin_add_overflow(total, src->info.samples, &total) ||
		    (count > 1 && total >= DATASET_SAMPLES_MAX)) {
			err_printf(err, errlen, "datasets %s to %s hold 2^62 samples or more; a "
				"mixture holds fewer: mix fewer datasets", dirs[0], dirs[s]);
			return -EOVERFLOW;
		}
		*shards += src->cat.nshards;
	}
	return 0;
}

/* Owns the second pass of dataset_open_sources(): each source's shard files opened
 * through dirfd[s] (closed here, and set to -1), and its zstd dictionary loaded and
 * handed to its shards. 0 or -errno with a reason in err. */
static int open_sources_shards(struct dataset *ds, int *dirfd, char *err, size_t errlen)
{
	char why[512];
	int rc;

	for (size_t s = 0; s < ds->nsrc; s++) {
		struct ds_source *src = &ds->src[s];

		rc = open_shards(ds, s, dirfd[s], why, sizeof(why));
		if (dirfd[s] >= 0)
			close(dirfd[s]);
		dirfd[s] = -1;
		if (rc) {
			err_printf(err, errlen, "%s: %s", src->dir, why);
			return rc;
		}
		if (src->info.compressed && src->cat.dict) {
			src->ddict = ZSTD_createDDict(src->cat.dict, src->cat.dict_len);
			if (!src->ddict) {
				err_printf(err, errlen, "%s: the catalog's zstd dictionary is unusable",
					src->dir);
				return -EBADMSG;
			}
			for (size_t k = src->first_shard; k < ds->nshards; k++)
				ds->shards[k].ddict = src->ddict;
		}
	}
	return 0;
}

int dataset_open_sources(const char *const *dirs, size_t count, struct dataset **out,
			 char *err, size_t errlen)
{
	struct dataset *ds;
	int *dirfd = NULL;
	size_t shards = 0;
	int rc;

	if (count == 0) {
		err_printf(err, errlen, "no dataset given; name at least one packed dataset");
		return -EINVAL;
	}
	ds = calloc(1, sizeof(*ds));
	if (!ds || !(ds->src = calloc(count, sizeof(*ds->src))) ||
	    !(dirfd = malloc(count * sizeof(*dirfd)))) {
		rc = -ENOMEM;
		goto err_free;
	}
	for (size_t s = 0; s < count; s++)
		dirfd[s] = -1;
	if ((rc = load_catalogs(ds, dirs, count, dirfd, &shards, err, errlen)))
		goto err_free;
	ds->shards = calloc(shards ? shards : 1, sizeof(*ds->shards));
	if (!ds->shards) {
		rc = -ENOMEM;
		goto err_free;
	}
	if ((rc = open_sources_shards(ds, dirfd, err, errlen)))
		goto err_free;
	if (count == 1)
		ds->info = ds->src[0].info;
	else if ((rc = union_info(ds)))
		goto err_free;
	free(dirfd);
	*out = ds;
	return 0;

err_free:
	for (size_t s = 0; dirfd && s < count; s++)
		if (dirfd[s] >= 0)
			close(dirfd[s]);
	free(dirfd);
	dataset_close(ds);
	return rc;
}

int dataset_open(const char *dir, struct dataset **out, char *err, size_t errlen)
{
	return dataset_open_sources(&dir, 1, out, err, errlen);
}

void dataset_close(struct dataset *ds)
{
	if (!ds)
		return;
	dsr_free(ds);
	for (size_t k = 0; k < ds->nshards; k++) {
		if (ds->shards[k].fd >= 0)
			close(ds->shards[k].fd);
		if (ds->shards[k].data)
			munmap((void *)ds->shards[k].data, (size_t)ds->shards[k].bytes);
		if (ds->shards[k].index)
			munmap((void *)ds->shards[k].index, ds->shards[k].index_len);
		free(ds->shards[k].file_alloc);
	}
	free(ds->shards);
	for (size_t s = 0; ds->src && s < ds->nsrc; s++) {
		ZSTD_freeDDict(ds->src[s].ddict);
		catalog_release(&ds->src[s].cat);
		free(ds->src[s].dir);
	}
	free(ds->src);
	free(ds);
}

const struct dataset_info *dataset_info(const struct dataset *ds)
{
	return &ds->info;
}

const char *dataset_dir(const struct dataset *ds)
{
	return ds->src[0].dir;
}

const struct catalog *dataset_catalog(const struct dataset *ds)
{
	return &ds->src[0].cat;
}

size_t dataset_source_count(const struct dataset *ds)
{
	return ds->nsrc;
}

const struct dataset_info *dataset_source_info(const struct dataset *ds, size_t s)
{
	return s < ds->nsrc ? &ds->src[s].info : NULL;
}

const char *dataset_source_dir(const struct dataset *ds, size_t s)
{
	return s < ds->nsrc ? ds->src[s].dir : NULL;
}

uint64_t dataset_source_offset(const struct dataset *ds, size_t s)
{
	return s < ds->nsrc ? ds->src[s].offset : ds->info.samples;
}

size_t dataset_source_of(const struct dataset *ds, uint64_t id, uint64_t *local_id)
{
	size_t lo = 0, hi = ds->nsrc;

	if (id >= ds->info.samples)
		return ds->nsrc;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (ds->src[mid].offset <= id)
			lo = mid;
		else
			hi = mid;
	}
	if (local_id)
		*local_id = id - ds->src[lo].offset;
	return lo;
}

int dataset_sample_len(const struct dataset *ds, uint64_t id, uint32_t *raw_len)
{
	const struct ds_shard *s;
	struct shard_index_entry e;

	if (id >= ds->info.samples)
		return -ERANGE;
	s = dataset_find_shard(ds, id);
	if (dataset_entry_read(s, id, &e) || e.raw_len > SAMPLE_MAX_BYTES)
		return -EIO; /* an unreadable or corrupt index; the read of the sample says more */
	*raw_len = e.raw_len;
	return 0;
}

int dataset_flat_shard(const struct dataset *ds, size_t i, const char **dir, const char **file,
		       uint64_t *first, uint64_t *count)
{
	const struct ds_shard *sh;
	const struct ds_source *src;
	uint64_t size = ds->info.seq_len * ds->info.itemsize;
	uint64_t ends[2];

	if (i >= ds->nshards)
		return -ERANGE;
	sh = &ds->shards[i];
	if (ds->info.kind != DATASET_TOKENS || sh->compressed || !size || sh->remote)
		return -ENOTSUP;
	/* the first and the last entry where back to back puts them: a pack writes every
	 * raw token sample so, and a shard that breaks the rule is refused, not guessed */
	ends[0] = 0;
	ends[1] = sh->count ? sh->count - 1 : 0;
	for (int k = 0; k < 2 && sh->count; k++) {
		struct shard_index_entry e;
		int rc = dataset_entry_read(sh, sh->first_sample + ends[k], &e);

		if (rc)
			return rc;
		if (e.offset != ends[k] * size || e.stored_len != size || e.raw_len != size)
			return -ENOTSUP;
	}
	src = &ds->src[sh->source];
	*dir = src->dir;
	*file = src->cat.shards[i - src->first_shard].file;
	*first = sh->first_sample;
	*count = sh->count;
	return 0;
}

int dataset_flat(const struct dataset *ds)
{
	const char *dir, *file;
	uint64_t first, count;

	for (size_t i = 0; i < ds->nshards; i++)
		if (dataset_flat_shard(ds, i, &dir, &file, &first, &count))
			return 0;
	return ds->nshards > 0;
}

int dataset_shard_file_id(const struct dataset *ds, size_t i, uint64_t *dev, uint64_t *ino)
{
	struct stat st;

	if (i >= ds->nshards)
		return -ERANGE;
	if (fstat(ds->shards[i].fd, &st))
		return -errno;
	*dev = (uint64_t)st.st_dev;
	*ino = (uint64_t)st.st_ino;
	return 0;
}

const char *dataset_shard_name(const struct dataset *ds, uint64_t id)
{
	if (id >= ds->info.samples)
		return NULL;
	return dataset_find_shard(ds, id)->file;
}

size_t dataset_fingerprint_text(const struct dataset_info *info, char *out, size_t len)
{
	int tokens = info->kind == DATASET_TOKENS;
	int n = snprintf(out, len,
			 "zephon-dataset-v1\nkind=%s\ncontent=%s\nrecord_ext=%s\ndtype=%s\n"
			 "seq_len=%" PRIu64 "\nsamples=%" PRIu64 "\n",
			 dataset_kind_name(info->kind), dataset_content_name(info->content),
			 info->content == CONTENT_TEXT ? info->record_ext : "",
			 tokens ? dtype_name(info->dtype) : "",
			 tokens ? info->seq_len : 0, info->samples);

	if (n >= 0 && (size_t)n < len && tokens && info->tokenizer_sha256[0])
		n += snprintf(out + n, len - (size_t)n, "tokenizer_sha256=%s\n",
			      info->tokenizer_sha256);
	if (n >= 0 && (size_t)n < len && tokens && info->row_len)
		n += snprintf(out + n, len - (size_t)n, "layout=rows\nrow_len=%" PRIu64
			      "\nmax_context_length=%" PRIu64 "\n", info->row_len,
			      info->max_context);
	return n < 0 ? 0 : (size_t)n;
}

