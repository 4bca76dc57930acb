/*
 * dstream.c: the checked decompression stream (dstream.h). File bytes go through raw:
 * the push decoders take them from there, and the libarchive reader's read callback
 * hands raw over whole, so the bytes it was handed are the bytes read.
 */
#include "dstream.h"

#include <archive.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DSTREAM_CHUNK (256 * 1024)

struct dstream {
	char *path;
	int fd;
	int eof;                 /* read() returned 0 */
	int done;                /* the decoded stream ended and was checked */
	uint64_t file_size;
	uint64_t bytes_read;
	XXH3_state_t *hash;
	enum codec_kind kind;
	struct codec *dec;       /* gzip, zstd */
	struct archive *ar;      /* xz, bzip2, lzma, lz4: a raw-format reader */
	int read_rc;             /* an error of the reader's read callback, reason in cb_err */
	char cb_err[512];
	uint8_t *raw;            /* file bytes; raw[raw_pos, raw_len) not yet used */
	size_t chunk;            /* size of raw: DSTREAM_CHUNK, less for small files */
	size_t raw_pos, raw_len;
};

/* read() the next chunk of the file into raw, hashing and counting it. 0, or -EIO with a
 * reason in err. */
static int read_raw(struct dstream *d, char *err, size_t errlen)
{
	ssize_t n;

	do
		n = read(d->fd, d->raw, d->chunk);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		snprintf(err, errlen, "%s: read error at byte %" PRIu64 ": %s", d->path,
			 d->bytes_read, strerror(errno));
		return -EIO;
	}
	if (d->hash)
		XXH3_128bits_update(d->hash, d->raw, (size_t)n);
	d->bytes_read += (uint64_t)n;
	d->raw_pos = 0;
	d->raw_len = (size_t)n;
	d->eof = n == 0;
	return 0;
}

/* libarchive's read callback: what is left in raw, then the file's next chunks. */
static la_ssize_t ar_read_cb(struct archive *a, void *ctx, const void **buffer)
{
	struct dstream *d = ctx;
	size_t n;

	if (d->raw_pos == d->raw_len && !d->eof) {
		d->read_rc = read_raw(d, d->cb_err, sizeof(d->cb_err));
		if (d->read_rc) {
			archive_set_error(a, -d->read_rc, "%s", d->cb_err);
			return -1;
		}
	}
	*buffer = d->raw + d->raw_pos;
	n = d->raw_len - d->raw_pos;
	d->raw_pos = d->raw_len;
	return (la_ssize_t)n;
}

int dstream_open(const char *path, XXH3_state_t *hash, struct dstream **out, char *err,
		 size_t errlen)
{
	struct dstream *d;
	struct stat sb;
	int rc;

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->fd = -1;
	d->hash = hash;
	d->path = strdup(path);
	if (!d->path) {
		rc = -ENOMEM;
		goto err_free;
	}
	d->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (d->fd < 0 || fstat(d->fd, &sb) != 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(-rc));
		goto err_free;
	}
	if (S_ISDIR(sb.st_mode)) {
		rc = -EISDIR;
		snprintf(err, errlen, "%s: is a directory, not a file", path);
		goto err_free;
	}
	/* Small files get small buffers (many small inputs, and the fuzz targets). */
	d->chunk = DSTREAM_CHUNK;
	if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size + 1 < DSTREAM_CHUNK)
		d->chunk = sb.st_size < 4095 ? 4096 : (size_t)sb.st_size + 1;
	d->file_size = S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
	d->raw = malloc(d->chunk);
	if (!d->raw) {
		rc = -ENOMEM;
		goto err_free;
	}
	/* Sniff the first bytes; they stay in raw for the decoder. */
	if ((rc = read_raw(d, err, errlen)))
		goto err_free;
	d->kind = codec_sniff(d->raw, d->raw_len);
	if (d->kind == CODEC_GZIP || d->kind == CODEC_ZSTD) {
		d->dec = codec_new(d->kind);
		if (!d->dec) {
			rc = -ENOMEM;
			goto err_free;
		}
	} else if (d->kind != CODEC_NONE) {
		rc = codec_archive_open(d->kind, d, ar_read_cb, path, &d->ar, err, errlen);
		if (rc) {
			if (d->read_rc) {
				rc = d->read_rc;
				snprintf(err, errlen, "%s", d->cb_err);
			}
			goto err_free;
		}
	}
	*out = d;
	return 0;

err_free:
	dstream_close(d);
	return rc;
}

