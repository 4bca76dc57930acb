#include "source.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "instream.h"

/* s->eod: opts->eod_token as one little-endian token of s->dtype, or -EINVAL when the
 * id does not fit that dtype. */
static int eod_encode(struct source *s)
{
	uint64_t id = s->opts->eod_token, max = dtype_max(s->dtype);
	unsigned size = dtype_size(s->dtype);

	if (id > max)
		return source_error(s, -EINVAL, "%s: --eod-token %ju does not fit its %s tokens "
				    "(ids 0 to %ju); pass the tokenizer's end-of-document id",
				    s->path, (uintmax_t)id, dtype_name(s->dtype), (uintmax_t)max);
	for (unsigned i = 0; i < size; i++)
		s->eod[i] = (uint8_t)(id >> (8 * i));
	s->eod_len = size;
	return 0;
}

int source_open(struct source *s, const struct source_ops *ops, const char *path,
		const struct source_opts *o)
{
	int rc;

	memset(s, 0, sizeof(*s));
	s->ops = ops;
	s->opts = o;
	s->path = strdup(path);
	s->hash = XXH3_createState();
	if (!s->path || !s->hash) {
		snprintf(s->err, sizeof(s->err), "out of memory");
		return -ENOMEM;
	}
	XXH3_128bits_reset(s->hash);
	rc = ops->open(s);
	if (!rc && s->content == CONTENT_TOKENS && o->have_eod_token)
		rc = eod_encode(s);
	return rc;
}

int source_put_eod(struct source *s, struct buf *out)
{
	if (!s->eod_len)
		return 0;
	return buf_append(out, s->eod, s->eod_len) ? -ENOMEM : 1;
}

int source_next(struct source *s, struct buf *out)
{
	return s->ops->next(s, out);
}

void source_checksum(struct source *s, char hex[33])
{
	xxh128_hex(XXH3_128bits_digest(s->hash), hex);
}

void source_close(struct source *s)
{
	if (s->ops && s->priv)
		s->ops->close(s);
	XXH3_freeState(s->hash);
	free(s->path);
	memset(s, 0, sizeof(*s));
}

int source_read_chunk(struct source *s, int fd, const char *path, uint64_t offset,
		      size_t want, struct buf *out)
{
	uint8_t *dst = out->data + out->len;
	size_t got = 0;

	while (got < want) {
		ssize_t r = pread(fd, dst + got, want - got, (off_t)(offset + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			snprintf(s->err, sizeof(s->err), "%s: read error at byte %ju: %s", path,
				 (uintmax_t)(offset + got),
				 r < 0 ? strerror(errno) : "the file shrank while being packed");
			return -EIO;
		}
		got += (size_t)r;
	}
	XXH3_128bits_update(s->hash, dst, want);
	out->len += want;
	return 0;
}

void source_notice(struct source *s, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	s->skipped++;
	if (!s->opts || !s->opts->notice)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	s->opts->notice(s->opts->ctx, msg);
}

int source_error(struct source *s, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vset(s->err, sizeof(s->err), rc, fmt, ap);
	va_end(ap);
	return rc;
}
