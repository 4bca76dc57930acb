/*
 * encode.c: the batch encodings of encode.h.
 *
 * Every encoder appends to the caller's buf and, on any failure, truncates it back to
 * the length it had on entry, so a failed claim never leaves partial bytes behind.
 * Samples are decoded straight into `out` where the encoding is a plain concatenation
 * (lines, npy, bin: no extra copy); tar decodes each sample into a scratch buf and lets
 * libarchive write headers and padding around it.
 */
#include "encode.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "filegroup.h"
#include "npy.h"

int encode_format_parse(const char *s, enum encode_format *out)
{
	static const struct {
		const char *name;
		enum encode_format f;
	} names[] = {
		{ "lines", FORMAT_LINES }, { "tar", FORMAT_TAR },
		{ "npy", FORMAT_NPY },     { "bin", FORMAT_BIN },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcmp(s, names[i].name)) {
			*out = names[i].f;
			return 0;
		}
	}
	return -EINVAL;
}

const char *encode_format_name(enum encode_format f)
{
	switch (f) {
	case FORMAT_LINES: return "lines";
	case FORMAT_TAR: return "tar";
	case FORMAT_NPY: return "npy";
	case FORMAT_BIN: return "bin";
	}
	return "?";
}

enum encode_format encode_format_default(const struct dataset_info *info)
{
	switch (info->content) {
	case CONTENT_TEXT: return FORMAT_LINES;
	case CONTENT_FILES: return FORMAT_TAR;
	case CONTENT_TOKENS: return FORMAT_NPY;
	}
	return FORMAT_LINES;
}

int encode_format_check(const struct dataset_info *info, enum encode_format f,
		       char *why, size_t why_len)
{
	const char *fits;

	switch (info->content) {
	case CONTENT_TEXT:
		if (f == FORMAT_LINES || f == FORMAT_TAR)
			return 0;
		fits = "lines or tar";
		break;
	case CONTENT_FILES:
		if (f == FORMAT_TAR)
			return 0;
		fits = "tar";
		break;
	case CONTENT_TOKENS:
		if (f == FORMAT_NPY || f == FORMAT_BIN)
			return 0;
		fits = "npy or bin";
		break;
	default:
		if (why && why_len)
			snprintf(why, why_len, "dataset content is unknown; repack it");
		return -EINVAL;
	}
	if (why && why_len)
		snprintf(why, why_len,
			 "format=%s does not fit a dataset of %s; use format=%s",
			 encode_format_name(f), dataset_content_name(info->content), fits);
	return -EINVAL;
}

/* Undo a failed encode: drop everything appended since `len`. */
static void buf_truncate(struct buf *b, size_t len)
{
	b->len = len;
	if (b->data)
		b->data[len] = 0;
}

/* Append sample ids[i] to out, with the error contract of encode_batch (-EIO names the
 * sample). Before the first, starts the disk reads of the batch's pages that are not in
 * memory. First asks for the index entry of the sample after next and the bytes of the
 * next: random samples otherwise each start with a cache and TLB miss in the index and
 * another in the shard. */
static int read_sample(struct sample_reader *r, const uint64_t *ids, size_t count, size_t i,
		       struct buf *out, uint64_t *bad_id)
{
	int rc;

	if (i == 0)
		sample_reader_warm(r, ids, count);
	if (i + 2 < count)
		sample_reader_prefetch(r, ids[i + 2], 0);
	if (i + 1 < count)
		sample_reader_prefetch(r, ids[i + 1], 1);
	rc = sample_reader_read(r, ids[i], out);
	if (rc == -EIO && bad_id)
		*bad_id = ids[i];
	return rc;
}

static int encode_lines(struct sample_reader *r, const uint64_t *ids, size_t count,
			struct buf *out, uint64_t *bad_id)
{
	for (size_t i = 0; i < count; i++) {
		int rc = read_sample(r, ids, count, i, out, bad_id);

		if (!rc)
			rc = buf_append(out, "\n", 1);
		if (rc)
			return rc;
	}
	return 0;
}

