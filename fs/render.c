/*
 * render.c: the generated files of the mount: /README (plain text), /status and
 * /rank/<r>/state (JSON through jansson; its keys are stable, docs/mounting.md),
 * /metrics (Prometheus text exposition format 0.0.4).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "clock.h"
#include "docindex.h"
#include "layout_json.h"
#include "rows_json.h"
#include "zmount.h"
#include "zephon_config.h"

int render_readme(struct zmount *z, struct buf *out)
{
	const struct server_config *c = server_get_config(z->srv);
	char ranks[256];

	rankset_format(&z->cfg->ranks, ranks, sizeof(ranks));
	return buf_printf(out,
		"Zephon %s: elastically deterministic training data, served as files.\n"
		"\n"
		"dataset      %s\n"
		"samples      %" PRIu64 " (%s, fingerprint %s)\n"
		"layout       world_size=%" PRIu64 " global_batch=%" PRIu64 " micro_batch=%" PRIu64
		" ranks=%s\n"
		"start        step %" PRIu64 " at gsn %" PRIu64 " (resume: %s)\n"
		"order        seed=%" PRIu64 " shuffle=%s epochs=%" PRIu64 "%s, format=%s\n"
		"journal      %s\n"
		"\n"
		"/rank/<r>/next      every open() claims rank r's next micro-batch (%" PRIu64
		" samples); read it whole\n"
		"/rank/<r>/peek      what the next open of next would get; claims nothing\n"
		"/rank/<r>/state     JSON: the rank's cursor and its last claim\n"
		"/rank/<r>/step/<t>  the whole share of rank r at step t; claims nothing\n"
		"/rank/<r>/at/<G>    rank r's share of the B samples from gsn G; claims nothing\n"
		"/rank/<r>/from/<G>  at/<G>, at/<G+B>, ... back to back (npy, bin); claims nothing\n"
		"/rank/<r>/ids/<G>   the sample ids of from/<G>'s shares, uint64 (uncompressed\n"
		"                    token shards: /status shards); claims nothing\n"
		"/rank/<r>/validation/<t>  rank r's share of validation step t (validation=F)\n"
		"/samples/<id>       one sample in the batch encoding; claims nothing\n"
		"/status             JSON: layout history, consumed_samples, cursors, counters,\n"
		"                    progress (what each rank read; zephon top MOUNTPOINT shows it)\n"
		"/metrics            Prometheus text format\n"
		"/control            write \"checkpoint STEP\" (model state holds every step below\n"
		"                    STEP) or \"rewind STEP\" (move every rank back to STEP)\n"
		"\n"
		"Step t covers global sequence numbers [G0 + (t-S0)*B, G0 + (t-S0+1)*B); rank r\n"
		"owns the slice [r*B/W, (r+1)*B/W) of it, served in micro-batches of m. The\n"
		"samples of a step are the same for every world size: concatenate the ranks'\n"
		"batches of a step in rank order to check. Only samples/ and this file can be\n"
		"mmap'ed; next, peek, step/ and the status files are served with direct I/O:\n"
		"read them. A failed mmap of next still claimed its batch (numpy's\n"
		"np.load(mmap_mode='r') opens it three times). Unmount with fusermount3 -u.\n",
		ZEPHON_VERSION, z->dataset_path, z->info->samples, dataset_kind_name(z->info->kind),
		z->info->fingerprint, c->layout.world_size, c->layout.global_batch,
		c->layout.micro_batch, ranks, c->layout.start_step, c->layout.start_samples,
		z->resume_applied, c->order.seed, order_shuffle_name(c->order.shuffle), z->cfg->epochs,
		z->cfg->epochs ? "" : " (endless)", encode_format_name(c->format), z->cfg->journal,
		c->layout.micro_batch);
}

static int dump_json(json_t *root, struct buf *out)
{
	char *text;
	int rc;

	if (!root)
		return -ENOMEM;
	text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (!text)
		return -ENOMEM;
	rc = buf_printf(out, "%s\n", text);
	free(text);
	return rc;
}

/* A layout of the journal as /status lists it (layout_json.h), with its weights when
 * it has them. */
static json_t *layout_json(const struct journal_layout *jl)
{
	json_t *j = json_object();

	if (j && layout_json_add(j, jl, 0)) {
		json_decref(j);
		return NULL;
	}
	if (j && jl->weights[0])
		json_object_set_new(j, "weights", json_string(jl->weights));
	return j;
}

