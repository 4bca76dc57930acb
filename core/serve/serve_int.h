/*
 * serve_int.h: what the files that make up the server share (serve.h is their contract
 * with the rest). struct server is server.c's alone: the others (serve.c: cursor, claim,
 * delivery, rewind) reach it through the functions below. Each of them owns a part of its own,
 * opaque to the rest and held by the server: serve_log.c the rate-limited log (struct
 * srv_log), prefetch.c the reader and buffer pools and the decoders (struct srv_pools),
 * readahead.c the page-cache hints along each rank's order (struct srv_ahead),
 * claimtab.c the claims open (struct claimtab); share.c (the pure reads: step/, at/,
 * validation/, samples/) keeps none. Each served rank's state (struct rank_state: its
 * cursor, serve.c's, and its prefetch ring, prefetch.c's, under one lock) is shared by
 * serve.c and prefetch.c.
 * Nothing outside core/serve/serve*.c, prefetch.c, readahead.c, share.c and claim.c
 * includes it.
 */
#ifndef ZEPHON_SERVE_INT_H
#define ZEPHON_SERVE_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "claimtab.h"
#include "clock.h"
#include "delivery.h"
#include "jobq.h"
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
};

/* A prefetch decode, queued on the server's decoders. */
struct decode_job {
	struct jobq_job job;     /* first: the job is the decode_job */
	struct server *s;
	struct rank_state *rs;
	uint64_t ci, generation;
};

struct srv_log;
struct srv_pools;
struct srv_ahead;

/* The parts of a server that the other files own, each opaque outside its file. */
struct srv_parts {
	struct srv_log *log;       /* serve_log.c */
	struct srv_pools *pools;   /* prefetch.c */
	struct srv_ahead *ahead;   /* readahead.c */
	struct claimtab *claims;   /* claimtab.c */
};

/* server.c: struct server, and what the other files read of it. srv_alloc: a server of
 * cfg over ds (its checks are server_new()'s) with its served ranks' states, whose
 * cursors the journal j (may be NULL) has; no part yet (srv_parts(): serve.c's
 * server_new makes them). 0, -EINVAL, or -ENOMEM with *out set for srv_release. The
 * parts are freed before srv_release, which frees the rest (the slots' batches are
 * prefetch.c's to drop first). */
int srv_alloc(const struct dataset *ds, const struct server_config *cfg, struct journal *j,
	      struct server **out);
void srv_release(struct server *s);
struct srv_parts *srv_parts(struct server *s);
/* The claim index of rs's cursor as the journal, which owns it (serve.h), has it; rs->ci
 * when there is no journal. Takes the journal's lock: never call it with view_lock held
 * (view_lock's readers must not wait for a commit). */
uint64_t srv_journal_ci(struct server *s, const struct rank_state *rs);
/* The dataset, its info and whether its shards are flat (dataset_flat(), asked once:
 * ids/ and the read-ahead find payloads from the id); the first gsn past the end of the
 * stream; the journal (NULL: none); the served ranks' states, in rank order. */
const struct dataset *srv_dataset(const struct server *s);
const struct dataset_info *srv_info(const struct server *s);
int srv_flat(const struct server *s);
uint64_t srv_limit(const struct server *s);
struct journal *srv_journal(const struct server *s);
size_t srv_nranks(const struct server *s);
struct rank_state *srv_rank_at(struct server *s, size_t i);
/* The index of rs among the served ranks (srv_rank_at(s, i) == rs). */
size_t srv_rank_index(const struct server *s, const struct rank_state *rs);
/* The served rank's state, NULL when rank is not served. */
struct rank_state *srv_find_rank(struct server *s, uint64_t rank);
/* A clean stop (server_stop_claims): from srv_close() on, srv_closing() is 1 and no
 * claim is handed out, no hint asked. */
void srv_close(struct server *s);
int srv_closing(const struct server *s);
/* Note whether the journal stalls (server_finished); returns what was noted before. */
int srv_stall_note(struct server *s, int stalled);
struct srv_log *srv_logger(struct server *s);
struct srv_pools *srv_pools(struct server *s);
struct srv_ahead *srv_ahead_of(struct server *s);
struct claimtab *server_claimtab(struct server *s);

/* The mount's layout (server_get_config()'s). */
static inline const struct layout *srv_layout(const struct server *s)
{
	return &server_get_config(s)->layout;
}

/* Counters of struct server_stats: one added to, and a claim's. */
enum srv_counter {
	SRV_PREFETCH_DECODED, SRV_DECODE_ERRORS, SRV_READAHEAD_SAMPLES, SRV_READAHEAD_RESIDENT,
	SRV_JOURNAL_ERRORS,
};
void srv_count(struct server *s, enum srv_counter c, uint64_t n);
struct srv_claim_count {
	int rc;                  /* server_claim's result */
	double us;               /* its latency */
	double journal_s;        /* its journal commit's seconds; < 0: none */
	uint64_t bytes;          /* the batch's (rc 0) */
	int hit;                 /* it came from the prefetch ring */
};
void srv_count_claim(struct server *s, const struct srv_claim_count *c);

/* serve_log.c: messages through cfg.log, LOG_BURST in a burst then one a second (a
 * token bucket); how many were held back is said with the next one that passes, and at
 * srv_log_free(). srv_log_new: 0 or -ENOMEM. */
#define LOG_BURST 20
#define LOG_REFILL_S 1.0
int srv_log_new(const struct server_config *cfg, const struct dataset *ds,
		struct srv_log **out);
void srv_log_free(struct srv_log *l);
void srv_log(struct server *s, int prio, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Log why the batch `what` names ("rank 3 next", "rank 3 step 12", "samples/7") could
 * not be built; nothing of it was served. */
void srv_log_decode_error(struct server *s, const char *what, int err, uint64_t bad);

/* prefetch.c. Sample readers for threads that decode outside the workers: NULL when out
 * of memory; reader_put(NULL) does nothing. */
struct sample_reader *srv_reader_get(struct server *s);
void srv_reader_put(struct server *s, struct sample_reader *r);
/* An empty buffer, with the capacity of a freed batch's when the pool has one. */
struct buf srv_pool_take(struct server *s);
/* Does claim index ci lie past the end of the stream (epochs=E)? */
int srv_past_end(const struct server *s, uint64_t ci);
/* The pools of a server of cfg (buffers for every rank's ring, the batches being read
 * and the workers): 0 or -ENOMEM. Free after srv_prefetch_stop (NULL is a no-op). */
int srv_pools_new(const struct server_config *cfg, struct srv_pools **out);
void srv_pools_free(struct srv_pools *p);
/* Start cfg.workers decoders, then (<= PRIME_AT_START_MAX ranks) fill every ring. 0 or
 * jobq's errors. */
int srv_prefetch_start(struct server *s);
/* Stop the decoders (queued decodes dropped, running ones waited for), free the kept
 * decode jobs, and drop every slot's batch; safe after a failed or no start. */
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
 * thread (started at the first hint) into *out: 0 or -ENOMEM. Stop it (hints queued are
 * dropped, one running is waited for) and free it; NULL is a no-op. */
int srv_ahead_start(struct server *s, struct srv_ahead **out);
void srv_ahead_free(struct srv_ahead *a);
/* server_readahead() for a served rank; _step: for the rank's claim of step `step` of
 * the mount's layout. */
void srv_ahead(struct server *s, struct rank_state *rs, uint64_t gsn, uint64_t steps,
	       int checked);
void srv_ahead_step(struct server *s, struct rank_state *rs, uint64_t step);

#endif
