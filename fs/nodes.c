/*
 * nodes.c: the node-kind table, one row per kind of node of the tree (docs/design.md
 * §5; every file: docs/mounting.md): its name and parent, attributes, whether it exists, its
 * size without a handle, what an open puts in a handle, how a handle is read, and what
 * a directory lists. The handlers (ops.c) read the row of an inode's kind.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "ops_int.h"
#include "parse.h"

int parse_decimal(const char *name, uint64_t max, uint64_t *out)
{
	uint64_t v;

	if (parse_u64_canonical(name, &v) || v > max) /* one spelling per number */
		return -ENOENT;
	*out = v;
	return 0;
}

/* The share a node of step/, at/ or validation/ names. */
static struct share node_share(uint64_t ino)
{
	enum node t = inode_type(ino);
	enum share_kind k = t == NODE_STEP ? SHARE_STEP : t == NODE_VAL ? SHARE_VALIDATION :
			    SHARE_AT;

	return (struct share){ k, inode_rank(ino), inode_step(ino) };
}

/* exists: does the stream still have the share (epochs=E ends it)? */
static int share_exists(struct zmount *z, uint64_t ino)
{
	struct share sh = node_share(ino);

	return server_share_in_stream(z->srv, &sh);
}

static int has_validation(struct zmount *z, uint64_t ino)
{
	(void)ino;
	return server_validation_steps(z->srv) != 0;
}

static int has_from(struct zmount *z, uint64_t ino)
{
	(void)ino;
	return server_shares_fixed(z->srv); /* only npy and bin shares have one size */
}

static int has_ids(struct zmount *z, uint64_t ino)
{
	(void)ino;
	return z->ids_served; /* uncompressed token shards, samples back to back */
}

static int sample_exists(struct zmount *z, uint64_t ino)
{
	return inode_id(ino) < z->info->samples;
}

/* size: of generated text, rendered now */
static uint64_t text_size(struct zmount *z, uint64_t ino, uint32_t pid, int *pure)
{
	struct buf text = BUF_INIT;
	uint64_t size;

	(void)pid;
	(void)pure;
	switch (inode_type(ino)) {
	case NODE_STATUS:
		render_status(z, &text);
		break;
	case NODE_METRICS:
		render_metrics(z, &text);
		break;
	default:
		render_state(z, inode_rank(ino), &text);
		break;
	}
	size = text.len;
	buf_release(&text);
	return size;
}

static uint64_t readme_size(struct zmount *z, uint64_t ino, uint32_t pid, int *pure)
{
	(void)ino;
	(void)pid;
	(void)pure;
	return z->readme_len;
}

/* next answers the caller's latest claim, else (npy and bin, whose batches all have one
 * size) the peeked batch's; peek the peeked batch's */
static uint64_t next_size(struct zmount *z, uint64_t ino, uint32_t pid, int *pure)
{
	struct batch *b = NULL;
	uint64_t size = 0;
	int found = 0;

	(void)pure;
	if (inode_type(ino) == NODE_NEXT)
		size = server_claim_size(z->srv, pid, inode_rank(ino), &found);
	if (!found && (inode_type(ino) == NODE_PEEK || server_shares_fixed(z->srv)) &&
	    server_peek(z->srv, inode_rank(ino), &b) == 0)
		size = batch_len(b);
	server_batch_free(z->srv, b);
	return size;
}

/* From the order and the index where that can be had: a lookup, then the open, would
 * otherwise build the whole share twice (tar: its headers need the samples) */
static uint64_t share_size(struct zmount *z, uint64_t ino, uint32_t pid, int *pure)
{
	struct share sh = node_share(ino);
	struct batch *b = NULL;
	uint64_t size = 0;

	(void)pid;
	if (server_share_len(z->srv, &sh, &size) == 0) {
		*pure = 1;
	} else if (server_share(z->srv, &sh, &b) == 0) {
		size = batch_len(b);
		*pure = 1;
	}
	server_batch_free(z->srv, b);
	return size;
}

static uint64_t sample_size(struct zmount *z, uint64_t ino, uint32_t pid, int *pure)
{
	struct batch *b = NULL;
	uint64_t size = 0;

	(void)pid;
	if (server_sample(z->srv, inode_id(ino), &b) == 0) {
		size = batch_len(b);
		*pure = 1;
	}
	server_batch_free(z->srv, b);
	return size;
}

static uint64_t run_size(struct zmount *z, uint64_t ino, uint32_t pid, int *pure)
{
	uint64_t share, size = 0;

	(void)pid;
	if (server_run_size(z->srv, inode_rank(ino), inode_step(ino), &share, &size) == 0)
		*pure = 1;
	return size;
}

