#include "serve.h"
#include "delivery.h"
#include "jobq.h"

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
/* A mount serving more ranks than this fills a rank's prefetch ring at its first claim,
 * not at the start: one node that forgot `ranks=` at world_size=4096 otherwise decodes
 * 2 x 4096 micro-batches at once, seconds of CPU and gigabytes for large micro-batches,
 * for ranks other nodes serve. */
#define PRIME_AT_START_MAX 64

void batch_free(struct batch *b)
{
	if (!b)
		return;
	buf_release(&b->data);
	free(b->views);
	free(b->ids);
	free(b);
}

uint64_t batch_len(const struct batch *b)
{
	return b->data.len + b->views_len;
}

size_t batch_slice(const struct batch *b, uint64_t off, size_t size, struct iovec *iov,
		   size_t max, size_t *bytes)
{
	size_t n = 0, got = 0;
	uint64_t pos = 0;

	/* the segments: data, then each view; take the part of each inside the window */
	for (size_t k = 0; k <= b->nviews && got < size && n < max; k++) {
		const uint8_t *base = k ? b->views[k - 1].iov_base : b->data.data;
		uint64_t len = k ? b->views[k - 1].iov_len : b->data.len;

		if (off < pos + len && len) {
			uint64_t from = off > pos ? off - pos : 0;
			uint64_t take = len - from < size - got ? len - from : size - got;

			iov[n++] = (struct iovec){ (void *)(base + from), (size_t)take };
			got += (size_t)take;
		}
		pos += len;
	}
	*bytes = got;
	return n;
}

/* batch_build() into `data`, an empty buffer whose capacity may be reused (it is the
 * batch's on success and released on failure). With views, the samples are views of
 * the dataset's mappings and data holds the header only (encode_batch_views: -ENOTSUP
 * when that is not possible here). */
static int build_batch(struct sample_reader *r, const struct dataset_info *info,
		       const struct order *o, const struct layout *l, enum encode_format f,
		       uint64_t rank, uint64_t step, uint64_t micro, uint64_t micros, int views,
		       struct buf data, struct batch **out, uint64_t *bad_id)
{
	struct batch *b;
	uint64_t gsn, count;
	int rc;

	if (micros == 0 || micro >= layout_micros(l) || micros > layout_micros(l) - micro) {
		buf_release(&data);
		return -EINVAL;
	}
	rc = layout_micro_gsn(l, rank, step, micro, &gsn);
	count = micros * l->micro_batch; /* <= B/W < 2^62 */
	if (!rc && count > SIZE_MAX / sizeof(uint64_t))
		rc = -ENOMEM;
	b = rc ? NULL : calloc(1, sizeof(*b));
	if (b) {
		b->ids = malloc(count * sizeof(*b->ids));
		if (views)
			b->views = malloc(count * sizeof(*b->views));
	}
	if (!b || !b->ids || (views && !b->views)) {
		batch_free(b);
		buf_release(&data);
		return rc ? rc : -ENOMEM;
	}
	data.len = 0;
	b->data = data;
	b->rank = rank;
	b->step = step;
	b->micro = micro;
	b->micros = micros;
	b->gsn = gsn;
	b->count = count;
	b->epoch = gsn / o->n;
	rc = order_fill(o, gsn, count, b->ids);
	if (!rc && views) {
		rc = encode_batch_views(r, info, f, b->ids, count, &b->data, b->views, bad_id);
		b->nviews = rc ? 0 : count;
		for (size_t i = 0; i < b->nviews; i++)
			b->views_len += b->views[i].iov_len;
	} else if (!rc) {
		rc = encode_batch(r, info, f, b->ids, count, &b->data, bad_id);
	}
	if (rc) {
		batch_free(b);
		return rc;
	}
	*out = b;
	return 0;
}

int batch_build(struct sample_reader *r, const struct dataset_info *info,
		const struct order *o, const struct layout *l, enum encode_format f,
		uint64_t rank, uint64_t step, uint64_t micro, uint64_t micros,
		struct batch **out, uint64_t *bad_id)
{
	return build_batch(r, info, o, l, f, rank, step, micro, micros, 0,
			   (struct buf)BUF_INIT, out, bad_id);
}

