/*
 * ops.c: the FUSE low-level handlers of the mount, one per operation (squashfuse's ll.c
 * shape): decode the inode, call the row of its kind (nodes.c) or core, reply. The tree
 * is docs/design.md §5 (every file: docs/mounting.md); inode numbers are fs/inode.h; what the
 * handlers share is fs/ops_int.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "fault.h"
#include "ops_int.h"

static struct zmount *zmount_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static int is_dir(uint64_t ino)
{
	const struct node_kind *k = node_kind_of(ino);

	return k && S_ISDIR(k->mode);
}

/* Replies: entry, ENOENT, ENOTDIR. */
static void zmount_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct zmount *z = zmount_of(req);
	uint64_t ino;

	if (!is_dir(parent)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	ino = node_child(z, parent, name);
	if (!ino) {
		if (inode_type(parent) == NODE_RANKDIR)
			say_unserved_rank(z, name);
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!defer(z, attr_queue(z, ino), &(struct deferred){ JOB_LOOKUP, req, ino, NULL, NULL,
		   0 }))
		reply_entry(z, req, ino);
}

/* Replies: attr, ENOENT. With a file handle (fstat on an open next, lseek SEEK_END),
 * the size is that handle's batch. */
static void zmount_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	const struct open_file *f = fi && fi->fh ? (const struct open_file *)fi->fh : NULL;

	if (inode_type(ino) == NODE_CONTROL)
		f = NULL; /* its handle holds pending input, not content */
	if (f || !defer(z, attr_queue(z, ino), &(struct deferred){ JOB_GETATTR, req, ino, NULL,
			 NULL, 0 }))
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

/* Replies: buf (entries from off), ENOTDIR, ENOMEM. step/, at/, from/, ids/ and samples/ list
 * nothing: they are unbounded, and ls -R / find / du must stay instant. */
static void zmount_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	struct dirbuf d = { .off = off, .cap = size };

	(void)fi;
	if (!is_dir(ino)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	d.p = malloc(size ? size : 1);
	if (!d.p) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	node_readdir(z, req, ino, &d);
	fuse_reply_buf(req, d.p, d.size);
	free(d.p);
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
	} else if (!defer(z, open_queue(z, ino), &(struct deferred){ JOB_OPEN, req, ino, fi, NULL,
			  0 })) {
		open_node(z, req, ino, fi);
	}
}

/* Replies: buf or iov (the bytes at [off, off + size) of the handle's content; short or
 * empty at its end), EIO (a sample failed its checksum or a shard was cut under the
 * mount: logged), ENOMEM. Any offset is honoured. */
static void zmount_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	struct open_file *f = (struct open_file *)fi->fh;

	__atomic_add_fetch(&f->refs, 1, __ATOMIC_ACQ_REL);
	if (f->claim)
		read_next(z, req, f, size, off, fi->lock_owner);
	else
		node_kind_of(ino)->read(z, req, f, size, off);
	open_file_put(z, f);
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
	if (!defer(z, z->journal_queue, &(struct deferred){ JOB_WRITE, req, ino, NULL, data,
		   size }))
		control_write(z, req, data, size);
}

/* Replies: err 0, at once: a close never waits for the journal. Only handles of next
 * get flushes (open_node sets noflush on every other). A close answered after its
 * reader read the last byte delivers the claim (claim_closed), and only then, once the
 * reply is sent, is the delivery committed (claim_finish): a kill before the reply fails
 * the reader's close, which must find the batch not counted; a kill between the reply
 * and the commit serves that one batch again. The commit may wait for a claim's: it runs
 * on this request thread under the same limit as claims (claim_inline_begin), else
 * offloaded; while the journal stalls it is not waited for at all (server_finished:
 * the delivery goes with the rank's next claim). A delivery the journal cannot write is
 * logged. */
static void zmount_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	struct open_file *f = (struct open_file *)fi->fh;
	int closing;

	if (!f || inode_type(ino) != NODE_NEXT || !f->claim) {
		fuse_reply_err(req, 0);
		return;
	}
	fault_point(FAULT_FLUSH);
	/* held across the reply: the release may come, on another thread, right behind it */
	__atomic_add_fetch(&f->refs, 1, __ATOMIC_ACQ_REL);
	closing = claim_closing(f->claim, fi->lock_owner);
	if (!claim_closed(f->claim, closing, fuse_reply_err(req, 0) == 0)) {
		open_file_put(z, f); /* nothing finished, or the reply reached no one */
		return;
	}
	fault_point(FAULT_FLUSH_REPLIED);
	if (server_journal_stalled(z->srv)) {
		flush_next(z, f);
	} else if (claim_inline_begin(z)) {
		flush_next(z, f);
		claim_inline_end(z);
	} else if (!defer(z, z->journal_queue, &(struct deferred){ JOB_FLUSH, NULL, ino, fi, NULL,
			  0 })) {
		flush_next(z, f);
	}
}

/* Replies: err 0. Frees the handle's batch. */
static void zmount_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct zmount *z = zmount_of(req);
	struct open_file *f = (struct open_file *)fi->fh;

	if (f && inode_type(ino) == NODE_NEXT) {
		fault_point(FAULT_RELEASE);
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