/* The npy header of count token samples: (count, seq_len), or, for a dataset of rows,
 * (count, 3, row_len): each sample's planes inputs, labels, positions (rowindex.h). */
static int npy_head(struct buf *out, const struct dataset_info *info, size_t count)
{
	if (info->row_len)
		return npy_header_write_3d(out, info->dtype, count, info->seq_len / info->row_len,
					   info->row_len);
	return npy_header_write(out, info->dtype, count, info->seq_len);
}

/* The bytes of count token samples (npy or bin, header aside) and of one of them.
 * 0, -EINVAL (not a token dataset), -EOVERFLOW (more than a buffer can hold). */
static int tokens_bytes(const struct dataset_info *info, size_t count,
			uint64_t *sample_bytes, uint64_t *data_bytes)
{
	if (!dtype_npy_descr(info->dtype) || info->seq_len == 0 || info->itemsize == 0)
		return -EINVAL;
	if (__builtin_mul_overflow(info->seq_len, (uint64_t)info->itemsize, sample_bytes) ||
	    __builtin_mul_overflow(*sample_bytes, (uint64_t)count, data_bytes) ||
	    *data_bytes > SIZE_MAX - NPY_ALIGN * 4)
		return -EOVERFLOW;
	return 0;
}

/* npy (with_header) or bin: the samples' tokens back to back, each sample exactly
 * seq_len * itemsize bytes (anything else is a corrupt sample). */
static int encode_tokens(const struct encode_in *in, int with_header, struct buf *out,
			 uint64_t *bad_id)
{
	const struct dataset_info *info = in->info;
	const uint64_t *ids = in->ids;
	size_t count = in->count;
	uint64_t sample_bytes, data_bytes;
	int rc = tokens_bytes(info, count, &sample_bytes, &data_bytes);

	if (rc)
		return rc;
	if (with_header) {
		rc = npy_head(out, info, count);
		if (rc)
			return rc;
	}
	/* One allocation for the whole batch: the hot path of token training. */
	rc = buf_reserve(out, (size_t)data_bytes);
	if (rc)
		return rc;
	for (size_t i = 0; i < count; i++) {
		size_t before = out->len;

		rc = read_sample(in->r, ids, count, i, out, bad_id);
		if (rc)
			return rc;
		if (out->len - before != sample_bytes) {
			if (bad_id)
				*bad_id = ids[i];
			return -EIO;
		}
	}
	return 0;
}

/* libarchive writes into a struct buf through these callbacks. */
struct tar_sink {
	struct buf *out;
	int err; /* -errno of the first failed append */
};

static la_ssize_t tar_write_cb(struct archive *a, void *client, const void *data,
			       size_t n)
{
	struct tar_sink *s = client;
	int rc = buf_append(s->out, data, n);

	if (rc) {
		s->err = rc;
		archive_set_error(a, -rc, "cannot grow the batch buffer");
		return -1;
	}
	return (la_ssize_t)n;
}

static int tar_open_cb(struct archive *a, void *client)
{
	(void)a;
	(void)client;
	return ARCHIVE_OK;
}

static int tar_close_cb(struct archive *a, void *client)
{
	(void)a;
	(void)client;
	return ARCHIVE_OK;
}

/* Translate a libarchive failure (the one boundary for its error space). */
static int tar_error(struct archive *a, const struct tar_sink *s)
{
	int e;

	if (s->err)
		return s->err;
	e = archive_errno(a);
	if (e == ENOMEM)
		return -ENOMEM;
	return -EIO;
}

/* One regular member: mode 0644, mtime 0, uid/gid 0, no user/group names, so the same
 * batch always gives the same bytes. */