/* A prefetch slot holds the batch of one claim index ci = (step - S0) * A + micro. */
enum slot_state { SLOT_EMPTY, SLOT_DECODING, SLOT_READY, SLOT_FAILED };

struct slot {
	enum slot_state state;
	uint64_t ci;
	struct batch *batch;    /* SLOT_READY */
	int err;                /* SLOT_FAILED */
	uint64_t bad_id;
};

struct rank_state {
	uint64_t rank;
	pthread_mutex_t lock;
	pthread_cond_t decoded;  /* a slot of this rank left SLOT_DECODING */
	/* view_lock: ci, last, commit_since and generation are written with lock and
	 * view_lock held and read with either; state, status and metrics take view_lock
	 * alone, so they never wait for a claim, which holds lock during its journal
	 * commit. Deliveries (dv) are kept under view_lock alone, for the same reason: a
	 * reader's close must not wait for a commit. */
	pthread_mutex_t view_lock;
	uint64_t ci;             /* claim index of the cursor: the next claim */
	double commit_since;     /* a claim's journal commit started then (now_s); 0: none */
	double sync_since;       /* server_finished()'s commit started then; 0: none (under
	                          * view_lock alone: a close holds no other lock of the rank) */
	uint64_t generation;     /* bumped by a rewind: in-flight decodes and deliveries of
	                          * earlier claims are dropped */
	struct delivery dv;      /* which claims reached their reader */
	struct slot *slots;      /* prefetch entries, slot of ci is ci % prefetch */
	struct claim_info last;
	double last_release;     /* when a handle of next was last closed (now_s) */
	int primed;              /* the ring was filled once (fill_ring): PRIME_AT_START_MAX */
	int refill_pending;      /* a claim left its refill to that close, see server_release */
};

/* A prefetch decode, queued on the server's decoders. */
struct decode_job {
	struct jobq_job job;     /* first: the job is the decode_job */
	struct server *s;
	struct rank_state *rs;
	uint64_t ci, generation;
};

/* Free sample readers for threads that decode outside the workers (claims that miss
 * the prefetch ring, peek, step, samples). */
struct reader_pool {
	pthread_mutex_t lock;
	struct sample_reader **free;
	size_t count, cap;
};

struct server {
	const struct dataset *ds;
	int stall_logged;        /* server_finished() said the journal stalls (atomic) */
	const struct dataset_info *info;
	struct server_config cfg;
	struct rankset ranks;
	struct journal *journal;
	uint64_t limit;          /* first gsn past the end of the stream */

	struct rank_state *rs;   /* one per served rank, in rank order */
	size_t nranks;

	struct jobq *decoders;   /* cfg.workers threads, each with a sample reader */
	pthread_mutex_t qlock;   /* guards stats */
	/* Decode jobs done, kept for the next ones: a claim queues one, and a malloc and
	 * free per claim would be the only allocation of a steady stream. */
	pthread_mutex_t jobs_lock;
	struct decode_job *free_jobs;   /* linked through job.next */

	struct reader_pool readers;
	struct server_stats stats;

	int closing;             /* atomic: a clean stop refuses claims (server_stop_claims) */

	/* Batch buffers come back here when a batch is freed, and the next batch is encoded
	 * into one: a batch of megabytes then costs no mmap/munmap and no page faults (each
	 * munmap of a multi-threaded process is a TLB shootdown on every CPU). */
	pthread_mutex_t log_lock;  /* guards the log_ fields: slog()'s rate limit */
	double log_tokens, log_t;
	uint64_t log_dropped;

