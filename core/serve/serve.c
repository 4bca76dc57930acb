#include "serve_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

const double server_latency_bounds_us[SERVER_LATENCY_BUCKETS - 1] = {
	25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000, 250000,
};

/* A claim that comes this long after the rank's last close is a paced reader's: its
 * ring's refill waits for the close of the batch it claims (server_release). Readers
 * that read back to back (a close, then the next open within microseconds) refill at
 * once. */
#define PACED_GAP_S 0.002

/* The claim index of the rank's cursor as the journal, which owns it (serve.h), has it;
 * rs->ci when there is no journal. Takes the journal's lock: never call it with
 * view_lock held (view_lock's readers must not wait for a commit). */
static uint64_t journal_ci(struct server *s, const struct rank_state *rs)
{
	uint64_t step, micro, ci;

	if (s->journal && journal_cursor(s->journal, rs->rank, &step, &micro) == 0 &&
	    layout_pos_ci(&s->cfg.layout, step, micro, &ci) == 0)
		return ci;
	return rs->ci;
}

int server_new(const struct dataset *ds, const struct server_config *cfg,
	       struct journal *j, struct server **out)
{
	struct server *s;
	int rc = -ENOMEM;

	if (!layout_valid(&cfg->layout) || !cfg->ranks || !cfg->ranks->count ||
	    cfg->prefetch > SERVER_MAX_PREFETCH || cfg->workers < 1 ||
	    cfg->workers > SERVER_MAX_WORKERS ||
	    cfg->order.n + cfg->order.holdout != dataset_info(ds)->samples)
		return -EINVAL;
	for (size_t i = 0; i < cfg->ranks->count; i++)
		if (cfg->ranks->ranks[i] >= layout_world_size(&cfg->layout))
			return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ds = ds;
	s->info = dataset_info(ds);
	s->flat = dataset_flat(ds); /* two index entries of every shard, read once */
	s->cfg = *cfg;
	s->journal = j;
	s->limit = order_limit(&cfg->order, cfg->epochs);
	pthread_mutex_init(&s->qlock, NULL);
	pthread_mutex_init(&s->jobs_lock, NULL);
	pthread_mutex_init(&s->readers.lock, NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_mutex_init(&s->log_lock, NULL);
	pthread_mutex_init(&s->claim_lock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&s->claims_done, &ca);
		pthread_condattr_destroy(&ca);
	}
	/* enough buffers for every rank's ring, the batches being read, and the workers */
	s->pool_cap = cfg->ranks->count * (cfg->prefetch + 2) + cfg->workers;
	s->pool_cap = s->pool_cap > 4096 ? 4096 : s->pool_cap;
	s->pool = calloc(s->pool_cap, sizeof(*s->pool));
	s->ranks.ranks = malloc(cfg->ranks->count * sizeof(uint64_t));
	s->rs = calloc(cfg->ranks->count, sizeof(*s->rs));
	if (!s->ranks.ranks || !s->rs || !s->pool)
		goto err_free;
	memcpy(s->ranks.ranks, cfg->ranks->ranks, cfg->ranks->count * sizeof(uint64_t));
	s->ranks.count = cfg->ranks->count;
	s->cfg.ranks = &s->ranks;
	for (size_t i = 0; i < s->ranks.count; i++) {
		struct rank_state *rs = &s->rs[i];

		rs->rank = s->ranks.ranks[i];
		pthread_mutex_init(&rs->lock, NULL);
		pthread_mutex_init(&rs->view_lock, NULL);
		pthread_cond_init(&rs->decoded, NULL);
		if (cfg->prefetch) {
			rs->slots = calloc(cfg->prefetch, sizeof(*rs->slots));
			if (!rs->slots)
				goto err_free;
		}
		s->nranks++;
		rs->ci = journal_ci(s, rs); /* normally S0: where journal_start put it */
		delivery_init(&rs->dv, rs->ci);
	}
	if (j) /* the mount reports deliveries (server_delivered) */
		journal_track_delivery(j);
	if ((rc = srv_ahead_start(s)) || (rc = srv_prefetch_start(s)))
		goto err_free;
	*out = s;
	return 0;

err_free:
	server_free(s);
	return rc;
}

