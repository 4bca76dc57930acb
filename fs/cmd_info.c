/* cmd_info.c: `zephon info DATASET [--json]`: what a dataset holds. */
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

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zephon info DATASET [--json]\n"
		"\n"
		"Describe a packed dataset: kind, sample count, raw and stored bytes, compression,\n"
		"shards, dtype and seq_len (tokens), inputs and the fingerprint. --json prints one\n"
		"JSON object (keys kind, samples, fingerprint, raw_bytes, stored_bytes, shards,\n"
		"dtype, seq_len, sources, ...).\n");
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
		printf("seq_len       %" PRIu64 " tokens (%" PRIu64 " bytes per sample)\n",
		       in->seq_len, in->seq_len * in->itemsize);
		if (in->overlap)
			printf("overlap       1 token: windows of --seq-len %" PRIu64 " + 1, the last "
			       "token of each the first of the next\n", in->seq_len - 1);
		if (in->have_eod_token)
			printf("eod_token     %" PRIu32 ", after every document\n", in->eod_token);
		else
			printf("eod_token     none (no end-of-document token appended)\n");
		printf("remainder     %" PRIu64 " tokens dropped at the end\n",
		       meta_u64(c, "remainder_tokens"));
	}
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

int cmd_info(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct dataset *ds;
	char err[1024];
	int json = 0, opt, rc;

	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "jh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'j':
			json = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			die_msg("info: unknown option '%s'; see zephon info --help", argv[optind - 1]);
			return 2;
		}
	}
	if (argc - optind != 1) {
		die_msg("info: give exactly one DATASET; usage: zephon info DATASET [--json]");
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
	if (json)
		rc = print_json(ds);
	else
		print_table(ds);
	dataset_close(ds);
	return rc;
}
