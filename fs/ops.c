/*
 * ops.c: the FUSE low-level handlers of the mount, one per operation (libfuse's
 * hello_ll.c shape): decode the inode, call core (serve.h) or a renderer, reply.
 * The tree is docs/design.md §5 (every file: README.md); inode numbers are fs/inode.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "claim.h"
#include "clock.h"
#include "guard.h"
#include "inode.h"
#include "jobq.h"
#include "zmount.h"

/* Names and inode numbers are fixed for the life of the mount: cache entries long.
 * Attributes of generated files change with every claim: never cache those. */
#define ENTRY_TIMEOUT 3600.0
#define STATIC_ATTR_TIMEOUT 3600.0
#define BLKSIZE (1u << 20)
#define CONTROL_MAX 4096    /* bytes of one write of control, its newline included */

/* What an open file handle holds: a claimed or built batch, or generated text.
 * refs: the handle itself, plus one per read replying from it. A read's reply can still
 * be inside fuse_reply_buf() after the kernel has its bytes, the reader has closed, and
 * release() has run on another thread; the last reference frees. */
struct open_file {
	struct batch *batch;    /* next, peek, step, sample */
	struct buf text;        /* status, metrics, state; control's pending input */
	int refs;
	struct claim *claim;    /* next: the claim (core/claim.h); batch is its batch */
	int progress;           /* next, step/<t>, at/<G>: a read to its end is progress */
	int progressed;         /* noted in z->progress (atomic): once per handle */
	struct open_file *prev, *next;  /* z->open_files: what an unmount must free */
	/* next: the claiming thread and rank, while the handle is in z->next_holders */
	uint64_t rank;
	uint32_t tid;
	int holding;
	struct open_file *hold_prev, *hold_next;
	struct share_run *run;  /* from/<G> (core/share.c) */
};

static void next_unhold_locked(struct zmount *z, struct open_file *f);

int zmount_wait_claims(struct zmount *z, double timeout_s, unsigned *left)
{
	return server_wait_claims(z->srv, timeout_s, left);
}

/* Free a handle; deliver: it was released (or never reached the opener, which was
 * interrupted: its claim is consumed within the mount either way). Handles freed at
 * unmount without a release were not delivered. */
static void open_file_free(struct zmount *z, struct open_file *f, int deliver)
{
	if (f->claim)
		claim_free(f->claim, deliver);
	else
		server_batch_free(z->srv, f->batch);
	buf_release(&f->text);
	share_run_free(f->run);
	free(f);
}

static void open_file_put(struct zmount *z, struct open_file *f)
{
	if (__atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		pthread_mutex_lock(&z->lock);
		next_unhold_locked(z, f); /* a handle the kernel never got: no release came */
		if (f->prev)
			f->prev->next = f->next;
		else
			z->open_files = f->next;
		if (f->next)
			f->next->prev = f->prev;
		pthread_mutex_unlock(&z->lock);
		open_file_free(z, f, 1);
	}
}

static void open_file_track(struct zmount *z, struct open_file *f)
{
	pthread_mutex_lock(&z->lock);
	f->next = z->open_files;
	if (f->next)
		f->next->prev = f;
	z->open_files = f;
	pthread_mutex_unlock(&z->lock);
}

void zmount_free_open_files(struct zmount *z)
{
	while (z->open_files) {
		struct open_file *f = z->open_files;

		z->open_files = f->next;
		open_file_free(z, f, 0);
	}
	memset(z->next_holders, 0, sizeof(z->next_holders));
	free(z->overlaps);
	z->overlaps = NULL;
	z->noverlaps = z->overlaps_cap = 0;
}

/* The process (thread group) of thread tid, or 0 when it is gone or a zombie: a process
 * that has exited holds no file. FUSE names the calling thread, not its process. */
static uint32_t tgid_of(uint32_t tid)
{
	char path[40], line[128];
	unsigned long tgid = 0;
	int alive = 1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%" PRIu32 "/status", tid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char state;

		if (sscanf(line, "State: %c", &state) == 1)
			alive = state != 'Z' && state != 'X';
		else if (sscanf(line, "Tgid: %lu", &tgid) == 1)
			break;
	}
	fclose(f);
	return alive ? (uint32_t)tgid : 0;
}

/* Count an open of rank's next by process mine while process theirs held it, and say
 * so (once a minute per rank). Under z->lock. */
static void next_overlap_locked(struct zmount *z, uint64_t rank, uint32_t mine, uint32_t theirs)
{
	struct next_overlap *o;
	size_t i = 0;

	while (i < z->noverlaps && z->overlaps[i].rank < rank)
		i++;
	if (i == z->noverlaps || z->overlaps[i].rank != rank) {
		if (ARRAY_GROW(z->overlaps, z->overlaps_cap, z->noverlaps + 1))
			return;
		o = z->overlaps;
		memmove(o + i + 1, o + i, (z->noverlaps - i) * sizeof(*o));
		o[i] = (struct next_overlap){ .rank = rank };
		z->noverlaps++;
	}
	o = &z->overlaps[i];
	o->opens++;
	z->overlaps_total++;
	zmount_log_limited(&o->log, 60, LOG_WARNING, "rank %" PRIu64 ": processes %" PRIu32 " and %"
			PRIu32 " hold rank/%" PRIu64 "/next open at once (%" PRIu64 " such opens "
			"so far); every open claims the rank's next batch, so they split the "
			"batches between them and the trainer gets them out of order (a DataLoader "
			"with num_workers >= 2 over next does this); read next from one process, "
			"or read rank/%" PRIu64 "/step/<t> from several",
			rank, theirs, mine, rank, o->opens, rank);
}

#define HOLDERS_CHECKED 8

/* Handle f of next (rank's claim by thread tid) is open: note it, and whether another
 * process holds the rank's next open at this moment. Reads /proc only when another
 * thread does. */