static int tar_member(struct archive *a, struct archive_entry *e, const struct tar_sink *s,
		      const char *name, const void *data, uint64_t size)
{
	archive_entry_clear(e);
	archive_entry_copy_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, (la_int64_t)size);
	archive_entry_set_mtime(e, 0, 0);
	archive_entry_set_uid(e, 0);
	archive_entry_set_gid(e, 0);
	/* ARCHIVE_WARN: a name that is not UTF-8 went in as hdrcharset=BINARY; fine */
	if (archive_write_header(a, e) < ARCHIVE_WARN)
		return tar_error(a, s);
	if (size && archive_write_data(a, data, (size_t)size) != (la_ssize_t)size)
		return tar_error(a, s);
	if (archive_write_finish_entry(a) != ARCHIVE_OK)
		return tar_error(a, s);
	return 0;
}

/* Write the members of one file group (dataset.h; walked by filegroup.h, which bounds-
 * checks every field). -EIO when the payload does not parse: the bytes passed their
 * checksum, so a malformed group is a corrupt sample all the same. */
static int tar_file_group(struct archive *a, struct archive_entry *e,
			  const struct tar_sink *s, const uint8_t *p, size_t len)
{
	char name[FILEGROUP_NAME_MAX + 1];
	struct filegroup_iter it;
	struct filegroup_file f;
	int rc;

	if (filegroup_iter_init(&it, p, len))
		return -EIO;
	while ((rc = filegroup_next(&it, &f)) == 1) {
		/* libarchive takes C strings: a NUL inside a name would cut it short */
		if (memchr(f.name, 0, f.name_len))
			return -EIO;
		memcpy(name, f.name, f.name_len);
		name[f.name_len] = 0;
		rc = tar_member(a, e, s, name, f.data, f.size);
		if (rc)
			return rc;
	}
	return rc == 0 ? 0 : -EIO;
}

/*
 * Member names are UTF-8 (as packed). libarchive converts names from the calling
 * thread's locale charset into the pax "path" record, so the same batch would come out
 * differently under LANG=C (raw bytes flagged hdrcharset=BINARY) and a UTF-8 locale.
 * Encoding under C.UTF-8, set for this thread only with uselocale(3), makes the bytes
 * independent of the environment; names that are not valid UTF-8 still fall back to
 * hdrcharset=BINARY, deterministically. Without C.UTF-8 (old libc) always write BINARY.
 */
static locale_t utf8_locale;
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;

static void utf8_locale_init(void)
{
	utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

static int encode_tar_locked(struct sample_reader *r, const struct dataset_info *info,
			     const uint64_t *ids, size_t count, struct buf *out,
			     uint64_t *bad_id);

static int encode_tar(struct sample_reader *r, const struct dataset_info *info,
		      const uint64_t *ids, size_t count, struct buf *out, uint64_t *bad_id)
{
	locale_t saved = (locale_t)0;
	int rc;

	pthread_once(&utf8_once, utf8_locale_init);
	if (utf8_locale)
		saved = uselocale(utf8_locale);
	rc = encode_tar_locked(r, info, ids, count, out, bad_id);
	if (utf8_locale)
		uselocale(saved);
	return rc;
}

static int encode_tar_locked(struct sample_reader *r, const struct dataset_info *info,
			     const uint64_t *ids, size_t count, struct buf *out,
			     uint64_t *bad_id)
{
	struct tar_sink sink = { out, 0 };
	struct buf sample = BUF_INIT;
	struct archive_entry *e = NULL;
	struct archive *a;
	char name[64];
	int rc = -ENOMEM;

	a = archive_write_new();
	if (!a)
		return -ENOMEM;
	e = archive_entry_new();
	if (!e)
		goto out;
	/* pax_restricted: ustar headers, plus a pax extended header only for what ustar
	 * cannot hold (long or non-ASCII names); no blocking, so the stream is exactly the
	 * members and the two zero blocks that end it. */
	if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    archive_write_add_filter_none(a) != ARCHIVE_OK ||
	    archive_write_set_bytes_per_block(a, 0) != ARCHIVE_OK ||
	    (!utf8_locale &&
	     archive_write_set_format_option(a, "pax", "hdrcharset", "BINARY") != ARCHIVE_OK) ||
	    archive_write_open(a, &sink, tar_open_cb, tar_write_cb, tar_close_cb) !=
		    ARCHIVE_OK) {
		rc = tar_error(a, &sink);
		goto out;
	}
	for (size_t i = 0; i < count; i++) {
		sample.len = 0;
		rc = read_sample(r, ids, count, i, &sample, bad_id);
		if (rc)
			goto out;
		if (info->content == CONTENT_TEXT) {
			snprintf(name, sizeof(name), "%09" PRIu64 ".%s", ids[i],
				 info->record_ext[0] ? info->record_ext : "txt");
			rc = tar_member(a, e, &sink, name, sample.data, sample.len);
		} else {
			rc = tar_file_group(a, e, &sink, sample.data, sample.len);
			if (rc == -EIO && bad_id)
				*bad_id = ids[i];
		}
		if (rc)
			goto out;
	}
	rc = archive_write_close(a) == ARCHIVE_OK ? 0 : tar_error(a, &sink);
out:
	archive_entry_free(e);
	archive_write_free(a); /* after close: does not write again */
	buf_release(&sample);
	return rc;
}

