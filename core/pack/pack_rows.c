/*
 * pack_rows.c: a dataset of rows (pack_int.h; rowindex.h has the row, rowplan.h the plan).
 *
 * The documents the front end sends are kept whole in a spill file (each as n int32
 * tokens, then n mask bytes when the front end sends masks), in the order they come;
 * once the last has come, one plan places every document (rowplan_make over their input
 * tokens, n - 1 each), and each row is made from the spill and handed to the record batch
 * like any sample: its bytes are checksummed, compressed on every thread, fingerprinted
 * and written in row order. So the dataset is the same bytes for any --threads.
 *
 * The spill file is made in the temporary directory and unlinked at once: however the
 * pack ends, it is not left behind, and it is never part of the dataset.
 */
#include "pack_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "docindex.h"
#include "le.h"
#include "rowindex.h"
#include "rowplan.h"

#define SPILL_BUF (4u << 20)
#define SPILL_NAME ".rows-spill"

struct pack_rows {
	int fd;                  /* the spill file, unlinked */
	uint64_t bytes;          /* written to it, buffer included */
	struct buf wbuf;         /* not yet written */
	uint64_t *off;           /* per document kept: its offset in the spill */
	uint32_t *len;           /* its tokens */
	uint32_t *src;           /* its source (catalog row) */
	size_t n, cap;
};

