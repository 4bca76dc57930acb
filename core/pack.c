#include "pack.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>
#include <zdict.h>
#include <zstd.h>

#include "catalog.h"
#include "compressor.h"
#include "instream.h"
#include "pool.h"
#include "shard_index.h"
#include "shard_writer.h"
#include "zephon_config.h"

/* Records gathered for one pass of the pool; results per record. */
struct batch {
	struct buf data;             /* records back to back */
	size_t n, cap;
	size_t *off, *len;
	uint64_t *line;              /* JSONL line numbers, for messages */
	int *status;                 /* 0 ok, 1 invalid JSON (why), < 0 -errno */
	char **why;
	uint32_t *xxh;               /* shard_index_checksum() of each record */
	size_t *foff, *flen;         /* frame offset and length in frames[fthr] */
	unsigned *fthr;
	struct buf *frames;          /* compressed frames, one buf per thread */
	size_t *bounds;              /* thread t takes records [bounds[t], bounds[t + 1]) */
	unsigned nthreads;
	int validate, compress;
};

struct packer {
	const struct pack_opts *o;
	char *err;
	size_t errlen;
	/* the inputs packed, as indexes into o->inputs: each names one source, after the
	 * other names of a Megatron pair were folded into its first (see resolve_inputs) */
	size_t *sources;
	size_t nsources;
	struct catalog cat;
	char *tmpdir;
	int dirfd;
	struct shard_writer *w;
	XXH3_state_t *fp;
	enum dataset_content content;
	enum dataset_kind kind;
	int have_dtype;
	enum token_dtype dtype;
	const char *dtype_from;      /* input that fixed the dtype */
	unsigned itemsize;
	int all_jsonl;
	/* dictionary training: samples are held here until enough have come */
	int training;
	struct buf stash;            /* whole samples, back to back */
	size_t *stash_sizes;
	size_t nstash, stash_cap;
	struct buf train;            /* the first PACK_DICT_SAMPLE_BYTES of each */
	size_t *train_sizes;
	void *dict;
	size_t dict_len;
	/* tokens */
	struct buf window;
	uint64_t tokens;             /* all tokens read */
	uint64_t *source_tokens;
	/* counters */
	uint64_t samples, raw_bytes, input_done, input_total;
	struct pack_progress prog;
	uint64_t skipped;
	/* the batch of records being gathered, processed on every thread */
	struct pool *pool;
	struct compressor **comp;    /* one per pool thread, after training */
	struct batch b;
	struct buf scratch;
	const char *cur_path;        /* the input the batch's records come from */
	int validate;                /* the batch holds JSONL lines to check */
};

static const unsigned itemsizes[] = { 1, 2, 4, 4 };

static int fail(struct packer *p, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct packer *p, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->err, p->errlen, fmt, ap);
	va_end(ap);
	return rc;
}

void pack_opts_init(struct pack_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->format = SOURCE_AUTO;
	o->compress = 1;
	o->level = PACK_LEVEL_DEFAULT;
	o->dict_size = PACK_DICT_SIZE_DEFAULT;
	o->shard_bytes = PACK_SHARD_BYTES_DEFAULT;
}

static enum dataset_content content_of(enum source_format f)
{
	switch (f) {
	case SOURCE_JSONL:
	case SOURCE_LINES:
		return CONTENT_TEXT;
	case SOURCE_DIR:
	case SOURCE_TAR:
		return CONTENT_FILES;
	default:
		return CONTENT_TOKENS;
	}
}

static void report(struct packer *p, int done)
{
	if (!p->o->progress)
		return;
	p->prog.input_bytes = p->input_done;
	p->prog.input_bytes_total = p->input_total;
	p->prog.samples = p->samples;
	p->prog.raw_bytes = p->raw_bytes;
	p->prog.stored_bytes = p->w ? shard_writer_stored_bytes(p->w) : 0;
	p->prog.done = done;
	p->o->progress(p->o->ctx, &p->prog);
}

/* The shard writer and one compressor per pool thread, once the dictionary is known. */
static int open_writer(struct packer *p)
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
		return fail(p, rc, "%s: %s", p->o->out, why);
	if (!p->o->compress)
		return 0;
	p->comp = calloc(pool_size(p->pool), sizeof(*p->comp));
	if (!p->comp)
		return -ENOMEM;
	for (unsigned t = 0; t < pool_size(p->pool); t++) {
		rc = compressor_new(p->o->level, p->dict, p->dict_len, &p->comp[t]);
		if (rc)
			return fail(p, rc, "zstd refused level %d or the trained dictionary",
				    p->o->level);
	}
	return 0;
}

static void batch_release(struct batch *b)
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

