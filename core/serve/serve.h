/*
 * serve.h: turning claims into batches (docs/design.md §3, §5 and §9). No FUSE here:
 * the mount (fs/) and `zephon batch` both come through this module, so the bytes of a
 * claim are the same whichever way they are asked for.
 *
 * The batch itself and its pure builder are batch.h. struct server is the per-mount
 * state. For each served rank a cursor (step, micro) and
 *    a ring of `prefetch` decoded micro-batches that worker threads keep filled
 *    (prefetch never claims). server_claim() hands over the batch at the cursor after
 *    journal_claim() committed it, then advances the cursor. The caller reports when a
 *    claimed batch reached its reader for good (server_delivered: its reader can no
 *    longer see an error for it, claim.h's delivery rule), and when its reader finished
 *    it (server_finished: durable in the journal before it returns); a step counts as
 *    consumed (server_consumed, the journal's resume point) only when every claim of it
 *    was delivered.
 *
 * The cursor's owner is the journal: journal_claim() is the compare-and-advance that
 * decides which claim is next, and journal_rewind() moves it. The server keeps a copy
 * (a claim index, layout_pos_ci()) that it reads from the journal at server_new() and
 * after each rewind, and advances with each committed claim, so that /status and the
 * prefetch ring never wait for the journal's lock (held during commits). Without a
 * journal (tests) the copy is the only cursor.
 *
 * Invariants: a rank's cursor advances only after the journal committed the claim; two
 * concurrent claims of one rank get consecutive, distinct micro-batches (a per-rank
 * mutex orders them); a batch that failed to decode or to be journaled is never handed
 * out and leaves the cursor where it was.
 * Thread-safety: every server_* function may be called from any thread.
 */
#ifndef ZEPHON_SERVE_H
#define ZEPHON_SERVE_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "buf.h"
#include "dataset.h"
#include "encode.h"
#include "journal.h"
#include "order.h"
#include "progress.h"

/* Log sink for what the server notices (decode errors, journal failures); syslog or
 * stderr in fs/. prio is a syslog priority (LOG_ERR, LOG_WARNING, LOG_INFO). */
typedef void (*server_log_fn)(void *ctx, int prio, const char *fmt, va_list ap);

/* The most of server_config's prefetch and workers: server_new() refuses more, and the
 * mount options say so first (fs/opts.c). */
#define SERVER_MAX_PREFETCH 64
#define SERVER_MAX_WORKERS 64

struct server_config {
	struct layout layout;       /* with S0/G0 as journal_start() resolved them */
	const struct rankset *ranks;/* served ranks (copied) */
	struct order order;
	struct order validation;    /* order_validation() of order; n == 0: no split */
	uint64_t epochs;            /* 0 = endless */
	enum encode_format format;
	unsigned prefetch;          /* decoded micro-batches kept ready per rank (0..MAX) */
	unsigned workers;           /* decode threads (1..MAX) */
	uint64_t readahead;         /* bytes of each served rank's coming samples whose pages
	                             * are asked of the kernel ahead of the rank (readahead.c,
	                             * server_readahead); 0: none */
	server_log_fn log;           /* may be NULL */
	void *log_ctx;
};

/* Last claim of a rank, for /rank/<r>/state. */
struct claim_info {
	int valid;
	uint64_t step, micro, gsn, count, epoch;
	uint64_t *ids;              /* count ids; owned by the server, see server_rank_state */
};

