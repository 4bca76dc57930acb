/*
 * rows_json.h: a dataset of rows (core/dataset/rowindex.h) described as JSON, the one
 * spelling that `zephon info` (its summary, and --sample ID) and a mount's /status and
 * /rank/<r>/state share. Keys are stable (docs/fine-tuning.md).
 */
#ifndef ZEPHON_ROWS_JSON_H
#define ZEPHON_ROWS_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset.h"

/* The dataset's rows meta added to object o: layout ("rows" or "windows"), and for rows
 * row_len, max_context_length, padding (positions), padding_fraction, documents_dropped
 * and chat (null, or {form, prompt_mismatch, prompt_mismatch_policy}). For a dataset of
 * another kind, nothing. */
void rows_json_meta(json_t *o, const struct dataset *ds);

struct rows_lineage;

/* Open what rows_json_row() reads: the dataset's row index and document index, and a
 * sample reader. 0, or -ENOENT (not a dataset of rows, or a mixture), or -errno with a
 * reason in err. */
int rows_lineage_open(const struct dataset *ds, struct rows_lineage **out, char *err,
		      size_t errlen);
void rows_lineage_close(struct rows_lineage *rl);

/* Row id as JSON, its mask read from its stored labels: {"sample", "row_len",
 * "padding", "documents": [{"document", "source", "path", "format", "record",
 * "position", "length", "labels", "trained": [[a, b], ...]}, ...]}: each document's
 * positions [position, position + length) in the row, the labels trained among them and
 * their spans [a, b) of row positions. NULL on failure, with the reason in err (a bad
 * sample, an index that does not match). */
json_t *rows_json_row(struct rows_lineage *rl, uint64_t id, char *err, size_t errlen);

#endif