void server_free(struct server *s)
{
	if (!s)
		return;
	srv_ahead_stop(s);
	srv_prefetch_stop(s);
	pthread_mutex_destroy(&s->jobs_lock);
	for (size_t i = 0; i < s->nranks; i++) {
		struct rank_state *rs = &s->rs[i];

		for (unsigned k = 0; k < s->cfg.prefetch; k++)
			srv_slot_clear(s, &rs->slots[k]);
		free(rs->slots);
		free(rs->last.ids);
		delivery_release(&rs->dv);
		pthread_mutex_destroy(&rs->lock);
		pthread_mutex_destroy(&rs->view_lock);
		pthread_cond_destroy(&rs->decoded);
	}
	free(s->rs);
	for (size_t i = 0; i < s->pool_count; i++)
		buf_release(&s->pool[i]);
	free(s->pool);
	pthread_mutex_destroy(&s->pool_lock);
	if (s->cfg.log)
		srv_log_dropped(s, s->log_limit.held);
	pthread_mutex_destroy(&s->log_lock);
	for (size_t i = 0; i < s->readers.count; i++)
		sample_reader_free(s->readers.free[i]);
	free(s->readers.free);
	pthread_mutex_destroy(&s->readers.lock);
	pthread_mutex_destroy(&s->qlock);
	pthread_mutex_destroy(&s->claim_lock);
	pthread_cond_destroy(&s->claims_done);
	rankset_release(&s->ranks);
	free(s);
}

/* A claim of b was journaled (rs->lock held): b is the rank's last claim, and the cursor
 * moves past it, in one step for the readers of view_lock. */
static void record_claim(struct rank_state *rs, struct batch *b)
{
	uint64_t *ids = malloc(b->count * sizeof(*ids));
	uint64_t *old;

	if (ids)
		memcpy(ids, b->ids, b->count * sizeof(*ids));
	pthread_mutex_lock(&rs->view_lock);
	old = rs->last.ids;
	rs->last = (struct claim_info){ 1, b->step, b->micro, b->gsn, ids ? b->count : 0,
					b->epoch, ids };
	rs->ci++;
	b->generation = rs->generation;
	pthread_mutex_unlock(&rs->view_lock);
	free(old);
}

/* Mark the start (since > 0) or the end (0) of rank's journal commit (rs->lock held). */
static void set_commit_since(struct rank_state *rs, double since)
{
	pthread_mutex_lock(&rs->view_lock);
	rs->commit_since = since;
	pthread_mutex_unlock(&rs->view_lock);
}

static void count_claim(struct server *s, int rc, double t0, double journal_s,
			const struct batch *b, int hit)
{
	double us = (clock_mono_s() - t0) * 1e6;
	unsigned k = 0;

	while (k < SERVER_LATENCY_BUCKETS - 1 && us > server_latency_bounds_us[k])
		k++;
	pthread_mutex_lock(&s->qlock);
	if (rc == 0) {
		s->stats.claims++;
		s->stats.batch_bytes += batch_len(b);
		s->stats.claim_latency[k]++;
		s->stats.claim_latency_sum_s += us * 1e-6;
		if (hit)
			s->stats.prefetch_hits++;
		else
			s->stats.prefetch_misses++;
	} else if (rc == -ENODATA) {
		s->stats.end_of_stream++;
	} else {
		s->stats.claim_errors++;
	}
	if (journal_s >= 0) {
		s->stats.journal_commits++;
		s->stats.journal_commit_sum_s += journal_s;
	}
	pthread_mutex_unlock(&s->qlock);
}

int server_delivered(struct server *s, const struct batch *b)
{
	struct rank_state *rs = srv_find_rank(s, b->rank);
	uint64_t ci, before = 0, after = 0;
	int rc = 0;

	if (!rs || b->micros != 1 || layout_pos_ci(&s->cfg.layout, b->step, b->micro, &ci))
		return -EINVAL;
	pthread_mutex_lock(&rs->view_lock);
	if (b->generation == rs->generation && ci < rs->ci) {
		before = rs->dv.prefix;
		rc = delivery_mark(&rs->dv, ci);
		after = rs->dv.prefix;
		if (after != before && s->journal) {
			uint64_t step, micro;

			layout_ci_pos(&s->cfg.layout, after, &step, &micro);
			journal_delivered(s->journal, rs->rank, step, micro);
		}
	}
	pthread_mutex_unlock(&rs->view_lock);
	if (rc < 0) {
		srv_log(s, LOG_WARNING, "rank %" PRIu64 ": the delivery of step %" PRIu64 " micro %"
			PRIu64 " could not be recorded (%s); a restart serves it and the claims "
			"after it again", b->rank, b->step, b->micro, strerror(-rc));
		return rc;
	}
	return 0;
}

