/* source_tar.c: tar archives with WebDataset grouping, read with libarchive. Compression
 * is decoded below libarchive's tar reader, by the checked stream of dstream.h
 * (libarchive's own gzip filter never checks the CRC32 and ISIZE trailer, RFC 1952
 * section 2.3.1). The tar reader stops at the end-of-archive blocks, and
 * what follows them in the compressed stream (tar padding, the last frame's checksum, a
 * gzip trailer, an xz index and footer, an lz4 content checksum, trailing garbage, a
 * truncation) would never be decoded; so tar_drain() decodes the rest of the stream
 * after them. */
#include "source.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstream.h"
#include "filegroup.h"

#define TAR_CHUNK (256 * 1024)

struct tar_src {
	struct archive *a;
	struct dstream *d;       /* the file's decoded, checked bytes (dstream.h) */
	uint8_t *plain;          /* TAR_CHUNK decoded bytes for libarchive */
	int read_rc;             /* a read or decoding error, with s->err set: reported as
	                          * it is, not as whatever libarchive makes of it */
	struct source *s;
	/* The member that ended the previous group: it starts the next one. */
	struct buf held;         /* a file group of one file, or empty */
	char *held_key;
	char *last_name;         /* last member seen, for positions in messages */
	int64_t header_at;       /* where the header being read starts in the tar stream,
	                          * -1 unknown: libarchive cannot say once a header failed */
	int in_entry;            /* a header was read: libarchive expects its data next */
	int at_end;
};

int tar_member_path(const char *path, const char **clean, size_t *key_len,
		    char *why, size_t why_len)
{
	const char *p = path, *base, *dot, *c;

	while (p[0] == '.' && p[1] == '/')
		p += 2;
	if (p[0] == '/') {
		snprintf(why, why_len, "absolute member path");
		return -EINVAL;
	}
	if (!*p) {
		snprintf(why, why_len, "empty member path");
		return -EINVAL;
	}
	/* Any ".." component could escape a directory when the batch is extracted. */
	for (c = p; *c; ) {
		const char *slash = strchr(c, '/');
		size_t n = slash ? (size_t)(slash - c) : strlen(c);

		if (n == 2 && c[0] == '.' && c[1] == '.') {
			snprintf(why, why_len, "member path has a '..' component");
			return -EINVAL;
		}
		c += n;
		if (*c == '/')
			c++;
	}
	if (strlen(p) > FILEGROUP_NAME_MAX) {
		snprintf(why, why_len, "member path longer than %d bytes", FILEGROUP_NAME_MAX);
		return -EINVAL;
	}
	base = strrchr(p, '/');
	base = base ? base + 1 : p;
	dot = strchr(base, '.');
	*clean = p;
	/* A base name that starts with '.' or has no '.' has no key/extension split. */
	*key_len = dot && dot != base && dot[1] ? (size_t)(dot - p) : 0;
	return 0;
}

/* The next decoded bytes into plain: *n > 0, or 0 at the checked end of the stream.
 * 0 or -errno with s->err set. */
static int plain_fill(struct source *s, struct tar_src *t, size_t *n)
{
	int rc = dstream_read(t->d, t->plain, TAR_CHUNK, n, s->err, sizeof(s->err));

	s->bytes_read = dstream_bytes_read(t->d);
	return rc;
}

/* libarchive's read callback: the tar stream. */
static ssize_t tar_read_cb(struct archive *a, void *ctx, const void **buffer)
{
	struct tar_src *t = ctx;
	struct source *s = t->s;
	size_t n;

	if (!t->read_rc)
		t->read_rc = plain_fill(s, t, &n);
	if (t->read_rc) {
		archive_set_error(a, -t->read_rc, "%s", s->err);
		return -1;
	}
	*buffer = t->plain;
	return (ssize_t)n;
}

/* After the tar end-of-archive blocks: decode the rest of the compressed stream, so a bad
 * checksum or trailer, trailing garbage or a truncation after them is found too. 0 or
 * -errno with s->err set. */
