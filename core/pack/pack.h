/*
 * pack.h: `zephon pack`: inputs in the order given become consecutive sample ids of a new,
 * immutable dataset directory (docs/design.md §4; layout in dataset.h).
 *
 * The dataset is written into a temporary directory beside the output
 * (".NAME.zephon-tmp-XXXXXX") and renamed into place only when every shard, index and
 * the catalog are written and fsync'ed: a failed, refused or cancelled pack leaves nothing
 * behind (a killed one leaves only the temporary directory, never a dataset).
 *
 * Dictionary: with compression and no --no-dict, the first samples (up to
 * PACK_DICT_TRAIN_BYTES, at most PACK_DICT_SAMPLE_BYTES of each) train one zstd dictionary
 * (ZDICT_trainFromBuffer, zstd's dictBuilder); a dataset too small to train one is packed
 * without. Tokens: all token inputs are concatenated and cut into windows of seq_len
 * tokens; the incomplete window at the end is dropped and counted (remainder_tokens).
 *
 * Inputs: each becomes one source (catalog row), but a Megatron pair is one source
 * whichever of its names (PREFIX, PREFIX.idx, PREFIX.bin) are given, in any order: the
 * later names fold into the first. A file given again, by any spelling (compared by
 * device and inode), is packed again, as upsampling, with a warning through notice.
 *
 * Fingerprint (catalog meta `fingerprint`): XXH3-128 over, in order, every sample as
 * (u64 little-endian length, bytes) in id order, then the text
 * "zephon-dataset-v1\n" "kind=K\n" "content=C\n" "record_ext=E\n" "dtype=D\n"
 * "seq_len=L\n" "samples=N\n", and for a pack with --tokenizer "tokenizer_sha256=H\n"
 * (another tokenizer is another dataset, even where the ids happen to agree), and for a
 * dataset of rows "layout=rows\n" "row_len=R\n" "max_context_length=C\n" (dataset.h,
 * dataset_fingerprint_text; a row's labels, its mask, are sample bytes). Compression, level, dictionary and shard size are not in
 * it: they do not change the sample bytes or ids.
 *
 * Core rule: never prints. Progress and notices go to the caller's callbacks.
 * Not thread-safe: one pack at a time per struct pack_opts.
 */
#ifndef ZEPHON_PACK_H
#define ZEPHON_PACK_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "source.h"

#define PACK_DICT_TRAIN_BYTES (8u << 20)
#define PACK_DICT_SAMPLE_BYTES (64u << 10)
#define PACK_DICT_SIZE_DEFAULT (112u << 10)
#define PACK_SHARD_BYTES_DEFAULT (UINT64_C(1) << 30)
#define PACK_LEVEL_DEFAULT 3
/* Records are validated, checksummed and compressed in batches of this size on every
 * thread, then written in order by the calling thread. */
#define PACK_BATCH_BYTES (4u << 20)
#define PACK_BATCH_RECORDS 16384
#define PACK_TOKDOCS_MAGIC "ZTOKDOC1"

struct pack_progress {
	uint64_t input_bytes;        /* bytes of input consumed, all inputs so far */
	uint64_t input_bytes_total;  /* sum of the inputs' sizes (0 when unknown) */
	uint64_t samples;
	uint64_t raw_bytes;
	uint64_t stored_bytes;
	uint64_t documents;          /* --tokenizer: documents and tokens so far */
	uint64_t tokens;
	size_t input;                /* which source is being read */
	size_t inputs;               /* sources: inputs after folding Megatron pairs */
	int done;                    /* the last call */
};

struct pack_opts {
	const char *const *inputs;
	size_t ninputs;
	const char *out;             /* dataset directory to create */
	enum source_format format;   /* SOURCE_AUTO or a --format */
	int have_dtype;
	enum token_dtype dtype;      /* --dtype */
	uint64_t seq_len;            /* --seq-len (tokens) */
	uint64_t overlap;            /* --overlap: 0, or 1 for windows of seq_len + 1 tokens
	                              * whose last token starts the next window */
	int have_eod_token;          /* --eod-token given */
	uint64_t eod_token;          /* --eod-token: appended after every document (see
	                              * source_opts); must fit the tokens' dtype */
	int compress;                /* 1 zstd, 0 none */
	int level;
	int no_dict;
	size_t dict_size;
	uint64_t shard_bytes;
	int skip_bad;
	int force;                   /* replace an existing dataset at out */
	unsigned threads;            /* 0: one per online CPU */
	/* >= 0: the inputs are this pipe's token documents, which `zephon pack
	 * --tokenizer`'s front end writes (pack_text.c has the format, PACK_TOKDOCS_MAGIC
	 * its first bytes); inputs and format are then not read. -1 otherwise. */
	int tokdocs_fd;
	/* With tokdocs_fd (--whole-documents, --chat): whole documents into rows of seq_len
	 * positions by one plan over the whole dataset (rowplan.h), a dataset of rows
	 * (rowindex.h: each sample three planes of seq_len int32: inputs, labels,
	 * positions); a document of more than max_context input tokens (its tokens - 1; 0:
	 * seq_len) is dropped and counted. 0: windows of the token stream. */
	int rows;
	uint64_t max_context;
	void (*progress)(void *ctx, const struct pack_progress *p);
	void (*notice)(void *ctx, const char *msg);
	void *ctx;
	volatile sig_atomic_t *cancel; /* set non-zero (from a signal handler) to stop */
};

/* Defaults for everything but inputs/out. */
void pack_opts_init(struct pack_opts *o);

struct pack_result {
	uint64_t samples;
	uint64_t raw_bytes;
	uint64_t stored_bytes;
	uint64_t input_bytes;
	uint64_t shards;
	size_t sources;              /* inputs packed, after folding Megatron pairs */
	uint64_t skipped;            /* records skipped (--skip-bad) and files not followed */
	uint64_t remainder_tokens;
	uint64_t documents;          /* --tokenizer: documents packed (0 otherwise) */
	uint64_t dropped;            /* rows: documents longer than max_context, dropped */
	uint64_t padding;            /* rows: positions of padding, all rows */
	uint64_t prompt_mismatch;    /* --chat: samples whose prompt tokens are not a prefix
	                              * of the conversation's (each dropped, or kept with
	                              * TorchTitan's mask: the front end's policy) */
	uint64_t tokens;             /* tokens read, all inputs */
	uint64_t max_token;          /* the largest token id (token datasets) */
	size_t dict_bytes;           /* 0 when packed without a dictionary */
	enum dataset_kind kind;
	char fingerprint[33];
};

/* Run the pack. 0 on success; on failure -errno with one line in err that names the
 * input and position, and nothing left at o->out: -EINVAL (bad input or options),
 * -EBADMSG (corrupt or truncated input), -EEXIST (out exists and !force), -ENODATA (the
 * inputs hold no sample), -ECANCELED (cancel was set), -EFBIG, -ENOMEM, -EIO. */
int pack_run(const struct pack_opts *o, struct pack_result *res, char *err, size_t errlen);

#endif