int server_finished(struct server *s, const struct batch *b)
{
	struct rank_state *rs = srv_find_rank(s, b->rank);
	int rc = server_delivered(s, b);
	double stalled;
	char why[256];

	if (rc || !s->journal)
		return rc;
	stalled = server_journal_wait(s);
	if (stalled > SERVER_JOURNAL_STALL_S) {
		if (!__atomic_exchange_n(&s->stall_logged, 1, __ATOMIC_RELAXED))
			srv_log(s, LOG_WARNING, "the journal has kept a commit waiting for %.1f s (its "
				"file system stalls): closes of next return without waiting for their "
				"delivery to be written, and a crash before it is written serves those "
				"batches again", stalled);
		return -ETIMEDOUT;
	}
	/* Outside the rank's lock: a claim holds it during its own commit, and the
	 * journal's lock orders the two. */
	pthread_mutex_lock(&rs->view_lock);
	rs->sync_since = clock_mono_s();
	pthread_mutex_unlock(&rs->view_lock);
	rc = journal_sync_delivered(s->journal, b->rank);
	pthread_mutex_lock(&rs->view_lock);
	rs->sync_since = 0;
	pthread_mutex_unlock(&rs->view_lock);
	if (!rc) {
		__atomic_store_n(&s->stall_logged, 0, __ATOMIC_RELAXED);
		return 0;
	}
	journal_last_error(s->journal, why, sizeof(why));
	srv_log(s, LOG_WARNING, "rank %" PRIu64 ": the delivery of step %" PRIu64 " micro %"
		PRIu64 " could not be written to the journal (%s); it goes with the rank's "
		"next claim, and a crash before that serves it again", b->rank, b->step,
		b->micro, *why ? why : strerror(-rc));
	pthread_mutex_lock(&s->qlock);
	s->stats.journal_errors++;
	pthread_mutex_unlock(&s->qlock);
	return rc;
}

/* pthread_mutex_clocklock(m, CLOCK_MONOTONIC, until): 0 or ETIMEDOUT. GCC 12's
 * ThreadSanitizer has no interceptor for it and reports the unlock that follows as the
 * unlock of an unlocked mutex; in that build a trylock loop stands in for it. */
static int lock_until(pthread_mutex_t *m, const struct timespec *until)
{
#ifdef __SANITIZE_THREAD__
	struct timespec nap = { 0, 1000000 };
	double end = (double)until->tv_sec + (double)until->tv_nsec * 1e-9;

	while (pthread_mutex_trylock(m)) {
		if (clock_mono_s() >= end)
			return ETIMEDOUT;
		nanosleep(&nap, NULL);
	}
	return 0;
#else
	return pthread_mutex_clocklock(m, CLOCK_MONOTONIC, until);
#endif
}

int server_stop_claims(struct server *s, double timeout_s)
{
	struct timespec until;
	double t = clock_mono_s() + timeout_s;
	int rc = 0;

	__atomic_store_n(&s->closing, 1, __ATOMIC_RELEASE);
	until.tv_sec = (time_t)t;
	until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
	/* A claim that passed its check before closing was set holds its rank's lock until
	 * it has recorded its claim: taking each lock once waits for them. */
	for (size_t i = 0; i < s->nranks && !rc; i++) {
		rc = -lock_until(&s->rs[i].lock, &until);
		if (!rc)
			srv_rank_unlock(s, &s->rs[i]);
	}
	return rc == -ETIMEDOUT ? rc : 0;
}