	pthread_mutex_t pool_lock;
	struct buf *pool;
	size_t pool_count, pool_cap;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Messages slog() passes in a burst, then one a second (a token bucket): a reader that
 * retries a failing open in a loop (a full disk, a corrupt sample) would otherwise log a
 * line per attempt. How many were held back is logged with the next one that passes, and
 * at server_free(). */
#define LOG_BURST 20
#define LOG_REFILL_S 1.0

static void slog_raw(struct server *s, int prio, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void slog_raw(struct server *s, int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	s->cfg.log(s->cfg.log_ctx, prio, fmt, ap);
	va_end(ap);
}

static void log_dropped(struct server *s, uint64_t n)
{
	if (n)
		slog_raw(s, LOG_WARNING, "%" PRIu64 " more message%s of this mount were not logged "
			 "(at most %d in a row, then one a second)", n, n == 1 ? "" : "s", LOG_BURST);
}

static void slog(struct server *s, int prio, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void slog(struct server *s, int prio, const char *fmt, ...)
{
	uint64_t dropped;
	va_list ap;
	double t;

	if (!s->cfg.log)
		return;
	pthread_mutex_lock(&s->log_lock);
	t = now_s();
	s->log_tokens += (t - s->log_t) / LOG_REFILL_S;
	if (s->log_tokens > LOG_BURST)
		s->log_tokens = LOG_BURST;
	s->log_t = t;
	if (s->log_tokens < 1) {
		s->log_dropped++;
		pthread_mutex_unlock(&s->log_lock);
		return;
	}
	s->log_tokens -= 1;
	dropped = s->log_dropped;
	s->log_dropped = 0;
	pthread_mutex_unlock(&s->log_lock);
	log_dropped(s, dropped);
	va_start(ap, fmt);
	s->cfg.log(s->cfg.log_ctx, prio, fmt, ap);
	va_end(ap);
}

static struct sample_reader *reader_get(struct server *s)
{
	struct sample_reader *r = NULL;

	pthread_mutex_lock(&s->readers.lock);
	if (s->readers.count)
		r = s->readers.free[--s->readers.count];
	pthread_mutex_unlock(&s->readers.lock);
	return r ? r : sample_reader_new(s->ds);
}

static void reader_put(struct server *s, struct sample_reader *r)
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

/* Does claim index ci lie past the end of the stream (epochs=E)? */
static int past_end(const struct server *s, uint64_t ci)
{
	uint64_t step, micro;

	layout_ci_pos(&s->cfg.layout, ci, &step, &micro);
	return !layout_step_in_stream(&s->cfg.layout, s->limit, step);
}

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

static struct buf pool_take(struct server *s)
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
		rc = build_batch(r, s->info, &s->cfg.order, &s->cfg.layout, s->cfg.format,
				 rank, step, micro, 1, 1, (struct buf)BUF_INIT, out, bad_id);
		if (rc != -ENOTSUP)
			return rc;
	}
	return build_batch(r, s->info, &s->cfg.order, &s->cfg.layout, s->cfg.format,
			   rank, step, micro, 1, 0, pool_take(s), out, bad_id);
}

static void run_decode(struct jobq_job *job, void *reader, int cancelled);

/* Keep a finished decode job for the next enqueue(). */
static void job_put(struct server *s, struct decode_job *d)
{
	pthread_mutex_lock(&s->jobs_lock);
	d->job.next = s->free_jobs ? &s->free_jobs->job : NULL;
	s->free_jobs = d;
	pthread_mutex_unlock(&s->jobs_lock);
}

static void enqueue(struct server *s, struct rank_state *rs, uint64_t ci, uint64_t gen)
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

static void slot_clear(struct server *s, struct slot *sl)
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

	pthread_mutex_lock(&rs->lock);
	if (jb->generation != rs->generation || jb->ci < rs->ci || jb->ci >= rs->ci + k ||
	    sl->state != SLOT_EMPTY || past_end(s, jb->ci)) {
		pthread_mutex_unlock(&rs->lock);
		return;
	}
	sl->state = SLOT_DECODING;
	sl->ci = jb->ci;
	pthread_mutex_unlock(&rs->lock);

	rc = build_ci(s, r, rs->rank, jb->ci, &b, &bad);

	pthread_mutex_lock(&rs->lock);
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
	pthread_mutex_unlock(&rs->lock);
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

static struct rank_state *find_rank(struct server *s, uint64_t rank)
{
	size_t lo = 0, hi = s->nranks;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->rs[mid].rank == rank)
			return &s->rs[mid];
		if (s->rs[mid].rank < rank)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Enqueue a decode for every claim index of rank's ring (decode_into_slot skips the slots that
 * are decoding, ready, or left behind). With rs->lock held, or before serving. */
static void fill_ring(struct server *s, struct rank_state *rs)
{
	for (unsigned i = 0; i < s->cfg.prefetch; i++)
		enqueue(s, rs, rs->ci + i, rs->generation);
}

int server_new(const struct dataset *ds, const struct server_config *cfg,
	       struct journal *j, struct server **out)
{
	struct server *s;
	char why[256];
	int rc = -ENOMEM;