static void next_hold(struct zmount *z, struct open_file *f, uint64_t rank, uint32_t tid)
{
	struct open_file **head = &z->next_holders[rank % ZMOUNT_HOLD_BUCKETS];
	uint32_t others[HOLDERS_CHECKED], mine, theirs = 0;
	size_t n = 0;

	f->rank = rank;
	f->tid = tid;
	pthread_mutex_lock(&z->lock);
	f->hold_prev = NULL;
	f->hold_next = *head;
	if (*head)
		(*head)->hold_prev = f;
	*head = f;
	f->holding = 1;
	for (const struct open_file *g = f->hold_next; g && tid && n < HOLDERS_CHECKED; g = g->hold_next) {
		size_t k = 0;

		while (k < n && others[k] != g->tid)
			k++;
		if (g->rank == rank && g->tid && g->tid != tid && k == n)
			others[n++] = g->tid;
	}
	pthread_mutex_unlock(&z->lock);
	if (!n || !(mine = tgid_of(tid)))
		return;
	for (size_t k = 0; k < n && !theirs; k++) {
		uint32_t t = tgid_of(others[k]);

		if (t && t != mine)
			theirs = t;
	}
	if (!theirs)
		return; /* threads of one process, or holders that have exited */
	pthread_mutex_lock(&z->lock);
	next_overlap_locked(z, rank, mine, theirs);
	pthread_mutex_unlock(&z->lock);
}

/* f no longer holds its rank's next (released, or never handed to the kernel). Under
 * z->lock. */
static void next_unhold_locked(struct zmount *z, struct open_file *f)
{
	if (f->holding) {
		if (f->hold_prev)
			f->hold_prev->hold_next = f->hold_next;
		else
			z->next_holders[f->rank % ZMOUNT_HOLD_BUCKETS] = f->hold_next;
		if (f->hold_next)
			f->hold_next->hold_prev = f->hold_prev;
		f->holding = 0;
	}
}

static struct zmount *zmount_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* Bytes of a handle's content. */
static uint64_t file_len(const struct open_file *f)
{
	if (f->run)
		return f->run->size;
	return f->batch ? batch_len(f->batch) : f->text.len;
}

/* A read of n bytes at off of the handle's batch is about to be replied: when it
 * reaches the batch's last byte (a claim of next, a step/ or at/ share), the rank has
 * read it (core/progress.h). Noted before the reply, so that a /status read after it
 * shows it (a reply the kernel then refuses, the reader being interrupted, still
 * counted); once per handle, so the read at the end of file that follows counts for
 * nothing. */
static void read_progress(struct zmount *z, struct open_file *f, off_t off, size_t n)
{
	const struct batch *b = f->batch;

	if (!f->progress || !n || off < 0 || (uint64_t)off + n < file_len(f) ||
	    __atomic_exchange_n(&f->progressed, 1, __ATOMIC_ACQ_REL))
		return;
	progress_note(z->progress, b->rank, server_progress_step(z->srv, b), b->count,
		      clock_mono_s());
}

static int parse_decimal(const char *name, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!*name || (name[0] == '0' && name[1])) /* one spelling per number: no leading 0s */
		return -ENOENT;
	for (const char *p = name; *p; p++) {
		if (*p < '0' || *p > '9' || v > (max - (uint64_t)(*p - '0')) / 10)
			return -ENOENT;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	*out = v;
	return 0;
}

/* The share a node of step/, at/ or validation/ names. */
static struct share node_share(uint64_t ino)
{
	enum share_kind k = inode_type(ino) == NODE_STEP ? SHARE_STEP :
			    inode_is_validation(ino) ? SHARE_VALIDATION : SHARE_AT;

	return (struct share){ k, inode_rank(ino), inode_step(ino) };
}

/* Does the stream still have step/<t> or at/<G>? (epochs=E ends it.) */
static int share_exists(struct zmount *z, enum share_kind k, uint64_t n)
{
	struct share sh = { k, 0, n };

	return n <= INODE_MAX_STEP && server_share_in_stream(z->srv, &sh);
}

/* Size a GETATTR without a file handle reports: content that is pure is built (and
 * freed); next answers the caller's latest claim, else the rank's latest claim. *pure is
 * set to 1 when the size is that of content that never changes (a step/ or samples/
 * file built without error), else left as it is. */
static uint64_t node_size(struct zmount *z, uint64_t ino, uint32_t pid, int *pure)
{
	struct buf text = BUF_INIT;
	struct batch *b = NULL;
	struct share sh;
	uint64_t size = 0;
	int found;

	switch (inode_type(ino)) {
	case NODE_README:
		return z->readme_len;
	case NODE_STATUS:
		render_status(z, &text);
		break;
	case NODE_METRICS:
		render_metrics(z, &text);
		break;
	case NODE_STATE:
		render_state(z, inode_rank(ino), &text);
		break;
	case NODE_NEXT:
		size = server_claim_size(z->srv, pid, inode_rank(ino), &found);
		/* npy and bin batches all have one size: the peeked batch tells it */
		if (!found && (z->cfg->format == FORMAT_NPY || z->cfg->format == FORMAT_BIN) &&
		    server_peek(z->srv, inode_rank(ino), &b) == 0)
			size = batch_len(b);
		break;
	case NODE_PEEK:
		if (server_peek(z->srv, inode_rank(ino), &b) == 0)
			size = batch_len(b);
		break;
	case NODE_STEP:
		/* From the order and the index: a lookup, then the open, would otherwise
		 * build the whole step twice (tar: its headers need the samples) */
		sh = node_share(ino);
		if (server_share_len(z->srv, &sh, &size) == 0) {
			*pure = 1;
		} else if (server_share(z->srv, &sh, &b) == 0) {
			size = batch_len(b);
			*pure = 1;
		}
		break;
	case NODE_SAMPLE:
		if (server_sample(z->srv, inode_id(ino), &b) == 0) {
			size = batch_len(b);
			*pure = 1;
		}
		break;
	case NODE_AT:
		if (inode_is_from(ino)) {
			uint64_t share;

			if (server_run_size(z->srv, inode_rank(ino), inode_step(ino), &share,
					    &size) == 0)
				*pure = 1;
			break;
		}
		sh = node_share(ino);
		if (server_share_len(z->srv, &sh, &size) == 0) {
			*pure = 1;
		} else if (server_share(z->srv, &sh, &b) == 0) {
			size = batch_len(b);
			*pure = 1;
		}
		break;
	default:
		break;
	}
	if (text.len)
		size = text.len;
	buf_release(&text);
	server_batch_free(z->srv, b);
	return size;
}