static uint64_t ids_size(struct zmount *z, uint64_t ino, uint32_t pid, int *pure)
{
	uint64_t size = 0;

	(void)pid;
	if (server_ids_size(z->srv, inode_rank(ino), inode_step(ino), &size) == 0)
		*pure = 1;
	return size;
}

static int open_text(struct zmount *z, uint64_t ino, uint32_t pid, struct open_file *f)
{
	(void)pid;
	switch (inode_type(ino)) {
	case NODE_STATUS:
		return render_status(z, &f->text);
	case NODE_METRICS:
		return render_metrics(z, &f->text);
	case NODE_README:
		return buf_append(&f->text, z->readme, z->readme_len);
	default:
		return render_state(z, inode_rank(ino), &f->text);
	}
}

static int open_control(struct zmount *z, uint64_t ino, uint32_t pid, struct open_file *f)
{
	(void)z;
	(void)ino;
	(void)pid;
	(void)f;
	return 0; /* its handle takes writes only */
}

/* Opening next claims the rank's next micro-batch; nothing else claims. */
static int open_next(struct zmount *z, uint64_t ino, uint32_t pid, struct open_file *f)
{
	int rc = claim_open(z->srv, inode_rank(ino), pid, &f->claim);

	if (rc)
		return rc;
	f->batch = f->claim->batch;
	f->progress = 1;
	next_hold(z, f, inode_rank(ino), pid);
	return 0;
}

static int open_peek(struct zmount *z, uint64_t ino, uint32_t pid, struct open_file *f)
{
	(void)pid;
	return server_peek(z->srv, inode_rank(ino), &f->batch);
}

static int open_share(struct zmount *z, uint64_t ino, uint32_t pid, struct open_file *f)
{
	struct share sh = node_share(ino);
	int rc = server_share(z->srv, &sh, &f->batch);

	(void)pid;
	if (!rc && sh.kind == SHARE_STEP)
		server_step_opened(z->srv, sh.n);
	f->progress = !rc && sh.kind != SHARE_VALIDATION;  /* evaluation is not training */
	return rc;
}

static int open_sample(struct zmount *z, uint64_t ino, uint32_t pid, struct open_file *f)
{
	(void)pid;
	return server_sample(z->srv, inode_id(ino), &f->batch);
}

static int open_run(struct zmount *z, uint64_t ino, uint32_t pid, struct open_file *f)
{
	(void)pid;
	return server_run_open(z->srv, inode_rank(ino), inode_step(ino), &f->run);
}

/* ids/<G>: the run of from/<G> (rank and gsn, nothing built), read as ids */
static int open_ids(struct zmount *z, uint64_t ino, uint32_t pid, struct open_file *f)
{
	int rc = open_run(z, ino, pid, f);

	if (!rc)
		rc = server_ids_size(z->srv, inode_rank(ino), inode_step(ino), &f->ids_size);
	f->ids = 1;
	return rc;
}

/* list: /rank lists the served ranks */
static void list_ranks(struct zmount *z, fuse_req_t req, uint64_t ino, struct dirbuf *d)
{
	(void)ino;
	for (size_t i = 0; i < z->cfg->ranks.count && !d->full; i++) {
		char name[24];

		snprintf(name, sizeof(name), "%" PRIu64, z->cfg->ranks.ranks[i]);
		dir_add(req, d, name, inode_make(NODE_RANK, z->cfg->ranks.ranks[i], 0), S_IFDIR);
	}
}

/* validation/ lists its steps (at/ has one name per gsn and lists none), from the
 * offset on: entries before it are skipped without a loop */
static void list_validation(struct zmount *z, fuse_req_t req, uint64_t ino, struct dirbuf *d)
{
	uint64_t t = d->off > d->index ? (uint64_t)(d->off - d->index) : 0;

	d->index += (off_t)t;
	for (; t < server_validation_steps(z->srv) && !d->full; t++) {
		char name[24];

		snprintf(name, sizeof(name), "%" PRIu64, t);
		dir_add(req, d, name, inode_make(NODE_VAL, inode_rank(ino), t), S_IFREG);
	}
}

#define DIR S_IFDIR | 0555
#define RO S_IFREG | 0444
/* Only the owner moves the stream (next) or sees where it stands (peek): with
 * allow_other, default_permissions keeps other users to status, samples/ and step/,
 * which claim nothing and are the same for anyone. */
#define OWNER S_IFREG | 0400