/* Counters for /metrics (monotonic since mount). */
#define SERVER_LATENCY_BUCKETS 12
struct server_stats {
	uint64_t claims, claim_errors, decode_errors, journal_errors, end_of_stream;
	uint64_t prefetch_hits, prefetch_misses;
	uint64_t prefetch_decoded;            /* batches the workers decoded into a ring */
	uint64_t batch_bytes;                 /* bytes of claimed batches */
	/* read-ahead (readahead.c): samples whose ids it computed to hint their pages, and
	 * its runs that found the dataset in the page cache (dataset_resident) and skipped */
	uint64_t readahead_samples, readahead_resident;
	/* claim latency (open of next), cumulative histogram in microseconds with the bucket
	 * bounds server_latency_bounds_us[]; the last bucket is +Inf. */
	uint64_t claim_latency[SERVER_LATENCY_BUCKETS];
	double claim_latency_sum_s;
	uint64_t journal_commits;
	double journal_commit_sum_s;
};
extern const double server_latency_bounds_us[SERVER_LATENCY_BUCKETS - 1];

struct server;

/* Start serving: starts cfg->workers threads that fill every rank's prefetch ring (with
 * more than 64 served ranks, a rank's ring from its first claim on).
 * The journal (may be NULL for tests: claims are then not recorded) stays owned by the
 * caller and must outlive the server. 0, -EINVAL (bad config), -ENOMEM, or a
 * pthread_create error. */
int server_new(const struct dataset *ds, const struct server_config *cfg,
	       struct journal *j, struct server **out);
/* Free a batch this server handed out, keeping its buffer to encode a later batch
 * into. Any thread; b may be NULL. */
void server_batch_free(struct server *s, struct batch *b);

/* Stop the workers and free everything (batches handed out stay the caller's). */
void server_free(struct server *s);

/* Claim rank's next micro-batch: journal it, advance the cursor, hand the batch over
 * (*out is the caller's; free with batch_free). 0, or
 *   -ENOENT  rank not served;
 *   -ENODATA the stream ended (epochs=E);
 *   -ESHUTDOWN the mount is stopping (server_stop_claims): nothing claimed;
 *   -EIO     a sample failed its checksum (logged with sample id and shard) or the journal
 *            could not record the claim (logged); nothing handed out, cursor unchanged;
 *   -ENOMEM. */
int server_claim(struct server *s, uint64_t rank, struct batch **out);

/* The batch b that server_claim() handed out reached its reader for good: a close of
 * it was answered after a read returned its last byte, or its handle was released (or
 * its open never reached the opener): claim.h's delivery rule. Each claim counts once (a second report is ignored), in any order
 * across a rank's claims; the rank's delivered position (the claims before the first
 * one not delivered) goes to the journal lazily (journal_delivered). Never waits for a
 * claim or a commit in progress. A batch from before a rewind is ignored. 0, -EINVAL
 * (b is not a claim of this server), -ENOMEM or -EOVERFLOW (the delivery could not be
 * recorded: logged; a restart serves it again). b stays the caller's. */
int server_delivered(struct server *s, const struct batch *b);

/* The reader of b (a claim of server_claim()) finished it: a close of its file was
 * answered after a read had returned its last byte. As server_delivered(), and then the
 * rank's delivered position is durable in the journal before this returns
 * (journal_sync_delivered(): one commit, shared by the ranks that finish at once, which
 * also reserves the rank's next claim), so a kill -9 of the mount after it never serves
 * b again -- provided every earlier claim of the rank was delivered too (the position is
 * a prefix: with one reader per rank, the rule, it is). Call it only after the close's
 * reply was sent, never before: a kill before the reply fails the reader's close, and b
 * must then be served again; a kill between the reply and this commit serves b again
 * too (the one window in which a finished batch is repeated). May wait for a claim's commit and for the
 * journal's file system: call it where blocking is allowed. 0, or the errors of
 * server_delivered(), or -EIO / -ENOMEM / -EROFS when the journal could not write it
 * (logged, counted in journal_errors; the position goes with the rank's next claim,
 * and a crash before that serves b again), or -ETIMEDOUT without waiting when a journal
 * commit has waited for more than SERVER_JOURNAL_STALL_S already (its file system
 * stalls; logged once per stall; the delivery stays in memory, as with -EIO).
 * Without a journal, server_delivered(). */
int server_finished(struct server *s, const struct batch *b);