/* Fill st for ino. 0 or -ENOENT (a name that does not exist, e.g. an unserved rank). */
static int node_attr(struct zmount *z, uint64_t ino, uint32_t pid, const struct open_file *f,
		     struct stat *st, double *timeout)
{
	enum node type = inode_type(ino);

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = z->uid;
	st->st_gid = z->gid;
	st->st_blksize = BLKSIZE;
	st->st_atim = st->st_mtim = st->st_ctim = z->mounted_at;
	*timeout = 0;
	switch (type) {
	case NODE_ROOT: case NODE_RANKDIR: case NODE_SAMPLESDIR: case NODE_RANK: case NODE_STEPDIR:
	case NODE_ATDIR:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		*timeout = STATIC_ATTR_TIMEOUT;
		break;
	case NODE_CONTROL:
		st->st_mode = S_IFREG | 0200;
		st->st_nlink = 1;
		break;
	case NODE_NEXT: case NODE_PEEK:
		/* Only the owner moves the stream (next) or sees where it stands (peek):
		 * with allow_other, default_permissions keeps other users to status,
		 * samples/ and step/, which claim nothing and are the same for anyone. */
		st->st_mode = S_IFREG | 0400;
		st->st_nlink = 1;
		break;
	case NODE_README:
		*timeout = STATIC_ATTR_TIMEOUT;
		/* fall through */
	default:
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		break;
	}
	if (type >= NODE_COUNT)
		return -ENOENT;
	if ((type == NODE_RANK || type == NODE_NEXT || type == NODE_PEEK || type == NODE_STATE ||
	     type == NODE_STEPDIR || type == NODE_STEP || type == NODE_ATDIR || type == NODE_AT) &&
	    !rankset_has(&z->cfg->ranks, inode_rank(ino)))
		return -ENOENT;
	if (type == NODE_STEP && !share_exists(z, SHARE_STEP, inode_step(ino)))
		return -ENOENT;
	if (type == NODE_SAMPLE && inode_id(ino) >= z->info->samples)
		return -ENOENT;
	if (type == NODE_AT && !(inode_is_validation(ino) ?
				 inode_step(ino) < server_validation_steps(z->srv) :
				 share_exists(z, SHARE_AT, inode_step(ino))))
		return -ENOENT;
	if (inode_is_validation(ino) && !server_validation_steps(z->srv))
		return -ENOENT;
	if (S_ISREG(st->st_mode)) {
		int pure = f && (type == NODE_STEP || type == NODE_SAMPLE || type == NODE_AT);

		st->st_size = (off_t)(f ? file_len(f) : node_size(z, ino, pid, &pure));
		/* A pure file's size is cached: a GETATTR without a handle reads the index
		 * or builds the whole batch (tar steps, samples), and open().read() in Python
		 * sends two per open (fstat), each a round trip; a file whose size could not
		 * be had is asked again next time. */
		if (pure)
			*timeout = STATIC_ATTR_TIMEOUT;
	}
	st->st_blocks = (st->st_size + 511) / 512;
	return 0;
}

static uint64_t child_of(struct zmount *z, uint64_t parent, const char *name)
{
	uint64_t v;

	switch (inode_type(parent)) {
	case NODE_ROOT:
		if (!strcmp(name, "README")) return inode_make(NODE_README, 0, 0);
		if (!strcmp(name, "status")) return inode_make(NODE_STATUS, 0, 0);
		if (!strcmp(name, "metrics")) return inode_make(NODE_METRICS, 0, 0);
		if (!strcmp(name, "control")) return inode_make(NODE_CONTROL, 0, 0);
		if (!strcmp(name, "rank")) return inode_make(NODE_RANKDIR, 0, 0);
		if (!strcmp(name, "samples")) return inode_make(NODE_SAMPLESDIR, 0, 0);
		return 0;
	case NODE_RANKDIR:
		if (parse_decimal(name, INODE_MAX_RANK, &v) || !rankset_has(&z->cfg->ranks, v))
			return 0;
		return inode_make(NODE_RANK, v, 0);
	case NODE_RANK:
		v = inode_rank(parent);
		if (!strcmp(name, "next")) return inode_make(NODE_NEXT, v, 0);
		if (!strcmp(name, "peek")) return inode_make(NODE_PEEK, v, 0);
		if (!strcmp(name, "state")) return inode_make(NODE_STATE, v, 0);
		if (!strcmp(name, "step")) return inode_make(NODE_STEPDIR, v, 0);
		if (!strcmp(name, "at")) return inode_make(NODE_ATDIR, v, 0);
		if (!strcmp(name, "validation") && server_validation_steps(z->srv))
			return inode_make(NODE_ATDIR, v, 0) | INODE_VALIDATION;
		if (!strcmp(name, "from") &&
		    (z->cfg->format == FORMAT_NPY || z->cfg->format == FORMAT_BIN))
			return inode_make(NODE_ATDIR, v, 0) | INODE_FROM;
		return 0;
	case NODE_ATDIR:
		if (inode_is_validation(parent)) {
			if (parse_decimal(name, INODE_MAX_STEP, &v) ||
			    v >= server_validation_steps(z->srv))
				return 0;
			return inode_make(NODE_AT, inode_rank(parent), v) | INODE_VALIDATION;
		}
		if (parse_decimal(name, INODE_MAX_STEP, &v) || !share_exists(z, SHARE_AT, v))
			return 0;
		return inode_make(NODE_AT, inode_rank(parent), v) | (parent & INODE_FROM);
	case NODE_STEPDIR:
		if (parse_decimal(name, INODE_MAX_STEP, &v) || !share_exists(z, SHARE_STEP, v))
			return 0;
		return inode_make(NODE_STEP, inode_rank(parent), v);
	case NODE_SAMPLESDIR:
		if (parse_decimal(name, INODE_MAX_ID, &v) || v >= z->info->samples)
			return 0;
		return inode_sample(v);
	default:
		return 0;
	}
}

/*
 * Requests that may block are answered on an offload thread (a job queue, core/jobq.h;
 * libfuse lets any thread reply to a request), so that the few request threads (one per
 * CPU by default) stay free for reads. Two queues:
 * - journal_queue: what may wait for the journal: a claim waits for its commit, and
 *   peek waits for a rank's lock, which a claim holds during that commit (a release of
 *   next never waits: core/claim.h); control writes commit (status, metrics and state read views that never
 *   wait, server_rank_state, and are answered on the request thread);
 * - build_queue: what decodes: samples/ and step/ files.
 * A stalled journal file system can hold up every thread of the first, however many
 * readers wait; the builds never queue behind them. Claims stay on the request thread
 * while few run at once (claim_inline_begin).
 */
