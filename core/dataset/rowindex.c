/* rowindex.c: the rows meta and the row index of a dataset of rows (rowindex.h). */
#include "rowindex.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "le.h"

#define WRITER_BUF (1u << 20)

int rowindex_meta(const struct catalog *c, enum token_dtype dtype, uint64_t seq_len,
		  uint64_t overlap, uint64_t *row_len, uint64_t *max_context, char *err,
		  size_t errlen)
{
	const char *v = catalog_meta_get(c, "layout");

	*row_len = *max_context = 0;
	if (!v)
		return 0;
	if (strcmp(v, "rows") || catalog_meta_u64(c, "row_len", row_len) ||
	    *row_len == 0 || dtype != DTYPE_INT32 || overlap ||
	    seq_len / ROW_PLANES != *row_len || seq_len % ROW_PLANES ||
	    catalog_meta_u64(c, "max_context_length", max_context) ||
	    *max_context == 0 || *max_context > *row_len)
		return err_set(err, errlen, -EBADMSG, "catalog meta 'layout', 'row_len' or "
			       "'max_context_length' does not describe rows (int32, seq_len = 3 x "
			       "row_len, no overlap, max_context_length up to row_len)");
	return 0;
}

struct rowindex_writer {
	int fd;
	char *path;
	uint64_t row_len, entries;
	uint64_t *offsets;       /* rows + 1 once finished; offsets[0] = 0 */
	size_t rows, cap;
	size_t used;
	uint8_t buf[WRITER_BUF];
};

int rowindex_writer_open(const char *path, uint64_t row_len, struct rowindex_writer **out,
			 char *err, size_t errlen)
{
	struct rowindex_writer *w = calloc(1, sizeof(*w));

	if (!w || !(w->path = strdup(path)) || !(w->offsets = malloc(1024 * sizeof(uint64_t)))) {
		if (w)
			free(w->path);
		free(w);
		return -ENOMEM;
	}
	w->cap = 1024;
	w->offsets[0] = 0;
	w->row_len = row_len;
	w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (w->fd < 0) {
		int rc = -errno;

		err_printf(err, errlen, "%s: cannot create: %s", path, strerror(-rc));
		free(w->offsets);
		free(w->path);
		free(w);
		return rc;
	}
	/* the header is written last, when the counts are known */
	w->used = sizeof(struct rowindex_header);
	memset(w->buf, 0, w->used);
	*out = w;
	return 0;
}

