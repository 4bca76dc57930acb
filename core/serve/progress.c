/*
 * progress.c: per-rank read positions and rates (progress.h).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "progress.h"
#include "run.h"

struct progress_slot {
	int64_t sec;            /* the whole second it counts (-1: unused) */
	uint64_t samples;
};

struct rank_progress {
	pthread_mutex_t mu;
	struct progress_rank_info info;
	double first_read_s;
	struct progress_slot slots[PROGRESS_SLOTS];
};

struct progress {
	struct layout layout;
	size_t n;
	struct rankset ranks;      /* the ranks (a copy), n of them */
	struct rank_progress *r;   /* r[i]: ranks.ranks[i]'s */
};

int progress_new(const uint64_t *ranks, size_t nranks, const struct layout *l,
		 struct progress **out)
{
	struct progress *p = calloc(1, sizeof(*p));

	if (!p || !(p->r = calloc(nranks ? nranks : 1, sizeof(*p->r))) ||
	    !(p->ranks.ranks = malloc((nranks ? nranks : 1) * sizeof(*ranks)))) {
		if (p)
			free(p->r);
		free(p);
		return -ENOMEM;
	}
	memcpy(p->ranks.ranks, ranks, nranks * sizeof(*ranks));
	p->ranks.count = nranks;
	p->layout = *l;
	p->n = nranks;
	for (size_t i = 0; i < nranks; i++) {
		pthread_mutex_init(&p->r[i].mu, NULL);
		for (size_t k = 0; k < PROGRESS_SLOTS; k++)
			p->r[i].slots[k].sec = -1;
	}
	*out = p;
	return 0;
}

void progress_free(struct progress *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++)
		pthread_mutex_destroy(&p->r[i].mu);
	free(p->ranks.ranks);
	free(p->r);
	free(p);
}

static struct rank_progress *find(struct progress *p, uint64_t rank)
{
	ssize_t i = rankset_index(&p->ranks, rank);

	return i < 0 ? NULL : &p->r[i];
}

void progress_note_run(struct progress *p, const struct progress_read *rd, double now)
{
	uint64_t k0, k1, g;

	run_completed(rd->unit, rd->off, rd->len, &k0, &k1);
	if (k1 > k0 && !layout_gsn_after(&p->layout, rd->gsn, k1 - 1, &g))
		progress_note(p, rd->rank, g, layout_shares_samples(&p->layout, k1 - k0), now);
}

void progress_note(struct progress *p, uint64_t rank, uint64_t step_gsn, uint64_t samples,
		   double now)
{
	struct rank_progress *r = find(p, rank);
	int64_t sec = (int64_t)floor(now);
	struct progress_slot *slot;

	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	if (step_gsn != PROGRESS_NO_STEP) {
		r->info.have_position = 1;
		r->info.step_gsn = step_gsn;
		/* the gsn after the step: below ORDER_MAX_GSN for a step of the stream */
		if (layout_gsn_after(&p->layout, step_gsn, 1, &r->info.position))
			r->info.position = ORDER_MAX_GSN;
	}
	r->info.samples += samples;
	if (r->info.last_read_s == 0)
		r->first_read_s = now;
	r->info.last_read_s = now;
	slot = &r->slots[(uint64_t)sec % PROGRESS_SLOTS];
	if (slot->sec != sec) {
		slot->sec = sec;
		slot->samples = 0;
	}
	slot->samples += samples;
	pthread_mutex_unlock(&r->mu);
}

/* Samples per second over the whole seconds [now - w, now), w = PROGRESS_WINDOW or the
 * whole seconds since the first read when fewer (0 before one whole second passed);
 * r->mu held. */
static double rank_rate(const struct rank_progress *r, double now)
{
	int64_t sec = (int64_t)floor(now), w = PROGRESS_WINDOW;
	uint64_t sum = 0;

	if (r->info.last_read_s == 0)
		return 0;
	if (sec - (int64_t)floor(r->first_read_s) < w)
		w = sec - (int64_t)floor(r->first_read_s);
	if (w <= 0)
		return 0;
	for (size_t k = 0; k < PROGRESS_SLOTS; k++)
		if (r->slots[k].sec >= sec - w && r->slots[k].sec < sec)
			sum += r->slots[k].samples;
	return (double)sum / (double)w;
}

int progress_rank(struct progress *p, uint64_t rank, double now,
		  struct progress_rank_info *out)
{
	struct rank_progress *r = find(p, rank);

	if (!r)
		return -ENOENT;
	pthread_mutex_lock(&r->mu);
	*out = r->info;
	out->samples_per_s = rank_rate(r, now);
	pthread_mutex_unlock(&r->mu);
	return 0;
}

int progress_total(struct progress *p, uint64_t start, double now, uint64_t *consumed,
		   double *samples_per_s, double *last_read_s)
{
	uint64_t least = UINT64_MAX;
	double rate = 0, last = 0;

	for (size_t i = 0; i < p->n; i++) {
		struct progress_rank_info in;

		progress_rank(p, p->ranks.ranks[i], now, &in);
		rate += in.samples_per_s;
		if (in.last_read_s > last)
			last = in.last_read_s;
		if ((in.have_position ? in.position : start) < least)
			least = in.have_position ? in.position : start;
	}
	*consumed = least == UINT64_MAX ? start : least;
	*samples_per_s = rate;
	*last_read_s = last;
	return last > 0;
}

int progress_step_number(const struct progress *p, uint64_t gsn, uint64_t *step)
{
	return layout_step_number(&p->layout, gsn, step);
}