enum job_op { JOB_LOOKUP, JOB_GETATTR, JOB_OPEN, JOB_WRITE, JOB_FLUSH };

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

/* The queue of a lookup or a stat without a handle of ino; NULL: it never blocks. */
static struct jobq *attr_queue(const struct zmount *z, uint64_t ino)
{
	switch (inode_type(ino)) {
	case NODE_PEEK:
		return z->journal_queue;
	case NODE_NEXT: /* npy and bin: a caller without a claim gets the peeked size */
		return z->cfg->format == FORMAT_NPY || z->cfg->format == FORMAT_BIN ?
		       z->journal_queue : NULL;
	case NODE_SAMPLE:
		return z->build_queue;
	case NODE_STEP: /* tar: the headers' sizes need the samples */
		return z->cfg->format == FORMAT_TAR ? z->build_queue : NULL;
	case NODE_AT: /* lines and tar: the size needs the samples */
		return z->cfg->format == FORMAT_NPY || z->cfg->format == FORMAT_BIN ?
		       NULL : z->build_queue;
	default:
		return NULL;
	}
}

/* The queue of an open of ino; NULL: it never blocks (README, control, and the generated
 * text of status, metrics and state). */
static struct jobq *open_queue(const struct zmount *z, uint64_t ino)
{
	switch (inode_type(ino)) {
	case NODE_README: case NODE_CONTROL: case NODE_STATUS: case NODE_METRICS: case NODE_STATE:
		return NULL;
	case NODE_STEP: case NODE_SAMPLE: case NODE_AT:
		return z->build_queue;
	default:
		return z->journal_queue;
	}
}

static void run_job(struct jobq_job *job, void *ctx, int cancelled);

/* Queue the request on q: 1 when queued (the job answers it), 0 when the caller must
 * answer it itself (q is NULL, no offload thread could run it, or out of memory). */
static int defer(struct zmount *z, struct jobq *q, enum job_op op, fuse_req_t req,
		 fuse_ino_t ino, const struct fuse_file_info *fi, const char *data, size_t size)
{
	struct request_job *j;

	if (!q)
		return 0;
	j = calloc(1, sizeof(*j) + size);
	if (!j)
		return 0;
	*j = (struct request_job){ .job.run = run_job, .z = z, .op = op, .req = req, .ino = ino,
				   .size = size };
	if (fi)
		j->fi = *fi;
	if (size)
		memcpy(j->data, data, size);
	if (jobq_submit(q, &j->job)) {
		free(j);
		return 0;
	}
	return 1;
}

/* A lookup of rank/<name> found nothing: when name is a rank number, say which ranks
 * this mount serves (a loop retrying it must not flood the log). */
static void say_unserved_rank(struct zmount *z, const char *name)
{
	uint64_t r, w = z->cfg->layout.world_size;
	char ranks[256];

	if (parse_decimal(name, UINT64_MAX, &r))
		return;
	rankset_format(&z->cfg->ranks, ranks, sizeof(ranks));
	if (r >= w)
		zmount_log_limited(&z->unserved_log, 10, LOG_WARNING, "no rank %s: this mount serves "
				"ranks %s of world_size %" PRIu64 ", and ranks run from 0 to %" PRIu64
				"; check the rank the reader uses, or mount with world_size= of the "
				"job (ENOENT)", name, ranks, w, w - 1);
	else
		zmount_log_limited(&z->unserved_log, 10, LOG_WARNING, "rank %s is not served here: "
				"this mount serves ranks %s of world_size %" PRIu64 "; read it on "
				"the node whose ranks= include %s (ENOENT)", name, ranks, w, name);
}

static void reply_entry(struct zmount *z, fuse_req_t req, uint64_t ino)
{
	struct fuse_entry_param e;
	double attr_timeout;

	memset(&e, 0, sizeof(e));
	if (node_attr(z, ino, fuse_req_ctx(req)->pid, NULL, &e.attr, &attr_timeout)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	e.ino = ino;
	e.attr_timeout = attr_timeout;
	e.entry_timeout = ENTRY_TIMEOUT;
	fuse_reply_entry(req, &e);
}

/* Replies: entry, ENOENT, ENOTDIR. */
static void zmount_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct zmount *z = zmount_of(req);
	uint64_t ino;
	enum node pt = inode_type(parent);

	if (pt != NODE_ROOT && pt != NODE_RANKDIR && pt != NODE_RANK && pt != NODE_STEPDIR &&
	    pt != NODE_SAMPLESDIR && pt != NODE_ATDIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	ino = child_of(z, parent, name);
	if (!ino) {
		if (pt == NODE_RANKDIR)
			say_unserved_rank(z, name);
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!defer(z, attr_queue(z, ino), JOB_LOOKUP, req, ino, NULL, NULL, 0))
		reply_entry(z, req, ino);
}

static void reply_attr(struct zmount *z, fuse_req_t req, uint64_t ino, const struct open_file *f)
{
	struct stat st;
	double timeout;

	if (node_attr(z, ino, fuse_req_ctx(req)->pid, f, &st, &timeout)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fuse_reply_attr(req, &st, timeout);
}

/* Replies: attr, ENOENT. With a file handle (fstat on an open next, lseek SEEK_END),
 * the size is that handle's batch. */
static void zmount_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	const struct open_file *f = fi && fi->fh ? (const struct open_file *)fi->fh : NULL;

	if (inode_type(ino) == NODE_CONTROL)
		f = NULL; /* its handle holds pending input, not content */
	if (f || !defer(z, attr_queue(z, ino), JOB_GETATTR, req, ino, NULL, NULL, 0))
		reply_attr(z, req, ino, f);
}

/* Replies: attr (truncating control, which `echo >` does), EROFS (everything else). */
static void zmount_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
			struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	struct stat st;
	double timeout;

	if (inode_type(ino) == NODE_CONTROL && (to_set & ~(FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MTIME |
	    FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME | FUSE_SET_ATTR_ATIME |
	    FUSE_SET_ATTR_ATIME_NOW)) == 0 && (!(to_set & FUSE_SET_ATTR_SIZE) || attr->st_size == 0)) {
		node_attr(z, ino, 0, NULL, &st, &timeout);
		fuse_reply_attr(req, &st, timeout);
		return;
	}
	(void)fi;
	fuse_reply_err(req, EROFS);
}