/* Per source of a mixture: samples consumed (of every gsn below `consumed`) and epoch. */
/* Each source of a mixture: its samples below consumed (used[s]) and its epoch there. */
static void source_progress(const struct served *sv, uint64_t consumed, uint64_t *used,
			    uint64_t *epoch)
{
	for (size_t s = 0; s < sv->k; s++) {
		used[s] = mixture_count(sv->mix, s, consumed);
		epoch[s] = used[s] / mixture_source_order(sv->mix, s)->n;
	}
}

static json_t *mixture_json(struct zmount *z, const uint64_t *used, const uint64_t *epoch)
{
	const struct served *st = z->served;
	const struct mixture *mx = st->mix;
	json_t *sources = json_array(), *segments = json_array();

	for (size_t s = 0; s < st->k; s++) {
		const struct dataset_info *si = dataset_source_info(st->ds, s);

		json_array_append_new(sources, json_pack(
			"{s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:s}",
			"name", served_source_name(st, s),
			"dataset", dataset_source_dir(st->ds, s),
			"samples", json_u64(si->samples),
			"weight", json_u64(st->weights[s]),
			"consumed_samples", json_u64(used[s]),
			"epoch", json_u64(epoch[s]),
			"epoch_samples", json_u64(mixture_source_order(mx, s)->n),
			"validation_samples", json_u64(st->holdout[s]),
			"fingerprint", si->fingerprint));
	}
	for (size_t i = 0; i < mixture_segments(mx); i++) {
		const uint64_t *a = mixture_segment_weights(mx, i);
		json_t *w = json_array();

		for (size_t s = 0; s < st->k; s++)
			json_array_append_new(w, json_u64(a[s]));
		json_array_append_new(segments, json_pack("{s:o, s:o}", "start_samples",
							  json_u64(mixture_segment_start(mx, i)),
							  "weights", w));
	}
	return json_pack("{s:s, s:o, s:o}", "weights", st->weights_text, "sources", sources,
			 "segments", segments);
}

/* Tokens a sample trains: the pack's --seq-len (a window's overlap token is the next
 * window's first; a row's positions, of its three planes); 0 for a dataset of another
 * kind. */
static uint64_t sample_tokens(const struct zmount *z)
{
	if (z->info->row_len)
		return z->info->row_len;
	return z->info->kind == DATASET_TOKENS ? z->info->seq_len - z->info->overlap : 0;
}

/* The job's consumed_samples and what it counts: the claims' (server_consumed()) for a
 * job that claimed from next, or for one that read nothing yet; otherwise that of the
 * readers of the pure files (progress_total(): the least rank position). */
struct job_progress {
	uint64_t consumed;
	const char *basis;      /* "claims" or "reads" */
	int any_read;
	double samples_per_s, last_read_s, now;
};

static void job_progress(struct zmount *z, const struct server_stats *st, struct job_progress *jp)
{
	uint64_t reads;

	jp->now = clock_mono_s();
	jp->any_read = progress_total(z->progress, server_get_config(z->srv)->layout.start_samples,
				      jp->now, &reads, &jp->samples_per_s, &jp->last_read_s);
	if (st->claims || !jp->any_read) {
		jp->consumed = server_consumed(z->srv);
		jp->basis = "claims";
	} else {
		jp->consumed = reads;
		jp->basis = "reads";
	}
}

/* /status' progress: the job's rates and each served rank's reads (core/serve/progress.h). */
static json_t *progress_json(struct zmount *z, const struct job_progress *jp)
{
	const struct layout *l = &server_get_config(z->srv)->layout;
	uint64_t tokens = sample_tokens(z);
	json_t *ranks = json_object();

	for (size_t i = 0; i < z->cfg->ranks.count; i++) {
		uint64_t r = z->cfg->ranks.ranks[i], step;
		struct progress_rank_info in;
		char key[24];

		if (progress_rank(z->progress, r, jp->now, &in))
			continue;
		snprintf(key, sizeof(key), "%" PRIu64, r);
		json_object_set_new(ranks, key, json_pack(
			"{s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
			"step", in.have_position && !progress_step_number(l, in.step_gsn, &step) ?
				json_u64(step) : json_null(),
			"gsn", in.have_position ? json_u64(in.step_gsn) : json_null(),
			"consumed_samples", in.have_position ? json_u64(in.position) : json_null(),
			"samples", json_u64(in.samples),
			"samples_per_s", json_real(in.samples_per_s),
			"tokens_per_s", tokens ? json_real(in.samples_per_s * (double)tokens)
					       : json_null(),
			"seconds_since_read", in.last_read_s > 0 ?
				json_real(jp->now - in.last_read_s) : json_null()));
	}
	return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o}",
			 "consumed_samples_from", jp->basis,
			 "epoch_samples", json_u64(z->served->order.n),
			 "samples_per_s", json_real(jp->samples_per_s),
			 "tokens_per_s", tokens ? json_real(jp->samples_per_s * (double)tokens)
						: json_null(),
			 "seconds_since_read", jp->any_read ? json_real(jp->now - jp->last_read_s)
							    : json_null(),
			 "ranks", ranks);
}

