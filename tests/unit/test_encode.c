/*
 * test_encode: the batch encodings of core/serve/encode.h over real datasets made with the
 * pack API (core/pack/pack.h) in a temporary directory: text (JSONL), files (a WebDataset tar
 * and a directory), tokens of every dtype, each packed with and without compression.
 * Checks the bytes of lines/npy/bin exactly, reads tar batches back with libarchive
 * (Python's tarfile and numpy.load are checked by tests/fuse/test_encode.py), and the
 * failure contract: a corrupt sample gives -EIO naming it and leaves `out` as it was.
 * Also that sample_reader_warm() reads the pages of a batch that are not in memory, and
 * only those.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "test_files.h"
#include "dataset.h"
#include "encode.h"
#include "pack.h"

static void pack(const char *out, const char *input, int compress, int have_dtype,
		 enum token_dtype dtype, uint64_t seq_len)
{
	struct pack_opts o;

	pack_opts_init(&o);
	o.compress = compress;
	o.have_dtype = have_dtype;
	o.dtype = dtype;
	o.seq_len = seq_len;
	pack_one_or_fail(&o, input, out);
}

static struct dataset *open_ds(const char *dir)
{
	struct dataset *ds = NULL;
	char err[512];
	int rc = dataset_open(dir, &ds, err, sizeof(err));

	if (rc)
		fprintf(stderr, "dataset_open %s: %d %s\n", dir, rc, err);
	REQUIRE(rc == 0);
	return ds;
}

/* ------------------------------------------------------------------ pure parts */

static void test_format_names(void)
{
	static const char *names[] = { "lines", "tar", "npy", "bin" };
	enum encode_format f;

	for (int i = 0; i < 4; i++) {
		CHECK(encode_format_parse(names[i], &f) == 0);
		CHECK(!strcmp(encode_format_name(f), names[i]));
	}
	CHECK(encode_format_parse("LINES", &f) == -EINVAL);
	CHECK(encode_format_parse("", &f) == -EINVAL);
	CHECK(encode_format_parse("npz", &f) == -EINVAL);
}

static void test_format_check(void)
{
	struct dataset_info info;
	char why[256];
	/* rows: text, files, tokens; columns: lines, tar, npy, bin */
	static const int ok[3][4] = { { 1, 1, 0, 0 }, { 0, 1, 0, 0 }, { 0, 0, 1, 1 } };
	static const enum dataset_content contents[3] = { CONTENT_TEXT, CONTENT_FILES,
							   CONTENT_TOKENS };
	static const enum encode_format defaults[3] = { FORMAT_LINES, FORMAT_TAR, FORMAT_NPY };

	memset(&info, 0, sizeof(info));
	for (int c = 0; c < 3; c++) {
		info.content = contents[c];
		CHECK(encode_format_default(&info) == defaults[c]);
		for (int f = 0; f < 4; f++) {
			why[0] = 0;
			int rc = encode_format_check(&info, (enum encode_format)f, why, sizeof(why));

			CHECK(rc == (ok[c][f] ? 0 : -EINVAL));
			if (!ok[c][f]) {
				/* names the format and what to use instead */
				CHECK(strstr(why, encode_format_name((enum encode_format)f)) != NULL);
				CHECK(strstr(why, "use format=") != NULL);
			}
		}
	}
}

