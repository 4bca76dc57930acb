/*
 * docindex.h: a token dataset's document index, DIR/documents.idx, written by
 * `zephon pack --tokenizer` (pack_text.c): where each document starts in the dataset's
 * token stream (the concatenation of every document, before it is cut into windows) and
 * which input record it came from, for lineage (`zephon info --sample ID`) and for
 * loaders that build per-document masks.
 *
 * Layout (COMPATIBILITY: a change is a format break; bump DOCINDEX_VERSION):
 *   struct docindex_header, then `count` struct docindex_entry, all little-endian,
 *   documents in stream order: entry i's first_token is the sum of the tokens of the
 *   entries before it. The catalog's meta `documents` repeats count.
 *
 * A token t of the stream lies in window w = t / stride (and also in window w - 1 at its
 * last position, with overlap 1), stride = seq_len - overlap; window w covers tokens
 * [w * stride, w * stride + seq_len). A dataset of rows (rowindex.h) has no windows: its
 * index lists the documents kept (not those dropped as too long), in input order, the
 * stream being their concatenation; rows.idx says which row holds each.
 *
 * Thread-safety: a writer is one thread's; an open index is read-only (mmap) and may be
 * shared.
 */
#ifndef ZEPHON_DOCINDEX_H
#define ZEPHON_DOCINDEX_H

#include <stddef.h>
#include <stdint.h>

#define DOCINDEX_FILE "documents.idx"
#define DOCINDEX_MAGIC "ZPHDOC\0\1" /* 8 bytes */
#define DOCINDEX_VERSION 1

struct docindex_header {
	char magic[8];          /* DOCINDEX_MAGIC */
	uint32_t version;       /* DOCINDEX_VERSION */
	uint32_t entry_size;    /* sizeof(struct docindex_entry) */
	uint64_t count;         /* documents */
	uint64_t tokens;        /* sum of their tokens (BOS and EOS included) */
};
_Static_assert(sizeof(struct docindex_header) == 32, "document index header is 32 bytes");

struct docindex_entry {
	uint64_t first_token;   /* offset of the document's first token in the stream */
	uint64_t tokens;        /* its tokens, BOS and EOS included */
	uint64_t record;        /* where in its input: JSONL/lines: 1-based line number;
	                         * Parquet/Arrow: 0-based row; a text file: 0 */
	uint32_t source;        /* the catalog's sources row (input file) */
	uint32_t reserved;      /* 0 */
};
_Static_assert(sizeof(struct docindex_entry) == 32, "document index entry is 32 bytes");

struct docindex_writer;

/* Create path (must not exist) for writing. 0, or -errno of open() with a reason in err.
 * *out is set only on success. */
int docindex_writer_open(const char *path, struct docindex_writer **out, char *err,
			 size_t errlen);
/* Append one document of `tokens` tokens from row `record` of source `source`; its
 * first_token is the tokens appended before it. 0 or -EIO/-ENOSPC (reason in err). */
int docindex_writer_add(struct docindex_writer *w, uint64_t tokens, uint64_t record,
			uint32_t source, char *err, size_t errlen);
uint64_t docindex_writer_count(const struct docindex_writer *w);
/* Write the header, fsync and close. 0 or -errno (reason in err). Frees w either way. */
int docindex_writer_finish(struct docindex_writer *w, char *err, size_t errlen);
/* Close and free without finishing (the caller removes the file). NULL is fine. */
void docindex_writer_free(struct docindex_writer *w);

struct docindex;

/* Map DIR/documents.idx. 0, -ENOENT (the dataset has none: not packed with --tokenizer),
 * -EBADMSG (bad magic, version or size; reason in err), -errno of open/mmap. */
int docindex_open(const char *dir, struct docindex **out, char *err, size_t errlen);
void docindex_close(struct docindex *di);
uint64_t docindex_count(const struct docindex *di);
/* Entry i (< count), decoded to host order. */
void docindex_get(const struct docindex *di, uint64_t i, struct docindex_entry *out);
/* The document holding stream token t: the last entry whose first_token <= t (count
 * when there is none, or t lies past the last document). O(log count). */
uint64_t docindex_find(const struct docindex *di, uint64_t t);

/* The documents that tokens [first, first + n) of the stream touch: [*d0, *d1) (empty
 * when those tokens lie past the last document). n >= 1. */
void docindex_range(const struct docindex *di, uint64_t first, uint64_t n, uint64_t *d0,
		    uint64_t *d1);
/* The tokens [first, first + n) of window `sample` of a token dataset of window length
 * seq_len (tokens as stored) and overlap (0 or 1): first = sample * (seq_len - overlap). */
static inline uint64_t docindex_window_first(uint64_t sample, uint64_t seq_len,
					     uint64_t overlap)
{
	return sample * (seq_len - overlap);
}

/* What an entry's `record` counts in an input of catalog source format `fmt` (the
 * sources row's format, as pack_text.c records it): "line" for "jsonl" and "lines" (from
 * 1), "row" for "parquet" and "arrow" (from 0), NULL for any other (a text file is one
 * document: record 0). The key under which `zephon info --sample --json` and a mount's
 * /rank/<r>/state name the record, beside "record". Pure; a static string. */
const char *docindex_record_key(const char *fmt);

/* Check the whole index against its dataset: count documents, tokens in all (the catalog's
 * meta `documents` and `tokens`), every entry starting where the one before ends, none
 * empty, every source below nsources. 0, or -EBADMSG with the first problem in err. */
int docindex_check(const struct docindex *di, uint64_t count, uint64_t tokens,
		   size_t nsources, char *err, size_t errlen);

#endif