void dstream_close(struct dstream *d)
{
	if (!d)
		return;
	if (d->ar)
		archive_read_free(d->ar);
	if (d->fd >= 0)
		close(d->fd);
	codec_free(d->dec);
	free(d->raw);
	free(d->path);
	free(d);
}

/* Plain input: the sniffed bytes, then read() straight into dst. */
static int read_plain(struct dstream *d, uint8_t *dst, size_t cap, size_t *n, char *err,
		      size_t errlen)
{
	ssize_t got;

	if (d->raw_pos < d->raw_len) {
		*n = d->raw_len - d->raw_pos < cap ? d->raw_len - d->raw_pos : cap;
		memcpy(dst, d->raw + d->raw_pos, *n);
		d->raw_pos += *n;
		return 0;
	}
	if (d->eof) {
		d->done = 1;
		return 0;
	}
	do
		got = read(d->fd, dst, cap);
	while (got < 0 && errno == EINTR);
	if (got < 0) {
		snprintf(err, errlen, "%s: read error at byte %" PRIu64 ": %s", d->path,
			 d->bytes_read, strerror(errno));
		return -EIO;
	}
	if (d->hash)
		XXH3_128bits_update(d->hash, dst, (size_t)got);
	d->bytes_read += (uint64_t)got;
	d->eof = got == 0;
	d->done = d->eof;
	*n = (size_t)got;
	return 0;
}

/* gzip or zstd: feed raw to the push decoder until it makes bytes or the file ends. */
static int read_codec(struct dstream *d, uint8_t *dst, size_t cap, size_t *n, char *err,
		      size_t errlen)
{
	struct dec_io io;
	int rc;

	for (;;) {
		if (d->raw_pos == d->raw_len) {
			if (d->eof) {
				rc = codec_finish(d->dec, d->path, err, errlen);
				d->done = !rc;
				return rc;
			}
			if ((rc = read_raw(d, err, errlen)))
				return rc;
			continue;
		}
		io = (struct dec_io){ d->raw, d->raw_len, d->raw_pos, dst, cap, *n };
		rc = codec_decode(d->dec, &io, d->path, err, errlen);
		d->raw_pos = io.src_pos;
		*n = io.dst_pos;
		if (rc || *n)
			return rc;
	}
}

/* The raw reader's data has ended: refuse file bytes after it (codec_archive_end()). */
static int archive_end(struct dstream *d, char *err, size_t errlen)
{
	uint64_t handed = d->bytes_read;  /* the callback hands raw over whole */
	int rc;

	if (!d->eof && (rc = read_raw(d, err, errlen)))
		return rc;
	return codec_archive_end(d->ar, d->kind, handed, !d->eof, d->path, err, errlen);
}

/* xz, bzip2, lzma or lz4 through the raw reader. */
static int read_archive(struct dstream *d, uint8_t *dst, size_t cap, size_t *n, char *err,
			size_t errlen)
{
	la_ssize_t got = archive_read_data(d->ar, dst, cap);
	const char *why;
	int rc;

	if (got < 0 && d->read_rc) {
		snprintf(err, errlen, "%s", d->cb_err);
		return d->read_rc;
	}
	if (got < 0) {
		why = archive_error_string(d->ar);
		snprintf(err, errlen, "%s: corrupt or truncated %s data near byte %" PRIu64 ": %s; "
			 "re-download or re-compress it", d->path, codec_name(d->kind),
			 d->bytes_read, why ? why : "unknown error");
		return -EBADMSG;
	}
	if (got == 0) {
		rc = archive_end(d, err, errlen);
		d->done = !rc;
		return rc;
	}
	*n = (size_t)got;
	return 0;
}

int dstream_read(struct dstream *d, uint8_t *dst, size_t cap, size_t *n, char *err,
		 size_t errlen)
{
	*n = 0;
	if (d->done)
		return 0;
	if (d->dec)
		return read_codec(d, dst, cap, n, err, errlen);
	if (d->ar)
		return read_archive(d, dst, cap, n, err, errlen);
	return read_plain(d, dst, cap, n, err, errlen);
}

size_t dstream_chunk(const struct dstream *d)
{
	return d->chunk;
}

const char *dstream_path(const struct dstream *d)
{
	return d->path;
}

enum codec_kind dstream_kind(const struct dstream *d)
{
	return d->kind;
}

uint64_t dstream_bytes_read(const struct dstream *d)
{
	return d->bytes_read;
}

uint64_t dstream_file_size(const struct dstream *d)
{
	return d->file_size;
}