struct dirbuf {
	char *p;
	size_t size, cap;
	off_t off;       /* entries already sent */
	off_t index;     /* entries seen so far */
	int full;
};

static void dir_add(fuse_req_t req, struct dirbuf *d, const char *name, uint64_t ino, mode_t mode)
{
	struct stat st = { .st_ino = ino, .st_mode = mode };
	size_t need;

	if (d->full || d->index++ < d->off)
		return;
	need = fuse_add_direntry(req, NULL, 0, name, NULL, 0);
	if (d->size + need > d->cap) {
		d->full = 1;
		return;
	}
	fuse_add_direntry(req, d->p + d->size, d->cap - d->size, name, &st, d->index);
	d->size += need;
}

/* Replies: buf (entries from off), ENOTDIR, ENOMEM. step/ and samples/ list nothing:
 * they are unbounded, and ls -R / find / du must stay instant. */
static void zmount_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	struct dirbuf d = { .off = off, .cap = size };
	enum node type = inode_type(ino);

	(void)fi;
	if (type != NODE_ROOT && type != NODE_RANKDIR && type != NODE_RANK &&
	    type != NODE_STEPDIR && type != NODE_SAMPLESDIR && type != NODE_ATDIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	d.p = malloc(size ? size : 1);
	if (!d.p) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	dir_add(req, &d, ".", ino, S_IFDIR);
	dir_add(req, &d, "..", 1, S_IFDIR);
	if (type == NODE_ROOT) {
		dir_add(req, &d, "README", inode_make(NODE_README, 0, 0), S_IFREG);
		dir_add(req, &d, "status", inode_make(NODE_STATUS, 0, 0), S_IFREG);
		dir_add(req, &d, "metrics", inode_make(NODE_METRICS, 0, 0), S_IFREG);
		dir_add(req, &d, "control", inode_make(NODE_CONTROL, 0, 0), S_IFREG);
		dir_add(req, &d, "rank", inode_make(NODE_RANKDIR, 0, 0), S_IFDIR);
		dir_add(req, &d, "samples", inode_make(NODE_SAMPLESDIR, 0, 0), S_IFDIR);
	} else if (type == NODE_RANKDIR) {
		for (size_t i = 0; i < z->cfg->ranks.count && !d.full; i++) {
			char name[24];

			snprintf(name, sizeof(name), "%" PRIu64, z->cfg->ranks.ranks[i]);
			dir_add(req, &d, name, inode_make(NODE_RANK, z->cfg->ranks.ranks[i], 0), S_IFDIR);
		}
	} else if (type == NODE_RANK) {
		uint64_t r = inode_rank(ino);

		dir_add(req, &d, "next", inode_make(NODE_NEXT, r, 0), S_IFREG);
		dir_add(req, &d, "peek", inode_make(NODE_PEEK, r, 0), S_IFREG);
		dir_add(req, &d, "state", inode_make(NODE_STATE, r, 0), S_IFREG);
		dir_add(req, &d, "step", inode_make(NODE_STEPDIR, r, 0), S_IFDIR);
		dir_add(req, &d, "at", inode_make(NODE_ATDIR, r, 0), S_IFDIR);
		if (server_validation_steps(z->srv))
			dir_add(req, &d, "validation", inode_make(NODE_ATDIR, r, 0) | INODE_VALIDATION,
				S_IFDIR);
		if (z->cfg->format == FORMAT_NPY || z->cfg->format == FORMAT_BIN)
			dir_add(req, &d, "from", inode_make(NODE_ATDIR, r, 0) | INODE_FROM, S_IFDIR);
	} else if (type == NODE_ATDIR && inode_is_validation(ino)) {
		/* its steps are listed (at/ has one name per gsn and lists none), from the
		 * offset on: entries before it are skipped without a loop */
		uint64_t t = d.off > d.index ? (uint64_t)(d.off - d.index) : 0;

		d.index += (off_t)t;
		for (; t < server_validation_steps(z->srv) && !d.full; t++) {
			char name[24];

			snprintf(name, sizeof(name), "%" PRIu64, t);
			dir_add(req, &d, name, inode_make(NODE_AT, inode_rank(ino), t) |
				INODE_VALIDATION, S_IFREG);
		}
	}
	fuse_reply_buf(req, d.p, d.size);
	free(d.p);
}

static int claim_errno(struct zmount *z, int rc)
{
	(void)z;
	switch (rc) {
	case -ENODATA: case -EIO: case -ENOENT: case -ENOMEM: case -EINVAL: case -ESHUTDOWN:
		return -rc;
	default:
		return EIO;
	}
}

/* Open ino for the request (its access mode checked): claim, build or render the
 * handle's content and reply. */