/* An empty npy batch needs no reader: the header alone, exactly as numpy writes it. */
static void test_npy_header(void)
{
	struct dataset_info info;
	struct buf out = BUF_INIT;
	uint64_t bad = 99;
	const char *dict = "{'descr': '<u2', 'fortran_order': False, 'shape': (0, 2048), }";

	memset(&info, 0, sizeof(info));
	info.content = CONTENT_TOKENS;
	info.dtype = DTYPE_UINT16;
	info.itemsize = 2;
	info.seq_len = 2048;
	buf_append(&out, "xy", 2);
	CHECK(encode_batch(&(struct encode_in){ NULL, &info, FORMAT_NPY, NULL, 0 }, &out, &bad) == 0);
	REQUIRE(out.len == 2 + 128);
	CHECK(!memcmp(out.data + 2, "\x93NUMPY\x01\x00", 8));
	CHECK(out.data[10] == 118 && out.data[11] == 0); /* header_len, little-endian */
	CHECK(!memcmp(out.data + 12, dict, strlen(dict)));
	for (size_t i = 12 + strlen(dict); i < 2 + 127; i++)
		CHECK(out.data[i] == ' ');
	CHECK(out.data[2 + 127] == '\n');
	CHECK(bad == 99);
	/* bin of nothing is nothing */
	out.len = 0;
	CHECK(encode_batch(&(struct encode_in){ NULL, &info, FORMAT_BIN, NULL, 0 }, &out, &bad) == 0);
	CHECK(out.len == 0);
	/* sizes that overflow are refused before anything is read or allocated */
	info.seq_len = UINT64_MAX / 2;
	uint64_t ids[4] = { 0, 1, 2, 3 };
	CHECK(encode_batch(&(struct encode_in){ NULL, &info, FORMAT_BIN, ids, 4 }, &out, &bad) == -EOVERFLOW);
	CHECK(encode_batch(&(struct encode_in){ NULL, &info, FORMAT_NPY, ids, 4 }, &out, &bad) == -EOVERFLOW);
	CHECK(out.len == 0);
	/* a format the content does not have */
	info.seq_len = 16;
	CHECK(encode_batch(&(struct encode_in){ NULL, &info, FORMAT_LINES, ids, 0 }, &out, &bad) == -EINVAL);
	CHECK(encode_batch(&(struct encode_in){ NULL, &info, FORMAT_TAR, ids, 0 }, &out, &bad) == -EINVAL);
	buf_release(&out);
}

/* ------------------------------------------------------------------ tar reading */

struct member {
	char name[512];
	size_t size;
	char data[4096];
};

/* Read a tar stream with libarchive; returns the number of members (at most max), or
 * -1 when it does not parse. Checks the deterministic header fields of each member. */
static int read_tar(const uint8_t *p, size_t n, struct member *m, int max)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	int k = 0, rc;

	archive_read_support_format_tar(a);
	if (archive_read_open_memory(a, p, n) != ARCHIVE_OK) {
		archive_read_free(a);
		return -1;
	}
	while ((rc = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(e);

		if (k >= max)
			break;
		REQUIRE(name);
		CHECK(archive_entry_filetype(e) == AE_IFREG);
		CHECK(archive_entry_perm(e) == 0644);
		CHECK(archive_entry_mtime(e) == 0);
		CHECK(archive_entry_uid(e) == 0 && archive_entry_gid(e) == 0);
		snprintf(m[k].name, sizeof(m[k].name), "%s", name);
		m[k].size = (size_t)archive_entry_size(e);
		REQUIRE(m[k].size <= sizeof(m[k].data));
		CHECK(archive_read_data(a, m[k].data, m[k].size) == (la_ssize_t)m[k].size);
		k++;
	}
	if (rc != ARCHIVE_EOF && k < max)
		k = -1;
	archive_read_free(a);
	return k;
}

/* ------------------------------------------------------------------ text */

#define NREC 40

