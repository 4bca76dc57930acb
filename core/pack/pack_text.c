/*
 * pack_text.c: the token documents that `zephon pack --tokenizer`'s front end
 * (python/zephon/pack_text.py) streams over a pipe, packed like any token input: the
 * documents are concatenated and cut into windows, each document goes into the document
 * index (docindex.h), each input file into the catalog's sources.
 *
 * The stream (pack.h, PACK_TOKDOCS_MAGIC), little-endian:
 *   "ZTOKDOC1", u32 n, n bytes of "key=value\n" lines: dtype, eod (the end-of-document
 *   id), vocab_size, tokenizer (its name), tokenizer_sha256, bos (optional),
 *   tokenizer_path (optional: its absolute path, recorded for the loaders, not part of
 *   the fingerprint), input_bytes (the inputs' total size, for progress), masks (1: every
 *   'B' carries a label mask; --chat), chat ("messages" or "prompt-response") and
 *   prompt_mismatch ("drop" or "keep": what the front end did with such samples), or
 *   only error (the front end cannot start: the message); then records, each a tag byte:
 *   'I' u32 n, "FORMAT\tPATH" (n bytes), u64 size      a new input (catalog row)
 *   'B' u32 docs, u64 tokens, docs x u64 record, docs x u32 length, tokens x u32 id,
 *       and with masks=1 tokens x u8 mask (1: the token is trained as a label, 0: not)
 *                                                     documents of the current input
 *   'C' u64 tokens, tokens x u32 id                   the first tokens of a document too
 *                                                     long for one batch: the next 'B'
 *                                                     record's first document ends it
 *                                                     (its length there counts the rest;
 *                                                     never with masks=1)
 *   'W' u32 n, message                                a chat sample whose prompt's tokens
 *                                                     are not a prefix of its own (counted)
 *   'P' u64 bytes                                     bytes of the current input read
 *   'S' u32 n, message                                a record skipped (--skip-bad)
 *   'X' u32 n, message                                the front end failed: the message
 *   'Z'                                               the end: every input was sent
 * The front end is untrusted as far as the dataset goes: every id is checked against
 * the dtype and vocab_size, every length against the batch.
 */
#include "pack_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "docindex.h"
#include "instream.h"
#include "le.h"

#define READ_BUF (1u << 20)
#define TEXT_MAX 65536u
/* A batch of more tokens than this is refused: the front end sends ~1M. */
#define BATCH_TOKENS_MAX (UINT64_C(1) << 30)

struct tdreader {
	int fd;
	uint8_t *buf;
	size_t pos, end;
	uint64_t consumed;
	XXH3_state_t *hash;          /* the current input's records */
};

/* Read exactly n bytes. 0, or -ECANCELED (interrupted), -EBADMSG (the stream ended: the
 * front end died), -EIO. */
static int td_read(struct packer *p, struct tdreader *r, void *dst, size_t n)
{
	uint8_t *d = dst;

	while (n) {
		if (r->pos == r->end) {
			ssize_t got;

			if (pack_cancelled(p))
				return -ECANCELED;
			got = read(r->fd, r->buf, READ_BUF);
			if (got < 0 && errno == EINTR)
				continue;
			if (got < 0)
				return pack_fail(p, -EIO, "reading the tokenizer front end: %s",
						 strerror(errno));
			if (got == 0)
				return -EBADMSG;
			r->pos = 0;
			r->end = (size_t)got;
		}
		size_t take = r->end - r->pos < n ? r->end - r->pos : n;

		memcpy(d, r->buf + r->pos, take);
		if (r->hash)
			XXH3_128bits_update(r->hash, r->buf + r->pos, take);
		r->pos += take;
		d += take;
		n -= take;
		r->consumed += take;
	}
	return 0;
}

static int td_u32(struct packer *p, struct tdreader *r, uint32_t *v)
{
	uint8_t b[4];
	int rc = td_read(p, r, b, 4);

	*v = le32_get(b);
	return rc;
}

