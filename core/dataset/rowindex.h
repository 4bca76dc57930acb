/*
 * rowindex.h: a dataset of rows (`zephon pack --whole-documents`, `--chat`): the catalog
 * meta that says so, the layout of a row, and DIR/rows.idx, the row index: which
 * documents (entries of documents.idx, docindex.h) each row holds and where. Written by
 * the pack (core/pack/pack_rows.c); read for lineage (`zephon info --sample ID`, a
 * mount's /rank/<r>/state) and checked by `zephon verify`.
 *
 * A row (docs/design.md §4, "Datasets of rows") is one sample of 3 L little-endian
 * int32, L = row_len:
 *   inputs[L]     the documents' tokens, each document of n tokens giving its first n - 1
 *   labels[L]     the next token of the same document, or -100 (IGNORE_INDEX) where no
 *                 loss is taken: a masked label (a chat prompt) or padding
 *   positions[L]  0, 1, ... n - 2 within each document
 * Documents lie back to back from position 0; the rest is padding: input 0, label -100,
 * position 0, as TorchTitan's packing pads.
 *
 * rows.idx (COMPATIBILITY: a change is a format break; bump ROWINDEX_VERSION), all
 * little-endian: struct rowindex_header; then `entries` struct rowindex_entry, row by row,
 * each row's documents by position; then rows + 1 u64 offsets: row r's entries are
 * [offset[r], offset[r + 1]), offset[0] = 0, offset[rows] = entries.
 *
 * Thread-safety: a writer is one thread's; an open index is read-only (mmap), shareable.
 */
#ifndef ZEPHON_ROWINDEX_H
#define ZEPHON_ROWINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "dtype.h"

#define ROWINDEX_FILE "rows.idx"
#define ROWINDEX_MAGIC "ZPHROWS\1" /* 8 bytes */
#define ROWINDEX_VERSION 1
/* The label of a position whose loss is not taken (TorchTitan's IGNORE_INDEX). */
#define ROW_IGNORE (-100)
/* The planes of a row, in this order. */
#define ROW_PLANES 3

struct rowindex_header {
	char magic[8];          /* ROWINDEX_MAGIC */
	uint32_t version;       /* ROWINDEX_VERSION */
	uint32_t entry_size;    /* sizeof(struct rowindex_entry) */
	uint64_t rows;          /* the dataset's samples */
	uint64_t entries;       /* documents placed (the catalog's meta `documents`) */
	uint64_t row_len;       /* L */
	uint64_t reserved;      /* 0 */
};
_Static_assert(sizeof(struct rowindex_header) == 48, "row index header is 48 bytes");

struct rowindex_entry {
	uint64_t document;      /* its entry in documents.idx */
	uint32_t position;      /* its first position in the row */
	uint32_t length;        /* its positions in the row: its tokens - 1 */
};
_Static_assert(sizeof(struct rowindex_entry) == 16, "row index entry is 16 bytes");

/* The rows meta of catalog c (layout=rows, row_len, max_context_length) into *row_len
 * and *max_context, for a token dataset of dtype, seq_len and overlap (its catalog's);
 * both 0 for a dataset without meta 'layout' (windows). 0, or -EBADMSG with a reason in
 * err (the meta does not describe rows of int32, seq_len = 3 row_len, overlap 0,
 * 1 <= max_context_length <= row_len). */
int rowindex_meta(const struct catalog *c, enum token_dtype dtype, uint64_t seq_len,
		  uint64_t overlap, uint64_t *row_len, uint64_t *max_context, char *err,
		  size_t errlen);

struct rowindex_writer;

/* Create path (must not exist) for the index of rows of row_len positions. 0, or
 * -ENOMEM, or -errno of open() with a reason in err. *out is set only on success. */
int rowindex_writer_open(const char *path, uint64_t row_len, struct rowindex_writer **out,
			 char *err, size_t errlen);
/* Append the next row, which holds the count documents e[0..count) (by position). 0, or
 * -ENOMEM, -EIO, -ENOSPC (reason in err). */
int rowindex_writer_row(struct rowindex_writer *w, const struct rowindex_entry *e,
			size_t count, char *err, size_t errlen);
/* Write the offsets and the header, fsync and close. 0 or -errno (reason in err). Frees
 * w either way. */
int rowindex_writer_finish(struct rowindex_writer *w, char *err, size_t errlen);
/* Close and free without finishing (the caller removes the file). NULL is fine. */
void rowindex_writer_free(struct rowindex_writer *w);

struct rowindex;

/* Map DIR/rows.idx. 0, -ENOENT (none: not a dataset of rows), -EBADMSG (bad magic,
 * version or size; reason in err), -errno of open/mmap. */
int rowindex_open(const char *dir, struct rowindex **out, char *err, size_t errlen);
void rowindex_close(struct rowindex *ri);
uint64_t rowindex_rows(const struct rowindex *ri);
/* Row r's (< rows) entries: [*first, *first + *count). */
void rowindex_row(const struct rowindex *ri, uint64_t r, uint64_t *first, uint64_t *count);
/* Entry k (< entries), decoded to host order. */
void rowindex_get(const struct rowindex *ri, uint64_t k, struct rowindex_entry *out);

/* Check the whole index against its dataset: `rows` rows of row_len, `documents`
 * entries (the catalog's samples, row_len and documents), the offsets ascending, each
 * row's entries back to back from position 0 within row_len, every document below
 * `documents` placed exactly once. 0, or -ENOMEM, or -EBADMSG with the first problem in
 * err. O(entries) time, documents / 8 bytes of memory. */
int rowindex_check(const struct rowindex *ri, uint64_t rows, uint64_t row_len,
		   uint64_t documents, char *err, size_t errlen);

/* Check one row's bytes (`sample`, 3 row_len int32) against its entries e[0..count) of
 * the row index: positions count from 0 in each document and are 0 in the padding;
 * within a document each label is ROW_IGNORE or the next position's input (a label never
 * crosses a document boundary); the padding is input 0, label ROW_IGNORE. 0, or
 * -EBADMSG with the first problem (its row position) in err. */
int rowindex_check_row(const uint8_t *sample, uint64_t row_len,
		       const struct rowindex_entry *e, size_t count, char *err, size_t errlen);

/* The trained positions (label not ROW_IGNORE) among [pos, pos + len) of a row's bytes
 * (`sample`, 3 row_len little-endian int32: its labels plane read), as spans [a, b) of
 * row positions: at most max spans into spans (more are counted, not stored). Returns the
 * number of spans; *trained (when not NULL) receives the trained positions. */
size_t rowindex_trained(const uint8_t *sample, uint64_t row_len, uint64_t pos, uint64_t len,
			uint64_t (*spans)[2], size_t max, uint64_t *trained);

#endif