static void make_records(char rec[NREC][128])
{
	for (int i = 0; i < NREC; i++)
		snprintf(rec[i], 128, "{\"id\": %d, \"text\": \"record %d %.*s caf\xc3\xa9\"}", i, i,
			 i % 50, "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
}

static void test_text(int compress)
{
	char rec[NREC][128], dir[64];
	struct buf src = BUF_INIT, out = BUF_INIT, want = BUF_INIT, again = BUF_INIT;
	static const uint64_t ids[] = { 7, 0, 39, 3, 3, 21 };
	const size_t n = sizeof(ids) / sizeof(ids[0]);
	struct member m[8];
	uint64_t bad = 1234;

	make_records(rec);
	for (int i = 0; i < NREC; i++)
		buf_printf(&src, "%s\n", rec[i]);
	write_file(tmp_path("records.jsonl"), src.data, src.len);
	snprintf(dir, sizeof(dir), "text-%d", compress);
	pack(tmp_path(dir), tmp_path("records.jsonl"), compress, 0, DTYPE_UINT8, 0);

	struct dataset *ds = open_ds(tmp_path(dir));
	const struct dataset_info *info = dataset_info(ds);
	struct sample_reader *r = sample_reader_new(ds);

	REQUIRE(r);
	CHECK(info->content == CONTENT_TEXT);
	CHECK(info->samples == NREC);
	CHECK(encode_format_default(info) == FORMAT_LINES);

	/* lines: each record and '\n', appended after what out held */
	buf_append(&out, "prefix", 6);
	buf_append(&want, "prefix", 6);
	for (size_t i = 0; i < n; i++)
		buf_printf(&want, "%s\n", rec[ids[i]]);
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_LINES, ids, n }, &out, &bad) == 0);
	CHECK(out.len == want.len && !memcmp(out.data, want.data, want.len));
	CHECK(bad == 1234);

	/* tar: one member per sample named by the 9-digit id and the record extension */
	out.len = 0;
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_TAR, ids, n }, &out, &bad) == 0);
	CHECK(out.len % 512 == 0);
	CHECK(read_tar(out.data, out.len, m, 8) == (int)n);
	for (size_t i = 0; i < n; i++) {
		char name[32];

		snprintf(name, sizeof(name), "%09" PRIu64 ".json", ids[i]);
		CHECK(!strcmp(m[i].name, name));
		CHECK(m[i].size == strlen(rec[ids[i]]));
		CHECK(!memcmp(m[i].data, rec[ids[i]], m[i].size));
	}
	/* byte-deterministic */
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_TAR, ids, n }, &again, &bad) == 0);
	CHECK(again.len == out.len && !memcmp(again.data, out.data, out.len));
	/* an empty tar batch is the end-of-archive marker alone */
	out.len = 0;
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_TAR, ids, 0 }, &out, &bad) == 0);
	CHECK(out.len == 1024 && read_tar(out.data, out.len, m, 8) == 0);

	/* formats text does not have */
	out.len = 0;
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_NPY, ids, n }, &out, &bad) == -EINVAL);
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_BIN, ids, n }, &out, &bad) == -EINVAL);
	CHECK(out.len == 0);

	sample_reader_free(r);
	dataset_close(ds);
	buf_release(&src);
	buf_release(&out);
	buf_release(&want);
	buf_release(&again);
}

/* ------------------------------------------------------------------ files */

/* Write a WebDataset tar: samples a, b/c (in a subdirectory), d with two members each. */
static void make_wds_tar(const char *path)
{
	static const char *names[] = { "a.txt", "a.cls", "sub/c.txt", "sub/c.cls",
				       "d.k\xc3\xa9y.txt", "d.k\xc3\xa9y.cls" };
	struct archive *a = archive_write_new();
	struct archive_entry *e = archive_entry_new();
	char data[64];

	archive_write_set_format_pax_restricted(a);
	REQUIRE(archive_write_open_filename(a, path) == ARCHIVE_OK);
	for (int i = 0; i < 6; i++) {
		int n = snprintf(data, sizeof(data), "payload of %s", names[i]);

		archive_entry_clear(e);
		archive_entry_copy_pathname(e, names[i]);
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_perm(e, 0600);
		archive_entry_set_size(e, n);
		archive_entry_set_mtime(e, 1700000000, 0);
		REQUIRE(archive_write_header(a, e) >= ARCHIVE_WARN);
		REQUIRE(archive_write_data(a, data, (size_t)n) == n);
	}
	archive_entry_free(e);
	archive_write_close(a);
	archive_write_free(a);
}