static int td_u64(struct packer *p, struct tdreader *r, uint64_t *v)
{
	uint8_t b[8];
	int rc = td_read(p, r, b, 8);

	*v = le64_get(b);
	return rc;
}

/* A length-prefixed text of at most TEXT_MAX bytes, NUL-terminated, into *out (freed by
 * the caller). */
static int td_text(struct packer *p, struct tdreader *r, char **out)
{
	uint32_t n;
	int rc = td_u32(p, r, &n);

	*out = NULL;
	if (rc)
		return rc;
	if (n > TEXT_MAX)
		return pack_fail(p, -EBADMSG, "the tokenizer front end sent a text of %" PRIu32
				 " bytes (broken stream)", n);
	if (!(*out = malloc(n + 1)))
		return -ENOMEM;
	(*out)[n] = 0;
	return td_read(p, r, *out, n);
}

static const char *header_get(const char *text, const char *key, char *val, size_t len)
{
	size_t kl = strlen(key);

	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!strncmp(l, key, kl) && l[kl] == '=') {
			const char *v = l + kl + 1, *e = strchr(v, '\n');
			size_t n = e ? (size_t)(e - v) : strlen(v);

			if (n >= len)
				n = len - 1;
			memcpy(val, v, n);
			val[n] = 0;
			return val;
		}
	}
	return NULL;
}

static int header_u64(const char *text, const char *key, uint64_t *out)
{
	char v[32], *end;

	if (!header_get(text, key, v, sizeof(v)) || v[0] < '0' || v[0] > '9')
		return -EINVAL;
	errno = 0;
	*out = strtoull(v, &end, 10);
	return *end || errno ? -EINVAL : 0;
}

/* The header's chat keys, and the dtype of rows (int32 planes, whatever the front end
 * chose: *dt). 0, or -EBADMSG (a mask without rows: the front end and packer disagree). */
static int header_rows(struct packer *p, const char *text, enum token_dtype *dt)
{
	uint64_t masks = 0;

	header_u64(text, "masks", &masks);
	p->masked = masks == 1;
	header_get(text, "chat", p->chat, sizeof(p->chat));
	header_get(text, "prompt_mismatch", p->mismatch_policy, sizeof(p->mismatch_policy));
	if (p->masked && !p->o->rows)
		return pack_fail(p, -EBADMSG, "internal: the front end sends label masks but the "
				 "pack makes no rows");
	if (!p->o->rows)
		return 0;
	if (p->vocab_size - 1 > dtype_max(DTYPE_INT32))
		return pack_fail(p, -EINVAL, "rows hold int32 token ids, but the tokenizer's "
				 "vocabulary has %" PRIu64 " ids", p->vocab_size);
	*dt = DTYPE_INT32;
	return 0;
}