static void open_node(struct zmount *z, fuse_req_t req, uint64_t ino, struct fuse_file_info *fi)
{
	enum node type = inode_type(ino);
	struct open_file *f;
	struct share sh;
	int rc = 0;

	f = calloc(1, sizeof(*f));
	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	f->refs = 1;
	open_file_track(z, f);
	switch (type) {
	case NODE_NEXT:
		rc = claim_open(z->srv, inode_rank(ino), fuse_req_ctx(req)->pid, &f->claim);
		if (!rc) {
			f->batch = f->claim->batch;
			f->progress = 1;
			next_hold(z, f, inode_rank(ino), fuse_req_ctx(req)->pid);
		}
		break;
	case NODE_PEEK:
		rc = server_peek(z->srv, inode_rank(ino), &f->batch);
		break;
	case NODE_STEP:
		sh = node_share(ino);
		rc = server_share(z->srv, &sh, &f->batch);
		if (!rc)
			server_step_opened(z->srv, inode_step(ino));
		f->progress = !rc;
		break;
	case NODE_SAMPLE:
		rc = server_sample(z->srv, inode_id(ino), &f->batch);
		break;
	case NODE_AT:
		if (inode_is_from(ino)) {
			rc = server_run_open(z->srv, inode_rank(ino), inode_step(ino), &f->run);
			break;
		}
		sh = node_share(ino);
		rc = server_share(z->srv, &sh, &f->batch);
		f->progress = !rc && !inode_is_validation(ino);  /* evaluation is not training */
		break;
	case NODE_STATUS:
		rc = render_status(z, &f->text);
		break;
	case NODE_METRICS:
		rc = render_metrics(z, &f->text);
		break;
	case NODE_STATE:
		rc = render_state(z, inode_rank(ino), &f->text);
		break;
	case NODE_README:
		rc = buf_append(&f->text, z->readme, z->readme_len);
		break;
	case NODE_CONTROL:
		fi->direct_io = 1;
		break;
	default:
		rc = -EISDIR;
		break;
	}
	if (rc) {
		open_file_put(z, f);
		fuse_reply_err(req, claim_errno(z, rc));
		return;
	}
	/* Only a close of next has work to do before close() returns (zmount_flush); the
	 * kernel sends no flush for the others. */
	fi->noflush = type != NODE_NEXT;
	if (type == NODE_README || type == NODE_SAMPLE) {
		/* The same bytes for the life of the mount, and small: through the page cache,
		 * so they can be mapped (np.load(mmap_mode='r'), np.memmap) and a second read
		 * is free. step/ is pure too, but its batches are large and read once: through
		 * the page cache they would go in 128 KiB readahead requests, copied into the
		 * cache and out again; direct I/O copies them once (RESULTS.md, "step/
		 * files"). */
		fi->keep_cache = 1;
	} else {
		fi->direct_io = 1;  /* every open may differ, or is read once: no page cache */
	}
	fi->fh = (uint64_t)(uintptr_t)f;
	if (fuse_reply_open(req, fi) == -ENOENT) {
		/* The opener was interrupted before it got the handle: the kernel will not
		 * release it. A claim already journaled stays journaled (never forgotten). */
		open_file_put(z, f);
	}
}

/* May a claim run on this request thread? The hop to an offload thread adds to every
 * claim's latency (tests/bench/RESULTS.md, "Offload threads"), so a claim stays here
 * while at most half the request threads (none of one) are in a claim: a stalled journal
 * commit then holds up no more than those, and the other half keep serving reads.
 * 1: go ahead, then call claim_inline_end(); 0: offload it. */
static int claim_inline_begin(struct zmount *z)
{
	unsigned n = __atomic_load_n(&z->inline_claims, __ATOMIC_RELAXED);

	do {
		if (n >= z->cfg->max_threads / 2)
			return 0;
	} while (!__atomic_compare_exchange_n(&z->inline_claims, &n, n + 1, 1, __ATOMIC_ACQ_REL,
					      __ATOMIC_RELAXED));
	return 1;
}

static void claim_inline_end(struct zmount *z)
{
	__atomic_sub_fetch(&z->inline_claims, 1, __ATOMIC_RELEASE);
}

/* Replies: open, EACCES (write access to a read-only file, read access to control),
 * ENOENT (rank not served), ENODATA (end of a finite stream, on next and peek), EIO (a
 * sample failed its checksum, or the journal could not record the claim), ESHUTDOWN
 * (next, once a clean stop began: nothing claimed), ENOMEM.
 * Opening next claims the rank's next micro-batch; nothing else claims. */
static void zmount_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	int acc = fi->flags & O_ACCMODE;

	if (inode_type(ino) == NODE_CONTROL ? acc != O_WRONLY : acc != O_RDONLY) {
		fuse_reply_err(req, EACCES);
		return;
	}
	if (inode_type(ino) == NODE_NEXT && claim_inline_begin(z)) {
		open_node(z, req, ino, fi);
		claim_inline_end(z);
	} else if (!defer(z, open_queue(z, ino), JOB_OPEN, req, ino, fi, NULL, 0)) {
		open_node(z, req, ino, fi);
	}
}

struct touch_args {
	const struct iovec *iov;
	size_t n;
};

/* Read one byte of every page the iovecs span (the views of a batch in the dataset's
 * mappings), so that a fault happens here, under guard_run(). */
static void touch_pages(void *ctx)
{
	const struct touch_args *t = ctx;
	long page = sysconf(_SC_PAGESIZE);

	for (size_t i = 0; i < t->n; i++) {
		const volatile uint8_t *p = t->iov[i].iov_base;
		size_t len = t->iov[i].iov_len;

		for (size_t k = 0; k < len; k += (size_t)page)
			(void)p[k];
		if (len)
			(void)p[len - 1];
	}
}

/* The iovecs of one reply: libfuse adds its header to them, and a writev of more than
 * IOV_MAX fails, which would leave the reader waiting for a reply that never comes. A
 * read that needs more (1 MiB of small shares) gets a short read: the reader asks for
 * the rest. */
#define FROM_IOV_MAX (IOV_MAX - 1)

/* A read of from/<G>: the shares it spans, each built as at/<G + k B> is (its samples are
 * views of the dataset's mappings where the encoding allows), replied as one iovec list:
 * the kernel's copy is the only one. The handle keeps the last share, so a share read in
 * two requests is built once. Replies: iov, EIO (a sample failed its checksum or could
 * not be read, or a shard was cut under the mount: logged), ENOMEM. */