int encode_format_fixed(enum encode_format f)
{
	return f == FORMAT_NPY || f == FORMAT_BIN;
}

int encode_views_possible(const struct dataset_info *info, enum encode_format f)
{
	return info->kind == DATASET_TOKENS && !info->compressed && encode_format_fixed(f) &&
	       info->seq_len * info->itemsize >= BATCH_VIEW_MIN;
}

int encode_batch_views(const struct encode_in *in, struct buf *head, struct iovec *views,
		       uint64_t *bad_id)
{
	size_t start = head->len;
	int rc = 0;

	if (!encode_views_possible(in->info, in->format))
		return -ENOTSUP;
	sample_reader_warm(in->r, in->ids, in->count);
	if (in->format == FORMAT_NPY)
		rc = npy_head(head, in->info, in->count);
	if (!rc)
		rc = sample_reader_views(in->r, in->ids, in->count, views, bad_id);
	if (rc)
		buf_truncate(head, start);
	return rc;
}

int encode_batch_len(struct sample_reader *r, const struct dataset_info *info,
		      enum encode_format f, const uint64_t *ids, size_t count, uint64_t *len)
{
	uint64_t total = 0, n, sample_bytes;
	int rc;

	if (encode_format_check(info, f, NULL, 0))
		return -EINVAL;
	switch (f) {
	case FORMAT_LINES:
		for (size_t i = 0; i < count; i++) {
			rc = sample_reader_raw_len(r, ids[i], &n);
			if (rc)
				return rc;
			if (__builtin_add_overflow(total, n + 1, &total))
				return -EOVERFLOW;
		}
		break;
	case FORMAT_NPY:
	case FORMAT_BIN:
		rc = tokens_bytes(info, count, &sample_bytes, &total);
		if (rc)
			return rc;
		if (f == FORMAT_NPY) {
			struct buf head = BUF_INIT;

			rc = npy_head(&head, info, count);
			n = head.len;
			buf_release(&head);
			if (rc)
				return rc;
			if (__builtin_add_overflow(total, n, &total))
				return -EOVERFLOW;
		}
		break;
	default:
		return -ENOTSUP;
	}
	*len = total;
	return 0;
}

int encode_batch(const struct encode_in *in, struct buf *out, uint64_t *bad_id)
{
	size_t start = out->len;
	int rc;

	if (encode_format_check(in->info, in->format, NULL, 0))
		return -EINVAL;
	switch (in->format) {
	case FORMAT_LINES:
		rc = encode_lines(in->r, in->ids, in->count, out, bad_id);
		break;
	case FORMAT_TAR:
		rc = encode_tar(in->r, in->info, in->ids, in->count, out, bad_id);
		break;
	case FORMAT_NPY:
	case FORMAT_BIN:
		rc = encode_tokens(in, in->format == FORMAT_NPY, out, bad_id);
		break;
	default:
		rc = -EINVAL;
	}
	if (rc)
		buf_truncate(out, start);
	return rc;
}