int server_claim(struct server *s, uint64_t rank, struct batch **out)
{
	struct rank_state *rs = srv_find_rank(s, rank);
	struct batch *b = NULL;
	double t0 = clock_mono_s(), journal_s = -1;
	int rc, hit = 0;

	if (!rs)
		return -ENOENT;
	srv_rank_lock(s, rs);
	/* checked under the rank's lock: server_stop_claims() passes every rank's lock once
	 * after setting it, so no claim starts after that pass */
	if (__atomic_load_n(&s->closing, __ATOMIC_ACQUIRE)) {
		rc = -ESHUTDOWN;
		goto out;
	}
	do
		rc = srv_past_end(s, rs->ci) ? -ENODATA : srv_take_cursor_batch(s, rs, &b, &hit);
	while (rc == -EAGAIN);
	if (rc)
		goto out;
	if (s->journal) {
		double tj = clock_mono_s();

		set_commit_since(rs, tj);
		rc = journal_claim(s->journal, rank, b->step, b->micro);
		set_commit_since(rs, 0);
		journal_s = clock_mono_s() - tj;
		if (rc) {
			char why[256];

			journal_last_error(s->journal, why, sizeof(why));
			srv_log(s, LOG_ERR, "rank %" PRIu64 ": the journal could not record the claim of "
				"step %" PRIu64 " micro %" PRIu64 " (%s); nothing was handed out",
				rank, b->step, b->micro, *why ? why : strerror(-rc));
			pthread_mutex_lock(&s->qlock);
			s->stats.journal_errors++;
			pthread_mutex_unlock(&s->qlock);
			srv_return_cursor_batch(s, rs, b);
			b = NULL;
			rc = -EIO;
			goto out;
		}
	}
	record_claim(rs, b);
	srv_ahead_step(s, rs, b->step);
	if (s->cfg.prefetch) {
		/* A reader that paces itself (a training step between claims) gets its batch
		 * read before the refill's decode competes with it for the CPU: the refill
		 * waits for the close. One that reads back to back keeps its lookahead.
		 * At most one refill waits, whatever the reader does with its handles, and
		 * only when the ring holds a batch beyond this one (prefetch >= 2). */
		if (!rs->primed) {
			rs->primed = 1;
			srv_fill_ring(s, rs);
		} else if (!rs->refill_pending && s->cfg.prefetch > 1 &&
		    t0 - rs->last_release > PACED_GAP_S) {
			rs->refill_pending = 1;
		} else if (rs->refill_pending) {
			rs->refill_pending = 0;
			srv_fill_ring(s, rs);
		} else {
			srv_enqueue(s, rs, rs->ci + s->cfg.prefetch - 1, rs->generation);
		}
	}
	*out = b;
out:
	srv_rank_unlock(s, rs);
	count_claim(s, rc, t0, journal_s, b, hit);
	return rc;
}

void server_release(struct server *s, uint64_t rank)
{
	struct rank_state *rs = srv_find_rank(s, rank);
	uint64_t ns = (uint64_t)(clock_mono_s() * 1e9);

	if (!rs)
		return;
	/* The rank's lock is busy while a claim of it commits, which may wait for as long
	 * as the journal's file system stalls: a close never waits for it. The one who
	 * holds it applies the close when it lets go (srv_rank_unlock). */
	__atomic_store_n(&rs->release_ns, ns ? ns : 1, __ATOMIC_RELEASE);
	if (pthread_mutex_trylock(&rs->lock) == 0)
		srv_rank_unlock(s, rs);
}

int server_peek(struct server *s, uint64_t rank, struct batch **out)
{
	struct rank_state *rs = srv_find_rank(s, rank);
	struct batch *b = NULL;
	int rc, hit;

	if (!rs)
		return -ENOENT;
	srv_rank_lock(s, rs);
	do
		rc = srv_past_end(s, rs->ci) ? -ENODATA : srv_take_cursor_batch(s, rs, &b, &hit);
	while (rc == -EAGAIN);
	if (!rc) {
		*out = batch_copy(b);
		rc = *out ? 0 : -ENOMEM;
		srv_return_cursor_batch(s, rs, b); /* peek leaves the ring as it was */
	}
	srv_rank_unlock(s, rs);
	return rc;
}

void server_step_opened(struct server *s, uint64_t step)
{
	if (s->journal)
		journal_note_reached(s->journal, step + 1); /* a checkpoint may name step + 1 */
}

int server_rank_state(struct server *s, uint64_t rank, uint64_t *cursor_step,
		      uint64_t *cursor_micro, struct claim_info *last)
{
	struct rank_state *rs = srv_find_rank(s, rank);

	if (!rs)
		return -ENOENT;
	pthread_mutex_lock(&rs->view_lock);
	layout_ci_pos(&s->cfg.layout, rs->ci, cursor_step, cursor_micro);
	*last = rs->last;
	last->ids = NULL;
	if (rs->last.valid && rs->last.count) {
		last->ids = malloc(rs->last.count * sizeof(uint64_t));
		if (last->ids)
			memcpy(last->ids, rs->last.ids, rs->last.count * sizeof(uint64_t));
		else
			last->count = 0;
	}
	pthread_mutex_unlock(&rs->view_lock);
	return 0;
}

static const char *journal_why(struct server *s, char *why)
{
	journal_last_error(s->journal, why, 256);
	return *why ? why : "the step must lie between the layout's start step and the furthest rank cursor";
}

int server_checkpoint(struct server *s, uint64_t step)
{
	char why[256];
	int rc;

	if (!s->journal)
		return -ENOSYS;
	rc = journal_checkpoint(s->journal, step);
	if (rc == -EINVAL)
		srv_log(s, LOG_WARNING, "control: refused %s", journal_why(s, why));
	else if (rc)
		srv_log(s, LOG_ERR, "checkpoint %" PRIu64 " could not be journaled: %s", step,
			journal_why(s, why));
	return rc;
}

