/* docindex.c: the document index of a token dataset (docindex.h). */
#include "docindex.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "le.h"

#define WRITER_BUF (1u << 20)

struct docindex_writer {
	int fd;
	char *path;
	uint64_t count, tokens;
	size_t used;
	uint8_t buf[WRITER_BUF];
};

int docindex_writer_open(const char *path, struct docindex_writer **out, char *err,
			 size_t errlen)
{
	struct docindex_writer *w = calloc(1, sizeof(*w));

	if (!w || !(w->path = strdup(path))) {
		free(w);
		return -ENOMEM;
	}
	w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (w->fd < 0) {
		int rc = -errno;

		err_printf(err, errlen, "%s: cannot create: %s", path, strerror(-rc));
		free(w->path);
		free(w);
		return rc;
	}
	/* the header is written last, when count is known */
	w->used = sizeof(struct docindex_header);
	memset(w->buf, 0, w->used);
	*out = w;
	return 0;
}

static int flush_at(struct docindex_writer *w, const void *p, size_t len, off_t *off,
		    char *err, size_t errlen)
{
	const uint8_t *b = p;

	while (len) {
		ssize_t r = *off < 0 ? write(w->fd, b, len) : pwrite(w->fd, b, len, *off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int rc = errno == ENOSPC ? -ENOSPC : -EIO;

			err_printf(err, errlen, "%s: write: %s", w->path, strerror(errno));
			return rc;
		}
		b += r;
		len -= (size_t)r;
		if (*off >= 0)
			*off += r;
	}
	return 0;
}

static int flush(struct docindex_writer *w, char *err, size_t errlen)
{
	off_t off = -1;
	int rc = flush_at(w, w->buf, w->used, &off, err, errlen);

	w->used = 0;
	return rc;
}

int docindex_writer_add(struct docindex_writer *w, uint64_t tokens, uint64_t record,
			uint32_t source, char *err, size_t errlen)
{
	uint8_t *e;
	int rc;

	if (w->used + sizeof(struct docindex_entry) > WRITER_BUF && (rc = flush(w, err, errlen)))
		return rc;
	e = w->buf + w->used;
	le64_put(e, w->tokens);
	le64_put(e + 8, tokens);
	le64_put(e + 16, record);
	le32_put(e + 24, source);
	le32_put(e + 28, 0);
	w->used += sizeof(struct docindex_entry);
	w->tokens += tokens;
	w->count++;
	return 0;
}

uint64_t docindex_writer_count(const struct docindex_writer *w)
{
	return w->count;
}

int docindex_writer_finish(struct docindex_writer *w, char *err, size_t errlen)
{
	uint8_t h[sizeof(struct docindex_header)];
	off_t off = 0;
	int rc = flush(w, err, errlen);

	memcpy(h, DOCINDEX_MAGIC, 8);
	le32_put(h + 8, DOCINDEX_VERSION);
	le32_put(h + 12, sizeof(struct docindex_entry));
	le64_put(h + 16, w->count);
	le64_put(h + 24, w->tokens);
	if (!rc)
		rc = flush_at(w, h, sizeof(h), &off, err, errlen);
	if (!rc && fsync(w->fd) != 0) {
		rc = -EIO;
		err_printf(err, errlen, "%s: fsync: %s", w->path, strerror(errno));
	}
	docindex_writer_free(w);
	return rc;
}

void docindex_writer_free(struct docindex_writer *w)
{
	if (!w)
		return;
	close(w->fd);
	free(w->path);
	free(w);
}

struct docindex {
	const uint8_t *map;
	size_t len;
	uint64_t count;
};

