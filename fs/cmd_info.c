/* cmd_info.c: `zephon info DATASET [--json]`: what a dataset holds. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "catalog.h"
#include "cmd.h"
#include "mixspec.h"
#include "dataset.h"
#include "docindex.h"
#include "layout_json.h"
#include "rows_json.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zephon info DATASET [--json] [--sample ID]\n"
		"\n"
		"Describe a packed dataset: kind, sample count, raw and stored bytes, compression,\n"
		"shards, dtype and seq_len (tokens), inputs and the fingerprint; for a dataset\n"
		"packed with --tokenizer, the tokenizer (name, sha256, vocabulary size, BOS, EOS),\n"
		"the documents and tokens. --json prints one JSON object (keys kind, samples,\n"
		"fingerprint, raw_bytes, stored_bytes, shards, dtype, seq_len, tokenizer,\n"
		"documents, tokens, max_token_id, sources, ...).\n"
		"--sample ID (datasets packed with --tokenizer): the documents window ID holds,\n"
		"each with its input file and line or row, from the dataset's document index; of\n"
		"a dataset of rows (--whole-documents, --chat), the documents row ID holds, their\n"
		"positions and the labels it trains (read from the row's stored mask).\n");
}

static uint64_t meta_u64(const struct catalog *c, const char *key)
{
	uint64_t v = 0;

	catalog_meta_u64(c, key, &v);
	return v;
}

static int print_json(const struct dataset *ds)
{
	const struct dataset_info *in = dataset_info(ds);
	const struct catalog *c = dataset_catalog(ds);
	json_t *o = json_object(), *src = json_array();
	const char *created = catalog_meta_get(c, "created");
	const char *version = catalog_meta_get(c, "zephon_version");
	char *text;
	int tokens = in->kind == DATASET_TOKENS;

	if (!o || !src)
		return 1;
	json_object_set_new(o, "dataset", json_string(dataset_dir(ds)));
	json_object_set_new(o, "kind", json_string(dataset_kind_name(in->kind)));
	json_object_set_new(o, "content", json_string(dataset_content_name(in->content)));
	json_object_set_new(o, "samples", json_integer((json_int_t)in->samples));
	json_object_set_new(o, "fingerprint", json_string(in->fingerprint));
	json_object_set_new(o, "raw_bytes", json_integer((json_int_t)in->raw_bytes));
	json_object_set_new(o, "stored_bytes", json_integer((json_int_t)in->stored_bytes));
	json_object_set_new(o, "compression_ratio", in->stored_bytes ?
			    json_real((double)in->raw_bytes / (double)in->stored_bytes) : json_null());
	json_object_set_new(o, "compress", json_string(in->compressed ? "zstd" : "none"));
	json_object_set_new(o, "level", in->compressed ?
			    json_integer((json_int_t)meta_u64(c, "level")) : json_null());
	json_object_set_new(o, "dict_bytes", json_integer((json_int_t)c->dict_len));
	json_object_set_new(o, "shards", json_integer((json_int_t)in->shards));
	json_object_set_new(o, "dtype", tokens ? json_string(dtype_name(in->dtype)) :
			    json_null());
	json_object_set_new(o, "seq_len", tokens ? json_integer((json_int_t)in->seq_len) :
			    json_null());
	json_object_set_new(o, "overlap", tokens ? json_integer((json_int_t)in->overlap) :
			    json_null());
	json_object_set_new(o, "eod_token", tokens && in->have_eod_token ?
			    json_integer((json_int_t)in->eod_token) : json_null());
	json_object_set_new(o, "remainder_tokens", tokens ?
			    json_integer((json_int_t)meta_u64(c, "remainder_tokens")) : json_null());
	json_object_set_new(o, "max_token_id", tokens && in->have_max_token_id ?
			    json_integer((json_int_t)in->max_token_id) : json_null());
	json_object_set_new(o, "tokens", tokens && catalog_meta_get(c, "tokens") ?
			    json_integer((json_int_t)meta_u64(c, "tokens")) : json_null());
	json_object_set_new(o, "documents", catalog_meta_get(c, "documents") ?
			    json_integer((json_int_t)meta_u64(c, "documents")) : json_null());
	json_object_set_new(o, "tokenizer", in->tokenizer_sha256[0] ? json_pack(
		"{s:s?, s:s, s:s?, s:I, s:o, s:o}", "name", catalog_meta_get(c, "tokenizer"),
		"sha256", in->tokenizer_sha256, "path", catalog_meta_get(c, "tokenizer_path"),
		"vocab_size", (json_int_t)meta_u64(c, "vocab_size"),
		"bos_token", catalog_meta_get(c, "bos_token") ?
			json_integer((json_int_t)meta_u64(c, "bos_token")) : json_null(),
		"eos_token", in->have_eod_token ? json_integer((json_int_t)in->eod_token) :
			json_null()) : json_null());
	rows_json_meta(o, ds);
	json_object_set_new(o, "record_ext", in->content == CONTENT_TEXT ?
			    json_string(in->record_ext) : json_null());
	json_object_set_new(o, "skipped", json_integer((json_int_t)meta_u64(c, "skipped")));
	json_object_set_new(o, "created", created ? json_string(created) : json_null());
	json_object_set_new(o, "zephon_version", version ? json_string(version) : json_null());
	for (size_t i = 0; i < c->nsources; i++) {
		const struct catalog_source *s = &c->sources[i];

		json_array_append_new(src, json_pack("{s:s, s:s, s:I, s:s, s:I, s:I}",
			"path", s->path, "format", s->format, "size", (json_int_t)s->size,
			"checksum", s->checksum, "first_sample", (json_int_t)s->first_sample,
			"samples", (json_int_t)s->samples));
	}
	json_object_set_new(o, "sources", src);
	text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!text)
		return 1;
	puts(text);
	free(text);
	return 0;
}

/* The rows lines of print_table (a dataset of rows; rows_json.h has the meta). */
static void print_rows(const struct dataset *ds)
{
	const struct dataset_info *in = dataset_info(ds);
	const struct catalog *c = dataset_catalog(ds);
	const char *chat = catalog_meta_get(c, "chat");

	printf("layout        rows of %" PRIu64 " positions: inputs, labels (-100: no loss), "
	       "positions, int32 (%" PRIu64 " bytes per sample)\n", in->row_len,
	       in->seq_len * in->itemsize);
	printf("padding       %" PRIu64 " positions (%.2f%%)\n", meta_u64(c, "padding"),
	       100.0 * (double)meta_u64(c, "padding") / ((double)in->samples *
							  (double)in->row_len));
	printf("max_context   %" PRIu64 " input tokens per document; %" PRIu64 " longer "
	       "dropped\n", in->max_context, meta_u64(c, "documents_dropped"));
	if (chat)
		printf("chat          %s; %" PRIu64 " prompts not a prefix of their conversation "
		       "(%s)\n", chat, meta_u64(c, "prompt_mismatch"),
		       catalog_meta_get(c, "prompt_mismatch_policy") ?
		       catalog_meta_get(c, "prompt_mismatch_policy") : "?");
}