static int batch_grow(struct batch *b, unsigned nthreads)
{
	size_t cap = b->cap ? b->cap * 2 : 1024;

#define GROW(f) do { void *q = realloc(b->f, cap * sizeof(*b->f)); if (!q) return -ENOMEM; \
	b->f = q; } while (0)
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
	b->cap = cap;
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
static int batch_add(struct packer *p, const void *data, size_t len, uint64_t line)
{
	struct batch *b = &p->b;
	int rc;

	if (len > SAMPLE_MAX_BYTES)
		return fail(p, -EFBIG, "%s: a sample of %zu bytes exceeds the %u-byte limit",
			    p->cur_path, len, (unsigned)SAMPLE_MAX_BYTES);
	if (b->n == b->cap && (rc = batch_grow(b, pool_size(p->pool))))
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

struct batch_job {
	struct packer *p;
	struct batch *b;
};

/* On pool thread t: validate, checksum and compress t's share of the batch. */
static void batch_work(void *arg, unsigned t, unsigned n)
{
	struct batch_job *job = arg;
	struct batch *b = job->b;
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
static void batch_run(struct packer *p, struct batch *b, int validate, int compress)
{
	struct batch_job job = { p, b };
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
	pool_run(p->pool, batch_work, &job);
}

/* Write record i of a processed batch. */
static int write_record(struct packer *p, struct batch *b, size_t i)
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
			return fail(p, rc, "zstd failed on sample %" PRIu64, p->samples);
		payload = p->scratch.data;
		plen = p->scratch.len;
	}
	rc = shard_writer_add_payload(p->w, payload, plen, b->len[i], b->xxh[i], why,
				      sizeof(why));
	if (rc)
		return fail(p, rc, "%s: %s", p->o->out, why);
	return 0;
}

/* Train the dictionary on what was held back, then write the held samples. */
static int end_training(struct packer *p)
{
	struct batch sb = { 0 };
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
	rc = open_writer(p);
	if (rc)
		return rc;
	/* The held samples become a batch of their own, compressed on every thread. */
	while (sb.cap < p->nstash)
		if ((rc = batch_grow(&sb, pool_size(p->pool))))
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
	batch_run(p, &sb, 0, p->o->compress);
	for (size_t i = 0; !rc && i < sb.n; i++) {
		if (sb.status[i])
			rc = fail(p, sb.status[i], "zstd failed on a sample");
		else
			rc = write_record(p, &sb, i);
	}
out:
	batch_release(&sb);
	free(p->stash_sizes);
	p->stash_sizes = NULL;
	p->nstash = 0;
	return rc;
}

static int hold(struct packer *p, const void *data, size_t len)
{
	size_t t = len < PACK_DICT_SAMPLE_BYTES ? len : PACK_DICT_SAMPLE_BYTES;

	if (p->nstash == p->stash_cap) {
		size_t cap = p->stash_cap ? p->stash_cap * 2 : 1024;
		size_t *a = realloc(p->stash_sizes, cap * sizeof(*a));
		size_t *b = a ? realloc(p->train_sizes, cap * sizeof(*b)) : NULL;

		if (a)
			p->stash_sizes = a;
		if (!a || !b)
			return -ENOMEM;
		p->train_sizes = b;
		p->stash_cap = cap;
	}
	if (buf_append(&p->stash, data, len) || buf_append(&p->train, data, t))
		return -ENOMEM;
	p->stash_sizes[p->nstash] = len;
	p->train_sizes[p->nstash] = t;
	p->nstash++;
	if (p->train.len >= PACK_DICT_TRAIN_BYTES || p->stash.len >= 8 * PACK_DICT_TRAIN_BYTES ||
	    p->nstash >= (1u << 20))
		return end_training(p);
	return 0;
}

/* Process the batch on every thread, then take its records in order: skip or refuse
 * invalid ones, fingerprint the rest, and hold them (training) or write them. */