/* The shard files where a loader that reads ids/<G> gathers the samples itself
 * (server_ids_served: uncompressed token shards, samples back to back): per shard, in id
 * order, its absolute "path", its "first" sample id and its "samples"; sample id lies at
 * byte (id - first) * sample_bytes of its file. null where ids/ is not served. */
static json_t *flat_shards(struct zmount *z)
{
	size_t n = dataset_info(z->ds)->shards;
	json_t *list;

	if (!z->cfg->ranks.count || !z->ids_served)
		return json_null();
	list = json_array();
	for (size_t i = 0; list && i < n; i++) {
		const char *dir, *file;
		uint64_t first, count, dev, ino;
		char *path, *abs;
		json_t *o;

		if (dataset_flat_shard(z->ds, i, &dir, &file, &first, &count) ||
		    dataset_shard_file_id(z->ds, i, &dev, &ino) ||
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

/* The layout as a loader of the pure files needs it, each value from the core function
 * that owns its rule, so that loaders compute none of it: the served ranks as a list,
 * one rank's share of a step in samples (layout_share) and micro-batches
 * (layout_micros), and the bytes of one share of at/<G> and of each share of from/<G>
 * (server_share_len of SHARE_AT: npy and bin; null for formats whose shares differ in
 * size, server_shares_fixed). */
static void loader_fields(struct zmount *z, json_t *root)
{
	const struct layout *l = &server_get_config(z->srv)->layout;
	struct share at = { SHARE_AT, z->cfg->ranks.count ? z->cfg->ranks.ranks[0] : 0,
			    l->start_samples };
	json_t *list = json_array();
	uint64_t len;

	for (size_t i = 0; list && i < z->cfg->ranks.count; i++)
		json_array_append_new(list, json_u64(z->cfg->ranks.ranks[i]));
	json_object_set_new(root, "rank_list", list);
	json_object_set_new(root, "share_samples", json_u64(layout_share(l)));
	json_object_set_new(root, "micro_batches", json_u64(layout_micros(l)));
	json_object_set_new(root, "share_bytes", z->cfg->ranks.count &&
			    server_shares_fixed(z->srv) && !server_share_len(z->srv, &at, &len) ?
			    json_u64(len) : json_null());
	json_object_set_new(root, "shards", flat_shards(z));
}

/* /status's cursors: for each served rank, {"step", "micro"} of its next claim. */
static json_t *cursors_json(struct zmount *z)
{
	json_t *cursors = json_object();

	for (size_t i = 0; i < z->cfg->ranks.count; i++) {
		uint64_t r = z->cfg->ranks.ranks[i], step, micro;
		struct claim_info last;
		char key[24];

		if (server_rank_state(z->srv, r, &step, &micro, &last))
			continue;
		free(last.ids);
		snprintf(key, sizeof(key), "%" PRIu64, r);
		json_object_set_new(cursors, key, json_pack("{s:o, s:o}", "step", json_u64(step),
							    "micro", json_u64(micro)));
	}
	return cursors;
}

/* /status's counters; the overlapping opens of each rank into overlaps (one lock for both,
 * so that overlapping_opens is their sum). */
static json_t *counters_json(struct zmount *z, const struct server_stats *st,
			     json_t *overlaps)
{
	json_t *counters;

	pthread_mutex_lock(&z->lock);
	for (size_t i = 0; i < z->noverlaps; i++) {
		char key[24];

		snprintf(key, sizeof(key), "%" PRIu64, z->overlaps[i].rank);
		json_object_set_new(overlaps, key, json_u64(z->overlaps[i].opens));
	}
	counters = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
			     "claims", json_u64(st->claims),
			     "claim_errors", json_u64(st->claim_errors),
			     "decode_errors", json_u64(st->decode_errors),
			     "journal_errors", json_u64(st->journal_errors),
			     "end_of_stream", json_u64(st->end_of_stream),
			     "prefetch_hits", json_u64(st->prefetch_hits),
			     "prefetch_misses", json_u64(st->prefetch_misses),
			     "prefetch_decoded", json_u64(st->prefetch_decoded),
			     "bytes_read", json_u64(z->bytes_read),
			     "control_errors", json_u64(z->control_errors),
			     "overlapping_opens", json_u64(z->overlaps_total));
	pthread_mutex_unlock(&z->lock);
	return counters;
}

/* /status's last_error: {"time", "message"} of the last error logged, or null. */
static json_t *last_error_json(void)
{
	char msg[1024];
	time_t t = zmount_last_error(msg, sizeof(msg));

	return t ? json_pack("{s:I, s:s}", "time", (json_int_t)t, "message", msg) : json_null();
}

/* What a dataset in object storage fetched and its node cache holds (null for a local
 * one): dataset_fetch_stats, whose errors name objects, never secrets. */
static json_t *fetch_json(struct zmount *z)
{
	struct dataset_fetch_stats f;

	if (dataset_fetch_stats(z->ds, &f))
		return json_null();
	return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
			 "s:o, s:o, s:b, s:s, s:s}",
			 "requests", json_u64(f.requests), "bytes", json_u64(f.bytes),
			 "retries", json_u64(f.retries), "errors", json_u64(f.errors),
			 "in_flight", json_u64(f.in_flight),
			 "samples_fetched", json_u64(f.samples_fetched),
			 "sample_bytes", json_u64(f.sample_bytes),
			 "fill_bytes", json_u64(f.fill_bytes),
			 "cache_hits", json_u64(f.cache_hits),
			 "cache_written", json_u64(f.cache_written),
			 "cache_not_kept", json_u64(f.cache_not_kept),
			 "cache_evicted", json_u64(f.cache_evicted),
			 "cache_bad", json_u64(f.cache_bad),
			 "cache_used", json_u64(f.cache_used), "cache_cap", json_u64(f.cache_cap),
			 "cache_full", f.cache_full, "cache_dir", f.cache_dir,
			 "last_error", f.last_error);
}

/* /status's fields of a token dataset: what a loader needs to decode batches without the
 * dataset's catalog. */
static void token_fields(struct zmount *z, json_t *root)
{
	json_object_set_new(root, "dtype", json_string(dtype_name(z->info->dtype)));
	json_object_set_new(root, "npy_descr", json_string(dtype_npy_descr(z->info->dtype)));
	json_object_set_new(root, "dtype_bytes", json_u64(dtype_size(z->info->dtype)));
	json_object_set_new(root, "seq_len", json_u64(z->info->seq_len));
	json_object_set_new(root, "window", json_u64(z->info->seq_len));
	json_object_set_new(root, "sample_tokens", json_u64(sample_tokens(z)));
	json_object_set_new(root, "overlap", json_u64(z->info->overlap));
	json_object_set_new(root, "eod_token", z->info->have_eod_token ?
			    json_u64(z->info->eod_token) : json_null());
	/* loaders refuse a dataset whose ids a model's embedding cannot hold */
	json_object_set_new(root, "max_token_id", z->info->have_max_token_id ?
			    json_u64(z->info->max_token_id) : json_null());
	/* layout, and a dataset of rows' row_len, max_context_length, padding, chat */
	rows_json_meta(root, z->ds);
}

int render_status(struct zmount *z, struct buf *out)
{
	const struct server_config *c = server_get_config(z->srv);
	json_t *root, *layouts, *cursors, *counters, *last_error, *overlaps = json_object();
	struct server_stats st;
	struct job_progress jp;
	uint64_t consumed, used[MIX_MAX_SOURCES], epoch[MIX_MAX_SOURCES];
	char ranks[256];

	server_get_stats(z->srv, &st);
	job_progress(z, &st, &jp);
	consumed = jp.consumed;
	if (z->served->is_mixture)
		source_progress(z->served, consumed, used, epoch);
	rankset_format(&z->cfg->ranks, ranks, sizeof(ranks));
	layouts = json_array();
	for (size_t i = 0; i < z->nlayouts; i++)
		json_array_append_new(layouts, layout_json(&z->layouts[i]));
	cursors = cursors_json(z);
	counters = counters_json(z, &st, overlaps);
	last_error = last_error_json();
	root = json_pack("{s:s, s:s, s:o, s:s, s:o, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:s, "
			 "s:o, s:s, s:o, s:s, s:s, s:f, s:o, s:o, s:o, s:o, s:o}",
			 "dataset", z->dataset_path,
			 "fingerprint", z->info->fingerprint,
			 "samples", json_u64(z->info->samples),
			 "kind", dataset_kind_name(z->info->kind),
			 "world_size", json_u64(c->layout.world_size),
			 "global_batch", json_u64(c->layout.global_batch),
			 "micro_batch", json_u64(c->layout.micro_batch),
			 "ranks", ranks,
			 "start_step", json_u64(c->layout.start_step),
			 "start_samples", json_u64(c->layout.start_samples),
			 "consumed_samples", json_u64(consumed),
			 /* the epoch of a batch at consumed (a mixture's: mixture_epoch's, as
			  * in /rank/<r>/state) */
			 "epoch", json_u64(order_epoch(&c->order, consumed)),
			 "resume", z->resume_applied,
			 "seed", json_u64(c->order.seed),
			 "shuffle", order_shuffle_name(c->order.shuffle),
			 "epochs", json_u64(z->cfg->epochs),
			 "format", encode_format_name(c->format),
			 "journal", z->cfg->journal,
			 "journal_wait_s", server_journal_wait(z->srv),
			 "layouts", layouts,
			 "cursors", cursors,
			 "counters", counters,
			 "overlapping_opens", overlaps,
			 "last_error", last_error);
	if (root) {
		json_object_set_new(root, "progress", progress_json(z, &jp));
		json_object_set_new(root, "mixture", z->served->is_mixture ?
				    mixture_json(z, used, epoch) : json_null());
		json_object_set_new(root, "validation", c->validation.n ? json_pack(
			"{s:s, s:o, s:o}", "split", z->served->split + strlen("validation="),
			"samples", json_u64(c->validation.n),
			"steps", json_u64(server_validation_steps(z->srv))) : json_null());
	}
	if (root)
		json_object_set_new(root, "fetch", fetch_json(z));
	if (root)
		loader_fields(z, root);
	if (root && z->info->kind == DATASET_TOKENS)
		token_fields(z, root);
	return dump_json(root, out);
}

/* dataset_fetch_stats as counters and gauges (nothing for a local dataset). */
static int fetch_metrics(struct zmount *z, struct buf *out)
{
	struct dataset_fetch_stats f;
	int rc = 0;

	if (dataset_fetch_stats(z->ds, &f))
		return 0;
#define FETCH(name, type, help, value) \
	if (!rc) rc = buf_printf(out, "# HELP zephon_" name " " help "\n# TYPE zephon_" name " " type \
				 "\nzephon_" name " %" PRIu64 "\n", (uint64_t)(value))
	FETCH("fetch_requests_total", "counter", "HTTP requests sent to object storage, retries "
	      "included.", f.requests);
	FETCH("fetch_bytes_total", "counter", "Response bytes received from object storage.",
	      f.bytes);
	FETCH("fetch_retries_total", "counter", "Requests sent again after a transient failure.",
	      f.retries);
	FETCH("fetch_errors_total", "counter", "Requests that failed for good.", f.errors);
	FETCH("fetch_samples_total", "counter", "Samples whose bytes came over the network.",
	      f.samples_fetched);
	FETCH("fetch_sample_bytes_total", "counter", "Stored bytes of those samples (what the "
	      "order needed).", f.sample_bytes);
	FETCH("cache_hits_total", "counter", "Samples read from the node cache.", f.cache_hits);
	FETCH("cache_written_bytes_total", "counter", "Bytes written into the node cache.",
	      f.cache_written);
	FETCH("cache_not_kept_bytes_total", "counter", "Fetched bytes the node cache could not "
	      "keep (its cap, a full disk).", f.cache_not_kept);
	FETCH("cache_bad_total", "counter", "Cached samples that failed their check (fetched "
	      "again).", f.cache_bad);
	FETCH("cache_used_bytes", "gauge", "Bytes the node cache holds (every process).",
	      f.cache_used);
#undef FETCH
	return rc;
}

/* A mixture's claim into jlast: for each sample its source's name, sample id within the
 * source and that source's epoch. */
static void add_sources(json_t *jlast, struct zmount *z, const struct claim_info *last)
{
	json_t *names = json_array(), *local = json_array(), *epochs = json_array();

	for (uint64_t i = 0; i < last->count && last->ids; i++) {
		uint64_t id, k, g = last->gsn + i;
		size_t s = mixture_locate(z->served->mix, g, &k);

		served_source_of(z->served, last->ids[i], &id);
		json_array_append_new(names, json_string(served_source_name(z->served, s)));
		json_array_append_new(local, json_u64(id));
		json_array_append_new(epochs, json_u64(k / mixture_source_order(z->served->mix,
										  s)->n));
	}
	json_object_set_new(jlast, "source", names);
	json_object_set_new(jlast, "source_samples", local);
	json_object_set_new(jlast, "source_epochs", epochs);
}

/* A dataset of rows: for each sample of the claim, its documents, where they lie in the
 * row and which of their labels it trains (rows_json_row; its stored mask). A row that
 * cannot be read gives {"error": reason}. */
static void add_rows(json_t *jlast, struct zmount *z, const struct claim_info *last)
{
	struct rows_lineage *rl;
	json_t *all;
	char err[256];

	if (rows_lineage_open(z->ds, &rl, err, sizeof(err)))
		return;
	all = json_array();
	for (uint64_t i = 0; i < last->count && last->ids; i++) {
		json_t *row = rows_json_row(rl, last->ids[i], err, sizeof(err));

		json_array_append_new(all, row ? json_incref(json_object_get(row, "documents")) :
				      json_pack("{s:s}", "error", err));
		json_decref(row);
	}
	rows_lineage_close(rl);
	json_object_set_new(jlast, "documents", all);
}

/* A dataset packed with --tokenizer: for each sample of the claim, the documents its
 * window holds, as [{"path", "record", "line" or "row"}, ...] (lineage; docindex.h:
 * docindex_record_key names what record counts; "record" stays for older readers).
 * Nothing for other datasets, mixtures, or an index that does not open. */
static void add_documents(json_t *jlast, struct zmount *z, const struct claim_info *last)
{
	const struct catalog *c = dataset_catalog(z->ds);
	const struct dataset_info *in = z->info;
	struct docindex *di;
	struct docindex_entry e;
	json_t *all;
	char err[256];

	if (in->row_len && !z->served->is_mixture) {
		add_rows(jlast, z, last);
		return;
	}
	if (z->served->is_mixture || in->kind != DATASET_TOKENS || !in->tokenizer_sha256[0] ||
	    docindex_open(dataset_dir(z->ds), &di, err, sizeof(err)))
		return;
	all = json_array();
	for (uint64_t i = 0; i < last->count && last->ids; i++) {
		json_t *docs = json_array();
		uint64_t d, d1;

		docindex_range(di, docindex_window_first(last->ids[i], in->seq_len, in->overlap),
			       in->seq_len, &d, &d1);
		for (; d < d1; d++) {
			docindex_get(di, d, &e);
			if (e.source < c->nsources) {
				const struct catalog_source *src = &c->sources[e.source];
				const char *key = docindex_record_key(src->format);
				json_t *o = json_pack("{s:s, s:o}", "path", src->path, "record",
						      json_u64(e.record));

				if (o && key)
					json_object_set_new(o, key, json_u64(e.record));
				json_array_append_new(docs, o);
			}
		}
		json_array_append_new(all, docs);
	}
	docindex_close(di);
	json_object_set_new(jlast, "documents", all);
}

int render_state(struct zmount *z, uint64_t rank, struct buf *out)
{
	uint64_t step, micro;
	struct claim_info last;
	json_t *root, *jlast = json_null();
	int rc = server_rank_state(z->srv, rank, &step, &micro, &last);

	if (rc)
		return rc;
	if (last.valid) {
		json_t *ids = json_array();

		for (uint64_t i = 0; i < last.count && last.ids; i++)
			json_array_append_new(ids, json_u64(last.ids[i]));
		jlast = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}",
				  "step", json_u64(last.step), "micro", json_u64(last.micro),
				  "gsn", json_u64(last.gsn), "count", json_u64(last.count),
				  "epoch", json_u64(last.epoch), "samples", ids);
		if (jlast && z->served->is_mixture)
			add_sources(jlast, z, &last);
		if (jlast)
			add_documents(jlast, z, &last);
	}
	free(last.ids);
	root = json_pack("{s:o, s:o, s:o, s:o}", "rank", json_u64(rank), "step", json_u64(step),
			 "micro", json_u64(micro), "last", jlast);
	return dump_json(root, out);
}

