/*
 * readahead.c: the ids of a rank's coming shares (server_share_ids, also ids/), and
 * page-cache read-ahead along each rank's order. The server knows which
 * samples every served rank reads next, which no reader of a shard file can guess: when a
 * rank moves (a claim of next, a read of ids/ or from/), the pages of the samples of its
 * next steps, up to cfg.readahead bytes of its share, are asked of the kernel
 * (dataset_hint: their own pages, and for flat shards the index pages only
 * where the reader checks samples against them), so
 * that on a cold dataset the disk reads are in flight, many at once and only of the bytes
 * the order needs, before the rank needs them. The hints run on one thread of their own:
 * a hint may wait for an index page, and neither a claim nor a decoder must.
 *
 * What it costs: the hinted pages in the page cache, up to cfg.readahead bytes per rank
 * ahead of it (reclaimable; no memory of the daemon's own), and the order's ids of those
 * samples computed once more. A dataset found in the page cache (dataset_resident: 64
 * random pages in memory) costs neither: a run then skips the rank's window, and the
 * next run, half a window on, probes again. Locking: each rank's ahead.lock guards its
 * fields (serve_int.h), taken alone or after the rank's rs->lock (a claim's
 * srv_ahead_step), never before it.
 */
#include "serve_int.h"
#include "run.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* What one dataset_hint call asks for: AHEAD_CHUNK bytes of samples (a whole share
 * at least, AHEAD_IDS samples at most), and the next chunk goes out once the one before
 * it has arrived (ahead_wait). So about two chunks are queued at the disk at a time:
 * enough to keep it busy (4 MiB in flight covers 4 ms of latency at 1 GB/s), little
 * enough that a read nobody hinted (the trainer's own code and files, another mount's)
 * waits behind at most that much (80 ms at 50 MB/s), where a whole readahead= window
 * queued at once would make it wait seconds (tests/bench/RESULTS.md, "Cold, slow
 * storage"). A dataset in the page cache costs no chunk at all (dataset_resident). */
#define AHEAD_CHUNK (UINT64_C(2) << 20)
#define AHEAD_IDS 4096
/* The longest ahead_wait: a disk slower than 2 MiB in this long is not kept waiting on. */
#define AHEAD_WAIT_S 2.0

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* The first gsn of the k-th step after the one at gsn, ORDER_MAX_GSN when past it (a
 * bound of the hints: nothing is hinted past the end of the stream). */
static uint64_t gsn_after_sat(const struct server *s, uint64_t gsn, uint64_t k)
{
	uint64_t g;

	return layout_gsn_after(&s->cfg.layout, gsn, k, &g) ? ORDER_MAX_GSN : g;
}

/* The ids of rank's shares of the steps from gsn g below end into ids (room for at least
 * one share): as many whole steps as fit in s->ahead_chunk ids (one at least). *count: the ids;
 * returns the gsn after the last step taken (end when past the stream). */
static uint64_t ahead_ids(struct server *s, struct rank_state *rs, uint64_t g, uint64_t end,
			  uint64_t *ids, size_t *count)
{
	uint64_t share = layout_share(&s->cfg.layout);

	*count = 0;
	while (g < end && (*count == 0 || *count + share <= s->ahead_chunk)) {
		struct layout at;

		if (layout_at(&s->cfg.layout, g, &at) || !layout_step_in_stream(&at, s->limit, 0) ||
		    server_share_ids(s, rs->rank, g, ids + *count))
			return end; /* past the end of the stream: nothing more to hint */
		*count += share;
		if (layout_gsn_after(&s->cfg.layout, g, 1, &g))
			return end;
	}
	return g;
}

int server_share_ids(struct server *s, uint64_t rank, uint64_t gsn, uint64_t *ids)
{
	struct layout l;
	uint64_t g;
	int rc;

	if (!srv_find_rank(s, rank))
		return -ENOENT;
	/* as batch_encode takes a whole share: its micro-batches are consecutive gsns */
	rc = layout_at(&s->cfg.layout, gsn, &l);
	if (!rc)
		rc = layout_micro_gsn(&l, rank, 0, 0, &g);
	return rc ? rc : order_fill(&s->cfg.order, g, layout_share(&l), ids);
}

/* Whether the hints are to stop: claims stopped (server_stop_claims), or the read-ahead
 * itself is being freed (srv_ahead_stop: an unmount need not wait out an ahead_wait). */
static int ahead_stopping(struct server *s)
{
	return __atomic_load_n(&s->closing, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&s->ahead_stopping, __ATOMIC_ACQUIRE);
}

/* Wait until sample id's pages are in memory (AHEAD_WAIT_S at most, or the server
 * stops): the chunk that ends with it has arrived. */
static void ahead_wait(struct server *s, uint64_t id, unsigned flags)
{
	double until = clock_mono_s() + AHEAD_WAIT_S;

	while (!dataset_cached(s->ds, id, flags) && clock_mono_s() < until && !ahead_stopping(s))
		usleep(500);
}

/* One chunk of a rank's hints per run, then the job queues itself again while the rank
 * has more: the thread goes round the ranks a chunk each. Before its chunk's hints, a run
 * waits for the chunk before it (any rank's) to arrive. */
static void ahead_run(struct jobq_job *job, void *ctx, int cancelled)
{
	struct ahead_job *j = (struct ahead_job *)job;
	struct server *s = j->s;
	struct rank_ahead *a = &j->rs->ahead;
	uint64_t from, end, next;
	size_t count;
	unsigned flags;
	int more, resident;

	(void)ctx;
	pthread_mutex_lock(&a->lock);
	from = a->done;
	end = a->to;
	if (cancelled || from >= end || ahead_stopping(s)) {
		a->queued = 0;
		pthread_mutex_unlock(&a->lock);
		return;
	}
	pthread_mutex_unlock(&a->lock);
	flags = (s->flat ? HINT_FLAT : 0) |
		(__atomic_load_n(&a->checked, __ATOMIC_RELAXED) ? HINT_INDEX : 0);
	resident = dataset_resident(s->ds, flags, &s->ahead_seed);
	if (resident) {
		/* in the page cache: no ids to compute (the order's cost, once more) nor hint;
		 * the rank's next run (half a window on) probes again */
		next = end;
		s->ahead_last = UINT64_MAX;
		count = 0;
	} else {
		next = ahead_ids(s, j->rs, from, end, s->ahead_ids, &count);
		if (s->ahead_last != UINT64_MAX)
			ahead_wait(s, s->ahead_last, s->ahead_last_flags);
		dataset_hint(s->ds, s->ahead_ids, count, flags);
		s->ahead_last = count ? s->ahead_ids[count - 1] : UINT64_MAX;
		s->ahead_last_flags = flags;
	}
	pthread_mutex_lock(&s->qlock);
	s->stats.readahead_samples += count;
	s->stats.readahead_resident += (uint64_t)resident;
	pthread_mutex_unlock(&s->qlock);
	pthread_mutex_lock(&a->lock);
	if (a->done == from) /* else the rank moved meanwhile: go on from where it is */
		a->done = next;
	more = a->done < a->to;
	a->queued = more;
	pthread_mutex_unlock(&a->lock);
	if (more && jobq_submit(s->ahead, &a->job.job)) {
		pthread_mutex_lock(&a->lock);
		a->queued = 0;
		pthread_mutex_unlock(&a->lock);
	}
}

void srv_ahead(struct server *s, struct rank_state *rs, uint64_t gsn, uint64_t steps,
	       int checked)
{
	struct rank_ahead *a = &rs->ahead;
	uint64_t to, half;
	int submit = 0;

	if (!s->ahead)
		return;
	to = gsn_after_sat(s, gsn, add_sat(steps, s->ahead_steps));
	half = gsn_after_sat(s, gsn, add_sat(steps, s->ahead_steps / 2));
	pthread_mutex_lock(&a->lock);
	if (gsn < a->at || gsn > a->done) {
		a->done = gsn; /* moved back (a rewind, another loader) or past the hints */
		a->to = to;
	} else if (to > a->to) {
		a->to = to;
	}
	a->at = gsn;
	__atomic_store_n(&a->checked, checked, __ATOMIC_RELAXED);
	/* hints go out in runs of half the window or more, not a step at a time */
	if (!a->queued && a->done < a->to && a->done <= half) {
		a->queued = 1;
		submit = 1;
	}
	pthread_mutex_unlock(&a->lock);
	if (submit && jobq_submit(s->ahead, &a->job.job)) {
		pthread_mutex_lock(&a->lock);
		a->queued = 0;
		pthread_mutex_unlock(&a->lock);
	}
}

void srv_ahead_step(struct server *s, struct rank_state *rs, uint64_t step)
{
	uint64_t g;

	if (s->ahead && !layout_step_gsn(&s->cfg.layout, step, &g))
		srv_ahead(s, rs, g, 1, 1);
}

void server_readahead(struct server *s, uint64_t rank, uint64_t gsn, uint64_t steps,
		      int checked)
{
	struct rank_state *rs = srv_find_rank(s, rank);

	if (rs)
		srv_ahead(s, rs, gsn, steps, checked);
}

int srv_ahead_start(struct server *s)
{
	struct jobq_config qc = {
		.max_threads = 1, .name = "zephon-ahead", .block_signals = 1,
	};
	const struct dataset_info *info = s->info;
	uint64_t share_bytes;
	int rc;

	for (size_t i = 0; i < s->nranks; i++) {
		struct rank_ahead *a = &s->rs[i].ahead;

		pthread_mutex_init(&a->lock, NULL);
		a->job.job.run = ahead_run;
		a->job.s = s;
		a->job.rs = &s->rs[i];
	}
	s->ahead_ready = 1;
	if (!s->cfg.readahead || !info->samples)
		return 0;
	/* a rank's share of a step in bytes on disk, from the mean stored sample */
	share_bytes = mul_sat(layout_share(&s->cfg.layout),
			      info->stored_bytes / info->samples ? info->stored_bytes / info->samples : 1);
	s->ahead_steps = run_shares_up(share_bytes, s->cfg.readahead);
	s->ahead_chunk = AHEAD_CHUNK / (share_bytes / layout_share(&s->cfg.layout));
	s->ahead_chunk = s->ahead_chunk > AHEAD_IDS ? AHEAD_IDS : s->ahead_chunk;
	s->ahead_last = UINT64_MAX;
	s->ahead_ids = malloc((layout_share(&s->cfg.layout) > AHEAD_IDS ?
			       layout_share(&s->cfg.layout) : AHEAD_IDS) * sizeof(uint64_t));
	if (!s->ahead_ids)
		return -ENOMEM;
	rc = jobq_new(&qc, &s->ahead); /* its thread starts at the first hint */
	return rc;
}

void srv_ahead_stop(struct server *s)
{
	__atomic_store_n(&s->ahead_stopping, 1, __ATOMIC_RELEASE);
	jobq_free(s->ahead); /* a queued job runs cancelled: queued is cleared */
	s->ahead = NULL;
	free(s->ahead_ids);
	s->ahead_ids = NULL;
	for (size_t i = 0; i < s->nranks && s->ahead_ready; i++)
		pthread_mutex_destroy(&s->rs[i].ahead.lock);
}