static int batch_flush(struct packer *p)
{
	struct batch *b = &p->b;
	int rc = 0;

	if (b->n == 0)
		return 0;
	batch_run(p, b, p->validate, p->o->compress && !p->training);
	for (size_t i = 0; i < b->n; i++) {
		const uint8_t *d = b->data.data + b->off[i];
		uint64_t le = htole64(b->len[i]);

		if (b->status[i] == 1) {
			if (!p->o->skip_bad) {
				rc = fail(p, -EINVAL, "%s:%" PRIu64 ": invalid JSON at %s; fix the line, "
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
			rc = fail(p, b->status[i], "%s: zstd failed on the sample of line/record %"
				  PRIu64, p->cur_path, b->line[i]);
			break;
		}
		XXH3_128bits_update(p->fp, &le, 8);
		XXH3_128bits_update(p->fp, d, b->len[i]);
		p->samples++;
		p->raw_bytes += b->len[i];
		rc = p->training ? hold(p, d, b->len[i]) : write_record(p, b, i);
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
		fail(p, rc, "out of memory while packing %s", p->cur_path);
	report(p, 0);
	return rc;
}

static int batch_full(const struct packer *p)
{
	return p->b.data.len >= PACK_BATCH_BYTES || p->b.n >= PACK_BATCH_RECORDS;
}

/* Cut every whole window out of p->window into the batch. */
static int cut_windows(struct packer *p)
{
	size_t stride = (size_t)(p->o->seq_len * p->itemsize), off = 0;
	size_t wlen = stride + (size_t)p->o->overlap * p->itemsize;
	int rc = 0;

	while (!rc && p->window.len - off >= wlen) {
		rc = batch_add(p, p->window.data + off, wlen, 0);
		off += stride; /* overlap: the window's last token starts the next one */
		if (!rc && batch_full(p))
			rc = batch_flush(p);
	}
	memmove(p->window.data, p->window.data + off, p->window.len - off);
	p->window.len -= off;
	return rc;
}

static int cancelled(const struct packer *p)
{
	return p->o->cancel && *p->o->cancel;
}

/* Pack o->inputs[i] as the next source (catalog row). */
static int pack_input(struct packer *p, size_t i, enum source_format f,
		      const struct source_opts *so)
{
	const char *path = p->o->inputs[i];
	struct source s;
	struct buf rec = BUF_INIT;
	struct catalog_source row;
	uint64_t first = p->samples, base_done = p->input_done, tokens_before = p->tokens;
	int rc;

	p->cur_path = path;
	p->validate = f == SOURCE_JSONL;
	rc = source_open(&s, source_ops_for(f), path, so);
	if (rc) {
		rc = fail(p, rc, "%s", s.err[0] ? s.err : strerror(-rc));
		goto out;
	}
	if (f == SOURCE_DIR || f == SOURCE_MEGATRON)
		p->input_total += s.bytes_total;
	if (s.content == CONTENT_TOKENS) {
		if (!p->have_dtype) {
			p->have_dtype = 1;
			p->dtype = s.dtype;
			p->dtype_from = path;
			p->itemsize = itemsizes[s.dtype];
		} else if (s.dtype != p->dtype) {
			rc = fail(p, -EINVAL, "%s: tokens are %s but the dataset's are %s (from %s); "
				  "all token inputs must share one dtype", path,
				  dataset_dtype_name(s.dtype), dataset_dtype_name(p->dtype),
				  p->dtype_from);
			goto out;
		}
	}
	for (;;) {
		if (cancelled(p)) {
			rc = fail(p, -ECANCELED, "pack interrupted; nothing was written to %s",
				  p->o->out);
			goto out;
		}
		rec.len = 0;
		rc = source_next(&s, &rec);
		p->input_done = base_done + s.bytes_read;
		if (rc < 0) {
			/* records before the bad spot are fine; the error is about this one */
			rc = fail(p, rc, "%s", s.err[0] ? s.err : strerror(-rc));
			goto out;
		}
		if (rc == 0)
			break;
		if (s.content == CONTENT_TOKENS) {
			p->tokens += rec.len / p->itemsize;
			rc = buf_append(&p->window, rec.data, rec.len);
			if (!rc)
				rc = cut_windows(p);
		} else {
			rc = batch_add(p, rec.data, rec.len, s.record_line);
			if (!rc && batch_full(p))
				rc = batch_flush(p);
		}
		if (rc) {
			if (rc == -ENOMEM && !p->err[0])
				fail(p, rc, "out of memory while packing %s", path);
			goto out;
		}
	}
	/* A batch never spans inputs: messages name the right file, rows count right. */
	rc = batch_flush(p);
	if (rc)
		goto out;
	p->skipped += s.skipped;
	if (s.content == CONTENT_TOKENS ? p->tokens == tokens_before : p->samples == first) {
		rc = fail(p, -ENODATA, "%s: no %s in this input (empty?); remove it from the "
			  "inputs", path, s.content == CONTENT_TOKENS ? "tokens" : "samples");
		goto out;
	}
	memset(&row, 0, sizeof(row));
	row.path = (char *)path;
	row.format = (char *)s.ops->name;
	row.size = s.bytes_read;
	source_checksum(&s, row.checksum);
	row.first_sample = first;
	row.samples = p->samples - first;
	p->source_tokens[p->cat.nsources] = p->tokens - tokens_before;
	rc = catalog_add_source(&p->cat, &row);
out:
	buf_release(&rec);
	source_close(&s);
	return rc;
}

/* Remove a directory that holds only files (ours: shards, indexes, catalog, journal). */
static int remove_flat_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) != 0)
			rc = -errno;
	}
	closedir(d);
	if (rmdir(path) != 0 && !rc)
		rc = -errno;
	return rc;
}

