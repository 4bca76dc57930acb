#include "served.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "journal_weights.h"
#include "s3.h"

int served_open(const char *path, struct served *st, char *err, size_t errlen)
{
	const char **dirs = NULL;
	int rc;

	memset(st, 0, sizeof *st);
	if (s3_is_url(path)) { /* a dataset in object storage: the URL as given */
		if (strlen(path) >= sizeof(st->path))
			return err_set(err, errlen, -ENAMETOOLONG, "%s: URL too long", path);
		strcpy(st->path, path);
		st->k = 1;
		return dataset_open(st->path, &st->ds, err, errlen);
	}
	if (!realpath(path, st->path)) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	st->is_mixture = mixspec_is_spec(st->path);
	if (!st->is_mixture) {
		st->k = 1;
		return dataset_open(st->path, &st->ds, err, errlen);
	}
	rc = mixspec_load(st->path, &st->spec, err, errlen);
	if (rc)
		return rc;
	dirs = malloc(st->spec.count * sizeof *dirs);
	if (!dirs) {
		mixspec_release(&st->spec);
		return -ENOMEM;
	}
	for (size_t s = 0; s < st->spec.count; s++)
		dirs[s] = st->spec.sources[s].dir;
	rc = dataset_open_sources(dirs, st->spec.count, &st->ds, err, errlen);
	free(dirs);
	if (rc) {
		mixspec_release(&st->spec);
		return rc;
	}
	st->k = st->spec.count;
	return 0;
}

void served_close(struct served *st)
{
	mixture_free(st->mix);
	dataset_close(st->ds);
	if (st->is_mixture)
		mixspec_release(&st->spec);
	free(st->weights);
	free(st->holdout);
	memset(st, 0, sizeof *st);
}

/* "0.01" or "1/100" as a fraction in (0, 1/2]. */
static int parse_fraction(const char *text, uint64_t *num, uint64_t *den, char *why,
			  size_t why_len)
{
	const char *slash = strchr(text, '/');
	char *end;
	double w;

	if (slash) {
		unsigned long long p, q;

		errno = 0;
		p = strtoull(text, &end, 10);
		if (end != slash || errno || text[0] == '-' || slash[1] == '-')
			goto bad;
		q = strtoull(slash + 1, &end, 10);
		if (*end || errno || q == 0 || slash[1] == 0)
			goto bad;
		*num = p;
		*den = q;
	} else {
		char sub[160];
		uint64_t pq[2];
		double two[2];

		errno = 0;
		w = strtod(text, &end);
		if (*end || errno || !*text || !(w > 0) || w > 0.5)
			goto bad;
		/* the exact fraction of w, by the weights' rule: w against 1 - w */
		two[0] = w;
		two[1] = 1 - w;
		if (mix_weights_exact(two, 2, pq, sub, sizeof sub))
			return err_set(why, why_len, -EINVAL, "validation=%s: not a fraction "
					"with a denominator up to 10^6; round it (e.g. 0.001 "
					"or 1/1000)", text);
		*num = pq[0];
		*den = pq[0] + pq[1];
	}
	if (*num == 0 || *num * 2 > *den)
		goto bad;
	return 0;
bad:
	return err_set(why, why_len, -EINVAL, "validation=%s: give the held-out fraction of "
			"each source as a number in (0, 0.5], e.g. 0.01 or 1/100", text);
}

/* Integer weights from the spec or from the weights option. */
static int resolve_weights(struct served *st, const char *weights_opt, uint64_t *a,
			   char *why, size_t why_len)
{
	double w[MIX_MAX_SOURCES];
	const char *names[MIX_MAX_SOURCES];
	char sub[512];
	int rc;

	for (size_t s = 0; s < st->k; s++) {
		w[s] = st->spec.sources[s].weight;
		names[s] = st->spec.sources[s].name;
	}
	if (weights_opt) {
		rc = mix_weights_parse(weights_opt, names, st->k, w, sub, sizeof sub);
		if (rc)
			return err_set(why, why_len, -EINVAL, "%s", sub);
	}
	rc = mix_weights_exact(w, st->k, a, sub, sizeof sub);
	if (rc && weights_opt)
		return err_set(why, why_len, -EINVAL, "weights=%s: %s", weights_opt, sub);
	if (rc) {
		snprintf(why, why_len, "mixture spec %s: the weights of its sources (1 = sources[0]): "
			 "%s", st->path, sub);
		return -EBADMSG;
	}
	return 0;
}

