/*
 * shard_writer.h: writes a dataset's shard files (layout pinned in dataset.h) into an
 * open directory, one sample at a time, in sample id order from 0.
 *
 * Each sample becomes one payload: with compression an independent zstd frame (content
 * size and XXH64 content checksum on, dictionary if given), else the raw bytes; its
 * index entry carries shard_index_checksum() of the raw bytes. A shard is closed (index header
 * completed, both files fsync'ed, a row added to the catalog) once its payload file
 * reaches shard_bytes, and at shard_writer_finish().
 *
 * Not thread-safe: one writer, one thread.
 */
#ifndef ZEPHON_SHARD_WRITER_H
#define ZEPHON_SHARD_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "catalog.h"

struct shard_writer_opts {
	int compress;            /* 1: zstd frames, 0: raw */
	int level;               /* zstd level (ZSTD_minCLevel()..ZSTD_maxCLevel()) */
	const void *dict;        /* zstd dictionary or NULL; borrowed until free */
	size_t dict_len;
	uint64_t shard_bytes;    /* roll over to a new shard past this many payload bytes */
};

struct shard_writer;

/* Start writing into directory dirfd (borrowed); closed shards are appended to *cat
 * (borrowed). 0, or -ENOMEM, -EINVAL (a dictionary zstd cannot load), -errno of the
 * first file creation, with a reason in err. */
int shard_writer_new(int dirfd, const struct shard_writer_opts *o, struct catalog *cat,
		     struct shard_writer **out, char *err, size_t errlen);

/* Append the next sample (len <= SAMPLE_MAX_BYTES). 0, or -EFBIG (too large), -ENOMEM,
 * -EIO (write failed; reason in err). */
int shard_writer_add(struct shard_writer *w, const void *data, size_t len, char *err,
		     size_t errlen);

/* Append the next sample already encoded: payload is its zstd frame (compress) or its
 * raw bytes, raw_len its decoded size, checksum shard_index_checksum() of the decoded bytes.
 * Lets callers compress on several threads. Same returns as shard_writer_add. */
int shard_writer_add_payload(struct shard_writer *w, const void *payload, size_t plen,
			     size_t raw_len, uint32_t checksum, char *err, size_t errlen);

/* Close the last shard. 0 or -EIO with a reason in err. */
int shard_writer_finish(struct shard_writer *w, char *err, size_t errlen);

/* Payload bytes written so far (the dataset's stored_bytes). */
uint64_t shard_writer_stored_bytes(const struct shard_writer *w);
uint64_t shard_writer_samples(const struct shard_writer *w);

void shard_writer_free(struct shard_writer *w);

#endif