int docindex_open(const char *dir, struct docindex **out, char *err, size_t errlen)
{
	struct docindex *di;
	struct stat sb;
	char *path;
	void *map;
	int fd, rc;

	if (asprintf(&path, "%s/%s", dir, DOCINDEX_FILE) < 0)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) != 0) {
		rc = -errno;
		err_printf(err, errlen, "%s: %s", path, strerror(-rc));
		goto out;
	}
	rc = -EBADMSG;
	if ((uint64_t)sb.st_size < sizeof(struct docindex_header)) {
		err_printf(err, errlen, "%s: truncated (%jd bytes)", path, (intmax_t)sb.st_size);
		goto out;
	}
	map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		err_printf(err, errlen, "%s: mmap: %s", path, strerror(errno));
		goto out;
	}
	if (memcmp(map, DOCINDEX_MAGIC, 8) || le32_get((uint8_t *)map + 8) != DOCINDEX_VERSION ||
	    le32_get((uint8_t *)map + 12) != sizeof(struct docindex_entry) ||
	    le64_get((uint8_t *)map + 16) != ((uint64_t)sb.st_size - sizeof(struct docindex_header)) /
		    sizeof(struct docindex_entry) ||
	    ((uint64_t)sb.st_size - sizeof(struct docindex_header)) % sizeof(struct docindex_entry)) {
		err_printf(err, errlen, "%s: not a document index of this version, or truncated",
			   path);
		munmap(map, (size_t)sb.st_size);
		goto out;
	}
	di = malloc(sizeof(*di));
	if (!di) {
		munmap(map, (size_t)sb.st_size);
		rc = -ENOMEM;
		goto out;
	}
	di->map = map;
	di->len = (size_t)sb.st_size;
	di->count = le64_get((uint8_t *)map + 16);
	*out = di;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(path);
	return rc;
}

void docindex_close(struct docindex *di)
{
	if (!di)
		return;
	munmap((void *)di->map, di->len);
	free(di);
}

uint64_t docindex_count(const struct docindex *di)
{
	return di->count;
}

void docindex_get(const struct docindex *di, uint64_t i, struct docindex_entry *out)
{
	const uint8_t *e = di->map + sizeof(struct docindex_header) +
		i * sizeof(struct docindex_entry);

	out->first_token = le64_get(e);
	out->tokens = le64_get(e + 8);
	out->record = le64_get(e + 16);
	out->source = le32_get(e + 24);
	out->reserved = le32_get(e + 28);
}

uint64_t docindex_find(const struct docindex *di, uint64_t t)
{
	uint64_t lo = 0, hi = di->count; /* the answer is in [lo, hi) or none */
	struct docindex_entry e;

	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		docindex_get(di, mid, &e);
		if (e.first_token <= t)
			lo = mid;
		else
			hi = mid;
	}
	if (di->count == 0)
		return di->count;
	docindex_get(di, lo, &e);
	if (e.first_token > t || t - e.first_token >= e.tokens)
		return di->count;
	return lo;
}

int docindex_check(const struct docindex *di, uint64_t count, uint64_t tokens,
		   size_t nsources, char *err, size_t errlen)
{
	struct docindex_entry e;
	uint64_t next = 0;

	if (di->count != count)
		return err_set(err, errlen, -EBADMSG, "%s: %ju documents, the catalog says %ju",
			       DOCINDEX_FILE, (uintmax_t)di->count, (uintmax_t)count);
	for (uint64_t i = 0; i < di->count; i++) {
		docindex_get(di, i, &e);
		if (e.first_token != next || e.tokens == 0 || e.source >= nsources)
			return err_set(err, errlen, -EBADMSG, "%s: document %ju: first token %ju "
				       "(expected %ju), %ju tokens, source %u of %zu", DOCINDEX_FILE,
				       (uintmax_t)i, (uintmax_t)e.first_token, (uintmax_t)next,
				       (uintmax_t)e.tokens, e.source, nsources);
		next += e.tokens;
	}
	if (next != tokens || le64_get(di->map + 24) != tokens)
		return err_set(err, errlen, -EBADMSG, "%s: %ju tokens, the catalog says %ju",
			       DOCINDEX_FILE, (uintmax_t)next, (uintmax_t)tokens);
	return 0;
}

void docindex_range(const struct docindex *di, uint64_t first, uint64_t n, uint64_t *d0,
		    uint64_t *d1)
{
	struct docindex_entry e;
	uint64_t d = docindex_find(di, first), last = first + n - 1;

	*d0 = d;
	for (; d < di->count; d++) {
		docindex_get(di, d, &e);
		if (e.first_token > last)
			break;
	}
	*d1 = d;
}

const char *docindex_record_key(const char *fmt)
{
	if (!strcmp(fmt, "jsonl") || !strcmp(fmt, "lines"))
		return "line";
	if (!strcmp(fmt, "parquet") || !strcmp(fmt, "arrow"))
		return "row";
	return NULL;
}