int served_set_order(struct served *st, const struct served_options *opt, char *why,
		     size_t why_len)
{
	const char *weights_opt = opt->weights, *validation_opt = opt->validation;
	struct order src[MIX_MAX_SOURCES];
	uint64_t off[MIX_MAX_SOURCES];
	int rc;

	if (weights_opt && !st->is_mixture)
		return err_set(why, why_len, -EINVAL, "weights= applies to a mixture spec "
				"only; %s is one dataset", st->path);
	st->split_num = 0;
	st->split_den = 1;
	st->split[0] = 0;
	if (validation_opt) {
		rc = parse_fraction(validation_opt, &st->split_num, &st->split_den, why, why_len);
		if (rc)
			return rc;
		if (st->split_den >= 10000000)
			return err_set(why, why_len, -EINVAL, "validation=%s: give the "
					"fraction with a denominator below 10^7",
					validation_opt);
		snprintf(st->split, sizeof st->split, "validation=%u/%u", (unsigned)st->split_num,
			 (unsigned)st->split_den);
	}
	st->weights = calloc(st->k, sizeof *st->weights);
	st->holdout = calloc(st->k, sizeof *st->holdout);
	if (!st->weights || !st->holdout)
		return -ENOMEM;
	st->holdout_total = 0;
	for (size_t s = 0; s < st->k; s++) {
		const struct dataset_info *si = st->is_mixture ? dataset_source_info(st->ds, s)
							       : dataset_info(st->ds);
		unsigned __int128 v = (unsigned __int128)si->samples * st->split_num / st->split_den;

		if (v >= si->samples)
			v = si->samples - 1; /* a source keeps a training sample */
		st->holdout[s] = (uint64_t)v;
		st->holdout_total += st->holdout[s];
		order_init(&src[s], si->samples, st->is_mixture ? mixture_source_seed(opt->seed, s) :
			   opt->seed, opt->shuffle);
		if (st->holdout[s])
			order_set_holdout(&src[s], st->holdout[s], order_split_key(si->fingerprint));
		off[s] = st->is_mixture ? dataset_source_offset(st->ds, s) : 0;
	}
	if (validation_opt && !st->holdout_total)
		return err_set(why, why_len, -EINVAL,
				"validation=%s holds out no sample (floor(N * %" PRIu64 "/%"
				PRIu64 ") is 0 for every source): give a larger fraction, or "
				"leave validation= out",
				validation_opt, st->split_num, st->split_den);
	if (!st->is_mixture) {
		st->order = src[0];
		st->weights[0] = 1;
		return 0;
	}
	st->weights_given = weights_opt != NULL;
	rc = resolve_weights(st, weights_opt, st->weights, why, why_len);
	if (rc)
		return rc;
	journal_weights_format(st->weights, st->k, st->weights_text);
	mixture_free(st->mix);
	st->mix = NULL;
	rc = mixture_new(st->k, src, off, st->weights, &st->mix);
	if (rc == -ENOMEM)
		return rc;
	if (rc)
		return err_set(why, why_len, -EINVAL, "cannot build the mixture's schedule "
				"(%s)", strerror(-rc));
	order_init(&st->order, dataset_info(st->ds)->samples, opt->seed, opt->shuffle);
	st->order.mix = st->mix;
	return 0;
}

