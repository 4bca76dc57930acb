/*
 * config_json.c: a mount's resolved configuration as JSON (config_json.h).
 */
#include "config_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "layout_json.h"
#include "rows_json.h"
#include "serve.h"

/* The shard files where a loader that reads ids/<G> gathers the samples itself
 * (server_ids_possible: uncompressed token shards, samples back to back): per shard, in
 * id order, its absolute "path", its "first" sample id and its "samples"; sample id lies
 * at byte (id - first) * sample_bytes of its file. null where ids/ is not served. */
static json_t *flat_shards(const struct dataset *ds, enum encode_format format)
{
	size_t n = dataset_info(ds)->shards;
	json_t *list;

	if (!server_ids_possible(format, dataset_flat(ds)))
		return json_null();
	list = json_array();
	for (size_t i = 0; list && i < n; i++) {
		const char *dir, *file;
		uint64_t first, count, dev, ino;
		char *path, *abs;
		json_t *o;

		if (dataset_flat_shard(ds, i, &dir, &file, &first, &count) ||
		    dataset_shard_file_id(ds, i, &dev, &ino) ||
		    asprintf(&path, "%s/%s", dir, file) < 0) {
			json_decref(list);
			return json_null();
		}
		abs = realpath(path, NULL); /* the daemon's directory is not the reader's */
		/* dev and ino: the file the daemon has open, which a reader compares with the
		 * path's before it maps it (a pack --force in place replaces the path) */
		o = json_pack("{s:s, s:o, s:o, s:o, s:o}", "path", abs ? abs : path,
			      "first", json_u64(first), "samples", json_u64(count),
			      "dev", json_u64(dev), "ino", json_u64(ino));
		free(abs);
		free(path);
		if (!o || json_array_append_new(list, o)) {
			json_decref(list);
			return json_null();
		}
	}
	return list ? list : json_null();
}

uint64_t config_sample_tokens(const struct dataset_info *info)
{
	if (info->row_len)
		return info->row_len;
	return info->kind == DATASET_TOKENS ? info->seq_len - info->overlap : 0;
}

/* A token dataset's fields: what a loader needs to decode batches without the dataset's
 * catalog. */
static void token_fields(const struct dataset *ds, json_t *root)
{
	const struct dataset_info *in = dataset_info(ds);

	json_object_set_new(root, "dtype", json_string(dtype_name(in->dtype)));
	json_object_set_new(root, "npy_descr", json_string(dtype_npy_descr(in->dtype)));
	json_object_set_new(root, "dtype_bytes", json_u64(dtype_size(in->dtype)));
	json_object_set_new(root, "seq_len", json_u64(in->seq_len));
	json_object_set_new(root, "window", json_u64(in->seq_len));
	json_object_set_new(root, "sample_tokens", json_u64(config_sample_tokens(in)));
	json_object_set_new(root, "overlap", json_u64(in->overlap));
	json_object_set_new(root, "eod_token", in->have_eod_token ?
			    json_u64(in->eod_token) : json_null());
	/* loaders refuse a dataset whose ids a model's embedding cannot hold */
	json_object_set_new(root, "max_token_id", in->have_max_token_id ?
			    json_u64(in->max_token_id) : json_null());
	/* layout, and a dataset of rows' row_len, max_context_length, padding, chat */
	rows_json_meta(root, ds);
}

/* The layout as a loader of the pure files needs it, each value from the core function
 * that owns its rule, so that loaders compute none of it: the served ranks as a list,
 * one rank's share of a step in samples (layout_share) and micro-batches
 * (layout_micros), and the bytes of one share of at/<G> and of each share of from/<G>
 * (npy and bin, encode_format_fixed; null for formats whose shares differ in size). */
