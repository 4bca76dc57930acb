/*
 * prefetch.c: what keeps claims from waiting for a decode. Each served rank has a ring
 * of cfg.prefetch slots, the slot of claim index ci at ci % prefetch, that decode jobs
 * fill on cfg.workers threads (core/util/jobq.h) while the rank reads; a claim takes its
 * batch from the ring or, on a miss, decodes it itself on a sample reader of the pool.
 * Batch buffers come back to a pool when a batch is freed, and the next batch is
 * encoded into one: a batch of megabytes then costs no mmap/munmap and no page faults.
 * Prefetch never claims: the cursor is serve.c's. Locking: serve_int.h.
 */
#include "serve_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sample_reader *srv_reader_get(struct server *s)
{
	struct sample_reader *r = NULL;

	pthread_mutex_lock(&s->readers.lock);
	if (s->readers.count)
		r = s->readers.free[--s->readers.count];
	pthread_mutex_unlock(&s->readers.lock);
	return r ? r : sample_reader_new(s->ds);
}

void srv_reader_put(struct server *s, struct sample_reader *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&s->readers.lock);
	if (ARRAY_GROW(s->readers.free, s->readers.cap, s->readers.count + 1)) {
		pthread_mutex_unlock(&s->readers.lock);
		sample_reader_free(r);
		return;
	}
	s->readers.free[s->readers.count++] = r;
	pthread_mutex_unlock(&s->readers.lock);
}

int srv_past_end(const struct server *s, uint64_t ci)
{
	uint64_t step, micro;

	layout_ci_pos(&s->cfg.layout, ci, &step, &micro);
	return !layout_step_in_stream(&s->cfg.layout, s->limit, step);
}


struct buf srv_pool_take(struct server *s)
{
	struct buf b = BUF_INIT;

	pthread_mutex_lock(&s->pool_lock);
	if (s->pool_count)
		b = s->pool[--s->pool_count];
	pthread_mutex_unlock(&s->pool_lock);
	return b;
}

void server_batch_free(struct server *s, struct batch *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&s->pool_lock);
	if (b->data.cap && s->pool_count < s->pool_cap) {
		s->pool[s->pool_count++] = b->data;
		b->data = (struct buf)BUF_INIT;
	}
	pthread_mutex_unlock(&s->pool_lock);
	batch_free(b);
}

static int build_ci(struct server *s, struct sample_reader *r, uint64_t rank, uint64_t ci,
		    struct batch **out, uint64_t *bad_id)
{
	uint64_t step, micro;
	int rc;

	if (!r)
		return -ENOMEM;
	layout_ci_pos(&s->cfg.layout, ci, &step, &micro);
	if (encode_views_possible(s->info, s->cfg.format)) {
		rc = batch_encode(r, s->info, &s->cfg.order, &s->cfg.layout, s->cfg.format,
				 rank, step, micro, 1, 1, (struct buf)BUF_INIT, out, bad_id);
		if (rc != -ENOTSUP)
			return rc;
	}
	return batch_encode(r, s->info, &s->cfg.order, &s->cfg.layout, s->cfg.format,
			   rank, step, micro, 1, 0, srv_pool_take(s), out, bad_id);
}

static void run_decode(struct jobq_job *job, void *reader, int cancelled);

/* Keep a finished decode job for the next srv_enqueue(). */
static void job_put(struct server *s, struct decode_job *d)
{
	pthread_mutex_lock(&s->jobs_lock);
	d->job.next = s->free_jobs ? &s->free_jobs->job : NULL;
	s->free_jobs = d;
	pthread_mutex_unlock(&s->jobs_lock);
}

void srv_enqueue(struct server *s, struct rank_state *rs, uint64_t ci, uint64_t gen)
{
	struct decode_job *d;

	pthread_mutex_lock(&s->jobs_lock);
	d = s->free_jobs;
	if (d)
		s->free_jobs = (struct decode_job *)d->job.next;
	pthread_mutex_unlock(&s->jobs_lock);
	if (!d)
		d = malloc(sizeof(*d));
	/* A dropped job only costs a synchronous decode at claim time. */
	if (!d)
		return;
	*d = (struct decode_job){ .job.run = run_decode, .s = s, .rs = rs, .ci = ci,
				  .generation = gen };
	if (jobq_submit(s->decoders, &d->job))
		job_put(s, d);
}