void served_ident(const struct served *st, struct journal_ident *out)
{
	memset(out, 0, sizeof *out);
	memcpy(out->fingerprint, dataset_info(st->ds)->fingerprint, sizeof out->fingerprint);
	out->seed = st->order.seed;
	out->shuffle = st->order.shuffle;
	out->samples = dataset_info(st->ds)->samples;
	snprintf(out->split, sizeof out->split, "%s", st->split);
}

int served_replay(struct served *st, const struct journal_layout *rows, size_t n,
		  char *why, size_t why_len)
{
	size_t from = 0, k;
	uint64_t a[MIX_MAX_SOURCES];
	int rc;

	if (!st->is_mixture)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(rows[i].rule, "fresh"))
			from = i;
	/* before the first recorded row: the weights of that row (or this mount's) */
	st->history = 0;
	rc = mixture_set_weights(st->mix, 0, st->weights);
	for (size_t i = from; !rc && i < n; i++) {
		if (!rows[i].weights[0])
			continue;
		if (journal_weights_parse(rows[i].weights, a, &k, NULL, 0) || k != st->k)
			return err_set(why, why_len, -EINVAL,
					"the journal's layout %" PRId64 " records weights "
					"\"%s\", which do not fit the mixture's %zu sources",
					rows[i].id, rows[i].weights, st->k);
		rc = mixture_set_weights(st->mix, st->history ? layout_start_samples(&rows[i].layout) :
					 0, a);
		st->history++;
	}
	return rc;
}

int served_changes_weights(const struct served *st, uint64_t g0)
{
	if (!served_records_weights(st))
		return 0;
	return memcmp(mixture_segment_weights(st->mix, mixture_segment_at(st->mix, g0)),
		      st->weights, st->k * sizeof *st->weights) != 0;
}

int served_records_weights(const struct served *st)
{
	return st->is_mixture && (st->weights_given || !st->history);
}

int served_start(struct served *st, uint64_t g0)
{
	const uint64_t *now;

	if (!st->is_mixture)
		return 0;
	if (served_records_weights(st))
		return mixture_set_weights(st->mix, g0, st->weights);
	/* the recorded history goes on: show the weights in force at the start */
	now = mixture_segment_weights(st->mix, mixture_segment_at(st->mix, g0));
	for (size_t s = 0; s < st->k; s++)
		st->weights[s] = now[s];
	journal_weights_format(st->weights, st->k, st->weights_text);
	return 0;
}

int served_check_change(const struct served *st, const struct journal_layout *rows,
			size_t n, uint64_t g, char *why, size_t why_len)
{
	const struct journal_layout *prev = NULL;
	uint64_t step, lo, hi, at;

	if (!served_changes_weights(st, g))
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(rows[i].rule, "fresh"))
			prev = NULL;
		if (layout_start_samples(&rows[i].layout) <= g)
			prev = &rows[i];
	}
	if (!prev || !layout_step_number(&prev->layout, g, &at))
		return 0;
	/* the boundaries around g: the step of prev that holds it, and the next one */
	step = layout_step_of(&prev->layout, g);
	if (layout_step_gsn(&prev->layout, step, &lo) ||
	    layout_gsn_after(&prev->layout, lo, 1, &hi))
		hi = lo = g;
	return err_set(why, why_len, -EINVAL,
			"weights=%s changes the mixture at samples %" PRIu64 ", inside step %"
			PRIu64 " of the layout before it (global_batch %" PRIu64 "): weights "
			"change only at a step boundary; resume at samples:%" PRIu64 " or "
			"samples:%" PRIu64 ", or keep the weights",
			st->weights_text, g, step, layout_global_batch(&prev->layout), lo, hi);
}

size_t served_source_of(const struct served *st, uint64_t id, uint64_t *local)
{
	if (!st->is_mixture) {
		*local = id;
		return 0;
	}
	return dataset_source_of(st->ds, id, local);
}

const char *served_source_name(const struct served *st, size_t s)
{
	return st->is_mixture ? st->spec.sources[s].name : "";
}