/* The tokenizer of a dataset packed with --tokenizer, and its documents. */
static void print_tokenizer(const struct catalog *c, const struct dataset_info *in)
{
	printf("tokenizer     %s, sha256 %s\n", catalog_meta_get(c, "tokenizer") ?
	       catalog_meta_get(c, "tokenizer") : "?", in->tokenizer_sha256);
	if (catalog_meta_get(c, "tokenizer_path"))
		printf("tokenizer at  %s (when packed)\n", catalog_meta_get(c, "tokenizer_path"));
	printf("vocab_size    %" PRIu64 "\n", meta_u64(c, "vocab_size"));
	if (catalog_meta_get(c, "bos_token"))
		printf("bos_token     %" PRIu64 ", before every document\n",
		       meta_u64(c, "bos_token"));
	printf("documents     %" PRIu64 " (%" PRIu64 " tokens, BOS and EOS included)\n",
	       meta_u64(c, "documents"), meta_u64(c, "tokens"));
}

static void print_table(const struct dataset *ds)
{
	const struct dataset_info *in = dataset_info(ds);
	const struct catalog *c = dataset_catalog(ds);
	const char *created = catalog_meta_get(c, "created");
	char a[32], b[32];

	printf("dataset       %s\n", dataset_dir(ds));
	if (in->kind == DATASET_TOKENS)
		printf("kind          tokens\n");
	else
		printf("kind          records (%s%s%s)\n", dataset_content_name(in->content),
		       in->content == CONTENT_TEXT ? ", ." : "",
		       in->content == CONTENT_TEXT ? in->record_ext : "");
	printf("samples       %" PRIu64 "\n", in->samples);
	if (in->kind == DATASET_TOKENS) {
		printf("dtype         %s\n", dtype_name(in->dtype));
		if (in->row_len)
			print_rows(ds);
		else
			printf("seq_len       %" PRIu64 " tokens (%" PRIu64 " bytes per sample)\n",
			       in->seq_len, in->seq_len * in->itemsize);
		if (in->overlap)
			printf("overlap       1 token: windows of --seq-len %" PRIu64 " + 1, the last "
			       "token of each the first of the next\n", in->seq_len - 1);
		if (in->have_eod_token)
			printf("eod_token     %" PRIu32 ", after every document\n", in->eod_token);
		else
			printf("eod_token     none (no end-of-document token appended)\n");
		if (!in->row_len)
			printf("remainder     %" PRIu64 " tokens dropped at the end\n",
			       meta_u64(c, "remainder_tokens"));
		if (in->have_max_token_id)
			printf("max_token_id  %" PRIu64 "\n", in->max_token_id);
	}
	if (in->tokenizer_sha256[0])
		print_tokenizer(c, in);
	printf("raw bytes     %" PRIu64 " (%s)\n", in->raw_bytes,
	       human_size((double)in->raw_bytes, a, sizeof(a)));
	printf("stored bytes  %" PRIu64 " (%s)\n", in->stored_bytes,
	       human_size((double)in->stored_bytes, b, sizeof(b)));
	if (in->stored_bytes)
		printf("ratio         %.2fx\n", (double)in->raw_bytes / (double)in->stored_bytes);
	if (in->compressed)
		printf("compression   zstd level %" PRIu64 ", %s\n", meta_u64(c, "level"),
		       c->dict_len ? "dictionary" : "no dictionary");
	else
		printf("compression   none\n");
	if (c->dict_len)
		printf("dictionary    %zu bytes\n", c->dict_len);
	printf("shards        %" PRIu64 "\n", in->shards);
	printf("fingerprint   %s\n", in->fingerprint);
	if (created)
		printf("created       %s by zephon %s\n", created,
		       catalog_meta_get(c, "zephon_version") ? catalog_meta_get(c, "zephon_version") : "?");
	if (meta_u64(c, "skipped"))
		printf("skipped       %" PRIu64 " at pack time (bad records with --skip-bad, tar "
		       "members without an extension, symlinks, special files)\n",
		       meta_u64(c, "skipped"));
	printf("sources       %zu\n", c->nsources);
	for (size_t i = 0; i < c->nsources; i++) {
		const struct catalog_source *s = &c->sources[i];

		if (s->samples)
			snprintf(b, sizeof(b), "ids %" PRIu64 "-%" PRIu64, s->first_sample,
				 s->first_sample + s->samples - 1);
		else
			snprintf(b, sizeof(b), "no samples");
		printf("  %-3zu %-8s %10s  %-22s %s\n", i, s->format,
		       human_size((double)s->size, a, sizeof(a)), b, s->path);
	}
}

