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

/* What decodes share: the decoders, the decode jobs kept for the next ones, free sample
 * readers for the threads that decode outside the workers (claims that miss the
 * prefetch ring, peek, step, samples), and the buffers of freed batches. Each under a
 * lock of its own, never held with another. */
struct srv_pools {
	struct jobq *decoders;   /* cfg.workers threads, each with a sample reader */
	/* Decode jobs done, kept for the next ones: a claim queues one, and a malloc and
	 * free per claim would be the only allocation of a steady stream. */
	pthread_mutex_t jobs_lock;
	struct decode_job *free_jobs;   /* linked through job.next */
	pthread_mutex_t readers_lock;
	struct sample_reader **readers;
	size_t nreaders, readers_cap;
	/* Batch buffers come back here when a batch is freed, and the next batch is encoded
	 * into one: a batch of megabytes then costs no mmap/munmap and no page faults (each
	 * munmap of a multi-threaded process is a TLB shootdown on every CPU). */
	pthread_mutex_t pool_lock;
	struct buf *pool;
	size_t pool_count, pool_cap;
};

int srv_pools_new(const struct server_config *cfg, struct srv_pools **out)
{
	struct srv_pools *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	/* enough buffers for every rank's ring, the batches being read, and the workers */
	p->pool_cap = cfg->ranks->count * (cfg->prefetch + 2) + cfg->workers;
	p->pool_cap = p->pool_cap > 4096 ? 4096 : p->pool_cap;
	p->pool = calloc(p->pool_cap, sizeof(*p->pool));
	if (!p->pool) {
		free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->jobs_lock, NULL);
	pthread_mutex_init(&p->readers_lock, NULL);
	pthread_mutex_init(&p->pool_lock, NULL);
	*out = p;
	return 0;
}

void srv_pools_free(struct srv_pools *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->pool_count; i++)
		buf_release(&p->pool[i]);
	free(p->pool);
	for (size_t i = 0; i < p->nreaders; i++)
		sample_reader_free(p->readers[i]);
	free(p->readers);
	pthread_mutex_destroy(&p->jobs_lock);
	pthread_mutex_destroy(&p->readers_lock);
	pthread_mutex_destroy(&p->pool_lock);
	free(p);
}

struct sample_reader *srv_reader_get(struct server *s)
{
	struct srv_pools *p = srv_pools(s);
	struct sample_reader *r = NULL;

	pthread_mutex_lock(&p->readers_lock);
	if (p->nreaders)
		r = p->readers[--p->nreaders];
	pthread_mutex_unlock(&p->readers_lock);
	return r ? r : sample_reader_new(srv_dataset(s));
}

void srv_reader_put(struct server *s, struct sample_reader *r)
{
	struct srv_pools *p = srv_pools(s);

	if (!r)
		return;
	pthread_mutex_lock(&p->readers_lock);
	if (ARRAY_GROW(p->readers, p->readers_cap, p->nreaders + 1)) {
		pthread_mutex_unlock(&p->readers_lock);
		sample_reader_free(r);
		return;
	}
	p->readers[p->nreaders++] = r;
	pthread_mutex_unlock(&p->readers_lock);
}

int srv_past_end(const struct server *s, uint64_t ci)
{
	const struct layout *l = &server_get_config(s)->layout;
	uint64_t step, micro;

	layout_ci_pos(l, ci, &step, &micro);
	return !layout_step_in_stream(l, srv_limit(s), step);
}


struct buf srv_pool_take(struct server *s)
{
	struct srv_pools *p = srv_pools(s);
	struct buf b = BUF_INIT;

	pthread_mutex_lock(&p->pool_lock);
	if (p->pool_count)
		b = p->pool[--p->pool_count];
	pthread_mutex_unlock(&p->pool_lock);
	return b;
}

void server_batch_free(struct server *s, struct batch *b)
{
	struct srv_pools *p = srv_pools(s);

	if (!b)
		return;
	pthread_mutex_lock(&p->pool_lock);
	if (b->data.cap && p->pool_count < p->pool_cap) {
		p->pool[p->pool_count++] = b->data;
		b->data = (struct buf)BUF_INIT;
	}
	pthread_mutex_unlock(&p->pool_lock);
	batch_free(b);
}

static int build_ci(struct server *s, struct sample_reader *r, uint64_t rank, uint64_t ci,
		    struct batch **out, uint64_t *bad_id)
{
	const struct server_config *c = server_get_config(s);
	struct batch_spec sp = { srv_info(s), &c->order, &c->layout, c->format, rank, 0, 0, 1 };
	int rc;