static int read_header(struct packer *p, struct tdreader *r)
{
	char magic[8], *text = NULL, v[256];
	enum token_dtype dt;
	int rc = td_read(p, r, magic, sizeof(magic));

	if (rc == -EBADMSG)
		return pack_fail(p, -EBADMSG, "the tokenizer front end ended before its first "
				 "output (see its message above)");
	if (rc)
		return rc;
	if (memcmp(magic, PACK_TOKDOCS_MAGIC, 8))
		return pack_fail(p, -EBADMSG, "the tokenizer front end does not speak this "
				 "zephon's protocol (expected %.8s); install the zephon Python "
				 "package of the same version", PACK_TOKDOCS_MAGIC);
	if ((rc = td_text(p, r, &text)))
		goto out;
	if (header_get(text, "error", p->err, p->errlen)) {
		rc = -EINVAL; /* it could not start: a bad tokenizer, option or input */
		goto out;
	}
	rc = pack_fail(p, -EBADMSG, "the tokenizer front end's header lacks a key or has a "
		       "bad value");
	if (!header_get(text, "dtype", v, sizeof(v)) || dtype_parse(v, &dt) ||
	    header_u64(text, "eod", &p->eod) || header_u64(text, "vocab_size", &p->vocab_size) ||
	    !header_get(text, "tokenizer", p->tok_name, sizeof(p->tok_name)) ||
	    !header_get(text, "tokenizer_sha256", p->tok_sha256, sizeof(p->tok_sha256)) ||
	    strspn(p->tok_sha256, "0123456789abcdef") != 64 || p->tok_sha256[64] ||
	    p->eod > dtype_max(dt) || p->eod >= p->vocab_size)
		goto out;
	if ((rc = header_rows(p, text, &dt)))
		goto out;
	p->have_bos = header_u64(text, "bos", &p->bos) == 0;
	/* a path too long for the buffer would be recorded cut: none instead */
	if (!header_get(text, "tokenizer_path", p->tok_path, sizeof(p->tok_path)) ||
	    strlen(p->tok_path) == sizeof(p->tok_path) - 1)
		p->tok_path[0] = 0;
	if (header_u64(text, "input_bytes", &p->input_total))
		p->input_total = 0;
	if (p->have_dtype && p->dtype != dt) {
		rc = pack_fail(p, -EINVAL, "internal: the front end chose %s, not the --dtype %s",
			       dtype_name(dt), dtype_name(p->dtype));
		goto out;
	}
	p->have_dtype = 1;
	p->dtype = dt;
	p->itemsize = dtype_size(dt);
	p->have_eod = 1;
	p->err[0] = 0;
	rc = 0;
out:
	free(text);
	return rc;
}

/* The source row of the input that ends here. */
static int finish_input(struct packer *p, struct tdreader *r, struct catalog_source *row,
			uint64_t tokens_before)
{
	uint64_t *st;
	int rc;

	if (!row->path)
		return 0;
	xxh128_hex(XXH3_128bits_digest(r->hash), row->checksum);
	st = realloc(p->source_tokens, (p->cat.nsources + 1) * sizeof(*st));
	if (!st)
		return -ENOMEM;
	p->source_tokens = st;
	st[p->cat.nsources] = p->tokens - tokens_before;
	rc = catalog_add_source(&p->cat, row);
	free(row->path);
	row->path = NULL;
	p->input_base += row->size;
	p->input_done = p->input_base;
	return rc;
}

/* ntok ids (u32, little-endian, at ids) of the input at path, each checked against the
 * dtype and the vocabulary and narrowed to the dtype in place (the output never outruns
 * the input: itemsize <= 4). 0, or -EINVAL (an id out of range, with the reason). */
static int narrow_ids(struct packer *p, const char *path, uint8_t *ids, uint64_t ntok)
{
	uint64_t max = dtype_max(p->dtype);

	for (uint64_t t = 0; t < ntok; t++) {
		uint32_t id = le32_get(ids + 4 * t);

		if (id > max || id >= p->vocab_size)
			return pack_fail(p, -EINVAL, "%s: token id %" PRIu32 " does not fit %s or the "
					 "tokenizer's vocabulary of %" PRIu64, path, id,
					 dtype_name(p->dtype), p->vocab_size);
		if (id > p->max_token && !p->o->rows) /* rows: of the documents kept */
			p->max_token = id;
		if (p->itemsize == 2)
			le16_put(ids + 2 * t, (uint16_t)id);
		else if (p->itemsize == 1)
			ids[t] = (uint8_t)id;
	}
	p->have_max_token = 1;
	return 0;
}

/* ntok narrowed ids into the window, whose full windows are cut. */
static int window_ids(struct packer *p, const uint8_t *ids, uint64_t ntok)
{
	int rc;

	p->tokens += ntok;
	if ((rc = buf_append(&p->window, ids, (size_t)ntok * p->itemsize)))
		return rc;
	return pack_cut_windows(p);
}

/* Rows: a document whose first p->doc_part tokens came in 'C' records (kept in
 * p->doc_buf while a row could still take it) and whose last n are at ids. A document
 * longer than a row takes is dropped by pack_rows_add (which reads no ids then). */