/* "line 7", "row 3" or "" for a document's record in an input of format fmt. */
static const char *record_name(const char *fmt, uint64_t record, char *buf, size_t len)
{
	const char *key = docindex_record_key(fmt);

	if (key)
		snprintf(buf, len, "%s %" PRIu64, key, record);
	else
		buf[0] = 0;
	return buf;
}

/* Document d (entry e, of input s) as it overlaps the window of stream tokens
 * [first, last]: appended to docs (JSON), or printed as a line when docs is NULL. */
static void sample_document(json_t *docs, uint64_t d, const struct docindex_entry *e,
			    const struct catalog_source *s, uint64_t first, uint64_t last)
{
	uint64_t a = e->first_token > first ? e->first_token - first : 0;
	uint64_t b = e->first_token + e->tokens - 1 < last ? e->first_token + e->tokens - 1 - first :
		last - first;
	char rec[64];

	record_name(s->format, e->record, rec, sizeof(rec));
	if (docs) {
		json_t *o = json_pack("{s:I, s:I, s:s, s:s, s:I, s:I, s:I, s:I, s:I}",
			"document", (json_int_t)d, "source", (json_int_t)e->source,
			"path", s->path, "format", s->format, "record", (json_int_t)e->record,
			"first_token", (json_int_t)e->first_token, "tokens", (json_int_t)e->tokens,
			"window_offset", (json_int_t)a, "window_tokens", (json_int_t)(b - a + 1));
		const char *key = docindex_record_key(s->format);

		/* the record named for what it counts ("record" stays, for older readers) */
		if (o && key)
			json_object_set_new(o, key, json_integer((json_int_t)e->record));
		json_array_append_new(docs, o);
	} else
		printf("  window tokens %" PRIu64 "-%" PRIu64 ": document %" PRIu64 " (tokens "
		       "%" PRIu64 "-%" PRIu64 " of its %" PRIu64 "), %s%s%s\n", a, b, d,
		       first + a - e->first_token, first + b - e->first_token, e->tokens, s->path,
		       rec[0] ? " " : "", rec);
}

