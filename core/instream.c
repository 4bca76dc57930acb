#include "instream.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>

#include "codec.h"

#define RAW_CHUNK (256 * 1024)

struct instream {
	char *path;
	int fd;
	int zstd;
	int eof;                 /* the file is exhausted */
	int done;                /* no more decoded bytes will come */
	uint64_t file_size;
	uint64_t bytes_read;
	uint64_t lineno;
	XXH3_state_t *hash;
	struct codec *dec;       /* gzip or zstd input, decoded and checked (codec.h) */
	struct archive *ar;      /* xz, bzip2, lzma, lz4: through libarchive's raw format */
	enum codec_kind kind;    /* the compression, sniffed at open */
	size_t ar_first;         /* sniffed bytes the first read callback hands over */
	uint8_t *raw;            /* compressed bytes read but not yet decoded */
	size_t chunk;            /* read size: RAW_CHUNK, less for small files */
	size_t raw_pos;          /* raw[raw_pos, raw_len) not yet decoded (gzip or zstd) */
	size_t raw_len;
	struct buf data;         /* decoded bytes; [pos, len) not yet returned */
	size_t pos;
	size_t scan;             /* bytes after pos already searched for '\n' */
};

void xxh128_hex(XXH128_hash_t h, char hex[33])
{
	snprintf(hex, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
}

/* read() up to cap bytes into dst, hashing and counting them. 0 at end of file. */
static ssize_t read_file(struct instream *in, uint8_t *dst, size_t cap)
{
	ssize_t n;

	do
		n = read(in->fd, dst, cap);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		if (in->hash)
			XXH3_128bits_update(in->hash, dst, (size_t)n);
		in->bytes_read += (uint64_t)n;
	}
	return n;
}

/* libarchive's read callback: first the sniffed bytes, then the file. */
static la_ssize_t ar_read(struct archive *a, void *ctx, const void **buffer)
{
	struct instream *in = ctx;
	ssize_t n;

	*buffer = in->raw;
	if (in->ar_first) {
		n = (ssize_t)in->ar_first;
		in->ar_first = 0;
		return n;
	}
	n = read_file(in, in->raw, in->chunk);
	if (n < 0)
		archive_set_error(a, errno, "read error at byte %" PRIu64 ": %s", in->bytes_read,
				  strerror(errno));
	in->eof = n == 0;
	return n;
}

/* The xz, bzip2, lzma or lz4 data has ended: refuse file bytes after it (codec_archive_end()). */
static int ar_end(struct instream *in, char *err, size_t errlen)
{
	uint64_t handed = in->bytes_read;
	ssize_t n = 0;

	if (!in->eof) {
		n = read_file(in, in->raw, in->chunk);
		if (n < 0) {
			snprintf(err, errlen, "%s: read error at byte %" PRIu64 ": %s", in->path,
				 in->bytes_read, strerror(errno));
			return -EIO;
		}
		in->eof = n == 0;
	}
	return codec_archive_end(in->ar, in->kind, handed, n > 0, in->path, err, errlen);
}

int instream_open(const char *path, XXH3_state_t *hash, struct instream **out, char *err,
		  size_t errlen)
{
	struct instream *in;
	struct stat sb;
	enum codec_kind kind;
	ssize_t n;
	int rc;

	in = calloc(1, sizeof(*in));
	if (!in)
		return -ENOMEM;
	in->fd = -1;
	in->path = strdup(path);
	in->hash = hash;
	if (!in->path) {
		rc = -ENOMEM;
		goto err_free;
	}
	in->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (in->fd < 0 || fstat(in->fd, &sb) != 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		goto err_free;
	}
	/* Small files get small buffers (many small inputs, and the fuzz targets). */
	in->chunk = RAW_CHUNK;
	if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size + 1 < RAW_CHUNK)
		in->chunk = sb.st_size < 4095 ? 4096 : (size_t)sb.st_size + 1;
	in->raw = malloc(in->chunk);
	if (!in->raw) {
		rc = -ENOMEM;
		goto err_free;
	}
	if (S_ISDIR(sb.st_mode)) {
		rc = -EISDIR;
		snprintf(err, errlen, "%s: is a directory, not a file", path);
		goto err_free;
	}
	in->file_size = S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
	/* Sniff the first bytes; they are kept in raw and fed to the right decoder. */
	n = read_file(in, in->raw, in->chunk);
	if (n < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: read error at byte 0: %s", path, strerror(errno));
		goto err_free;
	}
	in->eof = n == 0;
	in->raw_len = (size_t)n;
	kind = codec_sniff(in->raw, (size_t)n);
	in->kind = kind;
	in->zstd = kind == CODEC_ZSTD;
	if (buf_reserve(&in->data, in->chunk)) { /* data is never NULL from here on */
		rc = -ENOMEM;
		goto err_free;
	}
	if (kind == CODEC_GZIP || kind == CODEC_ZSTD) {
		in->dec = codec_new(kind);
		if (!in->dec) {
			rc = -ENOMEM;
			goto err_free;
		}
	} else if (kind != CODEC_NONE) {
		in->ar_first = (size_t)n;
		rc = codec_archive_open(kind, in, ar_read, path, &in->ar, err, errlen);
		if (rc)
			goto err_free;
	} else if (buf_append(&in->data, in->raw, (size_t)n)) {
		rc = -ENOMEM;
		goto err_free;
	}
	*out = in;
	return 0;