int server_rewind(struct server *s, uint64_t step)
{
	double t0 = clock_mono_s();
	char why[256];
	int rc;

	if (!s->journal)
		return -ENOSYS;
	/* Every rank lock is held across the journal write so no claim slips between the
	 * journal's rewind and the in-memory one. Locks are taken in rank order. */
	for (size_t i = 0; i < s->nranks; i++) {
		srv_rank_lock(s, &s->rs[i]);
		set_commit_since(&s->rs[i], t0); /* every claim now waits for this commit */
	}
	rc = journal_rewind(s->journal, step);
	for (size_t i = 0; i < s->nranks; i++)
		set_commit_since(&s->rs[i], 0);
	if (!rc) {
		for (size_t i = 0; i < s->nranks; i++) {
			struct rank_state *rs = &s->rs[i];
			uint64_t ci = journal_ci(s, rs); /* (step, 0) */

			pthread_mutex_lock(&rs->view_lock);
			rs->ci = ci;
			rs->generation++;
			delivery_reset(&rs->dv, rs->ci);
			pthread_mutex_unlock(&rs->view_lock);
			for (unsigned k = 0; k < s->cfg.prefetch; k++)
				if (rs->slots[k].state != SLOT_DECODING)
					srv_slot_clear(s, &rs->slots[k]);
				else
					rs->slots[k].state = SLOT_EMPTY; /* the worker drops its result */
			if (rs->primed)
				srv_fill_ring(s, rs);
		}
	}
	for (size_t i = s->nranks; i-- > 0;)
		srv_rank_unlock(s, &s->rs[i]);
	if (rc == -EINVAL)
		srv_log(s, LOG_WARNING, "control: refused %s", journal_why(s, why));
	else if (rc)
		srv_log(s, LOG_ERR, "rewind %" PRIu64 " could not be journaled: %s", step,
			journal_why(s, why));
	return rc;
}

uint64_t server_consumed(struct server *s)
{
	uint64_t prefix = UINT64_MAX, step, micro;

	for (size_t i = 0; i < s->nranks; i++) {
		pthread_mutex_lock(&s->rs[i].view_lock);
		if (s->rs[i].dv.prefix < prefix)
			prefix = s->rs[i].dv.prefix;
		pthread_mutex_unlock(&s->rs[i].view_lock);
	}
	/* the slowest rank's delivered prefix: its whole steps are the job's */
	layout_ci_pos(&s->cfg.layout, prefix, &step, &micro);
	return layout_consumed_at(&s->cfg.layout, step, NULL);
}

double server_journal_wait(struct server *s)
{
	double now = clock_mono_s(), wait = 0;

	for (size_t i = 0; i < s->nranks; i++) {
		pthread_mutex_lock(&s->rs[i].view_lock);
		if (s->rs[i].commit_since > 0 && now - s->rs[i].commit_since > wait)
			wait = now - s->rs[i].commit_since;
		if (s->rs[i].sync_since > 0 && now - s->rs[i].sync_since > wait)
			wait = now - s->rs[i].sync_since;
		pthread_mutex_unlock(&s->rs[i].view_lock);
	}
	return wait;
}

int server_journal_stalled(struct server *s)
{
	return server_journal_wait(s) > SERVER_JOURNAL_STALL_S;
}

void server_get_stats(struct server *s, struct server_stats *out)
{
	pthread_mutex_lock(&s->qlock);
	*out = s->stats;
	pthread_mutex_unlock(&s->qlock);
}

uint64_t server_progress_step(const struct server *s, const struct batch *b)
{
	const struct layout *l = &s->cfg.layout;
	uint64_t g;

	/* reading b completes the rank's share of its step when its micro-batches reach the
	 * step's last (a step share: 0 and A); W, B and m are the mount's for every share */
	if (!b->micros || b->micro + b->micros != layout_micros(l) ||
	    layout_micro_step_gsn(l, b->rank, b->micro, b->gsn, &g))
		return PROGRESS_NO_STEP;
	return g;
}

const struct server_config *server_get_config(const struct server *s)
{
	return &s->cfg;
}

int server_checkpoint_at(struct server *s, uint64_t gsn, uint64_t step)
{
	char why[256];
	int rc;

	if (!s->journal)
		return -ENOSYS;
	rc = journal_checkpoint_at(s->journal, gsn, step);
	if (rc == -EINVAL)
		srv_log(s, LOG_WARNING, "control: refused %s", journal_why(s, why));
	else if (rc)
		srv_log(s, LOG_ERR, "checkpoint samples:%" PRIu64 "@%" PRIu64 " could not be "
			"journaled: %s", gsn, step, journal_why(s, why));
	return rc;
}
