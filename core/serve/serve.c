/*
 * serve.c: struct server, its one home: serving's cursor, claims, deliveries, rewinds
 * and stats (serve.h), and what the other files of the server read of it (serve_int.h).
 */
#include "serve_int.h"
#include "fault.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

int server_new(const struct dataset *ds, const struct server_config *cfg,
	       struct journal *j, struct server **out)
{
	struct server *s = NULL;
	struct srv_parts *p;
	int rc = srv_alloc(ds, cfg, j, &s);

	if (rc)
		goto err_free;
	p = srv_parts(s);
	if (srv_log_new(cfg, ds, &p->log) || srv_pools_new(cfg, &p->pools) ||
	    claimtab_new(&p->claims)) {
		rc = -ENOMEM;
		goto err_free;
	}
	if (j) /* the mount reports deliveries (server_delivered) */
		journal_track_delivery(j);
	if ((rc = srv_ahead_start(s, &p->ahead)) || (rc = srv_prefetch_start(s)))
		goto err_free;
	*out = s;
	return 0;

err_free:
	server_free(s);
	return rc;
}

void server_free(struct server *s)
{
	struct srv_parts *p;

	if (!s)
		return;
	p = srv_parts(s);
	srv_ahead_free(p->ahead);
	p->ahead = NULL;
	srv_prefetch_stop(s);
	srv_pools_free(p->pools);
	srv_log_free(p->log);
	claimtab_free(p->claims);
	srv_release(s);
}

/* A claim that comes this long after the rank's last close is a paced reader's: its
 * ring's refill waits for the close of the batch it claims (server_release). Readers
 * that read back to back (a close, then the next open within microseconds) refill at
 * once. */
#define PACED_GAP_S 0.002

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