static void loader_fields(const struct mount_view *v, json_t *root)
{
	const struct mount_config *c = v->cfg;
	json_t *list = json_array();
	uint64_t len;

	for (size_t i = 0; list && i < c->ranks.count; i++)
		json_array_append_new(list, json_u64(c->ranks.ranks[i]));
	json_object_set_new(root, "rank_list", list);
	json_object_set_new(root, "share_samples", json_u64(layout_share(v->layout)));
	json_object_set_new(root, "micro_batches", json_u64(layout_micros(v->layout)));
	json_object_set_new(root, "share_bytes", encode_format_fixed(c->format) &&
			    !encode_batch_len(NULL, dataset_info(v->served->ds), c->format, NULL,
					      layout_share(v->layout), &len) ?
			    json_u64(len) : json_null());
	json_object_set_new(root, "shards", flat_shards(v->served->ds, c->format));
}

/* start_step and start_samples: the layout's once started; before, those the resume
 * rule fixes (the journal's history decides the others). */
static void start_fields(const struct mount_view *v, json_t *root)
{
	const struct journal_resume *r = &v->cfg->resume;
	json_t *step = json_null(), *samples = json_null();

	if (v->started) {
		step = json_u64(layout_start_step(v->layout));
		samples = json_u64(layout_start_samples(v->layout));
	} else if (r->rule == RESUME_SAMPLES) {
		samples = json_u64(r->value);
		if (r->has_step)
			step = json_u64(r->step);
	} else if (r->rule == RESUME_STEP) {
		step = json_u64(r->value);
	}
	json_object_set_new(root, "start_step", step);
	json_object_set_new(root, "start_samples", samples);
}

/* validation: the split as the mount reads it, its samples and whole steps; null
 * without one. */
static json_t *validation_json(const struct mount_view *v)
{
	const struct served *st = v->served;

	if (!st->holdout_total)
		return json_null();
	return json_pack("{s:s, s:o, s:o}", "split", st->split + strlen("validation="),
			 "samples", json_u64(st->holdout_total),
			 "steps", json_u64(layout_whole_steps(v->layout, st->holdout_total)));
}

json_t *config_json(const struct mount_view *v)
{
	const struct mount_config *c = v->cfg;
	const struct served *st = v->served;
	const struct dataset_info *info = dataset_info(st->ds);
	const struct layout *l = v->layout;
	json_t *root;
	char ranks[256];

	rankset_format(&c->ranks, ranks, sizeof(ranks));
	root = json_pack("{s:s, s:s, s:o, s:s, s:o, s:o, s:o, s:s}",
			 "dataset", v->dataset_path,
			 "fingerprint", info->fingerprint,
			 "samples", json_u64(info->samples),
			 "kind", dataset_kind_name(info->kind),
			 "world_size", json_u64(layout_world_size(l)),
			 "global_batch", json_u64(layout_global_batch(l)),
			 "micro_batch", json_u64(layout_micro_batch(l)),
			 "ranks", ranks);
	if (!root)
		return NULL;
	start_fields(v, root);
	json_object_set_new(root, "seed", json_u64(st->order.seed));
	json_object_set_new(root, "shuffle", json_string(order_shuffle_name(st->order.shuffle)));
	json_object_set_new(root, "epochs", json_u64(c->epochs));
	json_object_set_new(root, "format", json_string(encode_format_name(c->format)));
	json_object_set_new(root, "journal", json_string(c->journal));
	json_object_set_new(root, "validation", validation_json(v));
	/* before the start, a mixture's weights are known only when given: otherwise the
	 * journal's history goes on (served_records_weights) */
	json_object_set_new(root, "mixture", !st->is_mixture ? json_null() :
			    json_pack("{s:o}", "weights", v->started || st->weights_given ?
				      json_string(st->weights_text) : json_null()));
	loader_fields(v, root);
	if (info->kind == DATASET_TOKENS)
		token_fields(st->ds, root);
	return root;
}

int config_check_print(const struct mount_view *v, int json, FILE *f)
{
	const struct served *st = v->served;
	json_t *j;
	char *text;

	if (!json) {
		if (st->is_mixture && v->cfg->weights)
			fprintf(f, "weights=%s\n", st->weights_text);
		if (st->split[0])
			fprintf(f, "validation=%s\n", st->split + strlen("validation="));
		return 0;
	}
	j = config_json(v);
	text = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
	json_decref(j);
	if (!text) {
		die_msg("out of memory");
		return 1;
	}
	fprintf(f, "%s\n", text);
	free(text);
	return 0;
}
