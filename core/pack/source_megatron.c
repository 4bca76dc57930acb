/* source_megatron.c: Megatron-LM indexed datasets (PREFIX.idx + PREFIX.bin). */
#include "source.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guard.h"
#include "le.h"

#define MEG_MAGIC "MMIDIDX\0\0"
#define MEG_MAGIC_LEN 9
#define MEG_HEADER_LEN (MEG_MAGIC_LEN + 8 + 1 + 8 + 8)
#define MEG_CHUNK (4u << 20)

int megatron_idx_parse(const uint8_t *p, size_t len, uint64_t bin_size,
		       struct megatron_idx *out, char *why, size_t why_len)
{
	static const char *const names[] = { "?", "uint8", "int8", "int16", "int32", "int64",
		"float64", "float32", "uint16" };
	struct megatron_idx m = { 0 };
	uint64_t version, need;
	unsigned code;

	if (len < MEG_HEADER_LEN) {
		snprintf(why, why_len, "truncated .idx: %zu bytes, the header is %d", len,
			 MEG_HEADER_LEN);
		return -EBADMSG;
	}
	if (memcmp(p, MEG_MAGIC, MEG_MAGIC_LEN)) {
		snprintf(why, why_len, "bad magic: not a Megatron-LM .idx (expected MMIDIDX\\0\\0)");
		return -EBADMSG;
	}
	version = le64_get(p + 9);
	if (version != 1) {
		snprintf(why, why_len, "Megatron .idx version %ju is not supported (version 1 is)",
			 (uintmax_t)version);
		return -EBADMSG;
	}
	code = p[17];
	if (dtype_from_megatron(code, &m.dtype)) {
		snprintf(why, why_len, "dtype code %u (%s) is not one zephon stores (1 uint8, 4 "
			 "int32, 8 uint16)", code, code < 9 ? names[code] : "unknown");
		return -EINVAL;
	}
	m.itemsize = dtype_size(m.dtype);
	m.sequences = le64_get(p + 18);
	m.documents = le64_get(p + 26);
	if (m.sequences > (SIZE_MAX - MEG_HEADER_LEN) / 32 || m.documents > SIZE_MAX / 32) {
		snprintf(why, why_len, "truncated .idx: %ju sequences announced",
			 (uintmax_t)m.sequences);
		return -EBADMSG;
	}
	need = MEG_HEADER_LEN + m.sequences * 12 + m.documents * 8;
	if (len < need) {
		snprintf(why, why_len, "truncated .idx: %zu bytes, %ju sequences and %ju documents "
			 "need %ju", len, (uintmax_t)m.sequences, (uintmax_t)m.documents,
			 (uintmax_t)need);
		return -EBADMSG;
	}
	m.sizes = p + MEG_HEADER_LEN;
	m.pointers = m.sizes + m.sequences * 4;
	m.doc_index = m.pointers + m.sequences * 8;
	for (uint64_t i = 0; i < m.sequences; i++) {
		uint32_t n = le32_get(m.sizes + i * 4);
		uint64_t ptr = le64_get(m.pointers + i * 8);

		if (n > INT32_MAX || ptr > bin_size || (uint64_t)n * m.itemsize > bin_size - ptr) {
			snprintf(why, why_len, "sequence %ju (%u tokens at byte %ju) lies outside the "
				 "%ju-byte .bin", (uintmax_t)i, n, (uintmax_t)ptr,
				 (uintmax_t)bin_size);
			return -EBADMSG;
		}
		m.tokens += n;
	}
	*out = m;
	return 0;
}

struct meg_src {
	int bin;
	uint8_t *idx;
	size_t idx_len;
	char *bin_path;
	struct megatron_idx m;
	uint64_t seq;            /* current sequence */
	uint64_t done;           /* bytes of it emitted */
	uint64_t doc;            /* next document index entry to look at (--eod-token) */
	uint64_t doc_start;      /* the last entry looked at */
};