/* The reads of each rank (core/serve/progress.h) in /metrics. */
static int render_progress_metrics(struct zmount *z, const struct job_progress *jp,
				   struct buf *out)
{
	uint64_t tokens = sample_tokens(z);
	int rc = buf_printf(out, "# HELP zephon_read_samples_per_second Samples read per second "
			    "over the last %d s, every served rank (reads of next, step/, at/, from/ "
			    "to a batch's end).\n# TYPE zephon_read_samples_per_second gauge\n"
			    "zephon_read_samples_per_second %.3f\n", PROGRESS_WINDOW,
			    jp->samples_per_s);

	if (!rc && tokens)
		rc = buf_printf(out, "# HELP zephon_read_tokens_per_second Tokens (seq_len per "
				"sample) read per second over the last %d s.\n"
				"# TYPE zephon_read_tokens_per_second gauge\n"
				"zephon_read_tokens_per_second %.3f\n", PROGRESS_WINDOW,
				jp->samples_per_s * (double)tokens);
	if (!rc && jp->any_read)
		rc = buf_printf(out, "# HELP zephon_seconds_since_read Seconds since any rank last "
				"read a batch to its end.\n# TYPE zephon_seconds_since_read gauge\n"
				"zephon_seconds_since_read %.3f\n", jp->now - jp->last_read_s);
	for (int pass = 0; pass < 3 && !rc; pass++) {
		static const char *const head[] = {
			"# HELP zephon_rank_read_samples_total Samples of the rank read to a batch's "
			"end, re-reads included.\n# TYPE zephon_rank_read_samples_total counter\n",
			"# HELP zephon_rank_consumed_samples Where the rank reads on: the end of the "
			"step whose share it read last.\n# TYPE zephon_rank_consumed_samples gauge\n",
			"# HELP zephon_rank_seconds_since_read Seconds since the rank last read a "
			"batch to its end.\n# TYPE zephon_rank_seconds_since_read gauge\n",
		};

		rc = buf_printf(out, "%s", head[pass]);
		for (size_t i = 0; i < z->cfg->ranks.count && !rc; i++) {
			uint64_t r = z->cfg->ranks.ranks[i];
			struct progress_rank_info in;

			if (progress_rank(z->progress, r, jp->now, &in))
				continue;
			if (pass == 0)
				rc = buf_printf(out, "zephon_rank_read_samples_total{rank=\"%" PRIu64
						"\"} %" PRIu64 "\n", r, in.samples);
			else if (pass == 1 && in.have_position)
				rc = buf_printf(out, "zephon_rank_consumed_samples{rank=\"%" PRIu64
						"\"} %" PRIu64 "\n", r, in.position);
			else if (pass == 2 && in.last_read_s > 0)
				rc = buf_printf(out, "zephon_rank_seconds_since_read{rank=\"%" PRIu64
						"\"} %.3f\n", r, jp->now - in.last_read_s);
		}
	}
	return rc;
}