static int tar_drain(struct source *s, struct tar_src *t)
{
	size_t made;
	int rc;

	/* An uncompressed tar has nothing to check after its end blocks: bytes past them are
	 * neither read nor part of the input's checksum. */
	if (t->read_rc || dstream_kind(t->d) == CODEC_NONE)
		return t->read_rc;
	do
		rc = plain_fill(s, t, &made);
	while (!rc && made);
	return rc;
}

static void tar_close(struct source *s)
{
	struct tar_src *t = s->priv;

	if (t->a)
		archive_read_free(t->a);
	dstream_close(t->d);
	free(t->plain);
	buf_release(&t->held);
	free(t->held_key);
	free(t->last_name);
	free(t);
	s->priv = NULL;
}

static int tar_open(struct source *s)
{
	struct tar_src *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -ENOMEM;
	s->priv = t;
	t->s = s;
	s->content = CONTENT_FILES;
	rc = dstream_open(s->path, s->hash, &t->d, s->err, sizeof(s->err));
	if (rc == -EISDIR)
		snprintf(s->err, sizeof(s->err), "%s: is a directory, not a tar file", s->path);
	if (rc)
		return rc;
	s->bytes_total = dstream_file_size(t->d);
	s->bytes_read = dstream_bytes_read(t->d);
	t->plain = malloc(TAR_CHUNK);
	t->a = archive_read_new();
	if (!t->plain || !t->a)
		return -ENOMEM;
	/* No filters: every compression is decoded below the tar reader (dstream.h). */
	archive_read_support_format_tar(t->a);  /* ustar, pax, GNU (long names, sparse) */
	if (archive_read_open(t->a, t, NULL, tar_read_cb, NULL) != ARCHIVE_OK) {
		if (t->read_rc)
			return t->read_rc;
		snprintf(s->err, sizeof(s->err), "%s: not a tar archive: %s", s->path,
			 archive_error_string(t->a));
		return -EINVAL;
	}
	return 0;
}

static int set_str(char **dst, const char *src, size_t n)
{
	char *p = strndup(src, n);

	if (!p)
		return -ENOMEM;
	free(*dst);
	*dst = p;
	return 0;
}

/* Read the data of the current member (size bytes) as one file at the end of group
 * `start` in out. 0 or -errno with s->err set. */
static int read_member(struct source *s, struct tar_src *t, struct buf *out, size_t start,
		       const char *name, int64_t size)
{
	uint64_t got = 0;
	int rc;

	rc = filegroup_add_header(out, start, name, strlen(name), (uint64_t)size);
	if (rc) {
		snprintf(s->err, sizeof(s->err), "%s: member %s: out of memory", s->path, name);
		return rc;
	}
	while (got < (uint64_t)size) {
		/* Grow with the data actually read, never with what a header claims. */
		size_t want = (uint64_t)size - got < TAR_CHUNK ? (size_t)((uint64_t)size - got) :
			TAR_CHUNK;
		la_ssize_t n;

		if (buf_reserve(out, (size_t)got + want)) {
			snprintf(s->err, sizeof(s->err), "%s: member %s: out of memory", s->path,
				 name);
			return -ENOMEM;
		}
		n = archive_read_data(t->a, out->data + out->len + got, want);

		if (n < 0 && t->read_rc)
			return t->read_rc;
		if (n <= 0) {
			const char *why = n < 0 ? archive_error_string(t->a) : NULL;

			snprintf(s->err, sizeof(s->err), "%s: truncated or corrupt tar archive: member "
				 "%s ends after %ju of its %jd bytes (input ends at byte %ju; %s); "
				 "re-download or re-create the archive", s->path, name,
				 (uintmax_t)got, (intmax_t)size, (uintmax_t)s->bytes_read,
				 why ? why : "no more data");
			return -EBADMSG;
		}
		got += (uint64_t)n;
	}
	out->len += (size_t)size;
	out->data[out->len] = 0;
	return 0;
}

