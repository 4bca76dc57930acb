/*
 * pack_int.h: what the files of `zephon pack` share (pack.h is the API): the packer's
 * state and the functions of each step. pack.c runs the steps: pack_plan.c checks the
 * inputs and options, pack_publish.c makes the temporary directory and moves the
 * finished dataset into place, pack_batch.c gathers records into batches that every
 * pool thread validates, checksums and compresses, pack_dict.c holds the first samples
 * back to train the zstd dictionary on them, and every step reports through packer.c.
 * Each file stands above what it calls: pack.c > pack_plan.c, pack_publish.c,
 * pack_batch.c > pack_dict.c > packer.c; pack_text.c > pack_rows.c (rows of whole
 * documents, planned by rowplan.c) > pack_batch.c. Internal to core/pack/pack*.c; not
 * thread-safe: one pack per struct packer, the pool threads touching only their share
 * of a batch.
 */
#ifndef ZEPHON_PACK_INT_H
#define ZEPHON_PACK_INT_H

#include <stddef.h>
#include <stdint.h>

#include <xxhash.h>

#include "buf.h"
#include "catalog.h"
#include "pack.h"
#include "source.h"

/* Records gathered for one pass of the pool; results per record. */
struct pack_batch {
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
	size_t train_cap;
	void *dict;
	size_t dict_len;
	/* tokens */
	struct buf window;
	uint64_t tokens;             /* all tokens read */
	uint64_t *source_tokens;
	int have_max_token;
	uint64_t max_token;          /* the largest token id packed */
	int have_eod;
	uint64_t eod;                /* --eod-token, or the tokenizer front end's EOS */
	/* --tokenizer (pack_text.c): the front end's header and the document index */
	struct docindex_writer *docs;
	char tok_name[256], tok_sha256[65];
	char tok_path[4096];         /* the tokenizer's absolute path, "" when not sent */
	uint64_t doc_part;           /* tokens of the document begun by 'C' records, 0: none */
	struct buf doc_buf;          /* rows: those tokens (u32), while a row can take them */
	int doc_over;                /* rows: that document is longer than a row: dropped */
	uint64_t vocab_size;
	int have_bos;
	uint64_t bos;
	uint64_t input_base;         /* bytes of the inputs finished before this one */
	int masked;                  /* the front end sends a label mask per token (--chat) */
	char chat[32];               /* --chat: "messages" or "prompt-response"; "" */
	char mismatch_policy[16];    /* --chat: "drop" or "keep" */
	uint64_t prompt_mismatch;    /* --chat: its 'W' records */
	/* rows (o->rows; pack_rows.c): the documents kept, spilled until the plan */
	struct pack_rows *rows;
	uint64_t dropped, padding;
	/* counters */
	uint64_t samples, raw_bytes, input_done, input_total;
	struct pack_progress prog;
	uint64_t skipped;
	/* the batch of records being gathered, processed on every thread */
	struct pool *pool;
	struct compressor **comp;    /* one per pool thread, after training */
	struct pack_batch b;
	struct buf scratch;
	const char *cur_path;        /* the input the batch's records come from */
	int validate;                /* the batch holds JSONL lines to check */
};

/* packer.c: errors into the caller's buffer (returns rc), progress, interruption. */
int pack_fail(struct packer *p, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void pack_report(struct packer *p, int done);
int pack_cancelled(const struct packer *p);

/* pack_text.c: read the --tokenizer front end's stream from o->tokdocs_fd. */
int pack_tokdocs(struct packer *p);

/* pack_rows.c: a dataset of rows. pack_rows_open: the spill file (unlinked at once) in
 * the temporary directory; 0 or -errno. pack_rows_add: one document of n tokens (ids: n
 * little-endian u32, mask: n bytes, 1 where the token is trained as a label, or NULL for
 * all but the first) of record `record` of source `source` (format: its catalog format,
 * for messages): kept, or dropped and counted when longer than max_context input tokens
 * (or of one token); 0 or -errno. pack_rows_finish: plan the rows, write them through the
 * batch and the row index; 0 or -errno. pack_rows_free: NULL is fine. */
int pack_rows_open(struct packer *p);
int pack_rows_add(struct packer *p, const uint8_t *ids, const uint8_t *mask, uint32_t n,
		  uint64_t record, uint32_t source, const char *format);
int pack_rows_finish(struct packer *p);
void pack_rows_free(struct pack_rows *r);

/* pack_plan.c: check the inputs and options before any work. */
int pack_plan(struct packer *p, enum source_format *formats);

/* pack_batch.c: record batches, processed on every pool thread, written in order. */
int pack_open_writer(struct packer *p);
void pack_batch_release(struct pack_batch *b);
int pack_batch_grow(struct pack_batch *b, unsigned nthreads);
int pack_batch_add(struct packer *p, const void *data, size_t len, uint64_t line);
void pack_batch_run(struct packer *p, struct pack_batch *b, int validate, int compress);
int pack_write_record(struct packer *p, struct pack_batch *b, size_t i);
int pack_batch_flush(struct packer *p);
int pack_batch_full(const struct packer *p);
/* End dictionary training (pack_dict_train()), open the writer, and write the held
 * samples; 0 or -errno (the message in p->err). */
int pack_batch_write_held(struct packer *p);
/* Cut every whole window out of p->window into the batch (pack_batch.c); 0 or what
 * pack_batch_add/pack_batch_flush return. */
int pack_cut_windows(struct packer *p);

/* pack_dict.c: dictionary training on the first samples held back.
 * pack_dict_hold: 0, 1 when enough samples are held (the caller then calls
 * pack_batch_write_held()), or -ENOMEM. pack_dict_train: train on them and end the
 * training (p->training = 0); 0 or -ENOMEM. */
int pack_dict_hold(struct packer *p, const void *data, size_t len);
int pack_dict_train(struct packer *p);

/* pack_publish.c: the temporary directory, and publishing the dataset. */
int pack_remove_dir(const char *path);
int pack_make_tmp(struct packer *p);
int pack_publish(struct packer *p);
int pack_check_out(struct packer *p);

#endif
