/* pack.c: `zephon pack` (pack.h): each input read and cut into samples, the steps of
 * pack_int.h run in order. */
#include "pack.h"
#include "pack_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "compressor.h"
#include "docindex.h"
#include "le.h"
#include "instream.h"
#include "pool.h"
#include "rowindex.h"
#include "shard_writer.h"
#include "zephon_config.h"

void pack_opts_init(struct pack_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->format = SOURCE_AUTO;
	o->compress = 1;
	o->level = PACK_LEVEL_DEFAULT;
	o->dict_size = PACK_DICT_SIZE_DEFAULT;
	o->shard_bytes = PACK_SHARD_BYTES_DEFAULT;
	o->tokdocs_fd = -1;
}

/* p->max_token over len bytes of little-endian tokens of p->itemsize (int32 ones read
 * signed: a negative id is below any vocabulary size). */
static void note_max_token(struct packer *p, const uint8_t *d, size_t len)
{
	uint64_t max = p->max_token;
	int is_signed = p->dtype == DTYPE_INT32;

	for (size_t i = 0; i + p->itemsize <= len; i += p->itemsize) {
		uint64_t v = p->itemsize == 1 ? d[i] : p->itemsize == 2 ? le16_get(d + i) :
			le32_get(d + i);

		if (is_signed && (int32_t)v < 0)
			continue;
		if (v > max)
			max = v;
	}
	p->max_token = max;
	p->have_max_token = 1;
}

/* Owns the dataset's one dtype: the first token input sets it, every later one must
 * share it. 0, or -EINVAL with a reason (pack_fail). */
static int note_dtype(struct packer *p, const struct source *s, const char *path)
{
	if (!p->have_dtype) {
		p->have_dtype = 1;
		p->dtype = s->dtype;
		p->dtype_from = path;
		p->itemsize = dtype_size(s->dtype);
	} else if (s->dtype != p->dtype) {
		return pack_fail(p, -EINVAL, "%s: tokens are %s but the dataset's are %s (from %s); "
			  "all token inputs must share one dtype", path,
			  dtype_name(s->dtype), dtype_name(p->dtype),
			  p->dtype_from);
	}
	return 0;
}

/* Owns the record loop of pack_input(): every record of the open source s read into rec
 * and handed on (tokens cut into windows, other records into the current batch), the
 * progress (base_done: the bytes of the inputs before it) kept, a cancel heard.
 * 0 at the source's end, or -errno with a reason (pack_fail). */