	if (!r)
		return -ENOMEM;
	layout_ci_pos(&c->layout, ci, &sp.step, &sp.micro);
	if (encode_views_possible(sp.info, c->format)) {
		rc = batch_encode(r, &sp, 1, (struct buf)BUF_INIT, out, bad_id);
		if (rc != -ENOTSUP)
			return rc;
	}
	return batch_encode(r, &sp, 0, srv_pool_take(s), out, bad_id);
}

static void run_decode(struct jobq_job *job, void *reader, int cancelled);

/* Keep a finished decode job for the next srv_enqueue(). */
static void job_put(struct server *s, struct decode_job *d)
{
	struct srv_pools *p = srv_pools(s);

	pthread_mutex_lock(&p->jobs_lock);
	d->job.next = p->free_jobs ? &p->free_jobs->job : NULL;
	p->free_jobs = d;
	pthread_mutex_unlock(&p->jobs_lock);
}

void srv_enqueue(struct server *s, struct rank_state *rs, uint64_t ci, uint64_t gen)
{
	struct srv_pools *p = srv_pools(s);
	struct decode_job *d;

	pthread_mutex_lock(&p->jobs_lock);
	d = p->free_jobs;
	if (d)
		p->free_jobs = (struct decode_job *)d->job.next;
	pthread_mutex_unlock(&p->jobs_lock);
	if (!d)
		d = malloc(sizeof(*d));
	/* A dropped job only costs a synchronous decode at claim time. */
	if (!d)
		return;
	*d = (struct decode_job){ .job.run = run_decode, .s = s, .rs = rs, .ci = ci,
				  .generation = gen };
	if (jobq_submit(p->decoders, &d->job))
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
	unsigned k = server_get_config(s)->prefetch;
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
	if (!rc)
		srv_count(s, SRV_PREFETCH_DECODED, 1);
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

	return sample_reader_new(srv_dataset(s));
}

static void decoder_fini(void *arg, void *reader)
{
	(void)arg;
	sample_reader_free(reader);
}

/* Enqueue a decode for every claim index of rank's ring (decode_into_slot skips the slots that
 * are decoding, ready, or left behind). With rs->lock held, or before serving. */
void srv_fill_ring(struct server *s, struct rank_state *rs)
{
	for (unsigned i = 0; i < server_get_config(s)->prefetch; i++)
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
	unsigned k = server_get_config(s)->prefetch;
	struct slot *sl = k ? &rs->slots[rs->ci % k] : NULL;
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
		srv_count(s, SRV_DECODE_ERRORS, rc == -EIO);
	}
	return rc;
}

/* Put a batch back into the cursor's slot (a claim that could not be journaled). */
void srv_return_cursor_batch(struct server *s, struct rank_state *rs, struct batch *b)
{
	unsigned k = server_get_config(s)->prefetch;
	struct slot *sl = k ? &rs->slots[rs->ci % k] : NULL;

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
	struct srv_pools *p = srv_pools(s);
	unsigned workers = server_get_config(s)->workers;
	struct jobq_config qc = {
		.max_threads = workers, .name = "zephon-decode", .block_signals = 1,
		.thread_init = decoder_init, .thread_fini = decoder_fini, .arg = s,
	};
	int rc = jobq_new(&qc, &p->decoders);

	if (rc || (rc = jobq_start(p->decoders, workers)))
		return rc;
	if (srv_nranks(s) <= PRIME_AT_START_MAX)
		for (size_t i = 0; i < srv_nranks(s); i++) {
			srv_fill_ring(s, srv_rank_at(s, i));
			srv_rank_at(s, i)->primed = 1;
		}
	return 0;
}

void srv_prefetch_stop(struct server *s)
{
	struct srv_pools *p = srv_pools(s);

	if (!p)
		return;
	jobq_free(p->decoders); /* queued decodes are dropped, running ones waited for */
	p->decoders = NULL;
	while (p->free_jobs) {
		struct decode_job *d = p->free_jobs;

		p->free_jobs = (struct decode_job *)d->job.next;
		free(d);
	}
	for (size_t i = 0; i < srv_nranks(s); i++) {
		struct rank_state *rs = srv_rank_at(s, i);

		for (unsigned k = 0; rs->slots && k < server_get_config(s)->prefetch; k++)
			srv_slot_clear(s, &rs->slots[k]);
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
