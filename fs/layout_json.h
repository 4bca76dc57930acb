/*
 * layout_json.h: a journal's layout as JSON, the one spelling that `zephon journal show
 * --json` (its layouts) and /status (its layouts) share. Keys are stable (docs/mounting.md).
 */
#ifndef ZEPHON_LAYOUT_JSON_H
#define ZEPHON_LAYOUT_JSON_H

#include <jansson.h>
#include <stdint.h>

#include "journal.h"

/* v as a JSON integer (a new reference; NULL on ENOMEM). json_int_t is long long: gsns,
 * steps and counts stay below 2^62. */
json_t *json_u64(uint64_t v);

/* jl's world_size, global_batch, micro_batch, ranks, start_step, start_samples, time,
 * host, then rule (with_rule != 0) and resume, added to object o in that order. 0, or -1
 * (ENOMEM, or text that is not UTF-8) with o holding some of them. */
int layout_json_add(json_t *o, const struct journal_layout *jl, int with_rule);

#endif