static int pack_records(struct packer *p, struct source *s, struct buf *rec,
			uint64_t base_done)
{
	const char *path = p->cur_path;
	int rc;

	for (;;) {
		if (pack_cancelled(p))
			return pack_fail(p, -ECANCELED, "pack interrupted; nothing was written to %s",
				  p->o->out);
		rec->len = 0;
		rc = source_next(s, rec);
		p->input_done = base_done + s->bytes_read;
		if (rc < 0) {
			/* records before the bad spot are fine; the error is about this one */
			return pack_fail(p, rc, "%s", s->err[0] ? s->err : strerror(-rc));
		}
		if (rc == 0)
			return 0;
		if (s->content == CONTENT_TOKENS) {
			note_max_token(p, rec->data, rec->len);
			p->tokens += rec->len / p->itemsize;
			rc = buf_append(&p->window, rec->data, rec->len);
			if (!rc)
				rc = pack_cut_windows(p);
		} else {
			rc = pack_batch_add(p, rec->data, rec->len, s->record_line);
			if (!rc && pack_batch_full(p))
				rc = pack_batch_flush(p);
		}
		if (rc) {
			if (rc == -ENOMEM && !p->err[0])
				pack_fail(p, rc, "out of memory while packing %s", path);
			return rc;
		}
	}
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
		rc = pack_fail(p, rc, "%s", s.err[0] ? s.err : strerror(-rc));
		goto out;
	}
	if (f == SOURCE_DIR || f == SOURCE_MEGATRON)
		p->input_total += s.bytes_total;
	if (s.content == CONTENT_TOKENS && (rc = note_dtype(p, &s, path)))
		goto out;
	if ((rc = pack_records(p, &s, &rec, base_done)))
		goto out;
	/* A batch never spans inputs: messages name the right file, rows count right. */
	rc = pack_batch_flush(p);
	if (rc)
		goto out;
	p->skipped += s.skipped;
	if (s.content == CONTENT_TOKENS ? p->tokens == tokens_before : p->samples == first) {
		rc = pack_fail(p, -ENODATA, "%s: no %s in this input (empty?); remove it from the "
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

/* The meta of a dataset of rows (rowindex.h) and of its chat samples; 0 or -ENOMEM. */
static int write_rows_meta(struct packer *p, const struct dataset_info *info)
{
	struct catalog *c = &p->cat;
	int rc = 0;

	rc |= catalog_meta_set(c, "layout", "rows");
	rc |= catalog_meta_set_u64(c, "row_len", info->row_len);
	rc |= catalog_meta_set_u64(c, "max_context_length", info->max_context);
	rc |= catalog_meta_set_u64(c, "documents_dropped", p->dropped);
	rc |= catalog_meta_set_u64(c, "padding", p->padding);
	if (p->chat[0]) {
		rc |= catalog_meta_set(c, "chat", p->chat);
		rc |= catalog_meta_set_u64(c, "prompt_mismatch", p->prompt_mismatch);
		rc |= catalog_meta_set(c, "prompt_mismatch_policy", p->mismatch_policy);
	}
	return rc;
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
	if (p->o->tokdocs_fd >= 0)
		memcpy(info.tokenizer_sha256, p->tok_sha256, sizeof(info.tokenizer_sha256));
	if (p->o->rows) {
		info.row_len = p->o->seq_len;
		info.max_context = p->o->max_context ? p->o->max_context : p->o->seq_len;
		info.seq_len = ROW_PLANES * p->o->seq_len;
	}
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
		rc |= catalog_meta_set(c, "dtype", dtype_name(p->dtype));
		rc |= catalog_meta_set_u64(c, "seq_len", info.seq_len);
		rc |= catalog_meta_set_u64(c, "overlap", p->o->overlap);
		if (p->have_eod)
			rc |= catalog_meta_set_u64(c, "eod_token", p->eod);
		if (p->have_max_token)
			rc |= catalog_meta_set_u64(c, "max_token_id", p->max_token);
		rc |= catalog_meta_set_u64(c, "tokens", p->tokens);
		rc |= catalog_meta_set_u64(c, "remainder_tokens", res->remainder_tokens);
	}
	if (p->o->tokdocs_fd >= 0) {
		rc |= catalog_meta_set(c, "tokenizer", p->tok_name);
		rc |= catalog_meta_set(c, "tokenizer_sha256", p->tok_sha256);
		if (p->tok_path[0])
			rc |= catalog_meta_set(c, "tokenizer_path", p->tok_path);
		rc |= catalog_meta_set_u64(c, "vocab_size", p->vocab_size);
		if (p->have_bos)
			rc |= catalog_meta_set_u64(c, "bos_token", p->bos);
		rc |= catalog_meta_set_u64(c, "documents", res->documents);
	}
	if (p->o->rows)
		rc |= write_rows_meta(p, &info);
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

/* Check the inputs and the output, make the temporary directory and the pool. */
static int pack_start(struct packer *p, enum source_format *formats)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = p->o->threads ? p->o->threads : (unsigned)(cpus > 0 ? cpus : 1);
	int rc;

	if ((rc = pack_plan(p, formats)) || (rc = pack_check_out(p)) || (rc = pack_make_tmp(p)))
		return rc;
	return pool_new(n > 64 ? 64 : n, &p->pool);
}

/* Read every input into batches, in order. */
static int pack_inputs(struct packer *p, const enum source_format *formats)
{
	const struct pack_opts *o = p->o;
	struct source_opts so;
	int rc;

	memset(&so, 0, sizeof(so));
	so.skip_bad = o->skip_bad;
	so.defer_checks = 1;
	so.have_dtype = p->have_dtype;
	so.dtype = p->dtype;
	so.have_eod_token = o->have_eod_token;
	so.eod_token = o->eod_token;
	so.notice = o->notice;
	so.ctx = o->ctx;
	p->prog.inputs = p->nsources;
	p->training = o->compress && !o->no_dict && o->dict_size > 0;
	if (!p->training && (rc = pack_open_writer(p)))
		return rc;
	if (o->tokdocs_fd >= 0)
		return pack_tokdocs(p);
	for (size_t k = 0; k < p->nsources; k++) {
		size_t i = p->sources[k];

		p->prog.input = k;
		rc = pack_input(p, i, formats[i], &so);
		if (rc)
			return rc;
	}
	return 0;
}

/* Write the catalog into the temporary directory, read-only. */
static int save_catalog(struct packer *p)
{
	char why[300];
	char *path = NULL;
	int rc;

	if (asprintf(&path, "%s/%s", p->tmpdir, CATALOG_FILE) < 0)
		return -ENOMEM;
	rc = catalog_save(path, &p->cat, why, sizeof(why));
	if (!rc)
		chmod(path, 0444); /* immutable, like the shards */
	free(path);
	if (rc)
		pack_fail(p, rc, "%s", why);
	return rc;
}

/* After the last input: the token rows, the held samples (dictionary), the last shard,
 * the catalog; then the directory is synced and moved into place. */
static int pack_finish(struct packer *p, struct pack_result *res)
{
	const struct pack_opts *o = p->o;
	char why[300];
	int rc;

	if (p->kind == DATASET_TOKENS) {
		res->remainder_tokens = p->window.len / p->itemsize;
		if (p->samples == 0)
			return pack_fail(p, -ENODATA, "the inputs hold %" PRIu64 " tokens, less than "
					 "one window of --seq-len %" PRIu64, p->tokens, o->seq_len);
		if (!o->rows)
			token_rows(p);
	}
	if (p->docs) {
		res->documents = docindex_writer_count(p->docs);
		rc = docindex_writer_finish(p->docs, p->err, p->errlen);
		p->docs = NULL;
		if (rc)
			return rc;
	}
	res->tokens = p->tokens;
	res->max_token = p->max_token;
	if (p->training && (rc = pack_batch_write_held(p)))
		return rc;
	rc = shard_writer_finish(p->w, why, sizeof(why));
	if (rc)
		return pack_fail(p, rc, "%s: %s", o->out, why);
	if ((rc = write_meta(p, res)) || (rc = save_catalog(p)))
		return rc;
	if (pack_cancelled(p))
		return pack_fail(p, -ECANCELED, "pack interrupted; nothing was written to %s",
				 o->out);
	if (fsync(p->dirfd) != 0)
		return pack_fail(p, -EIO, "%s: fsync: %s", p->tmpdir, strerror(errno));
	return pack_publish(p);
}

/* Free what the packer holds; remove the temporary directory if it is still there. */
static void packer_release(struct packer *p)
{
	shard_writer_free(p->w);
	docindex_writer_free(p->docs);
	pack_rows_free(p->rows);
	if (p->comp)
		for (unsigned t = 0; t < pool_size(p->pool); t++)
			compressor_free(p->comp[t]);
	free(p->comp);
	pool_free(p->pool);
	pack_batch_release(&p->b);
	buf_release(&p->scratch);
	if (p->dirfd >= 0)
		close(p->dirfd);
	if (p->tmpdir) {
		pack_remove_dir(p->tmpdir);
		free(p->tmpdir);
	}
	catalog_release(&p->cat);
	XXH3_freeState(p->fp);
	buf_release(&p->stash);
	buf_release(&p->train);
	buf_release(&p->window);
	free(p->stash_sizes);
	free(p->train_sizes);
	free(p->dict);
	free(p->source_tokens);
	free(p->sources);
}

int pack_run(const struct pack_opts *o, struct pack_result *res, char *err, size_t errlen)
{
	struct packer p;
	enum source_format *formats = NULL;
	int rc;

	memset(&p, 0, sizeof(p));
	memset(res, 0, sizeof(*res));
	p.o = o;
	p.err = err;
	p.errlen = errlen;
	p.dirfd = -1;
	p.have_eod = o->have_eod_token;
	p.eod = o->eod_token;
	err[0] = 0;
	formats = calloc(o->ninputs ? o->ninputs : 1, sizeof(*formats));
	p.source_tokens = calloc(o->ninputs ? o->ninputs : 1, sizeof(*p.source_tokens));
	p.fp = XXH3_createState();
	if (!formats || !p.source_tokens || !p.fp) {
		rc = -ENOMEM;
		goto out;
	}
	XXH3_128bits_reset(p.fp);
	if ((rc = pack_start(&p, formats)) || (rc = pack_inputs(&p, formats)) ||
	    (rc = pack_finish(&p, res)))
		goto out;
	res->samples = p.samples;
	res->raw_bytes = p.raw_bytes;
	res->stored_bytes = shard_writer_stored_bytes(p.w);
	res->input_bytes = p.input_done;
	res->shards = p.cat.nshards;
	res->sources = p.nsources;
	res->skipped = p.skipped;
	res->dict_bytes = p.dict_len;
	res->dropped = p.dropped;
	res->padding = p.padding;
	res->prompt_mismatch = p.prompt_mismatch;
	res->kind = p.kind;
	pack_report(&p, 1);
out:
	if (rc == -ENOMEM && !err[0])
		pack_fail(&p, rc, "out of memory");
	packer_release(&p);
	free(formats);
	return rc;
}
