#include "shard_writer.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "buf.h"
#include "compressor.h"
#include "dataset.h"
#include "le.h"
#include "shard_index.h"

#define FLUSH_BYTES (1u << 20)

struct shard_writer {
	int dirfd;
	struct shard_writer_opts o;
	struct catalog *cat;
	struct compressor *comp; /* for shard_writer_add() */
	struct buf frame;        /* compressed sample */
	/* the open shard */
	unsigned k;              /* shard number */
	int fd, ifd;
	char file[32], index_file[32];
	uint64_t first_sample;
	uint64_t count;
	uint64_t offset;         /* payload bytes in this shard */
	struct buf pbuf, ibuf;   /* pending payload / index bytes */
	uint64_t samples;        /* written in all shards */
	uint64_t stored;
};

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = write(fd, b, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int flush(struct shard_writer *w, char *err, size_t errlen)
{
	int rc;

	if (w->pbuf.len) {
		rc = write_all(w->fd, w->pbuf.data, w->pbuf.len);
		if (rc) {
			snprintf(err, errlen, "writing %s: %s", w->file, strerror(-rc));
			return -EIO;
		}
		w->pbuf.len = 0;
	}
	if (w->ibuf.len) {
		rc = write_all(w->ifd, w->ibuf.data, w->ibuf.len);
		if (rc) {
			snprintf(err, errlen, "writing %s: %s", w->index_file, strerror(-rc));
			return -EIO;
		}
		w->ibuf.len = 0;
	}
	return 0;
}

static void header_bytes(uint8_t out[32], uint64_t count, uint64_t first)
{
	memcpy(out, SHARD_INDEX_MAGIC, 8);
	le32_put(out + 8, SHARD_INDEX_VERSION);
	le32_put(out + 12, (uint32_t)sizeof(struct shard_index_entry));
	le64_put(out + 16, count);
	le64_put(out + 24, first);
}

static int open_shard(struct shard_writer *w, char *err, size_t errlen)
{
	uint8_t hdr[32];

	snprintf(w->file, sizeof(w->file), "shard-%05u.%s", w->k, w->o.compress ? "zst" : "raw");
	snprintf(w->index_file, sizeof(w->index_file), "shard-%05u.idx", w->k);
	w->fd = openat(w->dirfd, w->file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (w->fd < 0) {
		snprintf(err, errlen, "creating %s: %s", w->file, strerror(errno));
		return -errno;
	}
	w->ifd = openat(w->dirfd, w->index_file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (w->ifd < 0) {
		snprintf(err, errlen, "creating %s: %s", w->index_file, strerror(errno));
		return -errno;
	}
	w->first_sample = w->samples;
	w->count = 0;
	w->offset = 0;
	/* The header's count is written when the shard closes. */
	header_bytes(hdr, 0, w->first_sample);
	return buf_append(&w->ibuf, hdr, sizeof(hdr));
}

static int close_shard(struct shard_writer *w, char *err, size_t errlen)
{
	struct catalog_shard row;
	uint8_t hdr[32];
	int rc;

	rc = flush(w, err, errlen);
	if (rc)
		return rc;
	header_bytes(hdr, w->count, w->first_sample);
	if (pwrite(w->ifd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) ||
	    fsync(w->ifd) != 0 || fsync(w->fd) != 0) {
		snprintf(err, errlen, "finishing %s: %s", w->file, strerror(errno));
		return -EIO;
	}
	close(w->fd);
	close(w->ifd);
	w->fd = w->ifd = -1;
	row.file = w->file;
	row.index_file = w->index_file;
	row.first_sample = w->first_sample;
	row.samples = w->count;
	row.bytes = w->offset;
	if (catalog_add_shard(w->cat, &row))
		return -ENOMEM;
	w->k++;
	return 0;
}

int shard_writer_new(int dirfd, const struct shard_writer_opts *o, struct catalog *cat,
		     struct shard_writer **out, char *err, size_t errlen)
{
	struct shard_writer *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->dirfd = dirfd;
	w->o = *o;
	w->cat = cat;
	w->fd = w->ifd = -1;
	if (o->compress) {
		int rc = compressor_new(o->level, o->dict, o->dict_len, &w->comp);

		if (rc) {
			snprintf(err, errlen, "zstd refused level %d or the trained dictionary",
				 o->level);
			shard_writer_free(w);
			return rc;
		}
	}
	*out = w;
	return 0;
}

int shard_writer_add(struct shard_writer *w, const void *data, size_t len, char *err,
		     size_t errlen)
{
	const void *payload = data;
	size_t plen = len;
	int rc;

	if (len > SAMPLE_MAX_BYTES) {
		snprintf(err, errlen, "sample %" PRIu64 " has %zu bytes, more than the %u-byte "
			 "limit", w->samples, len, (unsigned)SAMPLE_MAX_BYTES);
		return -EFBIG;
	}
	if (w->o.compress) {
		w->frame.len = 0;
		rc = compressor_frame(w->comp, data, len, &w->frame);
		if (rc) {
			snprintf(err, errlen, "zstd failed to compress sample %" PRIu64, w->samples);
			return rc;
		}
		payload = w->frame.data;
		plen = w->frame.len;
	}
	return shard_writer_add_payload(w, payload, plen, len, shard_index_checksum(data, len), err, errlen);
}

int shard_writer_add_payload(struct shard_writer *w, const void *payload, size_t plen,
			     size_t raw_len, uint32_t checksum, char *err, size_t errlen)
{
	struct shard_index_entry e;
	int rc;

	if (raw_len > SAMPLE_MAX_BYTES || plen > UINT32_MAX) {
		snprintf(err, errlen, "sample %" PRIu64 " has %zu bytes, more than the %u-byte "
			 "limit", w->samples, raw_len, (unsigned)SAMPLE_MAX_BYTES);
		return -EFBIG;
	}
	if (w->fd < 0) {
		rc = open_shard(w, err, errlen);
		if (rc)
			return rc;
	}
	e.offset = htole64(w->offset);
	e.stored_len = htole32((uint32_t)plen);
	e.raw_len = htole32((uint32_t)raw_len);
	e.checksum = htole32(checksum);
	e.reserved = 0;
	if (plen >= FLUSH_BYTES) {
		/* big payloads skip the copy */
		rc = flush(w, err, errlen);
		if (!rc && (rc = write_all(w->fd, payload, plen))) {
			snprintf(err, errlen, "writing %s: %s", w->file, strerror(-rc));
			rc = -EIO;
		}
	} else {
		rc = buf_append(&w->pbuf, payload, plen);
	}
	if (!rc)
		rc = buf_append(&w->ibuf, &e, sizeof(e));
	if (rc)
		return rc;
	w->offset += plen;
	w->stored += plen;
	w->count++;
	w->samples++;
	if (w->pbuf.len >= FLUSH_BYTES || w->ibuf.len >= FLUSH_BYTES) {
		rc = flush(w, err, errlen);
		if (rc)
			return rc;
	}
	if (w->offset >= w->o.shard_bytes)
		return close_shard(w, err, errlen);
	return 0;
}

int shard_writer_finish(struct shard_writer *w, char *err, size_t errlen)
{
	if (w->fd < 0)
		return 0;
	return close_shard(w, err, errlen);
}

uint64_t shard_writer_stored_bytes(const struct shard_writer *w)
{
	return w->stored;
}

uint64_t shard_writer_samples(const struct shard_writer *w)
{
	return w->samples;
}

void shard_writer_free(struct shard_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	if (w->ifd >= 0)
		close(w->ifd);
	compressor_free(w->comp);
	buf_release(&w->frame);
	buf_release(&w->pbuf);
	buf_release(&w->ibuf);
	free(w);
}
