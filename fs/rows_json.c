/* rows_json.c: a dataset of rows as JSON (rows_json.h). */
#include "rows_json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "catalog.h"
#include "docindex.h"
#include "layout_json.h"
#include "rowindex.h"

/* The most trained spans listed per document (a chat of many turns has one per turn). */
#define SPANS_MAX 64

static uint64_t meta_u64(const struct catalog *c, const char *key)
{
	uint64_t v = 0;

	catalog_meta_u64(c, key, &v);
	return v;
}

void rows_json_meta(json_t *o, const struct dataset *ds)
{
	const struct dataset_info *in = dataset_info(ds);
	const struct catalog *c = dataset_catalog(ds);
	uint64_t pad = meta_u64(c, "padding");
	const char *chat = catalog_meta_get(c, "chat");

	if (in->kind != DATASET_TOKENS)
		return;
	json_object_set_new(o, "layout", json_string(in->row_len ? "rows" : "windows"));
	if (!in->row_len)
		return;
	json_object_set_new(o, "row_len", json_u64(in->row_len));
	json_object_set_new(o, "max_context_length", json_u64(in->max_context));
	if (dataset_source_count(ds) != 1)
		return; /* a mixture: its sources' catalogs say the rest */
	json_object_set_new(o, "padding", json_u64(pad));
	json_object_set_new(o, "padding_fraction",
			    json_real((double)pad / ((double)in->samples * (double)in->row_len)));
	json_object_set_new(o, "documents_dropped", json_u64(meta_u64(c, "documents_dropped")));
	json_object_set_new(o, "chat", chat ? json_pack("{s:s, s:o, s:s?}", "form", chat,
		"prompt_mismatch", json_u64(meta_u64(c, "prompt_mismatch")),
		"prompt_mismatch_policy", catalog_meta_get(c, "prompt_mismatch_policy")) :
		json_null());
}

struct rows_lineage {
	const struct dataset *ds;
	struct rowindex *ri;
	struct docindex *di;
	struct sample_reader *r;
	struct buf sample;
};

void rows_lineage_close(struct rows_lineage *rl)
{
	if (!rl)
		return;
	rowindex_close(rl->ri);
	docindex_close(rl->di);
	sample_reader_free(rl->r);
	buf_release(&rl->sample);
	free(rl);
}

int rows_lineage_open(const struct dataset *ds, struct rows_lineage **out, char *err,
		      size_t errlen)
{
	struct rows_lineage *rl;
	int rc;

	if (!dataset_info(ds)->row_len || dataset_source_count(ds) != 1)
		return -ENOENT;
	if (!(rl = calloc(1, sizeof(*rl))))
		return -ENOMEM;
	rl->ds = ds;
	if ((rc = rowindex_open(dataset_dir(ds), &rl->ri, err, errlen)) ||
	    (rc = docindex_open(dataset_dir(ds), &rl->di, err, errlen))) {
		rows_lineage_close(rl);
		return rc == -ENOENT ? -EBADMSG : rc;
	}
	if (!(rl->r = sample_reader_new(ds))) {
		rows_lineage_close(rl);
		return -ENOMEM;
	}
	*out = rl;
	return 0;
}

/* Document entry e of row sample bytes s: its JSON object, or NULL (reason in err). */
static json_t *row_document(struct rows_lineage *rl, const struct rowindex_entry *e,
			    const uint8_t *s, char *err, size_t errlen)
{
	const struct catalog *c = dataset_catalog(rl->ds);
	uint64_t row_len = dataset_info(rl->ds)->row_len, spans[SPANS_MAX][2], trained;
	struct docindex_entry d;
	json_t *jspans = json_array();
	size_t n;

	if (e->document >= docindex_count(rl->di)) {
		err_printf(err, errlen, "%s names document %ju of %ju", ROWINDEX_FILE,
			   (uintmax_t)e->document, (uintmax_t)docindex_count(rl->di));
		json_decref(jspans);
		return NULL;
	}
	docindex_get(rl->di, e->document, &d);
	if (d.source >= c->nsources) {
		err_printf(err, errlen, "%s: document %ju names source %u of %zu", DOCINDEX_FILE,
			   (uintmax_t)e->document, d.source, c->nsources);
		json_decref(jspans);
		return NULL;
	}
	n = rowindex_trained(s, row_len, e->position, e->length, spans, SPANS_MAX, &trained);
	for (size_t k = 0; k < n && k < SPANS_MAX; k++)
		json_array_append_new(jspans, json_pack("[o, o]", json_u64(spans[k][0]),
							json_u64(spans[k][1])));
	return json_pack("{s:o, s:o, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o}",
			 "document", json_u64(e->document), "source", json_u64(d.source),
			 "path", c->sources[d.source].path, "format", c->sources[d.source].format,
			 "record", json_u64(d.record), "tokens", json_u64(d.tokens),
			 "position", json_u64(e->position), "length", json_u64(e->length),
			 "labels", json_u64(trained), "trained", jspans);
}

json_t *rows_json_row(struct rows_lineage *rl, uint64_t id, char *err, size_t errlen)
{
	uint64_t row_len = dataset_info(rl->ds)->row_len, first, count, used = 0;
	struct rowindex_entry e;
	json_t *docs;

	if (id >= rowindex_rows(rl->ri)) {
		err_printf(err, errlen, "%s holds rows 0-%ju, not %ju", ROWINDEX_FILE,
			   (uintmax_t)rowindex_rows(rl->ri) - 1, (uintmax_t)id);
		return NULL;
	}
	rl->sample.len = 0;
	if (sample_reader_read(rl->r, id, &rl->sample)) {
		err_printf(err, errlen, "%s", sample_reader_last_error(rl->r));
		return NULL;
	}
	if (rl->sample.len != 12 * row_len) {
		err_printf(err, errlen, "sample %ju holds %zu bytes, not a row of %ju", (uintmax_t)id,
			   rl->sample.len, (uintmax_t)row_len);
		return NULL;
	}
	docs = json_array();
	rowindex_row(rl->ri, id, &first, &count);
	for (uint64_t k = first; k < first + count; k++) {
		json_t *d;

		rowindex_get(rl->ri, k, &e);
		if (!(d = row_document(rl, &e, rl->sample.data, err, errlen))) {
			json_decref(docs);
			return NULL;
		}
		json_array_append_new(docs, d);
		used += e.length;
	}
	if (used > row_len) {
		err_printf(err, errlen, "%s: row %ju holds %ju positions of documents, more than "
			   "its %ju", ROWINDEX_FILE, (uintmax_t)id, (uintmax_t)used,
			   (uintmax_t)row_len);
		json_decref(docs);
		return NULL;
	}
	return json_pack("{s:o, s:o, s:o, s:o}", "sample", json_u64(id), "row_len",
			 json_u64(row_len), "padding", json_u64(row_len - used), "documents", docs);
}
