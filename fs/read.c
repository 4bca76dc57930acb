/*
 * read.c: the two ways a handle is read. read_content replies from the handle's batch
 * (its views of the dataset's mappings go to the reader in the kernel's one copy) or
 * text; read_run from a from/<G> run of shares, built by core as the read spans them.
 * A read that reaches the end of a batch of next, step/ or at/ is the rank's progress.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "clock.h"
#include "fault.h"
#include "guard.h"
#include "le.h"
#include "ops_int.h"
#include "run.h"

/* A read of n bytes at off of the handle's batch is about to be replied: when it
 * reaches the batch's last byte (a claim of next, a step/ or at/ share), the rank has
 * read it (core/serve/progress.h). Noted before the reply, so that a /status read after it
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
void read_run(struct zmount *z, fuse_req_t req, struct open_file *f, size_t size,
		      off_t off)
{
	struct share_run *run = f->run;
	struct share_read rd;
	int rc;

	/* the pages of these steps and of the steps after them: the ones after are on
	 * their way while these are built */
	if (off >= 0 && (uint64_t)off < run->size)
		share_run_ahead(run, (uint64_t)off, size, run->share, 1);
	rc = off < 0 ? 0 : share_run_read(run, (uint64_t)off, size, FROM_IOV_MAX, &rd);

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
		fuse_reply_err(req, claim_errno(rc));
		rd.bytes = 0;
	} else {
		/* noted before the reply, so that a /status read after it shows it */
		progress_note_run(z->progress, &(struct progress_read){ run->rank, run->gsn,
				  run->share, (uint64_t)off, rd.bytes }, clock_mono_s());
		fuse_reply_iov(req, rd.iov, (int)rd.niov); /* the kernel has the bytes then */
	}
	pthread_mutex_lock(&z->lock);
	z->bytes_read += rd.bytes;
	pthread_mutex_unlock(&z->lock);
	share_run_read_end(run, &rd, !rc);
}

/* A read of ids/<G>: the sample ids of the shares of from/<G> that [off, off + size)
 * spans, from the order (nothing decoded, nothing checked against the index: the reader
 * gathers the samples itself). Counted as progress as a read of from/ is: a share whose
 * last id is read is read. Replies: buf (short or empty at the end), ENOMEM, or
 * server_share_ids' errors. */
void read_ids(struct zmount *z, fuse_req_t req, struct open_file *f, size_t size, off_t off)
{
	struct share_run *run = f->run;
	uint64_t per = server_ids_share_bytes(z->srv), pos = off < 0 ? f->ids_size : (uint64_t)off;
	uint64_t end = f->ids_size - pos < size ? f->ids_size : pos + size;
	uint64_t *ids = NULL;
	uint8_t *out = NULL;
	int rc = 0;

	if (pos >= end || !per) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	/* the pages of these steps' samples and of the steps after them: on their way
	 * while the reader gathers */
	share_run_ahead(run, pos, end - pos, per, 0);
	ids = malloc(per);
	out = malloc(end - pos);
	if (!ids || !out)
		rc = -ENOMEM;
	for (uint64_t p = pos; !rc && p < end;) {
		struct run_piece piece;

		run_piece(per, p, end, &piece);
		rc = share_run_ids(run, piece.share, ids);
		for (uint64_t i = 0; !rc && i < run->share_samples; i++)
			le64_put(&ids[i], ids[i]);
		if (!rc)
			memcpy(out + (p - pos), (const uint8_t *)ids + piece.within, piece.len);
		p += piece.len;
	}
	if (rc) {
		fuse_reply_err(req, claim_errno(rc));
	} else {
		/* noted before the reply, so that a /status read after it shows it */
		progress_note_run(z->progress, &(struct progress_read){ run->rank, run->gsn, per,
				  pos, end - pos }, clock_mono_s());
		fuse_reply_buf(req, (const char *)out, end - pos);
	}
	free(ids);
	free(out);
}

/* read_content, and for a claim of next the lock owner of the reader (0: not known). */
static void read_batch(struct zmount *z, fuse_req_t req, struct open_file *f, size_t size,
		       off_t off, uint64_t owner)
{
	size_t n = 0;
	int sent = -1, tail;

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
	/* The reply holds the batch's last byte (or the reader asked past it): the reader
	 * can have it whole, and a close answered after this delivers it (claim.h). */
	if (f->claim && sent == 0 && off >= 0 && (uint64_t)off + n >= file_len(f) &&
	    claim_read_end(f->claim, owner))
		fault_point(FAULT_READ_END);
	if (f->claim)
		claim_tail_end(f->claim, tail);
	pthread_mutex_lock(&z->lock);
	z->bytes_read += n;
	pthread_mutex_unlock(&z->lock);
}

/* Replies: buf or iov (the bytes at [off, off + size) of the handle's content; short or
 * empty at its end), EIO (a shard cut under the mount). Any offset is honoured. */
void read_content(struct zmount *z, fuse_req_t req, struct open_file *f, size_t size,
		  off_t off)
{
	read_batch(z, req, f, size, off, 0);
}

void read_next(struct zmount *z, fuse_req_t req, struct open_file *f, size_t size,
	       off_t off, uint64_t owner)
{
	read_batch(z, req, f, size, off, owner);
}
