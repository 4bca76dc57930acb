/*
 * progress.h: how far each served rank has read, learned from the reads themselves, for
 * /status and /metrics. Readers of the pure files (from/, at/, step/: ZephonLoader, the
 * TorchTitan loader, map-style datasets) claim nothing, so the journal's cursors never
 * move for them; this is the mount's view of their position instead.
 *
 * What counts: a rank's share of a step (the B samples from some gsn G, rank r's slice)
 * read to its last byte, or a micro-batch of next read to its last byte. The rank's
 * position is the end of the step whose share (or last micro-batch) was read last in
 * time: G + B. So a loader that goes back (a rewind, a load_state_dict to an earlier
 * checkpoint) moves the position back with its first read, and a loader that reads
 * ahead (ZephonLoader reads up to 32 steps per read) shows the steps it has read, not
 * those the model has taken yet. Every share read counts in the rank's samples, re-reads
 * included. Nothing here is journaled: the loader's checkpoint owns a pure reader's
 * position.
 *
 * Rates: samples read per second over the last PROGRESS_WINDOW whole seconds (fewer
 * since the first read), from per-second buckets.
 * Thread-safety: every function may be called from any thread; one mutex per rank,
 * held for a few stores per share read (never while reading or replying).
 */
#ifndef ZEPHON_PROGRESS_H
#define ZEPHON_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

#define PROGRESS_WINDOW 10      /* seconds a rate averages over */
#define PROGRESS_SLOTS 16       /* per-second buckets kept (> PROGRESS_WINDOW) */

struct progress;

/* What one rank has read (progress_rank()). */
struct progress_rank_info {
	int have_position;      /* a step's share of this rank was read to its end */
	uint64_t step_gsn;      /* first gsn of that step (its B samples: all ranks') */
	uint64_t position;      /* step_gsn + B: the gsn this rank reads on from */
	uint64_t samples;       /* samples read to their end, re-reads included */
	double last_read_s;     /* clock time (progress_note's now) of the last read; 0: none */
	double samples_per_s;   /* over the last PROGRESS_WINDOW seconds before now */
};

/* Track the nranks ranks of ranks[] (sorted, unique; copied) of layout l (copied: its
 * steps give the positions). 0 or -ENOMEM; *out is set on success (free with
 * progress_free). */
int progress_new(const uint64_t *ranks, size_t nranks, const struct layout *l,
		 struct progress **out);
void progress_free(struct progress *p);

/* The clock of every `now` here is core/util/clock.h's clock_mono_s() (CLOCK_MONOTONIC, s). */

/* Rank read `samples` samples to their end at time now (seconds, a monotonic clock).
 * step_gsn: the first gsn of the step whose share of this rank those samples complete
 * (the position becomes step_gsn + B), or PROGRESS_NO_STEP when they complete none (a
 * micro-batch of next before the last of its step). A rank not tracked is ignored. */
#define PROGRESS_NO_STEP UINT64_MAX
void progress_note(struct progress *p, uint64_t rank, uint64_t step_gsn, uint64_t samples,
		   double now);

/* A read of a rank's run (from/<gsn> or ids/<gsn>: its shares of the steps from gsn on,
 * back to back, `unit` >= 1 bytes each, run.h) that returned len bytes at offset off. */
struct progress_read {
	uint64_t rank;
	uint64_t gsn;
	uint64_t unit;
	uint64_t off, len;
};

/* rd's shares whose last byte it reached (run_completed()) are read: progress_note of
 * the last, with all their samples. */
void progress_note_run(struct progress *p, const struct progress_read *rd, double now);

/* A copy of what rank has read, rates taken at now. 0 or -ENOENT (rank not tracked). */
int progress_rank(struct progress *p, uint64_t rank, double now,
		  struct progress_rank_info *out);

/* Over every tracked rank: *consumed = the least position (ranks that read no share yet
 * count at `start`, the mount's start gsn), *samples_per_s their sum, *last_read_s the
 * latest read (0: none). Returns 1 when any rank read anything, else 0. */
int progress_total(struct progress *p, uint64_t start, double now, uint64_t *consumed,
		   double *samples_per_s, double *last_read_s);

/* The number, in the tracked layout, of the step that starts at gsn
 * (layout_step_number()): 0, or -ERANGE (a loader positioned elsewhere reads at/<G> of
 * any G). */
int progress_step_number(const struct progress *p, uint64_t gsn, uint64_t *step);

#endif