const struct node_kind node_kinds[NODE_COUNT] = {
	[NODE_ROOT] = { .mode = DIR, .fixed = 1 },
	[NODE_README] = { "README", NODE_ROOT, .mode = RO, .fixed = 1, .keep_cache = 1,
			  .size = readme_size, .open = open_text, .read = read_content },
	[NODE_STATUS] = { "status", NODE_ROOT, .mode = RO, .size = text_size,
			  .open = open_text, .read = read_content },
	[NODE_METRICS] = { "metrics", NODE_ROOT, .mode = RO, .size = text_size,
			   .open = open_text, .read = read_content },
	[NODE_CONTROL] = { "control", NODE_ROOT, .mode = S_IFREG | 0200, .open = open_control,
			   .read = read_content },
	[NODE_RANKDIR] = { "rank", NODE_ROOT, .mode = DIR, .fixed = 1, .list = list_ranks },
	[NODE_SAMPLESDIR] = { "samples", NODE_ROOT, .mode = DIR, .fixed = 1 },
	[NODE_RANK] = { NULL, NODE_RANKDIR, INODE_MAX_RANK, DIR, .per_rank = 1, .fixed = 1 },
	[NODE_NEXT] = { "next", NODE_RANK, .mode = OWNER, .per_rank = 1, .size = next_size,
			.open = open_next, .read = read_content },
	[NODE_PEEK] = { "peek", NODE_RANK, .mode = OWNER, .per_rank = 1, .size = next_size,
			.open = open_peek, .read = read_content },
	[NODE_STATE] = { "state", NODE_RANK, .mode = RO, .per_rank = 1, .size = text_size,
			 .open = open_text, .read = read_content },
	[NODE_STEPDIR] = { "step", NODE_RANK, .mode = DIR, .per_rank = 1, .fixed = 1 },
	[NODE_STEP] = { NULL, NODE_STEPDIR, INODE_MAX_STEP, RO, .per_rank = 1, .pure = 1,
			.exists = share_exists, .size = share_size, .open = open_share,
			.read = read_content },
	[NODE_SAMPLE] = { NULL, NODE_SAMPLESDIR, INODE_MAX_ID, RO, .pure = 1, .keep_cache = 1,
			  .exists = sample_exists, .size = sample_size, .open = open_sample,
			  .read = read_content },
	[NODE_ATDIR] = { "at", NODE_RANK, .mode = DIR, .per_rank = 1, .fixed = 1 },
	[NODE_AT] = { NULL, NODE_ATDIR, INODE_MAX_STEP, RO, .per_rank = 1, .pure = 1,
		      .exists = share_exists, .size = share_size, .open = open_share,
		      .read = read_content },
	[NODE_VALDIR] = { "validation", NODE_RANK, .mode = DIR, .per_rank = 1, .fixed = 1,
			  .exists = has_validation, .list = list_validation },
	[NODE_VAL] = { NULL, NODE_VALDIR, INODE_MAX_STEP, RO, .per_rank = 1, .pure = 1,
		       .exists = share_exists, .size = share_size, .open = open_share,
		       .read = read_content },
	[NODE_FROMDIR] = { "from", NODE_RANK, .mode = DIR, .per_rank = 1, .fixed = 1,
			   .exists = has_from },
	/* from/<G> exists where at/<G> does */
	[NODE_FROM] = { NULL, NODE_FROMDIR, INODE_MAX_STEP, RO, .per_rank = 1, .pure = 1,
			.exists = share_exists, .size = run_size, .open = open_run,
			.read = read_run },
	[NODE_IDSDIR] = { "ids", NODE_RANK, .mode = DIR, .per_rank = 1, .fixed = 1,
			  .exists = has_ids },
	/* ids/<G> exists where from/<G> does, for uncompressed token shards */
	[NODE_IDS] = { NULL, NODE_IDSDIR, INODE_MAX_STEP, RO, .per_rank = 1, .pure = 1,
		       .exists = share_exists, .size = ids_size, .open = open_ids,
		       .read = read_ids },
};

const struct node_kind *node_kind_of(uint64_t ino)
{
	enum node t = inode_type(ino);

	return t < NODE_COUNT ? &node_kinds[t] : NULL;
}

/* Does ino exist: its kind, its rank served, its number within the stream. */
static int node_exists(struct zmount *z, uint64_t ino)
{
	const struct node_kind *k = node_kind_of(ino);

	if (!k || (k->per_rank && !rankset_has(&z->cfg->ranks, inode_rank(ino))))
		return 0;
	return !k->exists || k->exists(z, ino);
}