	if (layout_check(&cfg->layout, why, sizeof(why)) || !cfg->ranks || !cfg->ranks->count ||
	    cfg->prefetch > 64 || cfg->workers < 1 || cfg->workers > 64 ||
	    cfg->order.n + cfg->order.holdout != dataset_info(ds)->samples)
		return -EINVAL;
	for (size_t i = 0; i < cfg->ranks->count; i++)
		if (cfg->ranks->ranks[i] >= cfg->layout.world_size)
			return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ds = ds;
	s->info = dataset_info(ds);
	s->cfg = *cfg;
	s->journal = j;
	s->limit = order_limit(&cfg->order, cfg->epochs);
	pthread_mutex_init(&s->qlock, NULL);
	pthread_mutex_init(&s->jobs_lock, NULL);
	pthread_mutex_init(&s->readers.lock, NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_mutex_init(&s->log_lock, NULL);
	s->log_tokens = LOG_BURST;
	s->log_t = now_s();
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
	/* Decoders never take signals: a SIGTERM must land on a thread of the caller's (the
	 * FUSE loop's), whose interrupted wait notices the exit. Delivered to a decoder
	 * blocked on its condition variable, it would go unnoticed until the next request. */
	{
		struct jobq_config qc = {
			.max_threads = cfg->workers, .name = "zephon-decode", .block_signals = 1,
			.thread_init = decoder_init, .thread_fini = decoder_fini, .arg = s,
		};

		if ((rc = jobq_new(&qc, &s->decoders)) || (rc = jobq_start(s->decoders, cfg->workers)))
			goto err_free;
	}
	if (s->nranks <= PRIME_AT_START_MAX)
		for (size_t i = 0; i < s->nranks; i++) {
			fill_ring(s, &s->rs[i]);
			s->rs[i].primed = 1;
		}
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
	jobq_free(s->decoders); /* queued decodes are dropped, running ones waited for */
	while (s->free_jobs) {
		struct decode_job *d = s->free_jobs;

		s->free_jobs = (struct decode_job *)d->job.next;
		free(d);
	}
	pthread_mutex_destroy(&s->jobs_lock);
	for (size_t i = 0; i < s->nranks; i++) {
		struct rank_state *rs = &s->rs[i];

		for (unsigned k = 0; k < s->cfg.prefetch; k++)
			slot_clear(s, &rs->slots[k]);
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
		log_dropped(s, s->log_dropped);
	pthread_mutex_destroy(&s->log_lock);
	for (size_t i = 0; i < s->readers.count; i++)
		sample_reader_free(s->readers.free[i]);
	free(s->readers.free);
	pthread_mutex_destroy(&s->readers.lock);
	pthread_mutex_destroy(&s->qlock);
	rankset_release(&s->ranks);
	free(s);
}

/* Log why the batch `what` names ("rank 3 next", "rank 3 step 12", "samples/7") could
 * not be built; nothing of it was served. */
static void log_decode_error(struct server *s, const char *what, int err, uint64_t bad)
{
	if (err == -EIO)
		slog(s, LOG_ERR, "%s: sample %" PRIu64 " in %s failed its checksum; nothing was "
		     "served (run zephon verify on the dataset)", what, bad,
		     dataset_shard_name(s->ds, bad) ? dataset_shard_name(s->ds, bad) : "?");
	else
		slog(s, LOG_ERR, "%s: cannot build the batch: %s", what, strerror(-err));
}

/*
 * The batch at rank's cursor, with rs->lock held: from the prefetch ring when ready
 * (waiting for an in-flight decode of it), else decoded here. The slot is left empty;
 * the caller owns the batch.
 */
static int take_cursor_batch(struct server *s, struct rank_state *rs, struct batch **out,
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
		slot_clear(s, sl); /* decoded for a claim index the cursor has passed */
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
		slot_clear(s, sl); /* a later open retries the decode */
	} else {
		struct sample_reader *r = reader_get(s);

		rc = build_ci(s, r, rs->rank, rs->ci, out, &bad);
		reader_put(s, r);
	}
	if (rc) {
		char what[48];

		snprintf(what, sizeof(what), "rank %" PRIu64 " next", rs->rank);
		log_decode_error(s, what, rc, bad);
		pthread_mutex_lock(&s->qlock);
		s->stats.decode_errors += rc == -EIO;
		pthread_mutex_unlock(&s->qlock);
	}
	return rc;
}

/* Put a batch back into the cursor's slot (a claim that could not be journaled). */
static void return_cursor_batch(struct server *s, struct rank_state *rs, struct batch *b)
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
	double us = (now_s() - t0) * 1e6;
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
	struct rank_state *rs = find_rank(s, b->rank);
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
		slog(s, LOG_WARNING, "rank %" PRIu64 ": the delivery of step %" PRIu64 " micro %"
		     PRIu64 " could not be recorded (%s); a restart serves it and the claims "
		     "after it again", b->rank, b->step, b->micro, strerror(-rc));
		return rc;
	}
	return 0;
}