int pack_rows_open(struct packer *p)
{
	struct pack_rows *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->fd = openat(p->dirfd, SPILL_NAME, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (r->fd < 0 || unlinkat(p->dirfd, SPILL_NAME, 0) != 0) {
		int rc = -errno;

		if (r->fd >= 0)
			close(r->fd);
		free(r);
		return pack_fail(p, rc, "%s: cannot make the file that holds the documents until "
				 "they are planned into rows: %s", p->tmpdir, strerror(-rc));
	}
	p->rows = r;
	return 0;
}

void pack_rows_free(struct pack_rows *r)
{
	if (!r)
		return;
	close(r->fd);
	buf_release(&r->wbuf);
	free(r->off);
	free(r->len);
	free(r->src);
	free(r);
}

static int spill_flush(struct packer *p, struct pack_rows *r)
{
	const uint8_t *b = r->wbuf.data;
	size_t left = r->wbuf.len;

	while (left) {
		ssize_t w = write(r->fd, b, left);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return pack_fail(p, errno == ENOSPC ? -ENOSPC : -EIO, "%s: writing the documents "
					 "to plan: %s", p->tmpdir, strerror(errno));
		b += w;
		left -= (size_t)w;
	}
	r->wbuf.len = 0;
	return 0;
}

static int spill(struct packer *p, struct pack_rows *r, const void *data, size_t len)
{
	int rc;

	if (r->wbuf.len + len > SPILL_BUF && (rc = spill_flush(p, r)))
		return rc;
	if ((rc = buf_append(&r->wbuf, data, len)))
		return rc;
	r->bytes += len;
	return 0;
}

/* "PATH:LINE" for line-numbered inputs, "PATH: row N" for Parquet and Arrow rows. */
static void where(char *out, size_t len, const char *path, const char *format,
		  uint64_t record)
{
	if (!strcmp(format, "parquet") || !strcmp(format, "arrow"))
		snprintf(out, len, "%s: row %" PRIu64, path, record);
	else if (!strcmp(format, "text"))
		snprintf(out, len, "%s", path);
	else
		snprintf(out, len, "%s:%" PRIu64, path, record);
}

int pack_rows_add(struct packer *p, const uint8_t *ids, const uint8_t *mask, uint32_t n,
		  uint64_t record, uint32_t source, const char *format)
{
	struct pack_rows *r = p->rows;
	uint64_t max = p->o->max_context ? p->o->max_context : p->o->seq_len;
	int rc;

	if (n < 2 || n - 1 > max) {
		char at[600], msg[800];

		p->dropped++;
		if (p->o->notice) {
			where(at, sizeof(at), p->cur_path, format, record);
			if (n < 2)
				snprintf(msg, sizeof(msg), "%s: a document of one token has no input "
					 "with a label; dropped (counted in zephon info: "
					 "documents_dropped)", at);
			else
				snprintf(msg, sizeof(msg), "%s: a document of %" PRIu32 " tokens makes %"
					 PRIu32 " inputs, more than --max-context-length %" PRIu64
					 "; dropped (counted in zephon info: documents_dropped)", at, n,
					 n - 1, max);
			p->o->notice(p->o->ctx, msg);
		}
		return 0;
	}
	for (uint32_t k = 0; k < n; k++) /* the largest id of the documents kept */
		if (le32_get(ids + 4 * (size_t)k) > p->max_token)
			p->max_token = le32_get(ids + 4 * (size_t)k);
	if (r->n == r->cap) {
		/* parallel arrays of one capacity: each grows from r->cap to want */
		size_t want = r->cap ? 2 * r->cap : 4096, c;

		if ((c = r->cap, rc = ARRAY_GROW(r->off, c, want)) ||
		    (c = r->cap, rc = ARRAY_GROW(r->len, c, want)) ||
		    (c = r->cap, rc = ARRAY_GROW(r->src, c, want)))
			return rc;
		r->cap = want;
	}
	r->off[r->n] = r->bytes;
	r->len[r->n] = n;
	r->src[r->n] = source;
	if ((rc = spill(p, r, ids, (size_t)n * 4)) ||
	    (mask && (rc = spill(p, r, mask, n))))
		return rc;
	if ((rc = docindex_writer_add(p->docs, n, record, source, p->err, p->errlen)))
		return rc;
	r->n++;
	p->tokens += n;
	return 0;
}

/* Row planes for the documents members[0..count) of the spill (mapped at spill): inputs,
 * labels and positions into row (3 L int32, little-endian), and their row index entries
 * into e. Masked documents train the tokens whose mask byte is 1. */
static void make_row(const struct pack_rows *r, const uint8_t *spill, int masked,
		     const uint32_t *members, size_t count, uint64_t L, uint8_t *row,
		     struct rowindex_entry *e)
{
	uint8_t *in = row, *lab = row + 4 * L, *pos = row + 8 * L;
	uint64_t at = 0;

	memset(in, 0, 4 * L);
	memset(pos, 0, 4 * L);
	for (uint64_t k = 0; k < L; k++)
		le32_put(lab + 4 * k, (uint32_t)ROW_IGNORE);
	for (size_t j = 0; j < count; j++) {
		uint32_t d = members[j], n = r->len[d];
		const uint8_t *ids = spill + r->off[d], *mask = masked ? ids + 4 * (size_t)n : NULL;

		memcpy(in + 4 * at, ids, 4 * ((size_t)n - 1));
		for (uint32_t k = 0; k + 1 < n; k++) {
			if (!mask || mask[k + 1])
				memcpy(lab + 4 * (at + k), ids + 4 * ((size_t)k + 1), 4);
			le32_put(pos + 4 * (at + k), k);
		}
		e[j].document = d;
		e[j].position = (uint32_t)at;
		e[j].length = n - 1;
		at += n - 1;
	}
}

/* Each source's rows, in its catalog row: the first row holding a document of it, and how
 * many do (rows are not cut from a stream, so no row "starts" in an input). */
static void note_sources(struct packer *p, const struct rowplan *plan)
{
	uint64_t *last = calloc(p->cat.nsources + 1, sizeof(*last));

	for (size_t s = 0; s < p->cat.nsources; s++) {
		p->cat.sources[s].first_sample = 0;
		p->cat.sources[s].samples = 0;
	}
	if (!last)
		return; /* informational only: the counts stay 0 */
	for (uint64_t row = 0; row < plan->rows; row++) {
		for (uint32_t k = plan->first[row]; k < plan->first[row + 1]; k++) {
			uint32_t s = p->rows->src[plan->members[k]];

			if (s >= p->cat.nsources || last[s] == row + 1)
				continue;
			if (!last[s])
				p->cat.sources[s].first_sample = row;
			last[s] = row + 1;
			p->cat.sources[s].samples++;
		}
	}
	free(last);
}

/* Write the rows of plan, in order, through the record batch and the row index. */
static int write_rows(struct packer *p, const struct rowplan *plan, const uint8_t *spill,
		      struct rowindex_writer *ri)
{
	uint64_t L = p->o->seq_len, most = 1;
	uint8_t *row = malloc(12 * L);
	struct rowindex_entry *e;
	int rc = 0;

	for (uint64_t r = 0; r < plan->rows; r++)
		if (plan->first[r + 1] - plan->first[r] > most)
			most = plan->first[r + 1] - plan->first[r];
	e = malloc(most * sizeof(*e));

	if (!row || !e)
		rc = -ENOMEM;
	for (uint64_t r = 0; !rc && r < plan->rows; r++) {
		const uint32_t *m = plan->members + plan->first[r];
		size_t count = plan->first[r + 1] - plan->first[r];

		if (pack_cancelled(p)) {
			rc = -ECANCELED;
			break;
		}
		make_row(p->rows, spill, p->masked, m, count, L, row, e);
		if ((rc = rowindex_writer_row(ri, e, count, p->err, p->errlen)) ||
		    (rc = pack_batch_add(p, row, 12 * L, r)))
			break;
		if (pack_batch_full(p))
			rc = pack_batch_flush(p);
	}
	if (!rc)
		rc = pack_batch_flush(p);
	free(row);
	free(e);
	return rc;
}

int pack_rows_finish(struct packer *p)
{
	struct pack_rows *r = p->rows;
	struct rowindex_writer *ri = NULL;
	struct rowplan plan;
	uint32_t *sizes = malloc(r->n * sizeof(*sizes) + 1);
	uint8_t *spill = MAP_FAILED;
	char *path = NULL;
	int rc;

	memset(&plan, 0, sizeof(plan));
	if (!sizes)
		return -ENOMEM;
	if (r->n == 0) {
		free(sizes);
		return pack_fail(p, -ENODATA, "no document fits a row: all %" PRIu64 " were longer "
				 "than --max-context-length %" PRIu64 " inputs (or of one token)",
				 p->dropped, p->o->max_context ? p->o->max_context : p->o->seq_len);
	}
	for (size_t d = 0; d < r->n; d++)
		sizes[d] = r->len[d] - 1;
	if ((rc = spill_flush(p, r)) || (rc = rowplan_make(sizes, r->n, (uint32_t)p->o->seq_len,
							   &plan)))
		goto out;
	if (r->bytes && (spill = mmap(NULL, r->bytes, PROT_READ, MAP_SHARED, r->fd, 0)) ==
	    MAP_FAILED) {
		rc = pack_fail(p, -errno, "%s: mapping the documents to plan: %s", p->tmpdir,
			       strerror(errno));
		goto out;
	}
	if (asprintf(&path, "%s/%s", p->tmpdir, ROWINDEX_FILE) < 0) {
		path = NULL;
		rc = -ENOMEM;
		goto out;
	}
	if ((rc = rowindex_writer_open(path, p->o->seq_len, &ri, p->err, p->errlen)))
		goto out;
	p->cur_path = p->o->out;
	if ((rc = write_rows(p, &plan, spill, ri)))
		goto out;
	rc = rowindex_writer_finish(ri, p->err, p->errlen);
	ri = NULL;
	p->padding = plan.rows * p->o->seq_len - plan.used;
	note_sources(p, &plan);
out:
	if (rc == -ECANCELED)
		pack_fail(p, rc, "pack interrupted; nothing was written to %s", p->o->out);
	rowindex_writer_free(ri);
	if (spill != MAP_FAILED)
		munmap(spill, r->bytes);
	rowplan_release(&plan);
	free(sizes);
	free(path);
	return rc;
}
