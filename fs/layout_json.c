/*
 * layout_json.c: a journal's layout as JSON (layout_json.h).
 */
#include "layout_json.h"

json_t *json_u64(uint64_t v)
{
	return json_integer((json_int_t)v);
}

int layout_json_add(json_t *o, const struct journal_layout *jl, int with_rule)
{
	const struct layout *l = &jl->layout;

	if (json_object_set_new(o, "world_size", json_u64(layout_world_size(l))) ||
	    json_object_set_new(o, "global_batch", json_u64(layout_global_batch(l))) ||
	    json_object_set_new(o, "micro_batch", json_u64(layout_micro_batch(l))) ||
	    json_object_set_new(o, "ranks", json_string(jl->ranks)) ||
	    json_object_set_new(o, "start_step", json_u64(layout_start_step(l))) ||
	    json_object_set_new(o, "start_samples", json_u64(layout_start_samples(l))) ||
	    json_object_set_new(o, "time", json_integer((json_int_t)jl->time)) ||
	    json_object_set_new(o, "host", json_string(jl->host)) ||
	    (with_rule && json_object_set_new(o, "rule", json_string(jl->rule))) ||
	    json_object_set_new(o, "resume", json_string(jl->resume)))
		return -1;
	return 0;
}