/* A clean stop: from now on every server_claim() fails with -ESHUTDOWN. Returns once
 * every claim in progress has finished, 0, or -ETIMEDOUT after timeout_s seconds (a
 * claim still waits for the journal). */
int server_stop_claims(struct server *s, double timeout_s);

/* A handle of rank's next was closed: the refill of a paced reader's prefetch ring,
 * left by its last claim, starts now (so the decode never competes with the reads of
 * the batch just handed out). Never waits: when a claim of the rank is in progress
 * (which may be waiting for the journal for as long as its file system stalls), the
 * claim applies the close when it is done. Unknown ranks are ignored. */
void server_release(struct server *s, uint64_t rank);

/* What the next claim of rank would get, claiming nothing (a copy). Errors as above. */
int server_peek(struct server *s, uint64_t rank, struct batch **out);

/* A reader opened step/<step> (a stat of it does not count): the
 * job has reached step, so checkpoint and rewind accept step + 1 (journal_note_reached). */
void server_step_opened(struct server *s, uint64_t step);

/* One sample in the mount's encoding (a batch of one); pure. 0, -ERANGE (id >= N),
 * -EIO (it failed its checksum or could not be read: logged), -ENOMEM. */
int server_sample(struct server *s, uint64_t id, struct batch **out);

/* Cursor and last claim of a rank: copies into *cursor_step/micro and *last (last->ids
 * malloc'd, caller frees; NULL when no claim yet). 0 or -ENOENT. Never waits for a
 * claim in progress (nor its journal commit), like server_consumed and
 * server_journal_wait. */
int server_rank_state(struct server *s, uint64_t rank, uint64_t *cursor_step,
		      uint64_t *cursor_micro, struct claim_info *last);

/* `checkpoint STEP` and `rewind STEP` through the journal; a rewind also moves the
 * in-memory cursors and drops prefetched batches. 0, -EINVAL (refused: the reason is
 * logged), -EIO. Without a journal: -ENOSYS. */
int server_checkpoint(struct server *s, uint64_t step);
int server_rewind(struct server *s, uint64_t step);

/* consumed_samples: every gsn below it was delivered (min over served ranks of the
 * steps whose every claim was delivered). */
uint64_t server_consumed(struct server *s);

/* Seconds the oldest journal commit that claims wait for (a claim's own, a rewind's,
 * which holds every rank, or a close's: server_finished) has taken so far; 0 when none
 * is in progress. A commit that
 * lasts is a journal file system that stalls. */
double server_journal_wait(struct server *s);

/* A journal commit that has waited this long means its file system stalls (a healthy
 * one takes microseconds, or milliseconds with sync=full): the commits of closes'
 * deliveries are not made then (server_finished: they go with each rank's next claim),
 * so that a stalled journal holds up claims and nothing else. */
#define SERVER_JOURNAL_STALL_S 0.2
/* 1 when server_journal_wait() is past SERVER_JOURNAL_STALL_S, else 0. Never waits. */
int server_journal_stalled(struct server *s);

/* For progress_note() (core/serve/progress.h): the first gsn of the step that a batch of
 * this server (a claim, or a share of step/, at/ or validation/) belongs to, when reading
 * it completes the rank's share of that step (layout_micro_step_gsn()); else
 * PROGRESS_NO_STEP. */
uint64_t server_progress_step(const struct server *s, const struct batch *b);

void server_get_stats(struct server *s, struct server_stats *out);
const struct server_config *server_get_config(const struct server *s);