static void meg_close(struct source *s)
{
	struct meg_src *g = s->priv;

	if (g->bin >= 0)
		close(g->bin);
	if (g->idx)
		munmap(g->idx, g->idx_len);
	free(g->bin_path);
	free(g);
	s->priv = NULL;
}

size_t megatron_prefix_len(const char *path)
{
	size_t n = strlen(path);

	if (n > 4 && (!strcasecmp(path + n - 4, ".idx") || !strcasecmp(path + n - 4, ".bin")))
		n -= 4;
	return n;
}

/* path[0, n) and ext (".idx" or ".bin"), each letter of ext in the case of like's. */
static char *with_ext(const char *path, size_t n, const char *ext, const char *like)
{
	char *p = malloc(n + 5);

	if (!p)
		return NULL;
	memcpy(p, path, n);
	for (size_t i = 0; i < 5; i++)
		p[n + i] = isupper((unsigned char)like[i]) ? (char)toupper((unsigned char)ext[i]) :
			ext[i];
	return p;
}

/* path[0, n) and ext, spelled as like's extension, else in lower, else in upper case:
 * the first that is a regular file, or the first when none is. NULL when out of memory. */
static char *sibling(const char *path, size_t n, const char *ext, const char *like)
{
	const char *const likes[] = { like, ".aaa", ".AAA" };
	char *first = NULL;

	for (size_t i = 0; i < sizeof(likes) / sizeof(likes[0]); i++) {
		char *p = with_ext(path, n, ext, likes[i]);
		struct stat sb;

		if (!p || (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))) {
			free(first);
			return p;
		}
		if (first)
			free(p);
		else
			first = p;
	}
	return first;
}

