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
 * next run, half a window on, probes again. Locking: each rank's rank_ahead.lock guards
 * its fields, taken alone or after the rank's rs->lock (a claim's srv_ahead_step), never
 * before it.
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

/* One rank's read-ahead (server_readahead). Under lock: the hints asked for are the gsns
 * [done, to); done moves up as the job hints them, and back to the rank's position when
 * the rank moved back or jumped past it. */
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

/* The server's read-ahead: one thread that hints every rank's coming pages (NULL:
 * cfg.readahead is 0), and each served rank's state, in the server's rank order. The
 * fields after `chunk` are the thread's alone. */
struct srv_ahead {
	struct jobq *q;
	uint64_t steps;          /* cfg.readahead in steps of a rank's share */
	uint64_t chunk;          /* samples per hint (AHEAD_CHUNK) */
	int stopping;            /* atomic: srv_ahead_free() began; no more waits or hints */
	size_t nranks;
	struct rank_ahead *ranks;
	uint64_t *ids;           /* a chunk's ids */
	uint64_t last;           /* the last id of the latest chunk (UINT64_MAX: none), and */
	unsigned last_flags;     /* that chunk's dataset_hint flags */
	uint64_t seed;           /* dataset_resident()'s draw counter */
};

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

	return layout_gsn_after(&server_get_config(s)->layout, gsn, k, &g) ? ORDER_MAX_GSN : g;
}

/* The ids of rank's shares of the steps from gsn g below end into ids (room for at least
 * one share): as many whole steps as fit in a chunk's ids (one at least). *count: the
 * ids; returns the gsn after the last step taken (end when past the stream). */
