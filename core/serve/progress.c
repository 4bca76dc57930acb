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
	uint64_t global_batch;
	size_t n;
	struct rankset ranks;      /* the ranks (a copy), n of them */
	struct rank_progress *r;   /* r[i]: ranks.ranks[i]'s */
};

int progress_new(const uint64_t *ranks, size_t nranks, uint64_t global_batch,
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
	p->global_batch = global_batch;
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

void progress_note_run(struct progress *p, uint64_t rank, uint64_t g0, uint64_t share_bytes,
		       uint64_t share_samples, uint64_t off, uint64_t n, double now)
{
	uint64_t k0 = off / share_bytes, k1 = (off + n) / share_bytes;

	if (k1 > k0)
		progress_note(p, rank, g0 + (k1 - 1) * p->global_batch, (k1 - k0) * share_samples,
			      now);
}

uint64_t progress_step_of(uint64_t rank, uint64_t gsn, uint64_t micro, uint64_t micros,
			  uint64_t share, uint64_t micro_batch)
{
	uint64_t a, before;

	if (!share || !micro_batch || share % micro_batch)
		return PROGRESS_NO_STEP;
	a = share / micro_batch;
	if (micro + micros != a || micro >= a)
		return PROGRESS_NO_STEP;
	/* rank r's slice of a step is [r * share, (r + 1) * share) of it, in micro-batches
	 * of m: the batch starts rank * share + micro * m samples into its step */
	if (rank > UINT64_MAX / share)
		return PROGRESS_NO_STEP;
	before = rank * share + micro * micro_batch;
	return gsn >= before ? gsn - before : PROGRESS_NO_STEP;
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
		r->info.position = step_gsn + p->global_batch;
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

int progress_step_number(const struct layout *l, uint64_t gsn, uint64_t *step)
{
	if (gsn < l->start_samples || !l->global_batch ||
	    (gsn - l->start_samples) % l->global_batch)
		return -ERANGE;
	*step = layout_step_of(l, gsn);
	return 0;
}