static void test_files_tar(int compress)
{
	static const char *names[] = { "a.txt", "a.cls", "sub/c.txt", "sub/c.cls",
				       "d.k\xc3\xa9y.txt", "d.k\xc3\xa9y.cls" };
	struct buf out = BUF_INIT;
	struct member m[8];
	uint64_t ids[] = { 2, 0, 1 }, bad = 0;
	char dir[64], data[64];

	make_wds_tar(tmp_path("wds.tar"));
	snprintf(dir, sizeof(dir), "files-tar-%d", compress);
	pack(tmp_path(dir), tmp_path("wds.tar"), compress, 0, DTYPE_UINT8, 0);

	struct dataset *ds = open_ds(tmp_path(dir));
	const struct dataset_info *info = dataset_info(ds);
	struct sample_reader *r = sample_reader_new(ds);

	REQUIRE(r);
	CHECK(info->content == CONTENT_FILES);
	CHECK(info->samples == 3);
	CHECK(encode_format_default(info) == FORMAT_TAR);
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_LINES, ids, 3 }, &out, &bad) == -EINVAL);
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_TAR, ids, 3 }, &out, &bad) == 0);
	REQUIRE(read_tar(out.data, out.len, m, 8) == 6);
	for (int i = 0; i < 6; i++) {
		/* sample ids 2, 0, 1: members of d, then a, then c, each in packed order */
		const char *name = names[(ids[i / 2] * 2) + (uint64_t)(i % 2)];
		int n = snprintf(data, sizeof(data), "payload of %s", name);

		CHECK(!strcmp(m[i].name, name));
		CHECK(m[i].size == (size_t)n && !memcmp(m[i].data, data, (size_t)n));
	}
	sample_reader_free(r);
	dataset_close(ds);
	buf_release(&out);
}

static void test_files_dir(void)
{
	struct buf out = BUF_INIT, big = BUF_INIT;
	struct member m[4];
	uint64_t ids[] = { 1, 0 }, bad = 0;
	char longname[300], rel[320];

	REQUIRE(mkdir(tmp_path("tree"), 0755) == 0);
	REQUIRE(mkdir(tmp_path("tree/x"), 0755) == 0);
	write_file(tmp_path("tree/x/one.txt"), "one", 3);
	/* a name longer than ustar's 100 bytes: needs a pax "path" record */
	memset(longname, 'n', 150);
	strcpy(longname + 150, ".bin");
	for (int i = 0; i < 3000; i++)
		buf_append(&big, "0123456789", 10);
	snprintf(rel, sizeof(rel), "tree/%s", longname);
	write_file(tmp_path(rel), big.data, big.len);
	pack(tmp_path("files-dir"), tmp_path("tree"), 1, 0, DTYPE_UINT8, 0);

	struct dataset *ds = open_ds(tmp_path("files-dir"));
	const struct dataset_info *info = dataset_info(ds);
	struct sample_reader *r = sample_reader_new(ds);

	REQUIRE(r);
	CHECK(info->samples == 2);
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_TAR, ids, 2 }, &out, &bad) == 0);
	/* sorted by relative path: "nnn...n.bin" (id 0) before "x/one.txt" (id 1); ids 1, 0
	 * put x/one.txt first (read_tar stops after it: the other is too big for m) */
	REQUIRE(read_tar(out.data, out.len, m, 1) == 1);
	CHECK(!strcmp(m[0].name, "x/one.txt"));
	CHECK(m[0].size == 3 && !memcmp(m[0].data, "one", 3));
	{
		struct archive *a = archive_read_new();
		struct archive_entry *e;
		char *data = malloc(big.len);

		archive_read_support_format_tar(a);
		REQUIRE(archive_read_open_memory(a, out.data, out.len) == ARCHIVE_OK);
		REQUIRE(archive_read_next_header(a, &e) == ARCHIVE_OK);
		REQUIRE(archive_read_next_header(a, &e) == ARCHIVE_OK);
		CHECK(!strcmp(archive_entry_pathname(e), longname));
		CHECK((size_t)archive_entry_size(e) == big.len);
		CHECK(archive_read_data(a, data, big.len) == (la_ssize_t)big.len);
		CHECK(!memcmp(data, big.data, big.len));
		CHECK(archive_read_next_header(a, &e) == ARCHIVE_EOF);
		archive_read_free(a);
		free(data);
	}
	sample_reader_free(r);
	dataset_close(ds);
	buf_release(&out);
	buf_release(&big);
}

