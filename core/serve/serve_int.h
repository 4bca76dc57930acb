/*
 * serve_int.h: the server's state, shared by the files that make it up (serve.h is
 * their contract with the rest): serve_log.c (the rate-limited log), prefetch.c (reader
 * and buffer pools, decode jobs, each rank's prefetch ring), readahead.c (page-cache
 * hints along each rank's order), share.c (the pure reads: step/, at/, validation/,
 * samples/) and serve.c (cursor, claim, delivery, rewind).
 * Nothing outside core/serve/serve*.c, prefetch.c, readahead.c and share.c includes it.
 */
#ifndef ZEPHON_SERVE_INT_H
#define ZEPHON_SERVE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "clock.h"
#include "delivery.h"
#include "jobq.h"
#include "ratelimit.h"
#include "serve.h"

/* A mount serving more ranks than this fills a rank's prefetch ring at its first claim,
 * not at the start: one node that forgot `ranks=` at world_size=4096 otherwise decodes
 * 2 x 4096 micro-batches at once, seconds of CPU and gigabytes for large micro-batches,
 * for ranks other nodes serve. */
#define PRIME_AT_START_MAX 64

/* A prefetch slot holds the batch of one claim index ci = (step - S0) * A + micro. */
enum slot_state { SLOT_EMPTY, SLOT_DECODING, SLOT_READY, SLOT_FAILED };

struct slot {
	enum slot_state state;
	uint64_t ci;
	struct batch *batch;    /* SLOT_READY */
	int err;                /* SLOT_FAILED */
	uint64_t bad_id;
};

struct rank_state;

/* readahead.c: one rank's read-ahead (server_readahead). Under lock: the hints asked
 * for are the gsns [done, to); done moves up as the job hints them, and back to the
 * rank's position when the rank moved back or jumped past it. */
struct rank_ahead {
	pthread_mutex_t lock;
	uint64_t at;             /* the rank's latest position (a step's first gsn) */
	uint64_t done;           /* every step from at below done is hinted */
	uint64_t to;             /* hint the steps below this gsn */
	int queued;              /* job is queued or running */
	int checked;             /* the rank's latest reader checks each sample against its
	                          * index entry (next, from/; not ids/): hint the entries too
	                          * (atomic: the job reads it without the lock) */
	struct ahead_job {
		struct jobq_job job;  /* first: the job is the ahead_job */
		struct server *s;
		struct rank_state *rs;
	} job;
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
	int closing;             /* closes of the rank's claims being answered whose delivery
	                          * is not recorded yet (atomic; claim.c): a claim waits for
	                          * them, so that its commit holds the delivery of a close
	                          * its opener saw return (server_claim) */
	struct slot *slots;      /* prefetch entries, slot of ci is ci % prefetch */
	struct claim_info last;
	double last_release;     /* when a handle of next was last closed (clock_mono_s) */
	uint64_t release_ns;     /* atomic: a close not applied yet, its time in ns; 0: none
	                          * (server_release; srv_rank_lock and srv_rank_unlock apply
	                          * it) */
	int primed;              /* the ring was filled once (fill_ring): PRIME_AT_START_MAX */
	int refill_pending;      /* a claim left its refill to that close, see server_release */
	struct rank_ahead ahead; /* readahead.c */
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

/* The latest claim of next of each (process, rank): its size, which a GETATTR without
 * a file handle answers (numpy.fromfile sizes its array from fstat). claim.c. */
#define SERVER_PID_SLOTS 256
struct pid_claim {
	uint32_t pid;
	uint64_t rank;
	uint64_t size;
};

struct server {
	const struct dataset *ds;
	int stall_logged;        /* server_finished() said the journal stalls (atomic) */
	const struct dataset_info *info;
	int flat;                /* dataset_flat(ds), once at server_new: ids/ and the
	                          * read-ahead find payloads from the id */
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
	/* readahead.c: one thread that hints every rank's coming pages (NULL: cfg.readahead
	 * is 0); ahead_steps: cfg.readahead in steps of a rank's share; ahead_ready: the
	 * ranks' ahead locks are set up (srv_ahead_start ran) */
	struct jobq *ahead;
	uint64_t ahead_steps;
	uint64_t ahead_chunk;    /* samples per hint (readahead.c, AHEAD_CHUNK) */
	uint64_t *ahead_ids;     /* the thread's: a chunk's ids */
	uint64_t ahead_last;     /* the thread's: the last id of its latest chunk (UINT64_MAX:
	                          * none), and that chunk's dataset_hint flags */
	unsigned ahead_last_flags;
	uint64_t ahead_seed;     /* the thread's: dataset_resident()'s draw counter */
	int ahead_stopping;      /* atomic: srv_ahead_stop() began; no more waits or hints */
	int ahead_ready;
	struct server_stats stats;