/* The mixture's metrics: each source's samples below consumed and its epoch there. 0 or
 * buf_printf()'s -errno. */
static int source_metrics(const struct served *sv, uint64_t consumed, struct buf *out)
{
	uint64_t used[MIX_MAX_SOURCES], epoch[MIX_MAX_SOURCES];
	int rc;

	source_progress(sv, consumed, used, epoch);
	rc = buf_printf(out, "# HELP zephon_source_consumed_samples Samples of the source "
			"below consumed_samples.\n"
			"# TYPE zephon_source_consumed_samples gauge\n");
	for (size_t s = 0; s < sv->k && !rc; s++)
		rc = buf_printf(out, "zephon_source_consumed_samples{source=\"%s\"} %" PRIu64
				"\n", served_source_name(sv, s), used[s]);
	if (!rc)
		rc = buf_printf(out, "# HELP zephon_source_epoch The source's epoch at "
				"consumed_samples.\n# TYPE zephon_source_epoch gauge\n");
	for (size_t s = 0; s < sv->k && !rc; s++)
		rc = buf_printf(out, "zephon_source_epoch{source=\"%s\"} %" PRIu64 "\n",
				served_source_name(sv, s), epoch[s]);
	return rc;
}

/* The claim latency histogram and the journal's commit summary of st. 0 or
 * buf_printf()'s -errno. */