/* ------------------------------------------------------------------ tokens */

static void test_tokens(enum token_dtype dt, unsigned itemsize, const char *descr,
			int compress)
{
	const uint64_t L = 5, total = 23; /* 4 windows, 3 tokens of remainder */
	uint8_t raw[23 * 4];
	struct buf out = BUF_INIT, want = BUF_INIT;
	uint64_t ids[] = { 3, 1, 1, 0 }, bad = 0;
	char dir[64], in[64], dict[128];

	for (size_t i = 0; i < sizeof(raw); i++)
		raw[i] = (uint8_t)(i * 37 + 11);
	snprintf(in, sizeof(in), "tok-%s.bin", dtype_name(dt));
	write_file(tmp_path(in), raw, total * itemsize);
	snprintf(dir, sizeof(dir), "tok-%s-%d", dtype_name(dt), compress);
	pack(tmp_path(dir), tmp_path(in), compress, 1, dt, L);

	struct dataset *ds = open_ds(tmp_path(dir));
	const struct dataset_info *info = dataset_info(ds);
	struct sample_reader *r = sample_reader_new(ds);

	REQUIRE(r);
	CHECK(info->content == CONTENT_TOKENS);
	CHECK(info->samples == 4);
	CHECK(info->itemsize == itemsize);
	CHECK(encode_format_default(info) == FORMAT_NPY);
	for (size_t i = 0; i < 4; i++)
		buf_append(&want, raw + ids[i] * L * itemsize, L * itemsize);

	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_BIN, ids, 4 }, &out, &bad) == 0);
	CHECK(out.len == want.len && !memcmp(out.data, want.data, want.len));

	out.len = 0;
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_NPY, ids, 4 }, &out, &bad) == 0);
	REQUIRE(out.len == 128 + want.len);
	snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (4, 5), }",
		 descr);
	CHECK(!memcmp(out.data + 10, dict, strlen(dict)));
	CHECK(out.data[127] == '\n');
	CHECK(!memcmp(out.data + 128, want.data, want.len));

	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_LINES, ids, 4 }, &out, &bad) == -EINVAL);
	CHECK(encode_batch(&(struct encode_in){ r, info, FORMAT_TAR, ids, 4 }, &out, &bad) == -EINVAL);
	CHECK(out.len == 128 + want.len);
	sample_reader_free(r);
	dataset_close(ds);
	buf_release(&out);
	buf_release(&want);
}

/* ------------------------------------------------------------------ corruption */

/* Flip one byte in the middle of sample id's payload in its shard file. */
static void corrupt_sample(const char *dir, uint64_t id)
{
	struct dataset *ds = open_ds(dir);
	const char *shard = dataset_shard_name(ds, id);
	char spath[600], ipath[600];
	struct shard_index_header h;
	struct shard_index_entry e;
	uint8_t byte;
	int fd;

	REQUIRE(shard);
	snprintf(spath, sizeof(spath), "%s/%s", dir, shard);
	snprintf(ipath, sizeof(ipath), "%s/%s", dir, shard);
	REQUIRE(strrchr(ipath, '.'));
	strcpy(strrchr(ipath, '.'), ".idx");
	dataset_close(ds);

	fd = open(ipath, O_RDONLY);
	REQUIRE(fd >= 0);
	REQUIRE(pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h));
	REQUIRE(id >= h.first_sample && id - h.first_sample < h.count);
	REQUIRE(pread(fd, &e, sizeof(e), (off_t)(sizeof(h) + (id - h.first_sample) *
						 sizeof(e))) == (ssize_t)sizeof(e));
	close(fd);
	fd = open(spath, O_RDWR);
	REQUIRE(fd >= 0);
	off_t at = (off_t)(e.offset + e.stored_len / 2);
	REQUIRE(pread(fd, &byte, 1, at) == 1);
	byte ^= 0x20;
	REQUIRE(pwrite(fd, &byte, 1, at) == 1);
	close(fd);
}