int server_finished(struct server *s, const struct batch *b)
{
	struct rank_state *rs = find_rank(s, b->rank);
	int rc = server_delivered(s, b);
	double stalled;
	char why[256];

	if (rc || !s->journal)
		return rc;
	stalled = server_journal_wait(s);
	if (stalled > SERVER_JOURNAL_STALL_S) {
		if (!__atomic_exchange_n(&s->stall_logged, 1, __ATOMIC_RELAXED))
			slog(s, LOG_WARNING, "the journal has kept a commit waiting for %.1f s (its "
			     "file system stalls): closes of next return without waiting for their "
			     "delivery to be written, and a crash before it is written serves those "
			     "batches again", stalled);
		return -ETIMEDOUT;
	}
	/* Outside the rank's lock: a claim holds it during its own commit, and the
	 * journal's lock orders the two. */
	pthread_mutex_lock(&rs->view_lock);
	rs->sync_since = now_s();
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
	slog(s, LOG_WARNING, "rank %" PRIu64 ": the delivery of step %" PRIu64 " micro %"
	     PRIu64 " could not be written to the journal (%s); it goes with the rank's "
	     "next claim, and a crash before that serves it again", b->rank, b->step,
	     b->micro, *why ? why : strerror(-rc));
	pthread_mutex_lock(&s->qlock);
	s->stats.journal_errors++;
	pthread_mutex_unlock(&s->qlock);
	return rc;
}

int server_stop_claims(struct server *s, double timeout_s)
{
	struct timespec until;
	double t = now_s() + timeout_s;
	int rc = 0;

	__atomic_store_n(&s->closing, 1, __ATOMIC_RELEASE);
	until.tv_sec = (time_t)t;
	until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
	/* A claim that passed its check before closing was set holds its rank's lock until
	 * it has recorded its claim: taking each lock once waits for them. */
	for (size_t i = 0; i < s->nranks && !rc; i++) {
		rc = -pthread_mutex_clocklock(&s->rs[i].lock, CLOCK_MONOTONIC, &until);
		if (!rc)
			pthread_mutex_unlock(&s->rs[i].lock);
	}
	return rc == -ETIMEDOUT ? rc : 0;
}