/* Print o as indented JSON; 0, or 1 (ENOMEM). */
static int put_json(json_t *o)
{
	char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;

	if (text)
		puts(text);
	free(text);
	return text ? 0 : 1;
}

/* `zephon info DATASET --sample ID` of a dataset of rows: the documents row ID holds,
 * where, and which of their labels it trains (its stored mask). */
static int print_row(const struct dataset *ds, uint64_t id, int json)
{
	struct rows_lineage *rl;
	char err[512], rec[64];
	json_t *o, *d;
	size_t k;
	int rc = rows_lineage_open(ds, &rl, err, sizeof(err));

	if (rc) {
		die_msg("info: %s", rc == -ENOENT ? "not a dataset of rows" : err);
		return 1;
	}
	o = rows_json_row(rl, id, err, sizeof(err));
	rows_lineage_close(rl);
	if (!o) {
		die_msg("info: sample %" PRIu64 ": %s", id, err);
		return 1;
	}
	if (json) {
		rc = put_json(o);
		json_decref(o);
		return rc;
	}
	printf("sample %" PRIu64 ": a row of %" PRIu64 " positions, %zu documents, %" PRIu64
	       " padding\n", id, dataset_info(ds)->row_len,
	       json_array_size(json_object_get(o, "documents")),
	       (uint64_t)json_integer_value(json_object_get(o, "padding")));
	json_array_foreach(json_object_get(o, "documents"), k, d) {
		json_int_t pos = json_integer_value(json_object_get(d, "position"));
		json_int_t len = json_integer_value(json_object_get(d, "length"));
		json_t *sp, *span;
		size_t j;

		record_name(json_string_value(json_object_get(d, "format")),
			    (uint64_t)json_integer_value(json_object_get(d, "record")), rec,
			    sizeof(rec));
		printf("  positions %lld-%lld: document %lld (%lld tokens), %s%s%s; labels trained "
		       "%lld", (long long)pos, (long long)(pos + len - 1),
		       (long long)json_integer_value(json_object_get(d, "document")),
		       (long long)json_integer_value(json_object_get(d, "tokens")),
		       json_string_value(json_object_get(d, "path")), rec[0] ? " " : "", rec,
		       (long long)json_integer_value(json_object_get(d, "labels")));
		sp = json_object_get(d, "trained");
		json_array_foreach(sp, j, span)
			printf("%s%lld-%lld", j ? ", " : ": positions ",
			       (long long)json_integer_value(json_array_get(span, 0)),
			       (long long)json_integer_value(json_array_get(span, 1)) - 1);
		putchar('\n');
	}
	json_decref(o);
	return 0;
}