	int closing;             /* atomic: a clean stop refuses claims (server_stop_claims) */

	/* Batch buffers come back here when a batch is freed, and the next batch is encoded
	 * into one: a batch of megabytes then costs no mmap/munmap and no page faults (each
	 * munmap of a multi-threaded process is a TLB shootdown on every CPU). */
	pthread_mutex_t log_lock;  /* guards log_limit: srv_log()'s rate limit */
	struct ratelimit log_limit;

	/* claim.c: claims open (claim_open() in progress, or not freed yet), and the latest
	 * claim of each process */
	pthread_mutex_t claim_lock;   /* guards the fields below */
	pthread_cond_t claims_done;   /* open_claims reached 0; CLOCK_MONOTONIC */
	unsigned open_claims;
	struct pid_claim pids[SERVER_PID_SLOTS];
	unsigned pid_next;

	pthread_mutex_t pool_lock;
	struct buf *pool;
	size_t pool_count, pool_cap;
};

/* serve_log.c: messages through cfg.log, LOG_BURST in a burst then one a second (a
 * token bucket); how many were held back is said with the next one that passes. */
#define LOG_BURST 20
#define LOG_REFILL_S 1.0
void srv_log(struct server *s, int prio, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Say how many messages were held back (n > 0), bypassing the bucket. */
void srv_log_dropped(struct server *s, uint64_t n);
/* Log why the batch `what` names ("rank 3 next", "rank 3 step 12", "samples/7") could
 * not be built; nothing of it was served. */
void srv_log_decode_error(struct server *s, const char *what, int err, uint64_t bad);

/* prefetch.c. Sample readers for threads that decode outside the workers: NULL when out
 * of memory; reader_put(NULL) does nothing. */
struct sample_reader *srv_reader_get(struct server *s);
void srv_reader_put(struct server *s, struct sample_reader *r);
/* An empty buffer, with the capacity of a freed batch's when the pool has one. */
struct buf srv_pool_take(struct server *s);
/* The served rank's state, NULL when rank is not served. */
struct rank_state *srv_find_rank(struct server *s, uint64_t rank);
/* Does claim index ci lie past the end of the stream (epochs=E)? */
int srv_past_end(const struct server *s, uint64_t ci);
/* Start cfg.workers decoders, then (<= PRIME_AT_START_MAX ranks) fill every ring. 0 or
 * jobq's errors. */
int srv_prefetch_start(struct server *s);
/* Stop the decoders (queued decodes dropped, running ones waited for), free the kept
 * decode jobs. */
void srv_prefetch_stop(struct server *s);
/* Take and let go of rs->lock; each also applies a close that server_release() could
 * not apply because the lock was busy (a claim's journal commit holds it). */
void srv_rank_lock(struct server *s, struct rank_state *rs);
void srv_rank_unlock(struct server *s, struct rank_state *rs);
/* Queue a decode for every claim index of the rank's ring. rs->lock held. */
void srv_fill_ring(struct server *s, struct rank_state *rs);
/* Queue the decode of claim index ci (generation gen) into its slot. */
void srv_enqueue(struct server *s, struct rank_state *rs, uint64_t ci, uint64_t gen);
/* Empty a slot, keeping its batch's buffer. */
void srv_slot_clear(struct server *s, struct slot *sl);
/* The batch at the rank's cursor, rs->lock held (prefetch.c says how); -EAGAIN: the lock
 * was let go while waiting for its decode, start over. *hit: it came from the ring. */
int srv_take_cursor_batch(struct server *s, struct rank_state *rs, struct batch **out,
			  int *hit);
/* Put b back into the cursor's slot (a claim not journaled, a peek). rs->lock held. */
void srv_return_cursor_batch(struct server *s, struct rank_state *rs, struct batch *b);

/* readahead.c. Set up every served rank's read-ahead and, with cfg.readahead, its
 * thread (started at the first hint): 0 or -ENOMEM. Stop it (hints queued are dropped,
 * one running is waited for); safe after a failed or no start. */
int srv_ahead_start(struct server *s);
void srv_ahead_stop(struct server *s);
/* server_readahead() for a served rank; _step: for the rank's claim of step `step` of
 * the mount's layout. */
void srv_ahead(struct server *s, struct rank_state *rs, uint64_t gsn, uint64_t steps,
	       int checked);
void srv_ahead_step(struct server *s, struct rank_state *rs, uint64_t step);

#endif