/* Where the next header starts in the (decoded) tar stream, for messages: taken before
 * the header is read, since archive_read_header_position() fails (ARCHIVE_FATAL, -30)
 * once a header did. The rest of the current entry (the unread part of its data and
 * its padding, which libarchive takes lazily) is skipped first, as
 * archive_read_next_header() would do, so that the bytes libarchive took so far are
 * exactly the header's position. -1 when libarchive does not say. */
static int64_t next_header_at(struct tar_src *t)
{
	la_int64_t n;

	if (t->in_entry) {
		t->in_entry = 0;
		if (archive_read_data_skip(t->a) != ARCHIVE_OK)
			return -1; /* the header read that follows reports the error */
	}
	n = archive_filter_bytes(t->a, 0);
	return n < 0 ? -1 : (int64_t)n;
}

/* Start group `start` of out with the member held back from the previous call (the
 * first of a new key), if any: *key becomes its key (the caller frees it), *bytes its
 * size. 0 or -ENOMEM. */
static int take_held(struct tar_src *t, struct buf *out, size_t start, char **key,
		     uint64_t *bytes)
{
	struct filegroup_iter it;
	struct filegroup_file f;
	int rc;

	*key = NULL;
	*bytes = 0;
	if (!t->held.len)
		return 0;
	/* held is a one-file group; append its file after our count */
	filegroup_iter_init(&it, t->held.data, t->held.len);
	filegroup_next(&it, &f);
	rc = filegroup_add(out, start, f.name, f.name_len, f.data, f.size);
	if (rc)
		return rc;
	*bytes = f.size;
	*key = t->held_key;
	t->held_key = NULL;
	t->held.len = 0;
	return 0;
}

/* Read the next member header: 1 with *e set, 0 at the end of the archive (the rest of
 * the compressed stream checked, tar_drain()), or -errno with s->err set. */
static int next_header(struct source *s, struct tar_src *t, struct archive_entry **e)
{
	char at[48] = "";
	int rc;

	t->header_at = next_header_at(t);
	rc = archive_read_next_header(t->a, e);
	if (rc == ARCHIVE_EOF) {
		t->at_end = 1;
		rc = tar_drain(s, t);
		return rc ? rc : 0;
	}
	if (rc == ARCHIVE_WARN) /* e.g. an unknown pax keyword: the entry is usable */
		rc = ARCHIVE_OK;
	if (rc != ARCHIVE_OK && t->read_rc)
		return t->read_rc;
	t->in_entry = rc == ARCHIVE_OK;
	if (rc == ARCHIVE_OK)
		return 1;
	if (t->header_at >= 0)
		snprintf(at, sizeof(at), " at byte %jd", (intmax_t)t->header_at);
	snprintf(s->err, sizeof(s->err), "%s: bad tar header%s%s%s: %s "
		 "(truncated or corrupt archive)", s->path, at,
		 t->last_name ? ", after member " : "",
		 t->last_name ? t->last_name : "", archive_error_string(t->a));
	return -EBADMSG;
}

/* Whether member e joins a sample: 1 with *clean (its path without "./") and *key_len
 * set; 0 when it is skipped with a notice (a directory, link or device, a bad path under
 * --skip-bad, no extension); -errno with s->err set (a bad path, a sample too large,
 * -ENOMEM). group_bytes: the sample's bytes so far. */