int megatron_pair_paths(const char *path, char **idx, char **bin)
{
	size_t len = strlen(path), n = megatron_prefix_len(path);
	const char *like = n < len ? path + n : ".aaa";  /* a bare PREFIX: lower case first */
	int is_idx = n < len && !strcasecmp(path + n, ".idx");
	int is_bin = n < len && !is_idx;

	*idx = is_idx ? strdup(path) : sibling(path, n, ".idx", like);
	*bin = is_bin ? strdup(path) : sibling(path, n, ".bin", like);
	if (!*idx || !*bin) {
		free(*idx);
		free(*bin);
		*idx = *bin = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* What meg_open() reads of the .idx mapping, run under guard_run(): the input may be
 * truncated while we pack it (reads of the cut pages fault). */
struct meg_read_idx {
	struct source *s;
	struct meg_src *g;
	uint64_t bin_size;
	char why[300];
	int rc;
};

static void meg_read_idx(void *ctx)
{
	struct meg_read_idx *r = ctx;

	r->rc = megatron_idx_parse(r->g->idx, r->g->idx_len, r->bin_size, &r->g->m, r->why,
				   sizeof(r->why));
	if (!r->rc)
		XXH3_128bits_update(r->s->hash, r->g->idx, r->g->idx_len);
}

static int meg_open(struct source *s)
{
	struct meg_src *g = calloc(1, sizeof(*g));
	char *idx_path = NULL;
	struct stat ib, bb;
	int fd = -1, rc;

	if (!g)
		return -ENOMEM;
	g->bin = -1;
	s->priv = g;
	s->content = CONTENT_TOKENS;
	if (megatron_pair_paths(s->path, &idx_path, &g->bin_path))
		return -ENOMEM;
	fd = open(idx_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &ib) != 0) {
		rc = -errno;
		snprintf(s->err, sizeof(s->err), "%s: cannot open: %s", idx_path, strerror(-rc));
		goto out;
	}
	g->bin = open(g->bin_path, O_RDONLY | O_CLOEXEC);
	if (g->bin < 0 || fstat(g->bin, &bb) != 0) {
		rc = -errno;
		snprintf(s->err, sizeof(s->err), "%s: cannot open: %s (a Megatron .idx needs its "
			 ".bin beside it)", g->bin_path, strerror(-rc));
		goto out;
	}
	if (!S_ISREG(ib.st_mode) || ib.st_size == 0) {
		rc = -EBADMSG;
		snprintf(s->err, sizeof(s->err), "%s: empty or not a regular file", idx_path);
		goto out;
	}
	g->idx_len = (size_t)ib.st_size;
	g->idx = mmap(NULL, g->idx_len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (g->idx == MAP_FAILED) {
		g->idx = NULL;
		rc = -errno;
		snprintf(s->err, sizeof(s->err), "%s: mmap: %s", idx_path, strerror(-rc));
		goto out;
	}
	{
		struct meg_read_idx r = { s, g, (uint64_t)bb.st_size, "", 0 };

		if (guard_run(meg_read_idx, &r)) {
			rc = -EIO;
			snprintf(s->err, sizeof(s->err), "%s: read failed: %s (the file was "
				 "truncated while it was packed, or its disk failed)", idx_path,
				 strerror(EIO));
			goto out;
		}
		rc = r.rc;
		if (rc) {
			snprintf(s->err, sizeof(s->err), "%s: %s", idx_path, r.why);
			goto out;
		}
	}
	s->dtype = g->m.dtype;
	s->bytes_total = g->m.tokens * g->m.itemsize;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(idx_path);
	return rc;
}

/* 1 when a document ends where sequence k starts (k is in the document index, or is the
 * sequence count), 0 when not, -EBADMSG or -EIO (s->err set). Called with k rising; an
 * entry repeated (an empty document) ends one document only. */
static int meg_doc_ends_at(struct source *s, struct meg_src *g, uint64_t k)
{
	uint8_t b[8];
	int ends = k == g->m.sequences;

	for (; g->doc < g->m.documents; g->doc++) {
		uint64_t v;

		if (guard_copy(b, g->m.doc_index + g->doc * 8, 8))
			return source_error(s, -EIO, "%s: the .idx beside it can no longer be read "
					    "(truncated while it was packed, or its disk "
					    "failed); pack it again", g->bin_path);
		v = le64_get(b);
		if (v < g->doc_start || v > g->m.sequences)
			return source_error(s, -EBADMSG, "%s: document %ju of the .idx starts at "
					    "sequence %ju, outside %ju..%ju: the document index is "
					    "corrupt (pack without --eod-token to ignore it)",
					    g->bin_path, (uintmax_t)g->doc, (uintmax_t)v,
					    (uintmax_t)g->doc_start, (uintmax_t)g->m.sequences);
		g->doc_start = v;
		if (v > k)
			break;
		ends |= v == k;
	}
	return ends;
}

static int meg_next(struct source *s, struct buf *out)
{
	struct meg_src *g = s->priv;
	uint64_t size, ptr, want;
	uint8_t n[4], p[8];     /* a size and a pointer, copied out of the mapping */
	int rc;

	for (;;) {
		if (g->seq >= g->m.sequences)
			return 0;
		if (guard_copy(n, g->m.sizes + g->seq * 4, 4))
			goto cut;
		size = (uint64_t)le32_get(n) * g->m.itemsize;
		if (g->done < size)
			break;
		g->seq++;
		g->done = 0;
		if (s->eod_len) {  /* --eod-token: after each document's last sequence */
			rc = meg_doc_ends_at(s, g, g->seq);
			if (rc)
				return rc < 0 ? rc : source_put_eod(s, out);
		}
	}
	if (guard_copy(p, g->m.pointers + g->seq * 8, 8))
		goto cut;
	ptr = le64_get(p) + g->done;
	want = size - g->done < MEG_CHUNK ? size - g->done : MEG_CHUNK;
	rc = buf_reserve(out, (size_t)want);
	if (rc)
		return rc;
	rc = source_read_chunk(s, g->bin, g->bin_path, ptr, (size_t)want, out);
	if (rc)
		return rc;
	g->done += want;
	s->bytes_read += want;
	return 1;
cut:
	return source_error(s, -EIO, "%s: the .idx beside it can no longer be read (truncated "
			    "while it was packed, or its disk failed); pack it again", g->bin_path);
}

const struct source_ops source_megatron_ops = {
	.name = "megatron",
	.open = meg_open,
	.next = meg_next,
	.close = meg_close,
};