static void check_eio(const char *dir, enum encode_format f, uint64_t corrupt_id)
{
	struct dataset *ds = open_ds(dir);
	const struct dataset_info *info = dataset_info(ds);
	struct sample_reader *r = sample_reader_new(ds);
	struct buf out = BUF_INIT;
	uint64_t ids[] = { 0, 1, corrupt_id, 2 }, bad = UINT64_MAX;

	REQUIRE(r);
	buf_append(&out, "keep me", 7);
	CHECK(encode_batch(&(struct encode_in){ r, info, f, ids, 4 }, &out, &bad) == -EIO);
	CHECK(bad == corrupt_id);
	CHECK(out.len == 7 && !memcmp(out.data, "keep me", 7) && out.data[7] == 0);
	/* the samples around it still encode */
	bad = UINT64_MAX;
	CHECK(encode_batch(&(struct encode_in){ r, info, f, ids, 2 }, &out, &bad) == 0);
	CHECK(bad == UINT64_MAX);
	sample_reader_free(r);
	dataset_close(ds);
	buf_release(&out);
}

static void test_corrupt(void)
{
	for (int compress = 0; compress <= 1; compress++) {
		char dir[64];

		snprintf(dir, sizeof(dir), "text-%d", compress);
		corrupt_sample(tmp_path(dir), 5);
		check_eio(tmp_path(dir), FORMAT_LINES, 5);
		check_eio(tmp_path(dir), FORMAT_TAR, 5);

		snprintf(dir, sizeof(dir), "files-tar-%d", compress);
		corrupt_sample(tmp_path(dir), 2);
		{
			struct dataset *ds = open_ds(tmp_path(dir));
			struct sample_reader *r = sample_reader_new(ds);
			struct buf out = BUF_INIT;
			uint64_t ids[] = { 0, 2, 1 }, bad = 0;

			CHECK(encode_batch(&(struct encode_in){ r, dataset_info(ds), FORMAT_TAR, ids, 3 }, &out, &bad) ==
			      -EIO);
			CHECK(bad == 2 && out.len == 0);
			sample_reader_free(r);
			dataset_close(ds);
			buf_release(&out);
		}

		snprintf(dir, sizeof(dir), "tok-uint16-%d", compress);
		corrupt_sample(tmp_path(dir), 3);
		check_eio(tmp_path(dir), FORMAT_NPY, 3);
		check_eio(tmp_path(dir), FORMAT_BIN, 3);
	}
}

/* ------------------------------------------------------------------ read-ahead */

/* Evict the page-cache pages of path (written back first). 0, or -1 when it cannot. */
static int drop_cached(const char *path)
{
	int fd = open(path, O_RDONLY);
	int rc;

	REQUIRE(fd >= 0);
	rc = fdatasync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0 ? 0 : -1;
	close(fd);
	return rc;
}

/* Whether byte off of the file mapped at map is in the page cache. */
static int cached(const uint8_t *map, uint64_t off)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	unsigned char v = 0;

	REQUIRE(mincore((void *)((uintptr_t)(map + off) & ~(page - 1)), 1, &v) == 0);
	return v & 1;
}

