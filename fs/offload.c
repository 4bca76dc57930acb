/*
 * offload.c: which requests leave the request thread, and the jobs that answer them.
 * Requests that may block are answered on an offload thread (a job queue, core/util/jobq.h;
 * libfuse lets any thread reply to a request), so that the few request threads (one per
 * CPU by default) stay free for reads. Two queues:
 * - journal_queue: what may wait for the journal: a claim waits for its commit, and
 *   peek waits for a rank's lock, which a claim holds during that commit (a release of
 *   next never waits: core/serve/claim.h); control writes and closes of next commit (status,
 *   metrics and state read views that never wait, server_rank_state, and are answered
 *   on the request thread; a close is answered at once, its delivery's commit may come
 *   here);
 * - build_queue: what decodes: samples/ and step/ files.
 * A stalled journal file system can hold up every thread of the first, however many
 * readers wait; the builds never queue behind them. Claims stay on the request thread
 * while few run at once (claim_inline_begin).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jobq.h"
#include "ops_int.h"

struct request_job {
	struct jobq_job job;
	struct zmount *z;
	enum job_op op;
	fuse_req_t req;
	fuse_ino_t ino;
	struct fuse_file_info fi;   /* JOB_OPEN: a copy; libfuse's is on its thread's stack */
	size_t size;
	char data[];                /* JOB_WRITE: the bytes written */
};

struct jobq *attr_queue(const struct zmount *z, uint64_t ino)
{
	switch (inode_type(ino)) {
	case NODE_PEEK:
		return z->journal_queue;
	case NODE_NEXT: /* npy and bin: a caller without a claim gets the peeked size */
		return server_shares_fixed(z->srv) ?
		       z->journal_queue : NULL;
	case NODE_SAMPLE:
		return z->build_queue;
	case NODE_STEP: /* tar: the headers' sizes need the samples */
		return z->cfg->format == FORMAT_TAR ? z->build_queue : NULL;
	case NODE_AT: case NODE_VAL: case NODE_FROM: /* lines, tar: the size needs the samples */
		return server_shares_fixed(z->srv) ?
		       NULL : z->build_queue;
	default:
		return NULL;
	}
}

/* The queue of an open of ino; NULL: it never blocks (README, control, and the generated
 * text of status, metrics and state). */
struct jobq *open_queue(const struct zmount *z, uint64_t ino)
{
	switch (inode_type(ino)) {
	case NODE_README: case NODE_CONTROL: case NODE_STATUS: case NODE_METRICS: case NODE_STATE:
	case NODE_IDS: /* arithmetic over the order */
		return NULL;
	case NODE_STEP: case NODE_SAMPLE: case NODE_AT: case NODE_VAL: case NODE_FROM:
		return z->build_queue;
	default:
		return z->journal_queue;
	}
}

static void run_job(struct jobq_job *job, void *ctx, int cancelled);

int defer(struct zmount *z, struct jobq *q, const struct deferred *d)
{
	struct request_job *j;

	if (!q)
		return 0;
	j = calloc(1, sizeof(*j) + d->size);
	if (!j)
		return 0;
	*j = (struct request_job){ .job.run = run_job, .z = z, .op = d->op, .req = d->req,
				   .ino = d->ino, .size = d->size };
	if (d->fi)
		j->fi = *d->fi;
	if (d->size)
		memcpy(j->data, d->data, d->size);
	if (jobq_submit(q, &j->job)) {
		free(j);
		return 0;
	}
	return 1;
}

/* May a claim run on this request thread? The hop to an offload thread adds to every
 * claim's latency (tests/bench/RESULTS.md, "Offload threads"), so a claim stays here
 * while at most half the request threads (none of one) are in a claim: a stalled journal
 * commit then holds up no more than those, and the other half keep serving reads.
 * 1: go ahead, then call claim_inline_end(); 0: offload it. */
int claim_inline_begin(struct zmount *z)
{
	unsigned n = __atomic_load_n(&z->inline_claims, __ATOMIC_RELAXED);

	do {
		if (n >= z->cfg->max_threads / 2)
			return 0;
	} while (!__atomic_compare_exchange_n(&z->inline_claims, &n, n + 1, 1, __ATOMIC_ACQ_REL,
					      __ATOMIC_RELAXED));
	return 1;
}

void claim_inline_end(struct zmount *z)
{
	__atomic_sub_fetch(&z->inline_claims, 1, __ATOMIC_RELEASE);
}

static void run_job(struct jobq_job *job, void *ctx, int cancelled)
{
	struct request_job *j = (struct request_job *)job;

	(void)ctx;
	if (cancelled) {
		if (j->req)
			fuse_reply_err(j->req, ENOTCONN); /* the mount is going away */
		if (j->op == JOB_FLUSH)
			open_file_put(j->z, (struct open_file *)j->fi.fh);
	} else {
		switch (j->op) {
		case JOB_LOOKUP:
			reply_entry(j->z, j->req, j->ino);
			break;
		case JOB_GETATTR:
			reply_attr(j->z, j->req, j->ino, NULL);
			break;
		case JOB_OPEN:
			open_node(j->z, j->req, j->ino, &j->fi);
			break;
		case JOB_WRITE:
			control_write(j->z, j->req, j->data, j->size);
			break;
		case JOB_FLUSH: /* answered already: the delivery's commit */
			flush_next(j->z, (struct open_file *)j->fi.fh);
			break;
		}
	}
	free(j);
}