static int rows_end_part(struct packer *p, const uint8_t *ids, uint32_t n, uint64_t record,
			 uint32_t source, const char *format)
{
	uint64_t total = p->doc_part + n;
	int rc;

	if (p->doc_over || total > UINT32_MAX)
		return pack_rows_add(p, ids, NULL, total > UINT32_MAX ? UINT32_MAX : (uint32_t)total,
				     record, source, format);
	if ((rc = buf_append(&p->doc_buf, ids, (size_t)n * 4)))
		return rc;
	rc = pack_rows_add(p, p->doc_buf.data, NULL, (uint32_t)total, record, source, format);
	p->doc_buf.len = 0;
	return rc;
}

/* The documents of a batch (ids: their tokens as u32, masks: theirs or past the ids
 * when the front end sends none) into rows (pack_rows.c); the first one ends the
 * document 'C' records began, if any. */
static int add_to_rows(struct packer *p, uint32_t docs, const uint64_t *records,
		       const uint32_t *lens, const uint8_t *ids, const uint8_t *masks,
		       uint32_t source, const char *format)
{
	int rc;

	for (uint32_t d = 0; d < docs; d++) {
		uint32_t n = le32_get(&lens[d]);

		if (n == 0 && !(d == 0 && p->doc_part))
			return pack_fail(p, -EBADMSG, "the tokenizer front end sent an empty document "
					 "(broken stream)");
		if (d == 0 && p->doc_part)
			rc = rows_end_part(p, ids, n, le64_get(&records[d]), source, format);
		else
			rc = pack_rows_add(p, ids, p->masked ? masks : NULL, n,
					   le64_get(&records[d]), source, format);
		if (rc)
			return rc;
		ids += (size_t)n * 4;
		masks += n;
	}
	p->doc_part = 0;
	p->doc_over = 0;
	return 0;
}

/* One 'B' record: documents into the window and the document index, or into rows; the
 * first one ends the document that 'C' records began, if any (p->doc_part tokens). */
static int read_batch(struct packer *p, struct tdreader *r, const char *path, uint32_t source,
		      const char *format, struct buf *tmp)
{
	uint32_t docs;
	uint64_t ntok, sum = 0;
	uint64_t *records;
	uint32_t *lens;
	uint8_t *ids;
	int rc;

	if ((rc = td_u32(p, r, &docs)) || (rc = td_u64(p, r, &ntok)))
		return rc;
	if (ntok > BATCH_TOKENS_MAX || docs == 0 || docs > ntok + (p->doc_part ? 1 : 0))
		return pack_fail(p, -EBADMSG, "the tokenizer front end sent a batch of %" PRIu32
				 " documents and %" PRIu64 " tokens (broken stream)", docs, ntok);
	tmp->len = 0;
	if ((rc = buf_reserve(tmp, (size_t)docs * 12 + (size_t)ntok * (p->masked ? 5 : 4))))
		return rc;
	records = (uint64_t *)tmp->data;
	lens = (uint32_t *)(tmp->data + (size_t)docs * 8);
	ids = tmp->data + (size_t)docs * 12;
	if ((rc = td_read(p, r, tmp->data, (size_t)docs * 12 + (size_t)ntok *
			  (p->masked ? 5 : 4))))
		return rc;
	for (uint32_t d = 0; d < docs; d++)
		sum += le32_get(&lens[d]);
	if (sum != ntok)
		return pack_fail(p, -EBADMSG, "the tokenizer front end's batch lengths do not add "
				 "up (broken stream)");
	if ((rc = narrow_ids(p, path, ids, ntok)))
		return rc;
	if (p->o->rows)
		return add_to_rows(p, docs, records, lens, ids, ids + (size_t)ntok * 4, source,
				   format);
	for (uint32_t d = 0; d < docs; d++) {
		uint64_t n = le32_get(&lens[d]) + (d == 0 ? p->doc_part : 0);

		if (n == 0)
			return pack_fail(p, -EBADMSG, "the tokenizer front end sent an empty document "
					 "(broken stream)");
		rc = docindex_writer_add(p->docs, n, le64_get(&records[d]), source, p->err,
					 p->errlen);
		if (rc)
			return rc;
	}
	p->doc_part = 0;
	return window_ids(p, ids, ntok);
}