/* Files a pack writes: the catalog (and SQLite's side files of it) and the shards. */
static int is_dataset_file(const char *name)
{
	return !strncmp(name, CATALOG_FILE, strlen(CATALOG_FILE)) || !strncmp(name, "shard-", 6);
}

/*
 * --force replaces the dataset, not what users keep beside it: the default journal
 * (journal.sqlite and its -wal) and any other file move from the replaced dataset into
 * the new one. A journal so kept still names the old fingerprint: a repack of the same
 * data keeps resuming, a repack of other data is refused at mount with both
 * fingerprints named. A file that cannot be moved stays in `from`, which is then kept.
 */
static int carry_over(struct packer *p, const char *from, const char *to)
{
	DIR *d = opendir(from);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return fail(p, -errno, "%s: cannot list the old dataset: %s", from, strerror(errno));
	while ((de = readdir(d))) {
		char msg[512], *dst = NULL;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    is_dataset_file(de->d_name))
			continue;
		if (asprintf(&dst, "%s/%s", to, de->d_name) < 0) {
			rc = -ENOMEM;
			continue;
		}
		if (renameat(dirfd(d), de->d_name, AT_FDCWD, dst) != 0) {
			rc = fail(p, -errno, "cannot move %s/%s into the new dataset (%s); it is kept "
				  "in %s", from, de->d_name, strerror(errno), from);
		} else if (p->o->notice) {
			snprintf(msg, sizeof(msg), "kept %s from the replaced dataset", de->d_name);
			p->o->notice(p->o->ctx, msg);
		}
		free(dst);
	}
	closedir(d);
	return rc;
}

static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) != 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* Token source rows: which windows start inside each input. */
static void token_rows(struct packer *p)
{
	uint64_t before = 0, L = p->o->seq_len;

	for (size_t i = 0; i < p->cat.nsources; i++) {
		uint64_t n = p->source_tokens[i];
		uint64_t first = (before + L - 1) / L;
		uint64_t end = (before + n + L - 1) / L; /* first window starting at/after end */

		if (end > p->samples)
			end = p->samples;
		p->cat.sources[i].first_sample = first < end ? first : end;
		p->cat.sources[i].samples = first < end ? end - first : 0;
		before += n;
	}
}

static int write_meta(struct packer *p, struct pack_result *res)
{
	struct catalog *c = &p->cat;
	char text[256], created[32];
	const char *ext = p->content == CONTENT_TEXT ? (p->all_jsonl ? "json" : "txt") : "";
	time_t now = time(NULL);
	struct tm tm;
	int rc = 0;

	struct dataset_info info;

	memset(&info, 0, sizeof(info));
	info.kind = p->kind;
	info.content = p->content;
	snprintf(info.record_ext, sizeof(info.record_ext), "%s", ext);
	info.dtype = p->dtype;
	info.seq_len = p->o->seq_len + p->o->overlap;
	info.samples = p->samples;
	dataset_fingerprint_text(&info, text, sizeof(text));
	XXH3_128bits_update(p->fp, text, strlen(text));
	xxh128_hex(XXH3_128bits_digest(p->fp), res->fingerprint);
	gmtime_r(&now, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);

	rc |= catalog_meta_set_u64(c, "format_version", CATALOG_FORMAT_VERSION);
	rc |= catalog_meta_set(c, "kind", dataset_kind_name(p->kind));
	rc |= catalog_meta_set(c, "content", dataset_content_name(p->content));
	rc |= catalog_meta_set_u64(c, "samples", p->samples);
	if (p->content == CONTENT_TEXT)
		rc |= catalog_meta_set(c, "record_ext", ext);
	if (p->kind == DATASET_TOKENS) {
		rc |= catalog_meta_set(c, "dtype", dataset_dtype_name(p->dtype));
		rc |= catalog_meta_set_u64(c, "seq_len", p->o->seq_len + p->o->overlap);
		rc |= catalog_meta_set_u64(c, "overlap", p->o->overlap);
		rc |= catalog_meta_set_u64(c, "remainder_tokens", res->remainder_tokens);
	}
	rc |= catalog_meta_set(c, "compress", p->o->compress ? "zstd" : "none");
	if (p->o->compress)
		rc |= catalog_meta_set_u64(c, "level", (uint64_t)p->o->level);
	rc |= catalog_meta_set_u64(c, "dict_bytes", p->dict_len);
	rc |= catalog_meta_set_u64(c, "raw_bytes", p->raw_bytes);
	rc |= catalog_meta_set_u64(c, "stored_bytes", shard_writer_stored_bytes(p->w));
	rc |= catalog_meta_set_u64(c, "skipped", p->skipped);
	rc |= catalog_meta_set(c, "fingerprint", res->fingerprint);
	rc |= catalog_meta_set(c, "created", created);
	rc |= catalog_meta_set(c, "zephon_version", ZEPHON_VERSION);
	if (p->dict)
		rc |= catalog_set_dict(c, p->dict, p->dict_len);
	return rc ? -ENOMEM : 0;
}

