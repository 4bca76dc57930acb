/*
 * handle.c: the life of an open file handle (ops_int.h's struct open_file): made by an
 * open, tracked so that an unmount frees what the kernel never released, counted by
 * the reads replying from it, freed by the last reference. A handle of next holds a
 * claim (core/serve/claim.h), delivered when the handle goes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ops_int.h"

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

void open_file_put(struct zmount *z, struct open_file *f)
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

struct open_file *open_file_new(struct zmount *z)
{
	struct open_file *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->refs = 1;
	pthread_mutex_lock(&z->lock);
	f->next = z->open_files;
	if (f->next)
		f->next->prev = f;
	z->open_files = f;
	pthread_mutex_unlock(&z->lock);
	return f;
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

uint64_t file_len(const struct open_file *f)
{
	if (f->run)
		return f->ids ? f->ids_size : f->run->size;
	return f->batch ? batch_len(f->batch) : f->text.len;
}

/* The commit of a delivery made by a close of a handle of next (zmount_flush, after its
 * reply: claim.h's delivery rule): the rank's delivered position is durable when this
 * returns, and a kill -9 of the mount after that never serves the batch again. Every
 * close(2) of a descriptor of next comes to zmount_flush, in any process; only the one
 * of the reader that read the last byte gets here (a forked child's, a partial read's
 * change nothing: the release, when the last descriptor goes, counts the claim as
 * delivered, in memory). Failures are logged by the server. Takes the handle's
 * reference given by the caller. */
void flush_next(struct zmount *z, struct open_file *f)
{
	claim_finish(f->claim);
	open_file_put(z, f);
}


int claim_errno(int rc)
{
	switch (rc) {
	case -ENODATA: case -EIO: case -ENOENT: case -ENOMEM: case -EINVAL: case -ESHUTDOWN:
		return -rc;
	default:
		return EIO;
	}
}