static void read_from(struct zmount *z, fuse_req_t req, struct open_file *f, size_t size,
		      off_t off)
{
	struct share_run *run = f->run;
	struct share_read rd;
	int rc = off < 0 ? 0 : share_run_read(run, (uint64_t)off, size, FROM_IOV_MAX, &rd);

	if (off < 0 || (!rc && !rd.bytes)) {
		if (off >= 0)
			share_run_read_end(run, &rd, 0);
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (!rc) {
		struct touch_args t = { rd.iov, rd.niov };

		/* a shard cut under the mount fails this read here, not the daemon */
		if (guard_run(touch_pages, &t)) {
			zmount_log(LOG_ERR, "rank %" PRIu64 ": a shard of from/%" PRIu64 " can no "
				   "longer be read (truncated or an I/O error); this read fails with EIO",
				   run->rank, run->gsn);
			rc = -EIO;
		}
	}
	if (rc) {
		fuse_reply_err(req, claim_errno(z, rc));
		rd.bytes = 0;
	} else {
		/* noted before the reply, so that a /status read after it shows it */
		progress_note_run(z->progress, run->rank, run->gsn, run->share, run->share_samples,
				  (uint64_t)off, rd.bytes, clock_mono_s());
		fuse_reply_iov(req, rd.iov, (int)rd.niov); /* the kernel has the bytes then */
	}
	pthread_mutex_lock(&z->lock);
	z->bytes_read += rd.bytes;
	pthread_mutex_unlock(&z->lock);
	share_run_read_end(run, &rd, !rc);
}

/* Replies: buf (the bytes at [off, off + size) of the handle's content; short or empty
 * at its end). Any offset is honoured. */
static void zmount_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	struct open_file *f = (struct open_file *)fi->fh;
	size_t n = 0;
	int sent = -1, tail;

	(void)ino;
	__atomic_add_fetch(&f->refs, 1, __ATOMIC_ACQ_REL);
	if (f->run) {
		read_from(z, req, f, size, off);
		open_file_put(z, f);
		return;
	}
	/* Whether this reply holds the batch's last byte (or asks past it) is known before
	 * it is sent: a close that comes right behind the read waits for the report. */
	tail = f->claim ? claim_tail_begin(f->claim, off, size) : 0;
	if (f->batch && f->batch->nviews && off >= 0) {
		/* Samples go from the dataset's mapping to the reader in the kernel's one
		 * copy (fuse_reply_iov). */
		struct iovec iov[2 + (1u << 20) / BATCH_VIEW_MIN + 2];
		size_t max = sizeof(iov) / sizeof(iov[0]);
		size_t cnt = batch_slice(f->batch, (uint64_t)off, size, iov, max, &n);
		struct touch_args t = { iov, cnt };

		/* Touch every page first, guarded: a shard truncated under a live mount (or
		 * an I/O error of a network file system) then fails this read with EIO here,
		 * logged with its rank and step. A cut between the touch and the kernel's
		 * copy still fails only this read: the kernel ends the request with EIO and
		 * fails our writev with EFAULT, which libfuse logs as "writing device: Bad
		 * address". */
		if (guard_run(touch_pages, &t)) {
			zmount_log(LOG_ERR, "rank %" PRIu64 ": a shard of step %" PRIu64 " can no longer "
				"be read (truncated or an I/O error); this read fails with EIO",
				f->batch->rank, f->batch->step);
			n = 0;
			fuse_reply_err(req, EIO);
		} else {
			read_progress(z, f, off, n);
			sent = fuse_reply_iov(req, iov, (int)cnt); /* frees req whatever happens */
		}
	} else {
		const struct buf *b = f->batch ? &f->batch->data : &f->text;

		if (off >= 0 && (uint64_t)off < b->len)
			n = b->len - (size_t)off < size ? b->len - (size_t)off : size;
		read_progress(z, f, off, n);
		sent = fuse_reply_buf(req, n ? (const char *)b->data + off : NULL, n);
	}
	/* The reply holds the batch's last byte (or the reader asked past it): delivered,
	 * even if the reader dies before it closes. */
	if (f->claim && sent == 0 && off >= 0 && (uint64_t)off + n >= file_len(f))
		claim_delivered(f->claim);
	if (f->claim)
		claim_tail_end(f->claim, tail);
	pthread_mutex_lock(&z->lock);
	z->bytes_read += n;
	pthread_mutex_unlock(&z->lock);
	open_file_put(z, f);
}

/* "samples:G@S" of `checkpoint samples:G@S`: 0 or -EINVAL. */
static int parse_samples_at(const char *arg, uint64_t *gsn, uint64_t *step)
{
	char g[24], s[24], extra[2];

	if (strncmp(arg, "samples:", 8) ||
	    sscanf(arg + 8, "%23[0-9]@%23[0-9]%1s", g, s, extra) != 2 ||
	    parse_decimal(g, UINT64_MAX, gsn) || parse_decimal(s, UINT64_MAX, step))
		return -EINVAL;
	return 0;
}

/* One control command: "checkpoint STEP", "checkpoint samples:G@S" or "rewind STEP".
 * 0, -EINVAL (malformed or refused; logged), -EIO, -ENOSYS. */
static int control_line(struct zmount *z, const char *line)
{
	char cmd[16], arg[64], extra[2];
	uint64_t step, gsn;

	if (sscanf(line, "%15s %63s %1s", cmd, arg, extra) == 2 && !strcmp(cmd, "checkpoint") &&
	    !strncmp(arg, "samples:", 8)) {
		if (parse_samples_at(arg, &gsn, &step)) {
			zmount_log(LOG_WARNING, "control: \"%s\" is not \"checkpoint samples:G@S\"", line);
			return -EINVAL;
		}
		return server_checkpoint_at(z->srv, gsn, step);
	}
	if (sscanf(line, "%15s %63s %1s", cmd, arg, extra) != 2 ||
	    parse_decimal(arg, UINT64_MAX, &step)) {
		zmount_log(LOG_WARNING, "control: \"%s\" is not \"checkpoint STEP\" or \"rewind STEP\"", line);
		return -EINVAL;
	}
	if (!strcmp(cmd, "checkpoint"))
		return server_checkpoint(z->srv, step);
	if (!strcmp(cmd, "rewind"))
		return server_rewind(z->srv, step);
	zmount_log(LOG_WARNING, "control: unknown command \"%s\" (checkpoint STEP | rewind STEP)", cmd);
	return -EINVAL;
}

/* Apply one write of control (size < CONTROL_MAX) and reply: write, EINVAL, EIO. */
static void control_write(struct zmount *z, fuse_req_t req, const char *data, size_t size)
{
	char line[CONTROL_MAX];
	size_t len = size;
	int rc;

	if (len && data[len - 1] == '\n')
		len--;
	if (len && data[len - 1] == '\r')
		len--;
	memcpy(line, data, len);
	line[len] = 0;
	if (memchr(line, '\n', len) || strlen(line) != len) {
		zmount_log(LOG_WARNING, "control: one command per write, nothing applied");
		rc = -EINVAL;
	} else {
		rc = control_line(z, line);
	}
	pthread_mutex_lock(&z->lock);
	z->control_writes++;
	z->control_errors += rc != 0;
	pthread_mutex_unlock(&z->lock);
	if (rc)
		fuse_reply_err(req, rc == -ENOSYS ? ENOSYS : rc == -EINVAL ? EINVAL : EIO);
	else
		fuse_reply_write(req, size);
}