static int latency_metrics(const struct server_stats *st, struct buf *out)
{
	uint64_t cumulative = 0;
	int rc;

	rc = buf_printf(out, "# HELP zephon_claim_latency_seconds Time to claim in open() of next.\n"
			"# TYPE zephon_claim_latency_seconds histogram\n");
	for (unsigned k = 0; k < SERVER_LATENCY_BUCKETS && !rc; k++) {
		cumulative += st->claim_latency[k];
		if (k < SERVER_LATENCY_BUCKETS - 1)
			rc = buf_printf(out, "zephon_claim_latency_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
					server_latency_bounds_us[k] * 1e-6, cumulative);
		else
			rc = buf_printf(out, "zephon_claim_latency_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n",
					cumulative);
	}
	if (!rc)
		rc = buf_printf(out, "zephon_claim_latency_seconds_sum %.9f\n"
				"zephon_claim_latency_seconds_count %" PRIu64 "\n"
				"# HELP zephon_journal_commit_seconds Time spent committing claims.\n"
				"# TYPE zephon_journal_commit_seconds summary\n"
				"zephon_journal_commit_seconds_sum %.9f\n"
				"zephon_journal_commit_seconds_count %" PRIu64 "\n",
				st->claim_latency_sum_s, cumulative, st->journal_commit_sum_s,
				st->journal_commits);
	return rc;
}