/* The pure reads of the mount (core/serve/share.c): one rank's share of B samples, all A
 * micro-batches in one encoding. Pure: they claim nothing, move no cursor and note
 * nothing in the journal.
 *  - SHARE_STEP, n = t: rank's share of step t of the mount's layout (/rank/<r>/step/<t>).
 *  - SHARE_AT, n = G: rank's share of the B samples that start at gsn G, i.e. of the step
 *    that starts at G in a layout with this mount's W, B and m, whatever the layout's G0
 *    and its step boundaries (/rank/<r>/at/<G>, for loaders that keep the stream's
 *    position themselves).
 *  - SHARE_VALIDATION, n = t: the validation stream (a split, order_validation()) in
 *    steps of this mount's W, B and m: positions [t * B, (t + 1) * B) of it, rank's share
 *    like a step's (/rank/<r>/validation/<t>); the last V mod B positions are in none. */
enum share_kind { SHARE_STEP, SHARE_AT, SHARE_VALIDATION };
struct share {
	enum share_kind kind;
	uint64_t rank;
	uint64_t n;               /* the step, the first gsn or the validation step */
};

/* Build the share: *out as batch_build (free with server_batch_free). 0, -ENOENT (rank
 * not served; validation: no split or t >= server_validation_steps()), -EINVAL (a step
 * before S0), -EOVERFLOW (gsn + B past ORDER_MAX_GSN), or the errors of batch_build. */
int server_share(struct server *s, const struct share *sh, struct batch **out);

/* The length server_share() would give, from the order and the index without decoding
 * (encode_batch_len): what a lookup or stat needs. 0, -ENOTSUP (build it instead: tar
 * steps, and lines and tar for at/ and validation/), or the errors of server_share();
 * *len is set only on success. */
int server_share_len(struct server *s, const struct share *sh, uint64_t *len);

/* 1 when every share of a step has one size, whatever its samples (npy and bin: what
 * from/ needs, and what a size without building has), else 0 (lines, tar). */
int server_shares_fixed(const struct server *s);

/* 1 when the stream still has the share (epochs=E ends it; a validation step past the
 * last is none), else 0. Whether the rank is served is not asked. Never waits. */
int server_share_in_stream(struct server *s, const struct share *sh);

/* from/<G> of a rank (npy and bin): the shares of the steps from gsn G on (SHARE_AT of G,
 * G + B, ...), every full step to the end of the stream, read as one file. An endless
 * stream is cut where the size would pass 2^62. The fields are read-only outside
 * share.c. */
struct share_run {
	struct server *s;
	uint64_t rank, gsn;
	uint64_t share, size;       /* bytes of one share, of the whole run */
	uint64_t share_samples;     /* samples of one share */
	struct batch *kept;         /* share kept_k, the one read last (built once when a
	                             * share is read in two requests) */
	uint64_t kept_k;
	pthread_mutex_t mu;         /* orders the reads of one run, which may come on
	                             * several threads */
};

/* The bytes of one share and of the whole run from/<gsn> of rank. 0, -ENOTSUP (lines
 * and tar: shares differ in size), or server_share_len()'s errors. */
int server_run_size(struct server *s, uint64_t rank, uint64_t gsn, uint64_t *share,
		    uint64_t *size);
/* Open from/<gsn> of rank: *out malloc'd, free with share_run_free. Errors as
 * server_run_size, -ENOMEM. */
int server_run_open(struct server *s, uint64_t rank, uint64_t gsn, struct share_run **out);
void share_run_free(struct share_run *r);

/* One read of a run: the iovecs of its bytes, which point into the shares held. */
struct share_read {
	struct iovec *iov;
	size_t niov, cap_iov;
	size_t bytes;              /* total of the iovecs */
	uint64_t end;              /* offset after the last byte */
	struct batch **held;       /* shares built for this read */
	size_t nheld, cap_held;
};

/* The bytes [off, off + size) of the run, clipped at its end, in at most max_iov iovecs
 * (a reply's limit: fewer bytes than asked when they are spent, a short read), into *rd.
 * The shares it spans are built as server_share(SHARE_AT) builds them (views of the
 * dataset's mappings where the encoding allows). Takes the run's lock: always call
 * share_run_read_end(), which lets it go, after the reply, whatever this returned.
 * 0 (rd->bytes == 0: at or past the end), -ENOMEM, -EIO (a sample failed its checksum,
 * logged, or a share of another size), or batch_build's errors. */