static void test_warm(void)
{
	enum { L = 4096, N = 2048, SPREAD = 256 }; /* samples of 4 KiB, chosen 1 MiB apart */
	const uint64_t ids[] = { 3 * SPREAD + 5, 1 * SPREAD + 7, 6 * SPREAD + 1, 4 * SPREAD };
	const size_t n = sizeof(ids) / sizeof(ids[0]);
	uint8_t *raw = malloc((size_t)L * N), *shard, *index;
	char spath[600], ipath[600];
	struct stat ss, is;
	int sfd, ifd, ok = 1;

	REQUIRE(raw);
	for (size_t i = 0; i < (size_t)L * N; i++)
		raw[i] = (uint8_t)(i * 2654435761u >> 13);
	write_file(tmp_path("warm.bin"), raw, (size_t)L * N);
	free(raw);
	pack(tmp_path("warm"), tmp_path("warm.bin"), 0, 1, DTYPE_UINT8, L);
	snprintf(spath, sizeof(spath), "%s/shard-00000.raw", tmp_path("warm"));
	snprintf(ipath, sizeof(ipath), "%s/shard-00000.idx", tmp_path("warm"));
	sfd = open(spath, O_RDONLY);
	ifd = open(ipath, O_RDONLY);
	REQUIRE(sfd >= 0 && ifd >= 0 && fstat(sfd, &ss) == 0 && fstat(ifd, &is) == 0);
	REQUIRE(ss.st_size == (off_t)L * N);
	shard = mmap(NULL, (size_t)ss.st_size, PROT_READ, MAP_SHARED, sfd, 0);
	index = mmap(NULL, (size_t)is.st_size, PROT_READ, MAP_SHARED, ifd, 0);
	REQUIRE(shard != MAP_FAILED && index != MAP_FAILED);
	if (drop_cached(spath) || drop_cached(ipath) || cached(shard, ids[0] * L) ||
	    cached(index, 32 + ids[0] * 24)) {
		/* tmpfs, for one, keeps its pages: nothing to observe */
		fprintf(stderr, "test_warm: skipped, the page cache of %s cannot be dropped\n",
			spath);
		goto out;
	}

	struct dataset *ds = open_ds(tmp_path("warm"));
	struct sample_reader *r = sample_reader_new(ds);

	REQUIRE(r);
	sample_reader_warm(r, ids, n);
	/* the reads were only started: give them up to 10 s */
	for (int tries = 0; tries < 1000; tries++) {
		ok = 1;
		for (size_t i = 0; i < n; i++)
			ok &= cached(shard, ids[i] * L) && cached(shard, ids[i] * L + L - 1) &&
			      cached(index, 32 + ids[i] * 24);
		if (ok)
			break;
		usleep(10000);
	}
	CHECK(ok);
	/* only the batch's: a window of 128 KiB around each payload (the dataset fits in
	 * memory), not the whole shard */
	CHECK(cached(shard, 4 * SPREAD * (uint64_t)L + (64 << 10)));
	CHECK(!cached(shard, 2 * SPREAD * (uint64_t)L));
	CHECK(!cached(shard, (uint64_t)L * N - 1));
	sample_reader_free(r);
	dataset_close(ds);
out:
	munmap(shard, (size_t)ss.st_size);
	munmap(index, (size_t)is.st_size);
	close(sfd);
	close(ifd);
}

int main(void)
{
	/* Member names are UTF-8: read them back in a UTF-8 locale (libarchive converts
	 * names to the locale's charset and warns in the C locale). */
	REQUIRE(setlocale(LC_ALL, "C.UTF-8"));
	scratch_init("encode");
	test_format_names();
	test_format_check();
	test_npy_header();
	for (int compress = 0; compress <= 1; compress++) {
		test_text(compress);
		test_files_tar(compress);
		test_tokens(DTYPE_UINT8, 1, "|u1", compress);
		test_tokens(DTYPE_UINT16, 2, "<u2", compress);
		test_tokens(DTYPE_UINT32, 4, "<u4", compress);
		test_tokens(DTYPE_INT32, 4, "<i4", compress);
	}
	test_files_dir();
	test_corrupt();
	test_warm();
	if (!check_failures) /* a failed run leaves its files to look at */
		rm_rf(tmp);
	return check_status();
}