void srv_slot_clear(struct server *s, struct slot *sl)
{
	server_batch_free(s, sl->batch);
	memset(sl, 0, sizeof(*sl));
}

/* Decoder: decode the claim index a job names into its slot, unless the cursor moved on. */
static void decode_into_slot(struct server *s, struct sample_reader *r,
			     const struct decode_job *jb)
{
	struct rank_state *rs = jb->rs;
	unsigned k = s->cfg.prefetch;
	struct slot *sl = &rs->slots[jb->ci % k];
	struct batch *b = NULL;
	uint64_t bad = 0;
	int rc;

	srv_rank_lock(s, rs);
	if (jb->generation != rs->generation || jb->ci < rs->ci || jb->ci >= rs->ci + k ||
	    sl->state != SLOT_EMPTY || srv_past_end(s, jb->ci)) {
		srv_rank_unlock(s, rs);
		return;
	}
	sl->state = SLOT_DECODING;
	sl->ci = jb->ci;
	srv_rank_unlock(s, rs);

	rc = build_ci(s, r, rs->rank, jb->ci, &b, &bad);

	srv_rank_lock(s, rs);
	if (jb->generation != rs->generation || sl->state != SLOT_DECODING || sl->ci != jb->ci) {
		server_batch_free(s, b); /* a rewind dropped the slot meanwhile */
	} else if (rc) {
		sl->state = SLOT_FAILED;
		sl->err = rc;
		sl->bad_id = bad;
	} else {
		sl->state = SLOT_READY;
		sl->batch = b;
	}
	pthread_cond_broadcast(&rs->decoded);
	srv_rank_unlock(s, rs);
	if (!rc) {
		pthread_mutex_lock(&s->qlock);
		s->stats.prefetch_decoded++;
		pthread_mutex_unlock(&s->qlock);
	}
}

/* A decode job (jobq.h): run on a decoder with its sample reader, or dropped at stop. */
static void run_decode(struct jobq_job *job, void *reader, int cancelled)
{
	struct decode_job *d = (struct decode_job *)job;

	if (!cancelled)
		decode_into_slot(d->s, reader, d);
	job_put(d->s, d);
}

static void *decoder_init(void *arg)
{
	const struct server *s = arg;

	return sample_reader_new(s->ds);
}

static void decoder_fini(void *arg, void *reader)
{
	(void)arg;
	sample_reader_free(reader);
}

struct rank_state *srv_find_rank(struct server *s, uint64_t rank)
{
	ssize_t i = rankset_index(&s->ranks, rank); /* rs[i] is ranks.ranks[i]'s */

	return i < 0 ? NULL : &s->rs[i];
}

/* Enqueue a decode for every claim index of rank's ring (decode_into_slot skips the slots that
 * are decoding, ready, or left behind). With rs->lock held, or before serving. */
void srv_fill_ring(struct server *s, struct rank_state *rs)
{
	for (unsigned i = 0; i < s->cfg.prefetch; i++)
		srv_enqueue(s, rs, rs->ci + i, rs->generation);
}

/*
 * The batch at rank's cursor, with rs->lock held: from the prefetch ring when ready
 * (waiting for an in-flight decode of it), else decoded here. The slot is left empty;
 * the caller owns the batch.
 */
