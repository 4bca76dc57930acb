#include "instream.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstream.h"

#define RAW_CHUNK (256 * 1024)

struct instream {
	struct dstream *d;       /* the file's decoded, checked bytes */
	int done;                /* no more decoded bytes will come */
	uint64_t lineno;
	struct buf data;         /* decoded bytes; [pos, len) not yet returned */
	size_t pos;
	size_t scan;             /* bytes after pos already searched for '\n' */
};

void xxh128_hex(XXH128_hash_t h, char hex[33])
{
	snprintf(hex, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
}

int instream_open(const char *path, XXH3_state_t *hash, struct instream **out, char *err,
		  size_t errlen)
{
	struct instream *in = calloc(1, sizeof(*in));
	int rc;

	if (!in)
		return -ENOMEM;
	rc = dstream_open(path, hash, &in->d, err, errlen);
	if (rc)
		goto err_free;
	if (buf_reserve(&in->data, dstream_chunk(in->d))) { /* data is never NULL from here on */
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
	dstream_close(in->d);
	buf_release(&in->data);
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
	/* plain input is read straight into data, in reads that suit the file */
	size_t cap = dstream_kind(in->d) == CODEC_NONE ? dstream_chunk(in->d) : RAW_CHUNK;
	size_t n;
	int rc;

	compact(in);
	if (buf_reserve(&in->data, cap))
		return -ENOMEM;
	rc = dstream_read(in->d, in->data.data + in->data.len, cap, &n, err, errlen);
	if (rc)
		return rc;
	in->data.len += n;
	in->done = n == 0;
	return 0;
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
					 "%zu-byte sample limit", dstream_path(in->d), in->lineno, n, max_line);
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
				 "limit", dstream_path(in->d), in->lineno + 1, max_line);
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
	return dstream_bytes_read(in->d);
}

uint64_t instream_file_size(const struct instream *in)
{
	return dstream_file_size(in->d);
}

int instream_is_zstd(const struct instream *in)
{
	return dstream_kind(in->d) == CODEC_ZSTD;
}
