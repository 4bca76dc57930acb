/*
 * batch.h: one encoded batch and its pure builder (docs/design.md §3). The batch of
 * (rank, step, micro-batches [micro, micro + micros)) of a layout: sample ids from the
 * order, bytes from the encoder. The mount's server (serve.h) and `zephon batch` both
 * build through here, so the bytes are the same whichever way they are asked for.
 * Thread-safety: a batch belongs to one thread at a time; the functions share nothing.
 */
#ifndef ZEPHON_BATCH_H
#define ZEPHON_BATCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "buf.h"
#include "dataset.h"
#include "encode.h"
#include "order.h"

/* One encoded micro-batch (or several, for a whole step share) and where it came from.
 * Its bytes are data followed by the nviews ranges of views (encode_views_possible():
 * samples served straight from the dataset's mappings, never copied); views is NULL for
 * every other batch. */
struct batch {
	struct buf data;        /* the encoded bytes (or the header, before the views) */
	struct iovec *views;    /* owned array; the ranges belong to the dataset */
	size_t nviews;
	uint64_t views_len;     /* total bytes of the views */
	uint64_t rank, step, micro;
	uint64_t micros;        /* micro-batches covered: 1 for a claim, A for a step share */
	uint64_t gsn;           /* first gsn */
	uint64_t count;         /* samples, gsn .. gsn + count - 1 */
	uint64_t epoch;         /* epoch of the first sample */
	uint64_t *ids;          /* count sample ids, owned by the batch */
	uint64_t generation;    /* server_claim: the rank's rewind count when claimed */
};

void batch_free(struct batch *b);

/* Bytes of the batch: data plus views. */
uint64_t batch_len(const struct batch *b);

/* The iovecs of the batch's bytes [off, off + size), clipped at its end, into iov
 * (room for max entries; a slice needs at most 2 + size / BATCH_VIEW_MIN). Returns the
 * number used (0 at or past the end); *bytes receives their total length. */
size_t batch_slice(const struct batch *b, uint64_t off, size_t size, struct iovec *iov,
		   size_t max, size_t *bytes);

/* Which batch: the micro-batches [micro, micro + micros) of rank at step of layout, their
 * samples in order's sequence, of the dataset of info, encoded in format. */
struct batch_spec {
	const struct dataset_info *info;
	const struct order *order;
	const struct layout *layout;
	enum encode_format format;
	uint64_t rank, step, micro, micros;
};

/* The batch sp names. *out is malloc'd (free with batch_free). 0, or -EINVAL
 * (rank/step/micro outside the layout), -EOVERFLOW, -ENOMEM, -EIO (a sample failed its
 * checksum: *bad_id names it). */
int batch_build(struct sample_reader *r, const struct batch_spec *sp, struct batch **out,
		uint64_t *bad_id);

/* batch_build() into `data`, an empty buffer whose capacity may be reused (it is the
 * batch's on success and released on failure). views = 1: the samples are views of the
 * dataset's mappings and data holds the header only (encode_batch_views(); -ENOTSUP
 * when that is not possible for this batch, data then released). Errors as batch_build. */
int batch_encode(struct sample_reader *r, const struct batch_spec *sp, int views,
		 struct buf data, struct batch **out, uint64_t *bad_id);

/* A copy of b (its data copied, its views pointing at the same ranges); NULL when out
 * of memory. Free with batch_free. */
struct batch *batch_copy(const struct batch *b);

#endif
