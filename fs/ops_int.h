/*
 * ops_int.h: what the files of the mount's FUSE side share (zmount.h is their contract
 * with the rest of fs/). ops.c has the handlers, one per FUSE operation: each decodes
 * the inode, calls the node kind's row (nodes.c) or core, and replies. Around it:
 * handle.c (the life of an open file handle), nodes.c (the node-kind table: names,
 * attributes, sizes, opens, listings), read.c (the two ways a handle is read),
 * offload.c (which requests go to an offload thread), control.c (/control's commands),
 * overlap.c (the diagnostics of several processes holding one rank's next).
 */
#ifndef ZEPHON_OPS_INT_H
#define ZEPHON_OPS_INT_H

#include <stdint.h>
#include <sys/stat.h>

#include "claim.h"
#include "inode.h"
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
	struct claim *claim;    /* next: the claim (core/serve/claim.h); batch is its batch */
	int progress;           /* next, step/<t>, at/<G>: a read to its end is progress */
	int progressed;         /* noted in z->progress (atomic): once per handle */
	struct open_file *prev, *next;  /* z->open_files: what an unmount must free */
	/* next: the claiming thread and rank, while the handle is in z->next_holders */
	uint64_t rank;
	uint32_t tid;
	int holding;
	struct open_file *hold_prev, *hold_next;
	struct share_run *run;  /* from/<G> (core/serve/share.c), ids/<G> */
	int ids;                /* ids/<G>: the run's sample ids, ids_size bytes */
	uint64_t ids_size;
};

/* handle.c. A new handle (one reference), tracked for the unmount; NULL: out of memory. */
struct open_file *open_file_new(struct zmount *z);
/* Drop a reference; the last one frees the handle (its claim delivered). */
void open_file_put(struct zmount *z, struct open_file *f);
/* Bytes of a handle's content. */
uint64_t file_len(const struct open_file *f);
/* The errno a failed open or read replies for core's -errno. */
int claim_errno(int rc);
/* A close of a handle of next was answered and delivered its claim (zmount_flush,
 * claim_closed): the delivery's commit (claim_finish). Takes the reference the caller
 * gave. */
void flush_next(struct zmount *z, struct open_file *f);

/* overlap.c. Handle f of next (rank's claim by thread tid) is open: note it, and
 * whether another process holds the rank's next open at this moment (logged, counted). */
void next_hold(struct zmount *z, struct open_file *f, uint64_t rank, uint32_t tid);
/* f no longer holds its rank's next (released, or never handed to the kernel). Under
 * z->lock. */
void next_unhold_locked(struct zmount *z, struct open_file *f);

/* control.c. Apply one write of control (size < CONTROL_MAX) and reply: write, EINVAL,
 * EIO, ENOSYS. */
void control_write(struct zmount *z, fuse_req_t req, const char *data, size_t size);

/* nodes.c: one row per node kind. */
struct dirbuf {
	char *p;
	size_t size, cap;
	off_t off;       /* entries already sent */
	off_t index;     /* entries seen so far */
	int full;
};
void dir_add(fuse_req_t req, struct dirbuf *d, const char *name, uint64_t ino, mode_t mode);

typedef void node_read_fn(struct zmount *z, fuse_req_t req, struct open_file *f,
			 size_t size, off_t off);

struct node_kind {
	const char *name;           /* its name in its parent; NULL: a number up to max */
	enum node parent;
	uint64_t max;               /* the largest number of a numbered kind */
	mode_t mode;                /* S_IFDIR | 0555, S_IFREG | 0444, ... */
	int per_rank;               /* under /rank/<r>: only for served ranks */
	int fixed;                  /* attributes fixed for the mount's life: cached */
	int pure;                   /* content that never changes once built: its size is
	                             * cached when it could be had */
	int keep_cache;             /* the same small bytes for the mount's life: through the
	                             * page cache (mappable; a second read is free) */
	/* Does the node exist (beyond per_rank and max)? NULL: always. */
	int (*exists)(struct zmount *z, uint64_t ino);
	/* Directories: entries listed after the named children (NULL: none). */
	void (*list)(struct zmount *z, fuse_req_t req, uint64_t ino, struct dirbuf *d);
	/* Files: size without a handle (*pure set to 1 when it is content that never
	 * changes, else left), the content of a new handle (0 or -errno; NULL: EISDIR), and
	 * how a handle is read (read.c). */
	uint64_t (*size)(struct zmount *z, uint64_t ino, uint32_t pid, int *pure);
	int (*open)(struct zmount *z, uint64_t ino, uint32_t pid, struct open_file *f);
	node_read_fn *read;
};
extern const struct node_kind node_kinds[NODE_COUNT];