static uint64_t ahead_ids(struct server *s, struct rank_state *rs, uint64_t g, uint64_t end,
			  uint64_t *ids, size_t *count)
{
	const struct layout *l = &server_get_config(s)->layout;
	uint64_t share = layout_share(l), chunk = srv_ahead_of(s)->chunk;

	*count = 0;
	while (g < end && (*count == 0 || *count + share <= chunk)) {
		struct layout at;

		if (layout_at(l, g, &at) || !layout_step_in_stream(&at, srv_limit(s), 0) ||
		    server_share_ids(s, rs->rank, g, ids + *count))
			return end; /* past the end of the stream: nothing more to hint */
		*count += share;
		if (layout_gsn_after(l, g, 1, &g))
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
	rc = layout_at(&server_get_config(s)->layout, gsn, &l);
	if (!rc)
		rc = layout_micro_gsn(&l, rank, 0, 0, &g);
	return rc ? rc : order_fill(&server_get_config(s)->order, g, layout_share(&l), ids);
}

/* Whether the hints are to stop: claims stopped (server_stop_claims), or the read-ahead
 * itself is being freed (srv_ahead_stop: an unmount need not wait out an ahead_wait). */
static int ahead_stopping(struct server *s)
{
	return srv_closing(s) || __atomic_load_n(&srv_ahead_of(s)->stopping, __ATOMIC_ACQUIRE);
}

/* Wait until sample id's pages are in memory (AHEAD_WAIT_S at most, or the server
 * stops): the chunk that ends with it has arrived. */
static void ahead_wait(struct server *s, uint64_t id, unsigned flags)
{
	double until = clock_mono_s() + AHEAD_WAIT_S;

	while (!dataset_cached(srv_dataset(s), id, flags) && clock_mono_s() < until &&
	       !ahead_stopping(s))
		usleep(500);
}

/* One chunk of a rank's hints per run, then the job queues itself again while the rank
 * has more: the thread goes round the ranks a chunk each. Before its chunk's hints, a run
 * waits for the chunk before it (any rank's) to arrive. */
static void ahead_run(struct jobq_job *job, void *ctx, int cancelled)
{
	struct ahead_job *j = (struct ahead_job *)job;
	struct server *s = j->s;
	struct srv_ahead *h = srv_ahead_of(s);
	struct rank_ahead *a = &h->ranks[srv_rank_index(s, j->rs)];
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
	flags = (srv_flat(s) ? HINT_FLAT : 0) |
		(__atomic_load_n(&a->checked, __ATOMIC_RELAXED) ? HINT_INDEX : 0);
	resident = dataset_resident(srv_dataset(s), flags, &h->seed);
	if (resident) {
		/* in the page cache: no ids to compute (the order's cost, once more) nor hint;
		 * the rank's next run (half a window on) probes again */
		next = end;
		h->last = UINT64_MAX;
		count = 0;
	} else {
		next = ahead_ids(s, j->rs, from, end, h->ids, &count);
		if (h->last != UINT64_MAX)
			ahead_wait(s, h->last, h->last_flags);
		dataset_hint(srv_dataset(s), h->ids, count, flags);
		h->last = count ? h->ids[count - 1] : UINT64_MAX;
		h->last_flags = flags;
	}
	srv_count(s, SRV_READAHEAD_SAMPLES, count);
	srv_count(s, SRV_READAHEAD_RESIDENT, (uint64_t)resident);
	pthread_mutex_lock(&a->lock);
	if (a->done == from) /* else the rank moved meanwhile: go on from where it is */
		a->done = next;
	more = a->done < a->to;
	a->queued = more;
	pthread_mutex_unlock(&a->lock);
	if (more && jobq_submit(h->q, &a->job.job)) {
		pthread_mutex_lock(&a->lock);
		a->queued = 0;
		pthread_mutex_unlock(&a->lock);
	}
}

void srv_ahead(struct server *s, struct rank_state *rs, uint64_t gsn, uint64_t steps,
	       int checked)
{
	struct srv_ahead *h = srv_ahead_of(s);
	struct rank_ahead *a;
	uint64_t to, half;
	int submit = 0;

	if (!h || !h->q)
		return;
	a = &h->ranks[srv_rank_index(s, rs)];
	to = gsn_after_sat(s, gsn, add_sat(steps, h->steps));
	half = gsn_after_sat(s, gsn, add_sat(steps, h->steps / 2));
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
	if (submit && jobq_submit(h->q, &a->job.job)) {
		pthread_mutex_lock(&a->lock);
		a->queued = 0;
		pthread_mutex_unlock(&a->lock);
	}
}

void srv_ahead_step(struct server *s, struct rank_state *rs, uint64_t step)
{
	struct srv_ahead *h = srv_ahead_of(s);
	uint64_t g;

	if (h && h->q && !layout_step_gsn(&server_get_config(s)->layout, step, &g))
		srv_ahead(s, rs, g, 1, 1);
}

void server_readahead(struct server *s, uint64_t rank, uint64_t gsn, uint64_t steps,
		      int checked)
{
	struct rank_state *rs = srv_find_rank(s, rank);

	if (rs)
		srv_ahead(s, rs, gsn, steps, checked);
}

int srv_ahead_start(struct server *s, struct srv_ahead **out)
{
	struct jobq_config qc = {
		.max_threads = 1, .name = "zephon-ahead", .block_signals = 1,
	};
	const struct server_config *c = server_get_config(s);
	const struct dataset_info *info = srv_info(s);
	uint64_t share = layout_share(&c->layout), share_bytes;
	struct srv_ahead *h = calloc(1, sizeof(*h));

	if (!h || !(h->ranks = calloc(srv_nranks(s), sizeof(*h->ranks)))) {
		free(h);
		return -ENOMEM;
	}
	h->nranks = srv_nranks(s);
	for (size_t i = 0; i < h->nranks; i++) {
		struct rank_ahead *a = &h->ranks[i];

		pthread_mutex_init(&a->lock, NULL);
		a->job.job.run = ahead_run;
		a->job.s = s;
		a->job.rs = srv_rank_at(s, i);
	}
	*out = h;
	if (!c->readahead || !info->samples)
		return 0;
	/* a rank's share of a step in bytes on disk, from the mean stored sample */
	share_bytes = mul_sat(share, info->stored_bytes / info->samples ?
			      info->stored_bytes / info->samples : 1);
	h->steps = run_shares_up(share_bytes, c->readahead);
	h->chunk = AHEAD_CHUNK / (share_bytes / share);
	h->chunk = h->chunk > AHEAD_IDS ? AHEAD_IDS : h->chunk;
	h->last = UINT64_MAX;
	h->ids = malloc((share > AHEAD_IDS ? share : AHEAD_IDS) * sizeof(uint64_t));
	if (!h->ids)
		return -ENOMEM;
	return jobq_new(&qc, &h->q); /* its thread starts at the first hint */
}

void srv_ahead_free(struct srv_ahead *h)
{
	if (!h)
		return;
	__atomic_store_n(&h->stopping, 1, __ATOMIC_RELEASE);
	jobq_free(h->q); /* a queued job runs cancelled: queued is cleared */
	free(h->ids);
	for (size_t i = 0; i < h->nranks; i++)
		pthread_mutex_destroy(&h->ranks[i].lock);
	free(h->ranks);
	free(h);
}