/* A dataset written inside a directory input would be read back into itself. */
static int out_outside_inputs(struct packer *p, const enum source_format *formats)
{
	char *copy = strdup(p->o->out), *parent;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	parent = realpath(dirname(copy), NULL);
	for (size_t i = 0; parent && !rc && i < p->o->ninputs; i++) {
		char *in;
		size_t n;

		if (formats[i] != SOURCE_DIR || !(in = realpath(p->o->inputs[i], NULL)))
			continue;
		n = strlen(in);
		if (!strncmp(parent, in, n) && (parent[n] == '/' || parent[n] == 0 || n == 1))
			rc = fail(p, -EINVAL, "%s: the output lies inside the input directory %s; "
				  "choose an output outside it", p->o->out, p->o->inputs[i]);
		free(in);
	}
	free(parent);
	free(copy);
	return rc;
}

/* Warn that input i names the same file as input j before it. */
static void notice_repeat(struct packer *p, size_t i, size_t j)
{
	const char *a = p->o->inputs[i], *b = p->o->inputs[j];
	char msg[1024];

	if (!p->o->notice)
		return;
	if (!strcmp(a, b))
		snprintf(msg, sizeof(msg), "%s: given twice; packing it again (drop one to pack "
			 "it once)", a);
	else
		snprintf(msg, sizeof(msg), "%s: the same file as %s, given before it; packing it "
			 "again (drop one to pack it once)", a, b);
	p->o->notice(p->o->ctx, msg);
}

/*
 * Decide which inputs become sources (p->sources). A Megatron pair is one dataset stored
 * in two files, and a glob over its folder names both: every further name of a pair (its
 * .idx, .bin or PREFIX) is folded into the pair's latest source that lacks that name,
 * so the pair is packed once. A file named again (by any spelling: compared by device
 * and inode) is packed again, since repeating an input is how one upsamples it, but with
 * a warning, as it is as often a slip. An input that cannot be stat()ed is kept as it
 * is: opening it reports the error with its name.
 */
static int resolve_inputs(struct packer *p, const enum source_format *formats)
{
	const struct pack_opts *o = p->o;
	struct source_id *ids = calloc(o->ninputs, sizeof(*ids));
	unsigned *roles = calloc(o->ninputs, sizeof(*roles)); /* names folded into source k */
	int *have = calloc(o->ninputs, sizeof(*have));
	int rc = 0;

	p->sources = calloc(o->ninputs, sizeof(*p->sources));
	if (!ids || !roles || !have || !p->sources) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < o->ninputs; i++) {
		size_t k = p->nsources;

		have[i] = source_identify(o->inputs[i], formats[i], &ids[i]) == 0;
		if (have[i]) {
			/* k: the first source of the same pair that lacks this name, so that
			 * the order of the names does not matter (.idx .idx .bin .bin is
			 * .idx .bin .idx .bin); nsources for none */
			for (size_t m = 0; ids[i].role != SOURCE_ROLE_FILE && m < p->nsources; m++) {
				size_t j = p->sources[m];

				if (have[j] && source_id_same(&ids[i], &ids[j]) &&
				    !(roles[m] & ids[i].role)) {
					k = m;
					break;
				}
			}
			if (k < p->nsources) {
				roles[k] |= ids[i].role;
				continue;
			}
			/* a new source: warn when it repeats one already there */
			for (size_t j = 0; j < i; j++) {
				if (have[j] && source_id_same(&ids[i], &ids[j]) &&
				    ids[i].role == ids[j].role) {
					notice_repeat(p, i, j);
					break;
				}
			}
		}
		roles[p->nsources] = have[i] ? ids[i].role : 0;
		p->sources[p->nsources++] = i;
	}
out:
	free(ids);
	free(roles);
	free(have);
	return rc;
}