err_free:
	instream_close(in);
	return rc;
}

void instream_close(struct instream *in)
{
	if (!in)
		return;
	if (in->ar)
		archive_read_free(in->ar);
	if (in->fd >= 0)
		close(in->fd);
	codec_free(in->dec);
	buf_release(&in->data);
	free(in->raw);
	free(in->path);
	free(in);
}

/* Move the unreturned bytes to the front of data so it does not grow without bound. */
static void compact(struct instream *in)
{
	if (in->pos == 0)
		return;
	memmove(in->data.data, in->data.data + in->pos, in->data.len - in->pos);
	in->data.len -= in->pos;
	in->pos = 0;
}

/* Append more decoded bytes to data. 0 (progress or done set), or -errno. */
static int refill(struct instream *in, char *err, size_t errlen)
{
	ssize_t n;

	compact(in);
	if (in->ar) {
		la_ssize_t got;

		if (buf_reserve(&in->data, RAW_CHUNK))
			return -ENOMEM;
		got = archive_read_data(in->ar, in->data.data + in->data.len, RAW_CHUNK);
		if (got < 0) {
			snprintf(err, errlen, "%s: corrupt or truncated compressed data near byte %"
				 PRIu64 " (after line %" PRIu64 "): %s", in->path, in->bytes_read,
				 in->lineno, archive_error_string(in->ar) ?
				 archive_error_string(in->ar) : "unknown error");
			return -EBADMSG;
		}
		in->data.len += (size_t)got;
		if (got == 0) {
			int rc = ar_end(in, err, errlen);

			if (rc)
				return rc;
			in->done = 1;
		}
		return 0;
	}
	if (!in->dec) {
		if (buf_reserve(&in->data, in->chunk))
			return -ENOMEM;
		n = read_file(in, in->data.data + in->data.len, in->chunk);
		if (n < 0) {
			snprintf(err, errlen, "%s: read error at byte %" PRIu64 ": %s", in->path,
				 in->bytes_read, strerror(errno));
			return -EIO;
		}
		in->data.len += (size_t)n;
		if (n == 0)
			in->eof = in->done = 1;
		return 0;
	}
	for (;;) {
		size_t made = 0;
		int rc;

		if (in->raw_pos == in->raw_len) {
			if (in->eof) {
				rc = codec_finish(in->dec, in->path, err, errlen);
				if (rc)
					return rc;
				in->done = 1;
				return 0;
			}
			n = read_file(in, in->raw, in->chunk);
			if (n < 0) {
				snprintf(err, errlen, "%s: read error at byte %" PRIu64 ": %s",
					 in->path, in->bytes_read, strerror(errno));
				return -EIO;
			}
			in->raw_len = (size_t)n;
			in->raw_pos = 0;
			in->eof = n == 0;
			continue;
		}
		if (buf_reserve(&in->data, RAW_CHUNK))
			return -ENOMEM;
		rc = codec_decode(in->dec, in->raw, in->raw_len, &in->raw_pos,
				  in->data.data + in->data.len, RAW_CHUNK, &made, in->path, err,
				  errlen);
		if (rc)
			return rc;
		in->data.len += made;
		if (made)
			return 0;
	}
}

int instream_getline(struct instream *in, size_t max_line, const uint8_t **line,
		     size_t *len, char *err, size_t errlen)
{
	for (;;) {
		size_t avail = in->data.len - in->pos;
		const uint8_t *start = in->data.data + in->pos;
		const uint8_t *nl = avail > in->scan ?
			memchr(start + in->scan, '\n', avail - in->scan) : NULL;
		size_t n;
		int rc;

		if (nl || (in->done && avail)) {
			n = nl ? (size_t)(nl - start) : avail;
			in->pos += nl ? n + 1 : n;
			in->scan = 0;
			in->lineno++;
			if (n && start[n - 1] == '\r')
				n--;
			if (n > max_line) {
				snprintf(err, errlen, "%s:%" PRIu64 ": line of %zu bytes exceeds the "
					 "%zu-byte sample limit", in->path, in->lineno, n, max_line);
				return -EFBIG;
			}
			*line = start;
			*len = n;
			return 1;
		}
		if (in->done)
			return 0;
		in->scan = avail;
		if (avail > max_line + 2) {
			snprintf(err, errlen, "%s:%" PRIu64 ": line exceeds the %zu-byte sample "
				 "limit", in->path, in->lineno + 1, max_line);
			return -EFBIG;
		}
		rc = refill(in, err, errlen);
		if (rc)
			return rc;
	}
}

uint64_t instream_lineno(const struct instream *in)
{
	return in->lineno;
}

uint64_t instream_bytes_read(const struct instream *in)
{
	return in->bytes_read;
}

uint64_t instream_file_size(const struct instream *in)
{
	return in->file_size;
}

int instream_is_zstd(const struct instream *in)
{
	return in->zstd;
}