int srv_take_cursor_batch(struct server *s, struct rank_state *rs, struct batch **out,
			  int *hit)
{
	struct slot *sl = s->cfg.prefetch ? &rs->slots[rs->ci % s->cfg.prefetch] : NULL;
	uint64_t bad = 0;
	int rc;

	if (sl && sl->state == SLOT_DECODING && sl->ci == rs->ci) {
		/* The lock is let go while waiting: another opener of this rank may take
		 * this batch and move the cursor (maybe past the end). Start over. */
		pthread_cond_wait(&rs->decoded, &rs->lock);
		return -EAGAIN;
	}
	if (sl && sl->state != SLOT_EMPTY && sl->state != SLOT_DECODING && sl->ci != rs->ci)
		srv_slot_clear(s, sl); /* decoded for a claim index the cursor has passed */
	*hit = 0;
	if (sl && sl->ci == rs->ci && sl->state == SLOT_READY) {
		*out = sl->batch;
		sl->batch = NULL;
		sl->state = SLOT_EMPTY;
		*hit = 1;
		return 0;
	}
	if (sl && sl->ci == rs->ci && sl->state == SLOT_FAILED) {
		rc = sl->err;
		bad = sl->bad_id;
		srv_slot_clear(s, sl); /* a later open retries the decode */
	} else {
		struct sample_reader *r = srv_reader_get(s);

		rc = build_ci(s, r, rs->rank, rs->ci, out, &bad);
		srv_reader_put(s, r);
	}
	if (rc) {
		char what[48];

		snprintf(what, sizeof(what), "rank %" PRIu64 " next", rs->rank);
		srv_log_decode_error(s, what, rc, bad);
		pthread_mutex_lock(&s->qlock);
		s->stats.decode_errors += rc == -EIO;
		pthread_mutex_unlock(&s->qlock);
	}
	return rc;
}

/* Put a batch back into the cursor's slot (a claim that could not be journaled). */
void srv_return_cursor_batch(struct server *s, struct rank_state *rs, struct batch *b)
{
	struct slot *sl = s->cfg.prefetch ? &rs->slots[rs->ci % s->cfg.prefetch] : NULL;

	if (!sl || sl->state != SLOT_EMPTY) {
		server_batch_free(s, b);
		return;
	}
	sl->state = SLOT_READY;
	sl->ci = rs->ci;
	sl->batch = b;
}

int srv_prefetch_start(struct server *s)
{
	/* Decoders never take signals: a SIGTERM must land on a thread of the caller's (the
	 * FUSE loop's), whose interrupted wait notices the exit. Delivered to a decoder
	 * blocked on its condition variable, it would go unnoticed until the next request. */
	struct jobq_config qc = {
		.max_threads = s->cfg.workers, .name = "zephon-decode", .block_signals = 1,
		.thread_init = decoder_init, .thread_fini = decoder_fini, .arg = s,
	};
	int rc = jobq_new(&qc, &s->decoders);

	if (rc || (rc = jobq_start(s->decoders, s->cfg.workers)))
		return rc;
	if (s->nranks <= PRIME_AT_START_MAX)
		for (size_t i = 0; i < s->nranks; i++) {
			srv_fill_ring(s, &s->rs[i]);
			s->rs[i].primed = 1;
		}
	return 0;
}

void srv_prefetch_stop(struct server *s)
{
	jobq_free(s->decoders); /* queued decodes are dropped, running ones waited for */
	while (s->free_jobs) {
		struct decode_job *d = s->free_jobs;

		s->free_jobs = (struct decode_job *)d->job.next;
		free(d);
	}
}

/* Apply a close server_release() left (rs->lock held): note its time, and start the
 * refill its claim left to it. */
static void apply_release(struct server *s, struct rank_state *rs)
{
	uint64_t ns = __atomic_exchange_n(&rs->release_ns, 0, __ATOMIC_ACQ_REL);

	if (!ns)
		return;
	rs->last_release = (double)ns * 1e-9;
	if (rs->refill_pending) {
		rs->refill_pending = 0;
		srv_fill_ring(s, rs);
	}
}

void srv_rank_lock(struct server *s, struct rank_state *rs)
{
	pthread_mutex_lock(&rs->lock);
	apply_release(s, rs);
}

void srv_rank_unlock(struct server *s, struct rank_state *rs)
{
	apply_release(s, rs);
	pthread_mutex_unlock(&rs->lock);
	/* a close that came after the check above, and found the lock busy, is applied by
	 * whoever takes the lock next, or here */
	while (__atomic_load_n(&rs->release_ns, __ATOMIC_ACQUIRE) &&
	       pthread_mutex_trylock(&rs->lock) == 0) {
		apply_release(s, rs);
		pthread_mutex_unlock(&rs->lock);
	}
}