int server_delivered(struct server *s, const struct batch *b)
{
	struct rank_state *rs = srv_find_rank(s, b->rank);
	uint64_t ci, before = 0, after = 0;
	int rc = 0;

	if (!rs || b->micros != 1 || layout_pos_ci(srv_layout(s), b->step, b->micro, &ci))
		return -EINVAL;
	pthread_mutex_lock(&rs->view_lock);
	if (b->generation == rs->generation && ci < rs->ci) {
		before = rs->dv.prefix;
		rc = delivery_mark(&rs->dv, ci);
		after = rs->dv.prefix;
		if (after != before && srv_journal(s)) {
			uint64_t step, micro;

			layout_ci_pos(srv_layout(s), after, &step, &micro);
			journal_delivered(srv_journal(s), rs->rank, step, micro);
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

	if (rc || !srv_journal(s))
		return rc;
	stalled = server_journal_wait(s);
	if (stalled > SERVER_JOURNAL_STALL_S) {
		if (!srv_stall_note(s, 1))
			srv_log(s, LOG_WARNING, "the journal has kept a commit waiting for %.1f s (its "
				"file system stalls): the deliveries of closes of next now go with each "
				"rank's next claim instead of a commit of their own, and a crash before "
				"they are written serves those batches again", stalled);
		return -ETIMEDOUT;
	}
	/* Outside the rank's lock: a claim holds it during its own commit, and the
	 * journal's lock orders the two. */
	pthread_mutex_lock(&rs->view_lock);
	rs->sync_since = clock_mono_s();
	pthread_mutex_unlock(&rs->view_lock);
	rc = journal_sync_delivered(srv_journal(s), b->rank);
	pthread_mutex_lock(&rs->view_lock);
	rs->sync_since = 0;
	pthread_mutex_unlock(&rs->view_lock);
	if (!rc) {
		srv_stall_note(s, 0);
		return 0;
	}
	journal_last_error(srv_journal(s), why, sizeof(why));
	srv_log(s, LOG_WARNING, "rank %" PRIu64 ": the delivery of step %" PRIu64 " micro %"
		PRIu64 " could not be written to the journal (%s); it goes with the rank's "
		"next claim, and a crash before that serves it again", b->rank, b->step,
		b->micro, *why ? why : strerror(-rc));
	srv_count(s, SRV_JOURNAL_ERRORS, 1);
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

	srv_close(s);
	until.tv_sec = (time_t)t;
	until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
	/* A claim that passed its check before closing was set holds its rank's lock until
	 * it has recorded its claim: taking each lock once waits for them. */
	for (size_t i = 0; i < srv_nranks(s) && !rc; i++) {
		rc = -lock_until(&srv_rank_at(s, i)->lock, &until);
		if (!rc)
			srv_rank_unlock(s, srv_rank_at(s, i));
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
	if (srv_closing(s)) {
		rc = -ESHUTDOWN;
		goto out;
	}
	do
		rc = srv_past_end(s, rs->ci) ? -ENODATA : srv_take_cursor_batch(s, rs, &b, &hit);
	while (rc == -EAGAIN);
	if (rc)
		goto out;
	/* A close whose reply may have reached its reader already (this claim's opener,
	 * perhaps) records its delivery first: the commit below then holds it. Its thread
	 * is between its reply and that record, which takes no lock this one holds. */
	while (__atomic_load_n(&rs->closing, __ATOMIC_ACQUIRE))
		sched_yield();
	if (srv_journal(s)) {
		double tj = clock_mono_s();

		set_commit_since(rs, tj);
		rc = journal_claim(srv_journal(s), rank, b->step, b->micro);
		set_commit_since(rs, 0);
		journal_s = clock_mono_s() - tj;
		if (rc) {
			char why[256];

			journal_last_error(srv_journal(s), why, sizeof(why));
			srv_log(s, LOG_ERR, "rank %" PRIu64 ": the journal could not record the claim of "
				"step %" PRIu64 " micro %" PRIu64 " (%s); nothing was handed out",
				rank, b->step, b->micro, *why ? why : strerror(-rc));
			srv_count(s, SRV_JOURNAL_ERRORS, 1);
			srv_return_cursor_batch(s, rs, b);
			b = NULL;
			rc = -EIO;
			goto out;
		}
	}
	fault_point(FAULT_CLAIM); /* committed; the open not answered yet */
	record_claim(rs, b);
	srv_ahead_step(s, rs, b->step);
	if (server_get_config(s)->prefetch) {
		/* A reader that paces itself (a training step between claims) gets its batch
		 * read before the refill's decode competes with it for the CPU: the refill
		 * waits for the close. One that reads back to back keeps its lookahead.
		 * At most one refill waits, whatever the reader does with its handles, and
		 * only when the ring holds a batch beyond this one (prefetch >= 2). */
		if (!rs->primed) {
			rs->primed = 1;
			srv_fill_ring(s, rs);
		} else if (!rs->refill_pending && server_get_config(s)->prefetch > 1 &&
		    t0 - rs->last_release > PACED_GAP_S) {
			rs->refill_pending = 1;
		} else if (rs->refill_pending) {
			rs->refill_pending = 0;
			srv_fill_ring(s, rs);
		} else {
			srv_enqueue(s, rs, rs->ci + server_get_config(s)->prefetch - 1, rs->generation);
		}
	}
	*out = b;
out:
	srv_rank_unlock(s, rs);
	srv_count_claim(s, &(struct srv_claim_count){ rc, (clock_mono_s() - t0) * 1e6,
						      journal_s, rc ? 0 : batch_len(b), hit });
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
	if (srv_journal(s))
		journal_note_reached(srv_journal(s), step + 1); /* a checkpoint may name step + 1 */
}

int server_rank_state(struct server *s, uint64_t rank, uint64_t *cursor_step,
		      uint64_t *cursor_micro, struct claim_info *last)
{
	struct rank_state *rs = srv_find_rank(s, rank);

	if (!rs)
		return -ENOENT;
	pthread_mutex_lock(&rs->view_lock);
	layout_ci_pos(srv_layout(s), rs->ci, cursor_step, cursor_micro);
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
	journal_last_error(srv_journal(s), why, 256);
	return *why ? why : "the step must lie between the layout's start step and the furthest rank cursor";
}

int server_checkpoint(struct server *s, uint64_t step)
{
	char why[256];
	int rc;

	if (!srv_journal(s))
		return -ENOSYS;
	rc = journal_checkpoint(srv_journal(s), step);
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

	if (!srv_journal(s))
		return -ENOSYS;
	/* Every rank lock is held across the journal write so no claim slips between the
	 * journal's rewind and the in-memory one. Locks are taken in rank order. */
	for (size_t i = 0; i < srv_nranks(s); i++) {
		srv_rank_lock(s, srv_rank_at(s, i));
		set_commit_since(srv_rank_at(s, i), t0); /* every claim now waits for this commit */
	}
	rc = journal_rewind(srv_journal(s), step);
	for (size_t i = 0; i < srv_nranks(s); i++)
		set_commit_since(srv_rank_at(s, i), 0);
	if (!rc) {
		for (size_t i = 0; i < srv_nranks(s); i++) {
			struct rank_state *rs = srv_rank_at(s, i);
			uint64_t ci = srv_journal_ci(s, rs); /* (step, 0) */

			pthread_mutex_lock(&rs->view_lock);
			rs->ci = ci;
			rs->generation++;
			delivery_reset(&rs->dv, rs->ci);
			pthread_mutex_unlock(&rs->view_lock);
			for (unsigned k = 0; k < server_get_config(s)->prefetch; k++)
				if (rs->slots[k].state != SLOT_DECODING)
					srv_slot_clear(s, &rs->slots[k]);
				else
					rs->slots[k].state = SLOT_EMPTY; /* the worker drops its result */
			if (rs->primed)
				srv_fill_ring(s, rs);
		}
	}
	for (size_t i = srv_nranks(s); i-- > 0;)
		srv_rank_unlock(s, srv_rank_at(s, i));
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

	for (size_t i = 0; i < srv_nranks(s); i++) {
		struct rank_state *rs = srv_rank_at(s, i);

		pthread_mutex_lock(&rs->view_lock);
		if (rs->dv.prefix < prefix)
			prefix = rs->dv.prefix;
		pthread_mutex_unlock(&rs->view_lock);
	}
	/* the slowest rank's delivered prefix: its whole steps are the job's */
	layout_ci_pos(srv_layout(s), prefix, &step, &micro);
	return layout_consumed_at(srv_layout(s), step, NULL);
}

double server_journal_wait(struct server *s)
{
	double now = clock_mono_s(), wait = 0;

	for (size_t i = 0; i < srv_nranks(s); i++) {
		struct rank_state *rs = srv_rank_at(s, i);

		pthread_mutex_lock(&rs->view_lock);
		if (rs->commit_since > 0 && now - rs->commit_since > wait)
			wait = now - rs->commit_since;
		if (rs->sync_since > 0 && now - rs->sync_since > wait)
			wait = now - rs->sync_since;
		pthread_mutex_unlock(&rs->view_lock);
	}
	return wait;
}

int server_journal_stalled(struct server *s)
{
	return server_journal_wait(s) > SERVER_JOURNAL_STALL_S;
}

uint64_t server_progress_step(const struct server *s, const struct batch *b)
{
	const struct layout *l = srv_layout(s);
	uint64_t g;

	/* reading b completes the rank's share of its step when its micro-batches reach the
	 * step's last (a step share: 0 and A); W, B and m are the mount's for every share */
	if (!b->micros || b->micro + b->micros != layout_micros(l) ||
	    layout_micro_step_gsn(l, b->rank, b->micro, b->gsn, &g))
		return PROGRESS_NO_STEP;
	return g;
}

int server_checkpoint_at(struct server *s, uint64_t gsn, uint64_t step)
{
	char why[256];
	int rc;

	if (!srv_journal(s))
		return -ENOSYS;
	rc = journal_checkpoint_at(srv_journal(s), gsn, step);
	if (rc == -EINVAL)
		srv_log(s, LOG_WARNING, "control: refused %s", journal_why(s, why));
	else if (rc)
		srv_log(s, LOG_ERR, "checkpoint samples:%" PRIu64 "@%" PRIu64 " could not be "
			"journaled: %s", gsn, step, journal_why(s, why));
	return rc;
}