/* One 'C' record: the first tokens of a document that a later 'B' record ends, into the
 * window (the document index learns the document's length from that 'B'), or, for rows,
 * kept until then while a row can still take the document. */
static int read_part(struct packer *p, struct tdreader *r, const char *path, struct buf *tmp)
{
	uint64_t ntok, row_max = p->o->max_context ? p->o->max_context : p->o->seq_len;
	int rc;

	if ((rc = td_u64(p, r, &ntok)))
		return rc;
	if (ntok == 0 || ntok > BATCH_TOKENS_MAX || p->masked)
		return pack_fail(p, -EBADMSG, "the tokenizer front end sent a document part of %"
				 PRIu64 " tokens%s (broken stream)", ntok, p->masked ? " with masks" : "");
	tmp->len = 0;
	if ((rc = buf_reserve(tmp, (size_t)ntok * 4)) ||
	    (rc = td_read(p, r, tmp->data, (size_t)ntok * 4)) ||
	    (rc = narrow_ids(p, path, tmp->data, ntok)))
		return rc;
	p->doc_part += ntok;
	if (!p->o->rows)
		return window_ids(p, tmp->data, ntok);
	if (p->doc_over || p->doc_part > row_max + 1) { /* longer than a row: dropped at 'B' */
		p->doc_over = 1;
		p->doc_buf.len = 0;
		return 0;
	}
	return buf_append(&p->doc_buf, tmp->data, (size_t)ntok * 4);
}

/* The document index of this pack, in its temporary directory. */
static int pack_open_docindex(struct packer *p)
{
	char *path;
	int rc;

	if (asprintf(&path, "%s/%s", p->tmpdir, DOCINDEX_FILE) < 0)
		return -ENOMEM;
	rc = docindex_writer_open(path, &p->docs, p->err, p->errlen);
	free(path);
	return rc;
}

/* Record 'I': end the input before (finish_input) and start the one it names ("FORMAT\tPATH"
 * and its size in bytes); *path owns that text, row->path a copy of PATH. 0, -ENOMEM, or
 * what reading the stream returns. */
static int begin_input(struct packer *p, struct tdreader *r, struct catalog_source *row,
		       char **path, uint64_t *tokens_before)
{
	char *text = NULL;
	int rc;

	if ((rc = finish_input(p, r, row, *tokens_before)))
		return rc;
	XXH3_128bits_reset(r->hash);
	if ((rc = td_text(p, r, &text)) || (rc = td_u64(p, r, &row->size))) {
		free(text);
		return rc;
	}
	free(*path);
	*path = text;
	if (row->size > INT64_MAX) /* the catalog holds sizes as SQLite integers */
		return pack_fail(p, -EBADMSG, "the tokenizer front end named an input of %" PRIu64
				 " bytes (broken stream)", row->size);
	if (!(row->format = strchr(*path, '\t')))
		return pack_fail(p, -EBADMSG, "the tokenizer front end named an input without its "
				 "format (broken stream)");
	*row->format++ = 0;
	if (!(row->path = strdup(row->format)))
		return -ENOMEM;
	row->format = *path;
	p->cur_path = row->path;
	*tokens_before = p->tokens;
	p->nsources++;
	p->prog.inputs = p->prog.input = p->nsources;
	return 0;
}

/* Records 'P' (bytes of the input of `size` bytes read so far: progress), 'S' (a record
 * skipped by --skip-bad, with its notice) and 'X' (the front end's error, which ends the
 * pack). 0, or -EINVAL for 'X', or what reading the stream returns. */