/* Write len bytes at *off (advanced), or at the file's position when *off < 0. */
static int write_at(struct rowindex_writer *w, const void *p, size_t len, off_t *off,
		    char *err, size_t errlen)
{
	const uint8_t *b = p;

	while (len) {
		ssize_t r = *off < 0 ? write(w->fd, b, len) : pwrite(w->fd, b, len, *off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return err_set(err, errlen, errno == ENOSPC ? -ENOSPC : -EIO, "%s: write: %s",
				       w->path, strerror(errno));
		b += r;
		len -= (size_t)r;
		if (*off >= 0)
			*off += r;
	}
	return 0;
}

static int flush(struct rowindex_writer *w, char *err, size_t errlen)
{
	off_t off = -1;
	int rc = write_at(w, w->buf, w->used, &off, err, errlen);

	w->used = 0;
	return rc;
}

/* Append 8 bytes to the buffer, flushing it when full. */
static int put_u64(struct rowindex_writer *w, uint64_t v, char *err, size_t errlen)
{
	int rc;

	if (w->used + 8 > WRITER_BUF && (rc = flush(w, err, errlen)))
		return rc;
	le64_put(w->buf + w->used, v);
	w->used += 8;
	return 0;
}

int rowindex_writer_row(struct rowindex_writer *w, const struct rowindex_entry *e,
			size_t count, char *err, size_t errlen)
{
	int rc;

	if (w->rows + 2 > w->cap) {
		uint64_t *o = realloc(w->offsets, 2 * w->cap * sizeof(*o));

		if (!o)
			return -ENOMEM;
		w->offsets = o;
		w->cap *= 2;
	}
	for (size_t k = 0; k < count; k++) {
		if ((rc = put_u64(w, e[k].document, err, errlen)) ||
		    (rc = put_u64(w, (uint64_t)e[k].position | (uint64_t)e[k].length << 32, err,
				  errlen)))
			return rc;
	}
	w->entries += count;
	w->offsets[++w->rows] = w->entries;
	return 0;
}

int rowindex_writer_finish(struct rowindex_writer *w, char *err, size_t errlen)
{
	uint8_t h[sizeof(struct rowindex_header)];
	off_t off = 0;
	int rc = 0;

	for (size_t r = 0; !rc && r <= w->rows; r++)
		rc = put_u64(w, w->offsets[r], err, errlen);
	if (!rc)
		rc = flush(w, err, errlen);
	memset(h, 0, sizeof(h));
	memcpy(h, ROWINDEX_MAGIC, 8);
	le32_put(h + 8, ROWINDEX_VERSION);
	le32_put(h + 12, sizeof(struct rowindex_entry));
	le64_put(h + 16, w->rows);
	le64_put(h + 24, w->entries);
	le64_put(h + 32, w->row_len);
	if (!rc)
		rc = write_at(w, h, sizeof(h), &off, err, errlen);
	if (!rc && fsync(w->fd) != 0)
		rc = err_set(err, errlen, -EIO, "%s: fsync: %s", w->path, strerror(errno));
	rowindex_writer_free(w);
	return rc;
}

void rowindex_writer_free(struct rowindex_writer *w)
{
	if (!w)
		return;
	close(w->fd);
	free(w->offsets);
	free(w->path);
	free(w);
}

struct rowindex {
	const uint8_t *map;
	size_t len;
	uint64_t rows, entries, row_len;
	const uint8_t *offsets;
};

/* Whether the header at map (of len bytes) is this version's and the sizes add up. */
static int header_ok(const uint8_t *map, uint64_t len)
{
	uint64_t rows, entries;

	if (len < sizeof(struct rowindex_header) || memcmp(map, ROWINDEX_MAGIC, 8) ||
	    le32_get(map + 8) != ROWINDEX_VERSION ||
	    le32_get(map + 12) != sizeof(struct rowindex_entry))
		return 0;
	rows = le64_get(map + 16);
	entries = le64_get(map + 24);
	len -= sizeof(struct rowindex_header);
	return rows < len / 8 && entries <= len / sizeof(struct rowindex_entry) &&
	       entries * sizeof(struct rowindex_entry) + (rows + 1) * 8 == len;
}

int rowindex_open(const char *dir, struct rowindex **out, char *err, size_t errlen)
{
	struct rowindex *ri = NULL;
	struct stat sb;
	char *path;
	void *map = MAP_FAILED;
	int fd, rc;

	if (asprintf(&path, "%s/%s", dir, ROWINDEX_FILE) < 0)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) != 0) {
		rc = err_set(err, errlen, -errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (sb.st_size > 0)
		map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (sb.st_size > 0 && map == MAP_FAILED) {
		rc = err_set(err, errlen, -errno, "%s: mmap: %s", path, strerror(errno));
		goto out;
	}
	if (map == MAP_FAILED || !header_ok(map, (uint64_t)sb.st_size)) {
		rc = err_set(err, errlen, -EBADMSG, "%s: not a row index of this version, or "
			     "truncated", path);
		goto out;
	}
	if (!(ri = malloc(sizeof(*ri)))) {
		rc = -ENOMEM;
		goto out;
	}
	ri->map = map;
	ri->len = (size_t)sb.st_size;
	ri->rows = le64_get(ri->map + 16);
	ri->entries = le64_get(ri->map + 24);
	ri->row_len = le64_get(ri->map + 32);
	ri->offsets = ri->map + sizeof(struct rowindex_header) +
		ri->entries * sizeof(struct rowindex_entry);
	*out = ri;
	map = MAP_FAILED;
	rc = 0;
out:
	if (map != MAP_FAILED)
		munmap(map, (size_t)sb.st_size);
	if (fd >= 0)
		close(fd);
	free(path);
	return rc;
}

void rowindex_close(struct rowindex *ri)
{
	if (!ri)
		return;
	munmap((void *)ri->map, ri->len);
	free(ri);
}

uint64_t rowindex_rows(const struct rowindex *ri)
{
	return ri->rows;
}

void rowindex_row(const struct rowindex *ri, uint64_t r, uint64_t *first, uint64_t *count)
{
	uint64_t a = le64_get(ri->offsets + 8 * r), b = le64_get(ri->offsets + 8 * (r + 1));

	/* a corrupt index (rowindex_check finds it) reads as an empty row, never past it */
	if (a > b || b > ri->entries)
		a = b = 0;
	*first = a;
	*count = b - a;
}

void rowindex_get(const struct rowindex *ri, uint64_t k, struct rowindex_entry *out)
{
	const uint8_t *e = ri->map + sizeof(struct rowindex_header) +
		k * sizeof(struct rowindex_entry);
	uint64_t pl = le64_get(e + 8);

	out->document = le64_get(e);
	out->position = (uint32_t)pl;
	out->length = (uint32_t)(pl >> 32);
}

int rowindex_check(const struct rowindex *ri, uint64_t rows, uint64_t row_len,
		   uint64_t documents, char *err, size_t errlen)
{
	uint8_t *seen;
	struct rowindex_entry e;
	int rc = 0;

	if (ri->rows != rows || ri->row_len != row_len || ri->entries != documents)
		return err_set(err, errlen, -EBADMSG, "%s: %" PRIu64 " rows of %" PRIu64 " holding %"
			       PRIu64 " documents; the catalog says %" PRIu64 " of %" PRIu64 " and %"
			       PRIu64, ROWINDEX_FILE, ri->rows, ri->row_len, ri->entries, rows,
			       row_len, documents);
	if (!(seen = calloc(documents / 8 + 1, 1)))
		return -ENOMEM;
	for (uint64_t r = 0; !rc && r < rows; r++) {
		uint64_t a = le64_get(ri->offsets + 8 * r), b = le64_get(ri->offsets + 8 * (r + 1));
		uint64_t pos = 0;

		if ((r == 0 && a) || a > b || b > ri->entries || (r + 1 == rows && b != ri->entries))
			rc = err_set(err, errlen, -EBADMSG, "%s: row %" PRIu64 ": entries %" PRIu64
				     "-%" PRIu64 " are not the next ones", ROWINDEX_FILE, r, a, b);
		for (uint64_t k = a; !rc && k < b; k++) {
			rowindex_get(ri, k, &e);
			if (e.position != pos || e.length == 0 || pos + e.length > row_len ||
			    e.document >= documents || (seen[e.document / 8] >> (e.document % 8)) & 1)
				rc = err_set(err, errlen, -EBADMSG, "%s: row %" PRIu64 ": document %"
					     PRIu64 " at position %" PRIu32 " (expected %" PRIu64 "), %"
					     PRIu32 " positions: not where it belongs, or placed twice",
					     ROWINDEX_FILE, r, e.document, e.position, pos, e.length);
			else
				seen[e.document / 8] |= (uint8_t)(1u << (e.document % 8));
			pos += e.length;
		}
	}
	free(seen);
	return rc;
}

size_t rowindex_trained(const uint8_t *sample, uint64_t row_len, uint64_t pos, uint64_t len,
			uint64_t (*spans)[2], size_t max, uint64_t *trained)
{
	const uint8_t *labels = sample + 4 * row_len;
	uint64_t n = 0;
	size_t count = 0;
	int in = 0;

	for (uint64_t p = pos; p < pos + len && p < row_len; p++) {
		int t = (int32_t)le32_get(labels + 4 * p) != ROW_IGNORE;

		n += (uint64_t)t;
		if (t && !in) {
			if (count < max)
				spans[count][0] = p;
			count++;
		}
		if (!t && in && count <= max)
			spans[count - 1][1] = p;
		in = t;
	}
	if (in && count <= max)
		spans[count - 1][1] = pos + len < row_len ? pos + len : row_len;
	if (trained)
		*trained = n;
	return count;
}

int rowindex_check_row(const uint8_t *sample, uint64_t row_len,
		       const struct rowindex_entry *e, size_t count, char *err, size_t errlen)
{
	const uint8_t *in = sample, *lab = sample + 4 * row_len, *pos = sample + 8 * row_len;
	uint64_t p = 0;

#define AT(plane, q) ((int32_t)le32_get((plane) + 4 * (q)))
	for (size_t k = 0; k < count; k++) {
		uint64_t end = (uint64_t)e[k].position + e[k].length;

		if (e[k].position != p || end > row_len)
			return err_set(err, errlen, -EBADMSG, "its document %zu lies at %" PRIu32
				       ", not %" PRIu64, k, e[k].position, p);
		for (; p < end; p++) {
			int32_t l = AT(lab, p);

			if (AT(pos, p) != (int32_t)(p - e[k].position))
				return err_set(err, errlen, -EBADMSG, "position %" PRIu64 ": position "
					       "%d, expected %" PRIu64, p, AT(pos, p),
					       p - e[k].position);
			if (p + 1 < end && l != ROW_IGNORE && l != AT(in, p + 1))
				return err_set(err, errlen, -EBADMSG, "position %" PRIu64 ": label %d "
					       "is not the next input %d", p, l, AT(in, p + 1));
		}
	}
	for (; p < row_len; p++)
		if (AT(in, p) || AT(lab, p) != ROW_IGNORE || AT(pos, p))
			return err_set(err, errlen, -EBADMSG, "position %" PRIu64 " is padding but "
				       "holds input %d, label %d, position %d", p, AT(in, p),
				       AT(lab, p), AT(pos, p));
#undef AT
	return 0;
}