/* The row of ino's kind; NULL for an inode no kind has. */
const struct node_kind *node_kind_of(uint64_t ino);
/* The inode of parent's child name, 0 when it has none (or parent is no directory). */
uint64_t node_child(struct zmount *z, uint64_t parent, const char *name);
/* The listing of directory ino from d->off: ".", "..", the named children, the rest. */
void node_readdir(struct zmount *z, fuse_req_t req, uint64_t ino, struct dirbuf *d);
/* Fill st for ino (f: its handle, or NULL). 0 or -ENOENT. */
int node_attr(struct zmount *z, uint64_t ino, uint32_t pid, const struct open_file *f,
	      struct stat *st, double *timeout);
/* ENTRY / ATTR replies of a lookup and of a stat; ENOENT when node_attr says so. */
void reply_entry(struct zmount *z, fuse_req_t req, uint64_t ino);
void reply_attr(struct zmount *z, fuse_req_t req, uint64_t ino, const struct open_file *f);
/* Open ino for the request (its access mode checked): claim, build or render the
 * handle's content and reply. */
void open_node(struct zmount *z, fuse_req_t req, uint64_t ino, struct fuse_file_info *fi);
/* A lookup of rank/<name> found nothing: say which ranks this mount serves. */
void say_unserved_rank(struct zmount *z, const char *name);
/* A decimal name, one spelling per number (no leading 0s), at most max: 0 or -ENOENT. */
int parse_decimal(const char *name, uint64_t max, uint64_t *out);

/* read.c. Reply to a read of [off, off + size) of handle f: of its batch or text, or of
 * its run of from/ shares. */
node_read_fn read_content, read_run, read_ids;
/* read_content of a handle of next (f->claim) read by lock owner `owner` (the kernel's
 * id of the reader's file table; 0: not known): the close that delivers the claim is the
 * one of the reader that read its last byte (claim_closed). */
void read_next(struct zmount *z, fuse_req_t req, struct open_file *f, size_t size,
	       off_t off, uint64_t owner);

/* offload.c. Requests that may block go to an offload thread. */
enum job_op { JOB_LOOKUP, JOB_GETATTR, JOB_OPEN, JOB_WRITE, JOB_FLUSH };
/* The queue of a lookup or a stat without a handle of ino, of an open of ino; NULL: it
 * never blocks. */
struct jobq *attr_queue(const struct zmount *z, uint64_t ino);
struct jobq *open_queue(const struct zmount *z, uint64_t ino);
/* A request to answer on an offload thread: the operation, its request and inode, and
 * what it came with (fi: may be NULL; data: size bytes written, JOB_WRITE). */
struct deferred {
	enum job_op op;
	fuse_req_t req;
	fuse_ino_t ino;
	const struct fuse_file_info *fi;
	const char *data;
	size_t size;
};
/* Queue the request on q (its fi and data are copied): 1 when queued (the job answers
 * it), 0 when the caller must answer it itself (q is NULL, no offload thread could run
 * it, or out of memory). */
int defer(struct zmount *z, struct jobq *q, const struct deferred *d);
/* May a claim (or a close's commit) run on this request thread? 1: go ahead, then call
 * claim_inline_end(); 0: offload it. */
int claim_inline_begin(struct zmount *z);
void claim_inline_end(struct zmount *z);

#endif