static int read_message(struct packer *p, struct tdreader *r, uint8_t tag, uint64_t size)
{
	char *text = NULL;
	uint64_t u;
	int rc;

	if (tag == 'P') {
		if (!(rc = td_u64(p, r, &u))) {
			p->input_done = p->input_base + (u < size ? u : size);
			pack_report(p, 0);
		}
		return rc;
	}
	if ((rc = td_text(p, r, &text))) {
		free(text); /* td_text may have allocated it before the stream broke */
		return rc;
	}
	if (tag == 'X') {
		rc = pack_fail(p, -EINVAL, "%s", text);
	} else if (tag == 'W') {
		p->prompt_mismatch++;
		if (p->o->notice)
			p->o->notice(p->o->ctx, text);
	} else {
		p->skipped++;
		if (p->o->notice)
			p->o->notice(p->o->ctx, text);
	}
	free(text);
	return rc;
}

/* Whether record `tag` may come now: documents only after an input names their file
 * (path), and no new input nor the end while a document begun by 'C' records is open.
 * 0 or -EBADMSG (the reason in p->err). */
static int tag_in_order(struct packer *p, uint8_t tag, const char *path)
{
	if ((tag == 'I' || tag == 'Z') && p->doc_part)
		return pack_fail(p, -EBADMSG, "the tokenizer front end left a document of %s "
				 "unfinished (broken stream)", path ? path : "?");
	if ((tag == 'B' || tag == 'C') && !path)
		return pack_fail(p, -EBADMSG, "the tokenizer front end sent documents before "
				 "naming their input (broken stream)");
	return 0;
}

int pack_tokdocs(struct packer *p)
{
	struct tdreader r = { .fd = p->o->tokdocs_fd };
	struct catalog_source row;
	struct buf tmp = BUF_INIT;
	uint64_t tokens_before = 0;
	char *path = NULL;
	int rc, done = 0;

	memset(&row, 0, sizeof(row));
	r.buf = malloc(READ_BUF);
	r.hash = XXH3_createState();
	if (!r.buf || !r.hash) {
		rc = -ENOMEM;
		goto out;
	}
	XXH3_128bits_reset(r.hash); /* the header and records before the first input too */
	if ((rc = read_header(p, &r)) || (rc = pack_open_docindex(p)) ||
	    (p->o->rows && (rc = pack_rows_open(p))))
		goto out;
	while (!done) {
		uint8_t tag;

		if ((rc = td_read(p, &r, &tag, 1)))
			break;
		if ((rc = tag_in_order(p, tag, row.path)))
			break;
		switch (tag) {
		case 'I':
			rc = begin_input(p, &r, &row, &path, &tokens_before);
			break;
		case 'B':
			rc = read_batch(p, &r, row.path, (uint32_t)p->cat.nsources, row.format,
					&tmp);
			break;
		case 'C':
			rc = read_part(p, &r, row.path, &tmp);
			break;
		case 'P':
		case 'S':
		case 'W':
		case 'X':
			rc = read_message(p, &r, tag, row.size);
			break;
		case 'Z':
			rc = finish_input(p, &r, &row, tokens_before);
			done = 1;
			break;
		default:
			rc = pack_fail(p, -EBADMSG, "the tokenizer front end sent record tag 0x%02x "
				       "(broken stream)", tag);
		}
		if (rc)
			break;
	}
	if (rc == -EBADMSG && !p->err[0])
		pack_fail(p, rc, "the tokenizer front end stopped before the end of its output "
			  "(see its message above)");
	if (!rc && p->cat.nsources == 0)
		rc = pack_fail(p, -ENODATA, "the inputs hold no documents");
	if (!rc)
		rc = p->o->rows ? pack_rows_finish(p) : pack_batch_flush(p);
out:
	if (rc == -ECANCELED)
		pack_fail(p, rc, "pack interrupted; nothing was written to %s", p->o->out);
	free(row.path);
	free(path);
	buf_release(&tmp);
	buf_release(&p->doc_buf);
	free(r.buf);
	XXH3_freeState(r.hash);
	return rc;
}
