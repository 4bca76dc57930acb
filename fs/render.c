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
#include <unistd.h>

#include "catalog.h"
#include "clock.h"
#include "config_json.h"
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
		z->info->fingerprint, layout_world_size(&c->layout), layout_global_batch(&c->layout),
		layout_micro_batch(&c->layout), ranks, layout_start_step(&c->layout),
		layout_start_samples(&c->layout),
		z->resume_applied, c->order.seed, order_shuffle_name(c->order.shuffle), z->cfg->epochs,
		z->cfg->epochs ? "" : " (endless)", encode_format_name(c->format), z->cfg->journal,
		layout_micro_batch(&c->layout));
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
	jp->any_read = progress_total(z->progress,
				      layout_start_samples(&server_get_config(z->srv)->layout),
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
	uint64_t tokens = config_sample_tokens(z->info);
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
			"step", in.have_position && !progress_step_number(z->progress, in.step_gsn, &step) ?
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

int render_status(struct zmount *z, struct buf *out)
{
	const struct server_config *c = server_get_config(z->srv);
	struct mount_view view = { z->dataset_path, z->served, z->cfg, &c->layout, 1 };
	json_t *root, *layouts, *overlaps;
	struct server_stats st;
	struct job_progress jp;
	uint64_t consumed, step, used[MIX_MAX_SOURCES], epoch[MIX_MAX_SOURCES];

	server_get_stats(z->srv, &st);
	job_progress(z, &st, &jp);
	consumed = jp.consumed;
	if (z->served->is_mixture)
		source_progress(z->served, consumed, used, epoch);
	/* the configuration first, as `zephon mount --check --json` prints it */
	root = config_json(&view);
	if (!root)
		return -ENOMEM;
	if (z->served->is_mixture)
		json_object_set_new(root, "mixture", mixture_json(z, used, epoch));
	layouts = json_array();
	for (size_t i = 0; layouts && i < z->nlayouts; i++)
		json_array_append_new(layouts, layout_json(&z->layouts[i]));
	overlaps = json_object();
	json_object_set_new(root, "pid", json_integer((json_int_t)getpid()));
	json_object_set_new(root, "consumed_samples", json_u64(consumed));
	/* the step that starts there (null off the layout's steps: a reader elsewhere) */
	json_object_set_new(root, "consumed_step",
			    layout_step_number(&c->layout, consumed, &step) ? json_null() :
			    json_u64(step));
	/* the epoch of a batch at consumed (a mixture's: mixture_epoch's, as in
	 * /rank/<r>/state) */
	json_object_set_new(root, "epoch", json_u64(order_epoch(&c->order, consumed)));
	json_object_set_new(root, "resume", json_string(z->resume_applied));
	json_object_set_new(root, "journal_wait_s", json_real(server_journal_wait(z->srv)));
	json_object_set_new(root, "layouts", layouts);
	json_object_set_new(root, "cursors", cursors_json(z));
	json_object_set_new(root, "counters", counters_json(z, &st, overlaps));
	json_object_set_new(root, "overlapping_opens", overlaps);
	json_object_set_new(root, "last_error", last_error_json());
	json_object_set_new(root, "progress", progress_json(z, &jp));
	json_object_set_new(root, "fetch", fetch_json(z));
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
	uint64_t tokens = config_sample_tokens(z->info);
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