int server_claim(struct server *s, uint64_t rank, struct batch **out)
{
	struct rank_state *rs = find_rank(s, rank);
	struct batch *b = NULL;
	double t0 = now_s(), journal_s = -1;
	int rc, hit = 0;

	if (!rs)
		return -ENOENT;
	pthread_mutex_lock(&rs->lock);
	/* checked under the rank's lock: server_stop_claims() passes every rank's lock once
	 * after setting it, so no claim starts after that pass */
	if (__atomic_load_n(&s->closing, __ATOMIC_ACQUIRE)) {
		rc = -ESHUTDOWN;
		goto out;
	}
	do
		rc = past_end(s, rs->ci) ? -ENODATA : take_cursor_batch(s, rs, &b, &hit);
	while (rc == -EAGAIN);
	if (rc)
		goto out;
	if (s->journal) {
		double tj = now_s();

		set_commit_since(rs, tj);
		rc = journal_claim(s->journal, rank, b->step, b->micro);
		set_commit_since(rs, 0);
		journal_s = now_s() - tj;
		if (rc) {
			char why[256];

			journal_last_error(s->journal, why, sizeof(why));
			slog(s, LOG_ERR, "rank %" PRIu64 ": the journal could not record the claim of "
			     "step %" PRIu64 " micro %" PRIu64 " (%s); nothing was handed out",
			     rank, b->step, b->micro, *why ? why : strerror(-rc));
			pthread_mutex_lock(&s->qlock);
			s->stats.journal_errors++;
			pthread_mutex_unlock(&s->qlock);
			return_cursor_batch(s, rs, b);
			b = NULL;
			rc = -EIO;
			goto out;
		}
	}
	record_claim(rs, b);
	if (s->cfg.prefetch) {
		/* A reader that paces itself (a training step between claims) gets its batch
		 * read before the refill's decode competes with it for the CPU: the refill
		 * waits for the close. One that reads back to back keeps its lookahead.
		 * At most one refill waits, whatever the reader does with its handles, and
		 * only when the ring holds a batch beyond this one (prefetch >= 2). */
		if (!rs->primed) {
			rs->primed = 1;
			fill_ring(s, rs);
		} else if (!rs->refill_pending && s->cfg.prefetch > 1 &&
		    t0 - rs->last_release > PACED_GAP_S) {
			rs->refill_pending = 1;
		} else if (rs->refill_pending) {
			rs->refill_pending = 0;
			fill_ring(s, rs);
		} else {
			enqueue(s, rs, rs->ci + s->cfg.prefetch - 1, rs->generation);
		}
	}
	*out = b;
out:
	pthread_mutex_unlock(&rs->lock);
	count_claim(s, rc, t0, journal_s, b, hit);
	return rc;
}

int server_release(struct server *s, uint64_t rank, int wait)
{
	struct rank_state *rs = find_rank(s, rank);

	if (!rs)
		return 0;
	if (!wait) {
		if (pthread_mutex_trylock(&rs->lock))
			return -EBUSY;
	} else {
		pthread_mutex_lock(&rs->lock);
	}
	rs->last_release = now_s();
	if (rs->refill_pending) {
		rs->refill_pending = 0;
		fill_ring(s, rs);
	}
	pthread_mutex_unlock(&rs->lock);
	return 0;
}

static struct batch *batch_copy(const struct batch *b)
{
	struct batch *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	*c = *b;
	c->data = (struct buf)BUF_INIT;
	c->views = b->nviews ? malloc(b->nviews * sizeof(*c->views)) : NULL;
	c->ids = malloc(b->count * sizeof(*c->ids));
	if (!c->ids || (b->nviews && !c->views) ||
	    buf_append(&c->data, b->data.data, b->data.len)) {
		batch_free(c);
		return NULL;
	}
	if (b->nviews)
		memcpy(c->views, b->views, b->nviews * sizeof(*c->views));
	memcpy(c->ids, b->ids, b->count * sizeof(*c->ids));
	return c;
}

int server_peek(struct server *s, uint64_t rank, struct batch **out)
{
	struct rank_state *rs = find_rank(s, rank);
	struct batch *b = NULL;
	int rc, hit;

	if (!rs)
		return -ENOENT;
	pthread_mutex_lock(&rs->lock);
	do
		rc = past_end(s, rs->ci) ? -ENODATA : take_cursor_batch(s, rs, &b, &hit);
	while (rc == -EAGAIN);
	if (!rc) {
		*out = batch_copy(b);
		rc = *out ? 0 : -ENOMEM;
		return_cursor_batch(s, rs, b); /* peek leaves the ring as it was */
	}
	pthread_mutex_unlock(&rs->lock);
	return rc;
}

/* Can server_step() build rank's share of step? 0, -ENOENT (rank not served), -EINVAL
 * (a step before S0). server_step_len() asks the same, so a stat agrees with the open. */
static int step_servable(struct server *s, uint64_t rank, uint64_t step)
{
	if (!find_rank(s, rank))
		return -ENOENT;
	return step < s->cfg.layout.start_step ? -EINVAL : 0;
}

/* Build rank's whole share of step in layout l (every micro-batch in one encoding), on a
 * reader of the pool; a decode error is logged as what it was for ("step 7", "at gsn
 * 96"). Errors as batch_build, -ENOMEM. */