/* `zephon info DATASET --sample ID`: the documents window ID holds (lineage). */
static int print_sample(const struct dataset *ds, uint64_t id, int json)
{
	const struct dataset_info *in = dataset_info(ds);
	const struct catalog *c = dataset_catalog(ds);
	struct docindex *di;
	struct docindex_entry e;
	char err[512];
	uint64_t first, last, d, d1;
	json_t *docs, *o;
	int rc;

	if (in->kind != DATASET_TOKENS) {
		die_msg("info: --sample names the documents of a token window; %s holds records",
			dataset_dir(ds));
		return 2;
	}
	if (id >= in->samples) {
		die_msg("info: --sample %" PRIu64 ": %s has samples 0-%" PRIu64, id,
			dataset_dir(ds), in->samples - 1);
		return 2;
	}
	if (in->row_len)
		return print_row(ds, id, json);
	rc = docindex_open(dataset_dir(ds), &di, err, sizeof(err));
	if (rc == -ENOENT) {
		die_msg("info: %s has no document index (it was not packed with --tokenizer)",
			dataset_dir(ds));
		return 1;
	}
	if (rc) {
		die_msg("info: %s", err);
		return 1;
	}
	first = docindex_window_first(id, in->seq_len, in->overlap);
	last = first + in->seq_len - 1;
	docs = json_array();
	if (!json)
		printf("sample %" PRIu64 ": tokens %" PRIu64 "-%" PRIu64 " of the token stream\n",
		       id, first, last);
	docindex_range(di, first, in->seq_len, &d, &d1);
	for (; d < d1; d++) {
		docindex_get(di, d, &e);
		if (e.source >= c->nsources) {
			die_msg("info: %s: document %" PRIu64 " names source %" PRIu32 " of %zu",
				DOCINDEX_FILE, d, e.source, c->nsources);
			docindex_close(di);
			json_decref(docs);
			return 1;
		}
		sample_document(json ? docs : NULL, d, &e, &c->sources[e.source], first, last);
	}
	docindex_close(di);
	if (!json) {
		json_decref(docs);
		return 0;
	}
	o = json_pack("{s:I, s:I, s:I, s:o}", "sample", (json_int_t)id, "first_token",
		      (json_int_t)first, "tokens", (json_int_t)in->seq_len, "documents", docs);
	rc = o ? 0 : 1;
	if (o) {
		char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

		if (text)
			puts(text);
		rc = text ? 0 : 1;
		free(text);
		json_decref(o);
	}
	return rc;
}

int cmd_info(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "sample", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct dataset *ds;
	char err[1024];
	int json = 0, opt, rc, have_sample = 0;
	uint64_t sample = 0;

	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "jh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'j':
			json = 1;
			break;
		case 's': {
			char *end;

			errno = 0;
			sample = strtoull(optarg, &end, 10);
			if (optarg[0] < '0' || optarg[0] > '9' || *end || errno) {
				die_msg("info: --sample '%s' is not a sample id", optarg);
				return 2;
			}
			have_sample = 1;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			die_msg("info: unknown option '%s'; see zephon info --help", argv[optind - 1]);
			return 2;
		}
	}
	if (argc - optind != 1) {
		die_msg("info: give exactly one DATASET; usage: zephon info DATASET [--json] [--sample ID]");
		return 2;
	}
	if (mixspec_is_spec(argv[optind])) {
		die_msg("info: %s is a mixture spec, not a dataset directory: run zephon info on "
			"each dataset it names (a mount's /status lists them under mixture.sources)",
			argv[optind]);
		return 2;
	}
	rc = dataset_open(argv[optind], &ds, err, sizeof(err));
	if (rc) {
		die_msg("info: %s", err);
		return 1;
	}
	if (have_sample)
		rc = print_sample(ds, sample, json);
	else if (json)
		rc = print_json(ds);
	else
		print_table(ds);
	dataset_close(ds);
	return rc;
}