int render_metrics(struct zmount *z, struct buf *out)
{
	struct server_stats st;
	struct job_progress jp;
	struct next_overlap *ov = NULL;
	uint64_t bytes_read, overlaps_total;
	size_t nov;
	int rc = 0;

	server_get_stats(z->srv, &st);
	job_progress(z, &st, &jp);
	pthread_mutex_lock(&z->lock);
	bytes_read = z->bytes_read;
	overlaps_total = z->overlaps_total;
	nov = z->noverlaps;
	if (nov && !(ov = malloc(nov * sizeof(*ov))))
		rc = -ENOMEM;
	else if (nov)
		memcpy(ov, z->overlaps, nov * sizeof(*ov));
	pthread_mutex_unlock(&z->lock);
#define METRIC(name, type, help, value) \
	if (!rc) rc = buf_printf(out, "# HELP zephon_" name " " help "\n# TYPE zephon_" name " " type \
				 "\nzephon_" name " %" PRIu64 "\n", (uint64_t)(value))
	METRIC("claims_total", "counter", "Micro-batches handed out by opens of next.", st.claims);
	METRIC("claim_errors_total", "counter", "Opens of next that failed (EIO, ENOMEM).", st.claim_errors);
	METRIC("decode_errors_total", "counter", "Samples that failed their checksum.", st.decode_errors);
	METRIC("journal_errors_total", "counter", "Claims the journal could not record.", st.journal_errors);
	METRIC("end_of_stream_total", "counter", "Opens of next after the stream ended.", st.end_of_stream);
	METRIC("prefetch_hits_total", "counter", "Claims served from the prefetch ring.", st.prefetch_hits);
	METRIC("prefetch_misses_total", "counter", "Claims decoded on demand.", st.prefetch_misses);
	METRIC("prefetch_decoded_total", "counter", "Batches decoded ahead into the prefetch rings.",
	       st.prefetch_decoded);
	METRIC("batch_bytes_total", "counter", "Bytes of claimed batches.", st.batch_bytes);
	METRIC("readahead_samples_total", "counter", "Samples the read-ahead computed the ids "
	       "of, to ask the kernel for their pages.", st.readahead_samples);
	METRIC("readahead_resident_total", "counter", "Read-ahead runs that found the dataset in "
	       "the page cache and hinted nothing.", st.readahead_resident);
	METRIC("read_bytes_total", "counter", "Bytes returned by read().", bytes_read);
	METRIC("consumed_samples", "gauge", "Every gsn below this was delivered (claims) or read "
	       "(readers of the pure files only: the least rank position).", jp.consumed);
	METRIC("overlapping_opens_total", "counter", "Opens of a rank's next while another process "
	       "held it open (several readers of one rank: out of order).", overlaps_total);
#undef METRIC
	if (!rc && nov)
		rc = buf_printf(out, "# HELP zephon_rank_overlapping_opens_total Opens of the rank's "
				"next while another process held it open.\n"
				"# TYPE zephon_rank_overlapping_opens_total counter\n");
	for (size_t i = 0; i < nov && !rc; i++)
		rc = buf_printf(out, "zephon_rank_overlapping_opens_total{rank=\"%" PRIu64 "\"} %"
				PRIu64 "\n", ov[i].rank, ov[i].opens);
	free(ov);
	if (!rc && z->served->is_mixture)
		rc = source_metrics(z->served, jp.consumed, out);
	if (!rc)
		rc = render_progress_metrics(z, &jp, out);
	if (!rc)
		rc = buf_printf(out, "# HELP zephon_journal_wait_seconds How long the oldest claim "
				"still committing has waited for the journal (0: none); a value that "
				"grows is a journal file system that stalls.\n"
				"# TYPE zephon_journal_wait_seconds gauge\n"
				"zephon_journal_wait_seconds %.6f\n", server_journal_wait(z->srv));
	if (!rc)
		rc = latency_metrics(&st, out);
	if (!rc)
		rc = fetch_metrics(z, out);
	return rc;
}