/* Check the inputs and options before any work. */
static int plan(struct packer *p, enum source_format *formats)
{
	const struct pack_opts *o = p->o;
	char why[600];

	if (o->ninputs == 0)
		return fail(p, -EINVAL, "no inputs; give one or more files or directories");
	p->all_jsonl = 1;
	for (size_t i = 0; i < o->ninputs; i++) {
		enum dataset_content c;
		int rc = source_detect(o->inputs[i], o->format, &formats[i], why, sizeof(why));

		if (rc)
			return fail(p, rc, "%s", why);
		c = content_of(formats[i]);
		if (formats[i] != SOURCE_JSONL)
			p->all_jsonl = 0;
		if (i == 0) {
			p->content = c;
		} else if (c != p->content) {
			return fail(p, -EINVAL, "%s: holds %s but %s holds %s; one dataset has one "
				    "kind of sample, pack them separately", o->inputs[i],
				    dataset_content_name(c), o->inputs[0],
				    dataset_content_name(p->content));
		}
	}
	p->kind = p->content == CONTENT_TOKENS ? DATASET_TOKENS : DATASET_RECORDS;
	if (p->kind == DATASET_TOKENS && o->seq_len == 0)
		return fail(p, -EINVAL, "token inputs need a window length; pass --seq-len L");
	if (p->kind != DATASET_TOKENS && o->seq_len)
		return fail(p, -EINVAL, "--seq-len applies to token inputs only (%s holds %s)",
			    o->inputs[0], dataset_content_name(p->content));
	if (p->kind != DATASET_TOKENS && o->overlap)
		return fail(p, -EINVAL, "--overlap applies to token inputs only (%s holds %s)",
			    o->inputs[0], dataset_content_name(p->content));
	if (o->overlap > 1)
		return fail(p, -EINVAL, "--overlap %" PRIu64 ": give 0 or 1", o->overlap);
	if (p->kind == DATASET_TOKENS && o->seq_len > SAMPLE_MAX_BYTES / 4)
		return fail(p, -EINVAL, "--seq-len %" PRIu64 " is too large", o->seq_len);
	if (o->compress && (o->level < ZSTD_minCLevel() || o->level > ZSTD_maxCLevel()))
		return fail(p, -EINVAL, "--level %d is outside zstd's %d..%d", o->level,
			    ZSTD_minCLevel(), ZSTD_maxCLevel());
	if (o->shard_bytes == 0)
		return fail(p, -EINVAL, "--shard-size must be positive");
	if (o->have_dtype) {
		p->have_dtype = 1;
		p->dtype = o->dtype;
		p->dtype_from = "--dtype";
		p->itemsize = itemsizes[o->dtype];
	}
	if (out_outside_inputs(p, formats))
		return -EINVAL;
	if (resolve_inputs(p, formats))
		return -ENOMEM;
	for (size_t k = 0; k < p->nsources; k++) {
		size_t i = p->sources[k];
		struct stat sb;

		if (formats[i] != SOURCE_DIR && formats[i] != SOURCE_MEGATRON &&
		    stat(o->inputs[i], &sb) == 0 && S_ISREG(sb.st_mode))
			p->input_total += (uint64_t)sb.st_size;
	}
	return 0;
}

/* This machine's name for temporary directory names: gethostname(), '?' if unknown. */
static void host_name(char *out, size_t len)
{
	if (gethostname(out, len - 1) != 0 || !*out)
		snprintf(out, len, "?");
	out[len - 1] = 0;
	for (char *c = out; *c; c++)
		if (*c == '/')
			*c = '_';
}

/*
 * A pack killed by SIGKILL or a power loss leaves its temporary directory beside out
 * (SIGINT and SIGTERM clean up). Its name says which pack made it,
 * ".NAME.zephon-tmp-HOST-PID-XXXXXX": remove the ones of out whose pack is gone, saying
 * so. Gone means made on this host, by a pid that no longer exists, and with the flock
 * its pack holds free (a pid of another pid namespace, say). Another host's are left
 * alone with a note: that pack may be running. (A ".zephon-old-" directory is the old
 * dataset of a --force replace cut short between its two renames: left alone too.)
 * host is this machine's, from host_name().
 */
static void remove_leftovers(struct packer *p, const char *parent, const char *base,
			     const char *host)
{
	DIR *d = opendir(parent);
	struct dirent *de;
	char *prefix = NULL;

	if (!d || asprintf(&prefix, ".%s.zephon-tmp-", base) < 0) {
		if (d)
			closedir(d);
		return;
	}
	while ((de = readdir(d))) {
		const char *rest = de->d_name + strlen(prefix), *dash;
		char *path = NULL, msg[PATH_MAX + 160], *end;
		long pid;
		int fd, rc;

		if (strncmp(de->d_name, prefix, strlen(prefix)) || strstr(de->d_name, ".zephon-old-"))
			continue;
		/* HOST-PID-XXXXXX, parsed from the right: a host name may hold '-' */
		dash = strrchr(rest, '-');
		if (!dash || dash == rest || strlen(dash + 1) != 6)
			continue;
		while (--dash > rest && *dash != '-')
			;
		if (dash == rest || (pid = strtol(dash + 1, &end, 10)) <= 0 || *end != '-')
			continue;
		if (asprintf(&path, "%s/%s", parent, de->d_name) < 0)
			break;
		if ((size_t)(dash - rest) != strlen(host) || strncmp(rest, host, strlen(host))) {
			snprintf(msg, sizeof(msg), "%s: left by a pack on host %.*s; remove it if no "
				 "pack runs there any more", path, (int)(dash - rest), rest);
			if (p->o->notice)
				p->o->notice(p->o->ctx, msg);
		} else if (kill((pid_t)pid, 0) != 0 && errno == ESRCH &&
			   (fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
					O_NOFOLLOW)) >= 0) {
			if (flock(fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) {
				rc = remove_flat_dir(path);
				snprintf(msg, sizeof(msg), rc ? "cannot remove %s, left by an "
					 "interrupted pack: %s" : "removed %s, left by an interrupted "
					 "pack%s", path, rc ? strerror(-rc) : "");
				if (p->o->notice)
					p->o->notice(p->o->ctx, msg);
			}
			close(fd);
		}
		free(path);
	}
	free(prefix);
	closedir(d);
}