/* Replies: write (all bytes taken), EACCES (not control), EINVAL (not exactly one
 * well-formed command, or refused: the reason is logged and kept for /status), EIO (the
 * journal failed), E2BIG (over 4 KiB). Each write() is one command, applied whole or not
 * at all: "checkpoint STEP" or "rewind STEP", a trailing newline optional. A write with
 * several lines is refused before any of them is applied, so a caller that sees an error
 * knows nothing changed. */
static void zmount_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size,
		      off_t off, struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);

	(void)off;
	(void)fi;
	if (inode_type(ino) != NODE_CONTROL) {
		fuse_reply_err(req, EACCES);
		return;
	}
	if (size >= CONTROL_MAX) {
		fuse_reply_err(req, E2BIG);
		return;
	}
	if (!defer(z, z->journal_queue, JOB_WRITE, req, ino, NULL, data, size))
		control_write(z, req, data, size);
}

/* A close of a handle of next: every close(2) of a descriptor of it, in any process
 * (a child's exec closes the ones it inherited, long before the reader is done).
 * Once a read has returned the batch's last byte, the reader has it whole: its claim's
 * delivery is made durable in the journal before this close returns
 * (server_finished), and a kill -9 of the mount after that never serves it again. A
 * close before that (a partial read, or a forked child's) changes nothing here: the
 * release, when the last descriptor goes, counts the claim as delivered, in memory.
 * Takes the handle's reference given by the caller. */
static void flush_next(struct zmount *z, fuse_req_t req, struct open_file *f)
{
	if (f->claim)
		claim_finish(f->claim); /* failures are logged; the close succeeds */
	fuse_reply_err(req, 0);
	open_file_put(z, f);
}

/* Replies: err 0 (a delivery the journal could not write is logged, and the close
 * still succeeds: the reader has its bytes). Only handles of next get flushes (open_node
 * sets noflush on every other). The commit may wait for a claim's: it runs on this
 * request thread under the same limit as claims (claim_inline_begin), else offloaded;
 * while the journal stalls it is not waited for at all (server_finished), and the
 * close is answered here, never queued behind the stalled claims. */
static void zmount_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	struct open_file *f = (struct open_file *)fi->fh;

	if (!f || inode_type(ino) != NODE_NEXT) {
		fuse_reply_err(req, 0);
		return;
	}
	__atomic_add_fetch(&f->refs, 1, __ATOMIC_ACQ_REL);
	if (server_journal_stalled(z->srv)) {
		flush_next(z, req, f);
	} else if (claim_inline_begin(z)) {
		flush_next(z, req, f);
		claim_inline_end(z);
	} else if (!defer(z, z->journal_queue, JOB_FLUSH, req, ino, fi, NULL, 0)) {
		flush_next(z, req, f);
	}
}

/* Replies: err 0. Frees the handle's batch. */
static void zmount_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	struct open_file *f = (struct open_file *)fi->fh;

	if (f && inode_type(ino) == NODE_NEXT) {
		/* first: the closer's next open may come right behind this release */
		pthread_mutex_lock(&z->lock);
		next_unhold_locked(z, f);
		pthread_mutex_unlock(&z->lock);
	}
	fuse_reply_err(req, 0); /* close() need not wait for the free */
	if (f && f->claim)
		claim_release(f->claim); /* never waits for a claim's commit */
	if (f)
		open_file_put(z, f);
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
		case JOB_FLUSH:
			flush_next(j->z, j->req, (struct open_file *)j->fi.fh);
			break;
		}
	}
	free(j);
}

/* Replies: EROFS. The tree is fixed; only control takes writes. */
static void zmount_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)parent; (void)name; (void)mode; (void)rdev;
	fuse_reply_err(req, EROFS);
}

static void zmount_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)parent; (void)name; (void)mode;
	fuse_reply_err(req, EROFS);
}

static void zmount_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent; (void)name;
	fuse_reply_err(req, EROFS);
}

static void zmount_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		       fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	(void)parent; (void)name; (void)newparent; (void)newname; (void)flags;
	fuse_reply_err(req, EROFS);
}

static void zmount_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	(void)link; (void)parent; (void)name;
	fuse_reply_err(req, EROFS);
}

static void zmount_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	(void)ino; (void)newparent; (void)newname;
	fuse_reply_err(req, EROFS);
}

static void zmount_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		       struct fuse_file_info *fi)
{
	(void)parent; (void)name; (void)mode; (void)fi;
	fuse_reply_err(req, EROFS);
}

/* Replies: statfs: the dataset's stored size in 4 KiB blocks, its samples as files. */
static void zmount_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct zmount *z = zmount_of(req);
	struct statvfs sv;

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = (z->info->stored_bytes + 4095) / 4096;
	sv.f_files = z->info->samples;
	sv.f_namemax = 255;
	sv.f_flag = ST_NOSUID | ST_NODEV;
	fuse_reply_statfs(req, &sv);
}

static void zmount_init(void *userdata, struct fuse_conn_info *conn)
{
	struct zmount *z = userdata;

	if (z->ready)
		z->ready();
	/* Only samples/ and README use the page cache: read them in requests as large as
	 * the kernel offers (its readahead, 128 KiB here), not one page at a time. */
	conn->max_readahead = 1u << 20;
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
}

const struct fuse_lowlevel_ops zmount_ops = {
	.init = zmount_init,
	.lookup = zmount_lookup,
	.getattr = zmount_getattr,
	.setattr = zmount_setattr,
	.readdir = zmount_readdir,
	.open = zmount_open,
	.read = zmount_read,
	.write = zmount_write,
	.flush = zmount_flush,
	.release = zmount_release,
	.mknod = zmount_mknod,
	.mkdir = zmount_mkdir,
	.unlink = zmount_unlink,
	.rmdir = zmount_unlink,
	.rename = zmount_rename,
	.symlink = zmount_symlink,
	.link = zmount_link,
	.create = zmount_create,
	.statfs = zmount_statfs,
};