static int member_usable(struct source *s, struct tar_src *t, struct archive_entry *e,
			 uint64_t group_bytes, const char **clean, size_t *key_len)
{
	const char *path = archive_entry_pathname(e);
	mode_t type = archive_entry_filetype(e);
	int64_t size = archive_entry_size(e);
	char why[160];

	if (!path)
		path = "";
	if (set_str(&t->last_name, path, strlen(path)))
		return -ENOMEM;
	if (type == AE_IFDIR)
		return 0;
	if (type != AE_IFREG || archive_entry_hardlink(e)) {
		source_notice(s, "%s: member %s is not a regular file (link or device); "
			      "skipped", s->path, path);
		return 0;
	}
	if (tar_member_path(path, clean, key_len, why, sizeof(why))) {
		if (!s->opts->skip_bad) {
			snprintf(s->err, sizeof(s->err), "%s: member %s: %s; refusing the "
				 "archive (or pass --skip-bad to skip such members)",
				 s->path, path, why);
			return -EINVAL;
		}
		source_notice(s, "%s: member %s: %s; skipped", s->path, path, why);
		return 0;
	}
	if (*key_len == 0) {
		/* WebDataset drops members without an extension, and so do we. */
		source_notice(s, "%s: member %s has no extension, so no WebDataset key; "
			      "skipped", s->path, path);
		return 0;
	}
	if (size < 0 || (uint64_t)size + group_bytes > SAMPLE_MAX_BYTES / 2) {
		snprintf(s->err, sizeof(s->err), "%s: member %s: sample exceeds the size "
			 "limit", s->path, path);
		return -EFBIG;
	}
	return 1;
}

/* Two members of one name in one sample: WebDataset refuses it too. 0 or -EINVAL with
 * s->err set. */
static int check_unique(struct source *s, const struct buf *out, size_t start,
			const char *clean, const char *key)
{
	struct filegroup_iter it;
	struct filegroup_file f;

	filegroup_iter_init(&it, out->data + start, out->len - start);
	while (filegroup_next(&it, &f) == 1) {
		if (f.name_len == strlen(clean) && !memcmp(f.name, clean, f.name_len)) {
			snprintf(s->err, sizeof(s->err), "%s: member %s appears twice in "
				 "sample %s", s->path, clean, key);
			return -EINVAL;
		}
	}
	return 0;
}

/* Hold member (clean, size), the first of the next key, back for the next call. */
static int hold_member(struct source *s, struct tar_src *t, const char *clean,
		       size_t key_len, int64_t size)
{
	size_t hs;
	int rc = filegroup_begin(&t->held, &hs);

	if (!rc)
		rc = read_member(s, t, &t->held, hs, clean, size);
	if (!rc)
		rc = set_str(&t->held_key, clean, key_len);
	return rc;
}

/* The next sample: the consecutive members that share a key, as one file group. */
static int tar_next(struct source *s, struct buf *out)
{
	struct tar_src *t = s->priv;
	struct archive_entry *e;
	size_t start, base = out->len;
	uint64_t group_bytes;
	char *key = NULL;
	int rc;

	if (t->at_end)
		return 0;
	rc = filegroup_begin(out, &start);
	if (!rc)
		rc = take_held(t, out, start, &key, &group_bytes);
	while (!rc) {
		const char *clean;
		size_t key_len;
		int64_t size;

		rc = next_header(s, t, &e);
		if (rc <= 0)
			break;
		rc = member_usable(s, t, e, group_bytes, &clean, &key_len);
		if (rc <= 0) {
			if (rc == 0)
				continue;
			break;
		}
		size = archive_entry_size(e);
		if (key && (strlen(key) != key_len || memcmp(key, clean, key_len))) {
			/* A new key: this member starts the next group. */
			rc = hold_member(s, t, clean, key_len, size);
			break;
		}
		if (!key && set_str(&key, clean, key_len)) {
			rc = -ENOMEM;
			break;
		}
		rc = check_unique(s, out, start, clean, key);
		if (!rc)
			rc = read_member(s, t, out, start, clean, size);
		group_bytes += (uint64_t)size;
	}
	free(key);
	if (rc < 0) {
		out->len = base;
		t->at_end = 1;
		return rc;
	}
	if (filegroup_count(out, start) == 0) {
		out->len = base;
		return 0;
	}
	return 1;
}

const struct source_ops source_tar_ops = {
	.name = "tar",
	.open = tar_open,
	.next = tar_next,
	.close = tar_close,
};