int share_run_read(struct share_run *r, uint64_t off, size_t size, size_t max_iov,
		   struct share_read *rd);
/* After the reply of rd (ok: it was a success): the run keeps the last share built,
 * frees the others and rd's arrays, and lets its lock go. */
void share_run_read_end(struct share_run *r, struct share_read *rd, int ok);
/* The ids of share k of the run (ids/<gsn>'s k-th share: the step at gsn + k B) into
 * ids[0, share_samples). Errors as server_share_ids. */
int share_run_ids(struct share_run *r, uint64_t k, uint64_t *ids);
/* A read of [off, off + len) of the run, whose shares take `unit` bytes each (share for
 * from/, 8 * share_samples for ids/): server_readahead() of the steps it spans and one
 * more; checked as there (from/: 1, ids/: 0). */
void share_run_ahead(struct share_run *r, uint64_t off, uint64_t len, uint64_t unit,
		     int checked);

/* ids/<G> of a rank: the sample ids of the shares of from/<G>, share by share (each
 * share_samples little-endian uint64, in the order the share holds its samples), for a
 * reader that gathers the samples from the shard files itself. */
/* 1 when the mount's dataset has the samples of every shard back to back, uncompressed
 * (dataset_flat_shard() of each shard): ids/ exists; 0 otherwise. Fixed at mount. */
int server_ids_served(const struct server *s);
/* The rule of server_ids_served() before a server exists: a format whose shares have one
 * size (encode_format_fixed) over a dataset whose shards are flat (dataset_flat()). */
int server_ids_possible(enum encode_format format, int flat);
/* Bytes of ids/<gsn> of rank: 8 * share_samples per step of from/<gsn>; an endless
 * stream is cut where the size would pass 2^62. Errors as server_run_size, -EOVERFLOW
 * (8 * share_samples past 2^64). */
int server_ids_size(struct server *s, uint64_t rank, uint64_t gsn, uint64_t *size);
/* Bytes of one share of ids/<G>: 8 (a little-endian uint64) per sample of the share. */
uint64_t server_ids_share_bytes(const struct server *s);
/* The ids of rank's share of the step that starts at gsn (at/<gsn>) into ids[0,
 * share_samples). 0, -ENOENT (rank not served), -EOVERFLOW (past ORDER_MAX_GSN). */
int server_share_ids(struct server *s, uint64_t rank, uint64_t gsn, uint64_t *ids);

/* Rank reads the `steps` steps from gsn (a step's first gsn: a claim's step, the steps of
 * an ids/ or from/ read): ask the kernel, on the server's read-ahead thread, for the pages
 * of the samples of those steps and of the steps after them up to cfg.readahead bytes of
 * the rank's share (each sample once while the rank moves forward; from gsn again after
 * it moved back). Returns at once; hints only (dataset_hint: nothing
 * is done for a dataset in the page cache, no error). checked: the reader checks each
 * sample against its index entry (from/: 1; ids/, whose reader gathers the samples
 * itself: 0), so the entries' pages are asked for too. Nothing for an unserved rank, for
 * cfg.readahead 0, or past the end of the stream. Any thread. */
void server_readahead(struct server *s, uint64_t rank, uint64_t gsn, uint64_t steps,
		      int checked);

/* Validation steps: V / B (0 without a split). */
uint64_t server_validation_steps(const struct server *s);

/* `checkpoint samples:G@S`: the model state saved now holds every gsn below G, and the
 * step that starts at G is numbered S; any G, unlike server_checkpoint() (a loader that
 * reads at/<G> has its own position). 0, -EINVAL (reason logged), -EIO; without a
 * journal -ENOSYS. */
int server_checkpoint_at(struct server *s, uint64_t gsn, uint64_t step);

#endif
