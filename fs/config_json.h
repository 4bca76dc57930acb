/*
 * config_json.h: a mount's resolved configuration as JSON, the one spelling of /status's
 * configuration keys and of `zephon mount --check --json` (what the mount would serve,
 * before it starts): every default and every derived value (share_samples,
 * micro_batches, share_bytes, rank_list, the journal's path) is the C code's, so that
 * no launcher or loader restates one. Keys are stable (docs/mounting.md).
 */
#ifndef ZEPHON_CONFIG_JSON_H
#define ZEPHON_CONFIG_JSON_H

#include <jansson.h>
#include <stdio.h>

#include "opts.h"
#include "served.h"

/* What a mount serves. layout: the mount's, with S0 and G0 as its journal resolved them
 * when `started`; before that (--check) S0 and G0 are the resume rule's where it fixes
 * them (samples:G[@S], step:S) and null otherwise. */
struct mount_view {
	const char *dataset_path;       /* absolute */
	const struct served *served;    /* its order set (served_set_order) */
	const struct mount_config *cfg; /* format resolved (mount_config_check_dataset) */
	const struct layout *layout;
	int started;
};

/* The configuration object: dataset, fingerprint, samples, kind, world_size,
 * global_batch, micro_batch, ranks, rank_list, start_step, start_samples, seed, shuffle,
 * epochs, format, journal, validation, mixture (its weights: null before the start
 * unless weights= was given, as the journal's history decides them), share_samples,
 * micro_batches, share_bytes, shards, and a token dataset's dtype, npy_descr,
 * dtype_bytes, seq_len, window, sample_tokens, overlap, eod_token, max_token_id and
 * rows_json_meta()'s keys, in that order. A new reference, or NULL (ENOMEM). */
json_t *config_json(const struct mount_view *v);

/* --check's output on f: what a launcher compares with a live mount's /status before
 * reusing it. With json the whole configuration (config_json()); else a mixture's
 * weights= (when given) and the validation split as lines ("weights=7,3",
 * "validation=1/100"), the values this mount would serve. 0, or 1 (out of memory, said
 * on stderr). */
int config_check_print(const struct mount_view *v, int json, FILE *f);

/* Tokens a sample trains: the pack's --seq-len (a window's overlap token is the next
 * window's first; a row's positions, of its three planes); 0 for a dataset of another
 * kind. */
uint64_t config_sample_tokens(const struct dataset_info *info);

#endif