uint64_t node_child(struct zmount *z, uint64_t parent, const char *name)
{
	enum node pt = inode_type(parent);
	uint64_t v, ino;

	for (enum node t = NODE_README; t < NODE_COUNT; t++) {
		const struct node_kind *k = &node_kinds[t];

		if (k->parent != pt)
			continue;
		if (k->name && !strcmp(name, k->name))
			ino = inode_make(t, inode_rank(parent), 0);
		else if (!k->name && parse_decimal(name, k->max, &v) == 0)
			ino = t == NODE_SAMPLE ? inode_sample(v) : t == NODE_RANK ?
			      inode_make(t, v, 0) : inode_make(t, inode_rank(parent), v);
		else
			continue;
		return node_exists(z, ino) ? ino : 0;
	}
	return 0;
}

void node_readdir(struct zmount *z, fuse_req_t req, uint64_t ino, struct dirbuf *d)
{
	enum node type = inode_type(ino);

	dir_add(req, d, ".", ino, S_IFDIR);
	dir_add(req, d, "..", 1, S_IFDIR);
	for (enum node t = NODE_README; t < NODE_COUNT; t++) {
		const struct node_kind *k = &node_kinds[t];
		uint64_t child = inode_make(t, inode_rank(ino), 0);

		if (k->parent == type && k->name && (!k->exists || k->exists(z, child)))
			dir_add(req, d, k->name, child, k->mode & S_IFMT);
	}
	if (node_kinds[type].list)
		node_kinds[type].list(z, req, ino, d);
}

void dir_add(fuse_req_t req, struct dirbuf *d, const char *name, uint64_t ino, mode_t mode)
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

int node_attr(struct zmount *z, uint64_t ino, uint32_t pid, const struct open_file *f,
	      struct stat *st, double *timeout)
{
	const struct node_kind *k = node_kind_of(ino);
	int pure;

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = z->uid;
	st->st_gid = z->gid;
	st->st_blksize = BLKSIZE;
	st->st_atim = st->st_mtim = st->st_ctim = z->mounted_at;
	*timeout = 0;
	if (!node_exists(z, ino))
		return -ENOENT;
	st->st_mode = k->mode;
	st->st_nlink = S_ISDIR(k->mode) ? 2 : 1;
	if (k->fixed)
		*timeout = STATIC_ATTR_TIMEOUT;
	if (S_ISREG(st->st_mode)) {
		pure = f && k->pure;
		st->st_size = (off_t)(f ? file_len(f) : k->size ? k->size(z, ino, pid, &pure) : 0);
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

/* A loop retrying it must not flood the log. */
void say_unserved_rank(struct zmount *z, const char *name)
{
	uint64_t r, w = layout_world_size(&z->cfg->layout);
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

void reply_entry(struct zmount *z, fuse_req_t req, uint64_t ino)
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

void reply_attr(struct zmount *z, fuse_req_t req, uint64_t ino, const struct open_file *f)
{
	struct stat st;
	double timeout;

	if (node_attr(z, ino, fuse_req_ctx(req)->pid, f, &st, &timeout)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fuse_reply_attr(req, &st, timeout);
}


void open_node(struct zmount *z, fuse_req_t req, uint64_t ino, struct fuse_file_info *fi)
{
	const struct node_kind *k = node_kind_of(ino);
	struct open_file *f = open_file_new(z);
	int rc;

	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	rc = k && k->open ? k->open(z, ino, fuse_req_ctx(req)->pid, f) : -EISDIR;
	if (rc) {
		open_file_put(z, f);
		fuse_reply_err(req, claim_errno(rc));
		return;
	}
	/* Only a close of next has work to do before close() returns (zmount_flush); the
	 * kernel sends no flush for the others. */
	fi->noflush = inode_type(ino) != NODE_NEXT;
	/* README and samples/: the same bytes for the life of the mount, and small: through
	 * the page cache, so they can be mapped (np.load(mmap_mode='r'), np.memmap) and a
	 * second read is free. step/ is pure too, but its batches are large and read once:
	 * through the page cache they would go in 128 KiB readahead requests, copied into
	 * the cache and out again; direct I/O copies them once (RESULTS.md, "step/ files").
	 * Everything else may differ at every open, or is read once: no page cache. */
	if (k->keep_cache)
		fi->keep_cache = 1;
	else
		fi->direct_io = 1;
	fi->fh = (uint64_t)(uintptr_t)f;
	if (fuse_reply_open(req, fi) == -ENOENT) {
		/* The opener was interrupted before it got the handle: the kernel will not
		 * release it. A claim already journaled stays journaled (never forgotten). */
		open_file_put(z, f);
	}
}