/* Make the temporary directory beside out, named and locked as this pack's
 * (remove_leftovers). */
static int make_tmp(struct packer *p)
{
	char *copy1 = strdup(p->o->out), *copy2 = strdup(p->o->out), host[256];
	int rc = 0;

	host_name(host, sizeof(host));
	if (copy1 && copy2) {
		char *parent = dirname(copy1), *base = basename(copy2);

		remove_leftovers(p, parent, base, host);
		if (asprintf(&p->tmpdir, "%s/.%s.zephon-tmp-%s-%d-XXXXXX", parent, base, host,
			     (int)getpid()) < 0)
			p->tmpdir = NULL;
	}
	if (!p->tmpdir) {
		rc = -ENOMEM;
	} else if (!mkdtemp(p->tmpdir)) {
		rc = fail(p, -errno, "%s: cannot create a directory beside it: %s", p->o->out,
			  strerror(errno));
		free(p->tmpdir);
		p->tmpdir = NULL;
	} else if ((p->dirfd = open(p->tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		rc = fail(p, -errno, "%s: %s", p->tmpdir, strerror(errno));
	} else {
		/* held until the pack ends; unsupported on some network file systems, where
		 * the pid in the name is the guard */
		flock(p->dirfd, LOCK_EX);
		/* mkdtemp makes 0700; a dataset is as readable as any new directory */
		mode_t mask = umask(0);

		umask(mask);
		fchmod(p->dirfd, 0777 & ~mask);
	}
	free(copy1);
	free(copy2);
	return rc;
}

/* Whether path is a directory with nothing in it. */
static int empty_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int empty = d != NULL;

	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = 0;
	if (d)
		closedir(d);
	return empty;
}

/* Move the finished dataset into place (replacing an old one under --force). */
static int publish(struct packer *p)
{
	const char *out = p->o->out;
	char *old = NULL, *parent_copy = strdup(out);
	struct stat sb;
	int rc = 0;

	if (!parent_copy)
		return -ENOMEM;
	/* rename(2) replaces an empty directory by itself */
	if (lstat(out, &sb) == 0 && !(S_ISDIR(sb.st_mode) && empty_dir(out))) {
		if (!p->o->force) {
			rc = fail(p, -EEXIST, "%s already exists; choose another -o or pass --force "
				  "to replace it", out);
			goto done;
		}
		if (asprintf(&old, "%s.zephon-old-%d", p->tmpdir, (int)getpid()) < 0) {
			old = NULL;
			rc = -ENOMEM;
			goto done;
		}
		if (rename(out, old) != 0) {
			rc = fail(p, -errno, "%s: cannot move the old dataset aside: %s", out,
				  strerror(errno));
			goto done;
		}
	}
	if (rename(p->tmpdir, out) != 0) {
		rc = fail(p, -errno, "%s: cannot rename the new dataset into place: %s", out,
			  strerror(errno));
		if (old)
			rename(old, out);
		goto done;
	}
	free(p->tmpdir);
	p->tmpdir = NULL;
	fsync_path(dirname(parent_copy));
	if (old && carry_over(p, old, out) == 0)
		remove_flat_dir(old);
done:
	free(old);
	free(parent_copy);
	return rc;
}

/* An existing output must be an empty directory (`mkdir out && zephon pack ... -o out`),
 * or, under --force, a dataset: never delete a stranger. */
static int check_out(struct packer *p)
{
	const struct pack_opts *o = p->o;
	struct stat sb;
	char *cat = NULL;
	int ok;

	if (lstat(o->out, &sb) != 0 || (S_ISDIR(sb.st_mode) && empty_dir(o->out)))
		return 0;
	if (!o->force)
		return fail(p, -EEXIST, "%s already exists; choose another -o or pass --force to "
			    "replace it", o->out);
	if (!S_ISDIR(sb.st_mode))
		return fail(p, -EEXIST, "%s exists and is not a directory; refusing to replace it",
			    o->out);
	if (asprintf(&cat, "%s/%s", o->out, CATALOG_FILE) < 0)
		return -ENOMEM;
	ok = access(cat, F_OK) == 0;
	free(cat);
	if (!ok)
		return fail(p, -EEXIST, "%s exists and is not a zephon dataset; refusing to "
			    "replace it", o->out);
	return 0;
}

int pack_run(const struct pack_opts *o, struct pack_result *res, char *err, size_t errlen)
{
	struct packer p;
	struct source_opts so;
	enum source_format *formats = NULL;
	char why[300];
	int rc;

	memset(&p, 0, sizeof(p));
	memset(res, 0, sizeof(*res));
	p.o = o;
	p.err = err;
	p.errlen = errlen;
	p.dirfd = -1;
	err[0] = 0;
	formats = calloc(o->ninputs ? o->ninputs : 1, sizeof(*formats));
	p.source_tokens = calloc(o->ninputs ? o->ninputs : 1, sizeof(*p.source_tokens));
	p.fp = XXH3_createState();
	if (!formats || !p.source_tokens || !p.fp) {
		rc = -ENOMEM;
		goto out;
	}
	XXH3_128bits_reset(p.fp);
	rc = plan(&p, formats);
	if (!rc)
		rc = check_out(&p);
	if (!rc)
		rc = make_tmp(&p);
	if (rc)
		goto out;
	{
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		unsigned n = o->threads ? o->threads : (unsigned)(cpus > 0 ? cpus : 1);

		rc = pool_new(n > 64 ? 64 : n, &p.pool);
		if (rc)
			goto out;
	}
	memset(&so, 0, sizeof(so));
	so.skip_bad = o->skip_bad;
	so.defer_checks = 1;
	so.have_dtype = p.have_dtype;
	so.dtype = p.dtype;
	so.notice = o->notice;
	so.ctx = o->ctx;
	p.prog.inputs = p.nsources;
	p.training = o->compress && !o->no_dict && o->dict_size > 0;
	if (!p.training && (rc = open_writer(&p)))
		goto out;
	for (size_t k = 0; k < p.nsources; k++) {
		size_t i = p.sources[k];

		p.prog.input = k;
		rc = pack_input(&p, i, formats[i], &so);
		if (rc)
			goto out;
	}
	if (p.kind == DATASET_TOKENS) {
		res->remainder_tokens = p.window.len / p.itemsize;
		if (p.samples == 0) {
			rc = fail(&p, -ENODATA, "the inputs hold %" PRIu64 " tokens, less than one "
				  "window of --seq-len %" PRIu64, p.tokens, o->seq_len);
			goto out;
		}
		token_rows(&p);
	}
	if (p.training && (rc = end_training(&p)))
		goto out;
	rc = shard_writer_finish(p.w, why, sizeof(why));
	if (rc) {
		fail(&p, rc, "%s: %s", o->out, why);
		goto out;
	}
	rc = write_meta(&p, res);
	if (rc)
		goto out;
	{
		char *path = NULL;

		if (asprintf(&path, "%s/%s", p.tmpdir, CATALOG_FILE) < 0) {
			rc = -ENOMEM;
			goto out;
		}
		rc = catalog_save(path, &p.cat, why, sizeof(why));
		if (!rc)
			chmod(path, 0444); /* immutable, like the shards */
		free(path);
		if (rc) {
			fail(&p, rc, "%s", why);
			goto out;
		}
	}
	if (cancelled(&p)) {
		rc = fail(&p, -ECANCELED, "pack interrupted; nothing was written to %s", o->out);
		goto out;
	}
	if (fsync(p.dirfd) != 0) {
		rc = fail(&p, -EIO, "%s: fsync: %s", p.tmpdir, strerror(errno));
		goto out;
	}
	rc = publish(&p);
	if (rc)
		goto out;
	res->samples = p.samples;
	res->raw_bytes = p.raw_bytes;
	res->stored_bytes = shard_writer_stored_bytes(p.w);
	res->input_bytes = p.input_done;
	res->shards = p.cat.nshards;
	res->sources = p.nsources;
	res->skipped = p.skipped;
	res->dict_bytes = p.dict_len;
	res->kind = p.kind;
	report(&p, 1);
out:
	if (rc == -ENOMEM && !err[0])
		fail(&p, rc, "out of memory");
	shard_writer_free(p.w);
	if (p.comp)
		for (unsigned t = 0; t < pool_size(p.pool); t++)
			compressor_free(p.comp[t]);
	free(p.comp);
	pool_free(p.pool);
	batch_release(&p.b);
	buf_release(&p.scratch);
	if (p.dirfd >= 0)
		close(p.dirfd);
	if (p.tmpdir) {
		remove_flat_dir(p.tmpdir);
		free(p.tmpdir);
	}
	catalog_release(&p.cat);
	XXH3_freeState(p.fp);
	buf_release(&p.stash);
	buf_release(&p.train);
	buf_release(&p.window);
	free(p.stash_sizes);
	free(p.train_sizes);
	free(p.dict);
	free(p.source_tokens);
	free(p.sources);
	free(formats);
	return rc;
}