static int build_share_of(struct server *s, const struct order *o, const struct layout *l,
			  uint64_t rank, uint64_t step, const char *what, struct batch **out)
{
	struct sample_reader *r = reader_get(s);
	uint64_t bad = 0;
	int rc = -ENOTSUP;

	if (!r)
		return -ENOMEM;
	/* the samples as views of the dataset's mappings where the encoding allows: the
	 * kernel's copy is then the only one */
	if (encode_views_possible(s->info, s->cfg.format))
		rc = build_batch(r, s->info, o, l, s->cfg.format, rank, step, 0, layout_micros(l),
				 1, (struct buf)BUF_INIT, out, &bad);
	if (rc == -ENOTSUP)
		rc = build_batch(r, s->info, o, l, s->cfg.format, rank, step, 0, layout_micros(l),
				 0, pool_take(s), out, &bad);
	reader_put(s, r);
	if (rc == -EIO) {
		char msg[96];

		snprintf(msg, sizeof(msg), "rank %" PRIu64 " %s", rank, what);
		log_decode_error(s, msg, rc, bad);
	}
	return rc;
}

static int build_share(struct server *s, const struct layout *l, uint64_t rank, uint64_t step,
		       const char *what, struct batch **out)
{
	return build_share_of(s, &s->cfg.order, l, rank, step, what, out);
}

int server_step(struct server *s, uint64_t rank, uint64_t step, struct batch **out)
{
	char what[40];
	int rc = step_servable(s, rank, step);

	if (rc)
		return rc;
	snprintf(what, sizeof(what), "step %" PRIu64, step);
	return build_share(s, &s->cfg.layout, rank, step, what, out);
}

int server_step_len(struct server *s, uint64_t rank, uint64_t step, uint64_t *len)
{
	const struct layout *l = &s->cfg.layout;
	uint64_t gsn, count = layout_share(l), total = 0, part, n;
	uint64_t ids[1024];
	struct sample_reader *r;
	int rc = step_servable(s, rank, step);

	if (!rc)
		rc = layout_micro_gsn(l, rank, step, 0, &gsn);
	if (rc)
		return rc;
	if (s->cfg.format != FORMAT_LINES) /* npy, bin: arithmetic; tar: -ENOTSUP */
		return encode_batch_len(NULL, s->info, s->cfg.format, NULL, count, len);
	r = reader_get(s);
	if (!r)
		return -ENOMEM;
	/* lines: a sum over the samples, taken a thousand ids at a time */
	for (uint64_t done = 0; !rc && done < count; done += part) {
		part = count - done < 1024 ? count - done : 1024;
		rc = order_fill(&s->cfg.order, gsn + done, part, ids);
		if (!rc)
			rc = encode_batch_len(r, s->info, FORMAT_LINES, ids, part, &n);
		if (!rc && __builtin_add_overflow(total, n, &total))
			rc = -EOVERFLOW;
	}
	reader_put(s, r);
	if (!rc)
		*len = total;
	return rc;
}

void server_step_opened(struct server *s, uint64_t step)
{
	if (s->journal)
		journal_note_reached(s->journal, step + 1); /* a checkpoint may name step + 1 */
}

int server_sample(struct server *s, uint64_t id, struct batch **out)
{
	struct sample_reader *r;
	struct batch *b;
	uint64_t bad = 0;
	int rc;

	if (id >= s->info->samples)
		return -ERANGE;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ids = malloc(sizeof(*b->ids));
	r = reader_get(s);
	if (!b->ids || !r) {
		reader_put(s, r);
		batch_free(b);
		return -ENOMEM;
	}
	b->ids[0] = id;
	b->count = 1;
	rc = encode_batch(r, s->info, s->cfg.format, b->ids, 1, &b->data, &bad);
	reader_put(s, r);
	if (rc) {
		if (rc == -EIO) {
			char what[40];

			snprintf(what, sizeof(what), "samples/%" PRIu64, id);
			log_decode_error(s, what, rc, bad);
		}
		batch_free(b);
		return rc;
	}
	*out = b;
	return 0;
}

int server_rank_state(struct server *s, uint64_t rank, uint64_t *cursor_step,
		      uint64_t *cursor_micro, struct claim_info *last)
{
	struct rank_state *rs = find_rank(s, rank);

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
		slog(s, LOG_WARNING, "control: refused %s", journal_why(s, why));
	else if (rc)
		slog(s, LOG_ERR, "checkpoint %" PRIu64 " could not be journaled: %s", step,
		     journal_why(s, why));
	return rc;
}

int server_rewind(struct server *s, uint64_t step)
{
	double t0 = now_s();
	char why[256];
	int rc;

	if (!s->journal)
		return -ENOSYS;
	/* Every rank lock is held across the journal write so no claim slips between the
	 * journal's rewind and the in-memory one. Locks are taken in rank order. */
	for (size_t i = 0; i < s->nranks; i++) {
		pthread_mutex_lock(&s->rs[i].lock);
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
					slot_clear(s, &rs->slots[k]);
				else
					rs->slots[k].state = SLOT_EMPTY; /* the worker drops its result */
			if (rs->primed)
				fill_ring(s, rs);
		}
	}
	for (size_t i = s->nranks; i-- > 0;)
		pthread_mutex_unlock(&s->rs[i].lock);
	if (rc == -EINVAL)
		slog(s, LOG_WARNING, "control: refused %s", journal_why(s, why));
	else if (rc)
		slog(s, LOG_ERR, "rewind %" PRIu64 " could not be journaled: %s", step,
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
	return layout_consumed(&s->cfg.layout, layout_done(&s->cfg.layout, step), NULL);
}

double server_journal_wait(struct server *s)
{
	double now = now_s(), wait = 0;

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

const struct server_config *server_get_config(const struct server *s)
{
	return &s->cfg;
}

/* The layout whose step 0 starts at gsn: what at/<gsn> serves. */
static int at_layout(struct server *s, uint64_t rank, uint64_t gsn, struct layout *l)
{
	if (!find_rank(s, rank))
		return -ENOENT;
	return layout_at(&s->cfg.layout, gsn, l);
}

int server_at(struct server *s, uint64_t rank, uint64_t gsn, struct batch **out)
{
	char what[40];
	struct layout l;
	int rc = at_layout(s, rank, gsn, &l);

	if (rc)
		return rc;
	snprintf(what, sizeof(what), "at gsn %" PRIu64, gsn);
	return build_share(s, &l, rank, 0, what, out);
}

/* The bytes of one rank's share of a step in npy and bin, which every share has (W and B
 * are the mount's whatever the start gsn); -ENOTSUP for lines and tar, whose shares
 * differ. */
static int fixed_share_len(struct server *s, uint64_t *len)
{
	if (s->cfg.format != FORMAT_NPY && s->cfg.format != FORMAT_BIN)
		return -ENOTSUP;
	return encode_batch_len(NULL, s->info, s->cfg.format, NULL,
				layout_share(&s->cfg.layout), len);
}

int server_at_len(struct server *s, uint64_t rank, uint64_t gsn, uint64_t *len)
{
	struct layout l;
	int rc = at_layout(s, rank, gsn, &l);

	return rc ? rc : fixed_share_len(s, len);
}

uint64_t server_validation_steps(const struct server *s)
{
	return s->cfg.validation.n / s->cfg.layout.global_batch;
}

static int validation_layout(struct server *s, uint64_t rank, uint64_t t, struct layout *l)
{
	if (!find_rank(s, rank) || t >= server_validation_steps(s))
		return -ENOENT;
	return layout_at(&s->cfg.layout, t * s->cfg.layout.global_batch, l);
}

int server_validation(struct server *s, uint64_t rank, uint64_t t, struct batch **out)
{
	char what[48];
	struct layout l;
	int rc = validation_layout(s, rank, t, &l);

	if (rc)
		return rc;
	snprintf(what, sizeof(what), "validation step %" PRIu64, t);
	return build_share_of(s, &s->cfg.validation, &l, rank, 0, what, out);
}

int server_validation_len(struct server *s, uint64_t rank, uint64_t t, uint64_t *len)
{
	struct layout l;
	int rc = validation_layout(s, rank, t, &l);

	return rc ? rc : fixed_share_len(s, len);
}

int server_checkpoint_at(struct server *s, uint64_t gsn, uint64_t step)
{
	char why[256];
	int rc;

	if (!s->journal)
		return -ENOSYS;
	rc = journal_checkpoint_at(s->journal, gsn, step);
	if (rc == -EINVAL)
		slog(s, LOG_WARNING, "control: refused %s", journal_why(s, why));
	else if (rc)
		slog(s, LOG_ERR, "checkpoint samples:%" PRIu64 "@%" PRIu64 " could not be "
		     "journaled: %s", gsn, step, journal_why(s, why));
	return rc;
}
