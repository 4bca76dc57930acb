/*
 * test_pack.c: pack_run() into a temp dir, read back with dataset.h, and corrupt it (also
 * while it is open).
 * Also the parsers of untrusted bytes on hand-made cases (the fuzz targets cover the rest).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"
#include "check.h"
#include "test_files.h"
#include "dataset.h"
#include "filegroup.h"
#include "pack.h"
#include "parse.h"
#include "shard_index.h"
#include "npy.h"
#include "source.h"

static int do_pack(const char *in, const char *out, uint64_t shard_bytes, int compress,
		   int no_dict, char *err)
{
	struct pack_opts o;

	pack_opts_init(&o);
	o.shard_bytes = shard_bytes;
	o.compress = compress;
	o.no_dict = no_dict;
	return pack_one(&o, in, out, err, 512);
}

/* Sample k of the test input: lines of varying length and content. */
static int make_line(unsigned k, char *buf, size_t cap)
{
	return snprintf(buf, cap, "{\"k\": %u, \"text\": \"%.*s\"}", k, (int)(k % 97),
			"the quick brown fox jumps over the lazy dog; the quick brown fox jumps "
			"over the lazy dog again and again");
}

#define N_LINES 3000

static void test_roundtrip(int compress, int no_dict)
{
	char *in = tmp_path("in.jsonl"), *out = tmp_path("ds"), err[512], line[256];
	struct buf all = BUF_INIT, b = BUF_INIT;
	struct dataset *ds;
	struct sample_reader *r;
	int rc;

	for (unsigned k = 0; k < N_LINES; k++) {
		int n = make_line(k, line, sizeof(line));

		buf_append(&all, line, (size_t)n);
		buf_append(&all, "\n", 1);
	}
	write_file(in, all.data, all.len);
	rc = do_pack(in, out, 16 << 10, compress, no_dict, err);
	if (rc)
		fprintf(stderr, "pack: %s\n", err);
	REQUIRE(rc == 0);
	rc = dataset_open(out, &ds, err, sizeof(err));
	REQUIRE(rc == 0);
	CHECK_EQ_U64(dataset_info(ds)->samples, N_LINES);
	CHECK(dataset_info(ds)->shards > 3);
	CHECK(dataset_info(ds)->compressed == compress);
	CHECK(!strcmp(dataset_info(ds)->record_ext, "json"));
	r = sample_reader_new(ds);
	REQUIRE(r);
	/* random access in a scrambled order */
	for (unsigned i = 0; i < N_LINES; i++) {
		unsigned k = (unsigned)(((uint64_t)i * 2654435761u) % N_LINES);
		uint32_t len = 0;
		int n = make_line(k, line, sizeof(line));

		b.len = 0;
		CHECK(sample_reader_read(r, k, &b) == 0);
		CHECK(b.len == (size_t)n && !memcmp(b.data, line, (size_t)n));
		CHECK(dataset_sample_len(ds, k, &len) == 0 && len == (uint32_t)n);
	}
	b.len = 0;
	CHECK(sample_reader_read(r, N_LINES, &b) == -ERANGE);
	CHECK(dataset_shard_name(ds, N_LINES) == NULL);
	CHECK(dataset_shard_name(ds, 0) && !strncmp(dataset_shard_name(ds, 0), "shard-00000", 11));
	{
		struct dataset_verify_report rep;

		CHECK(dataset_verify(ds, NULL, NULL, NULL, &rep) == 0);
		CHECK_EQ_U64(rep.samples_ok, N_LINES);
		CHECK(!strcmp(rep.fingerprint, dataset_info(ds)->fingerprint));
	}
	sample_reader_free(r);
	dataset_close(ds);

	/* The same samples, any compression: the same fingerprint. */
	{
		static char first_fp[33];
		struct dataset *d2;

		REQUIRE(dataset_open(out, &d2, err, sizeof(err)) == 0);
		if (!first_fp[0])
			memcpy(first_fp, dataset_info(d2)->fingerprint, 33);
		CHECK(!strcmp(first_fp, dataset_info(d2)->fingerprint));
		dataset_close(d2);
	}
	buf_release(&all);
	buf_release(&b);
}

static void flip(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t c;

	if (fd < 0)
		perror(path);
	REQUIRE(fd >= 0);
	REQUIRE(pread(fd, &c, 1, off) == 1);
	c ^= 0x20;
	REQUIRE(pwrite(fd, &c, 1, off) == 1);
	close(fd);
}

/* A flipped byte in a shard: that sample's read fails with EIO and leaves out alone;
 * every other sample still reads. */
static void test_corrupt_reads(int compress)
{
	char *out = tmp_path("ds"), err[512], line[256], *shard;
	struct dataset *ds;
	struct sample_reader *r;
	struct buf b = BUF_INIT;
	uint64_t first, bad = 0;
	unsigned nbad = 0;

	REQUIRE(dataset_open(out, &ds, err, sizeof(err)) == 0);
	first = dataset_catalog(ds)->shards[1].first_sample;
	{
		char name[300];

		snprintf(name, sizeof(name), "ds/%s", dataset_catalog(ds)->shards[1].file);
		shard = tmp_path(name);
	}
	dataset_close(ds);
	chmod(shard, 0644);
	flip(shard, 1000);

	REQUIRE(dataset_open(out, &ds, err, sizeof(err)) == 0);
	r = sample_reader_new(ds);
	for (uint64_t id = 0; id < N_LINES; id++) {
		int n = make_line((unsigned)id, line, sizeof(line));
		int rc;

		buf_append(&b, "keep", 4);
		b.len = 4;
		rc = sample_reader_read(r, id, &b);
		if (rc) {
			CHECK(rc == -EIO);
			CHECK(b.len == 4 && !memcmp(b.data, "keep", 4));
			CHECK(strstr(sample_reader_last_error(r), dataset_catalog(ds)->shards[1].file));
			nbad++;
			bad = id;
		} else {
			CHECK(b.len == 4 + (size_t)n && !memcmp(b.data + 4, line, (size_t)n));
		}
	}
	CHECK(nbad == 1);
	CHECK(bad >= first && bad < first + dataset_catalog(ds)->shards[1].samples);
	{
		struct dataset_verify_report rep;

		CHECK(dataset_verify(ds, NULL, NULL, NULL, &rep) == -EBADMSG);
		CHECK_EQ_U64(rep.samples_bad, 1);
	}
	(void)compress;
	sample_reader_free(r);
	dataset_close(ds);
	buf_release(&b);

	/* A truncated shard is refused at open. */
	REQUIRE(truncate(shard, 100) == 0);
	CHECK(dataset_open(out, &ds, err, sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "truncated"));
}

struct cut_ctx {
	struct dataset *ds;
	uint64_t idx_first, idx_count;     /* the samples of the shard whose index was cut */
	uint64_t data_first, data_count;   /* the samples of the shard whose payload was cut */
	char idx_file[64];
	int verify_named;                  /* verify reported the cut index by name */
};

static int in_range(uint64_t id, uint64_t first, uint64_t count)
{
	return id >= first && id - first < count;
}

static void verify_msg(void *ctx, uint64_t id, const char *msg)
{
	struct cut_ctx *c = ctx;

	(void)id;
	if (strstr(msg, c->idx_file) && strstr(msg, "index read failed"))
		c->verify_named = 1;
}

/* Count a failed check of read_cut() (it runs on a thread of its own) and say where. */
#define WRONG(cond) do { \
	if (cond) { \
		fprintf(stderr, "%s:%d: wrong: %s\n", __FILE__, __LINE__, #cond); \
		wrong++; \
	} \
} while (0)

/* Every reader of the mappings, on a thread created with every signal blocked (as the
 * mount's decode threads are): each sample of a shard whose index or payload was cut
 * fails with -EIO, every other one reads. */
static void *read_cut(void *arg)
{
	struct cut_ctx *c = arg;
	const struct dataset_info *in = dataset_info(c->ds);
	struct sample_reader *r = sample_reader_new(c->ds);
	struct buf b = BUF_INIT;
	uint64_t ids[64], bad_id;
	struct iovec views[64];
	long wrong = 0;

	REQUIRE(r);
	for (uint64_t id = 0; id < in->samples; id++) {
		int idx_cut = in_range(id, c->idx_first, c->idx_count);
		int data_cut = in_range(id, c->data_first, c->data_count);
		uint32_t len;
		uint64_t len64;
		int rc;

		sample_reader_prefetch(r, id, 0);
		sample_reader_prefetch(r, id, 1);
		b.len = 0;
		rc = sample_reader_read(r, id, &b);
		WRONG(rc != (idx_cut || data_cut ? -EIO : 0));
		WRONG(rc && !strstr(sample_reader_last_error(r), idx_cut ? "index entry read failed" :
				    "read failed"));
		WRONG((dataset_sample_len(c->ds, id, &len) == -EIO) != idx_cut);
		WRONG((sample_reader_raw_len(r, id, &len64) == -EIO) != idx_cut);
	}
	for (uint64_t k = 0; k < 64; k++)   /* a batch across every shard */
		ids[k] = k * (in->samples / 64);
	for (int i = 0; i < 20; i++)         /* probed and warmed, then skipped: no fault */
		sample_reader_warm(r, ids, 64);
	if (!in->compressed) {
		WRONG(sample_reader_views(r, ids, 64, views, &bad_id) != -EIO);
		WRONG(!in_range(bad_id, c->idx_first, c->idx_count) &&
			 !in_range(bad_id, c->data_first, c->data_count));
	}
	{
		struct dataset_verify_report rep;

		WRONG(dataset_verify(c->ds, verify_msg, NULL, c, &rep) != -EBADMSG);
		WRONG(!c->verify_named);
		WRONG(rep.samples_bad != c->idx_count + c->data_count);
	}
	buf_release(&b);
	sample_reader_free(r);
	return (void *)wrong;
}

/* A shard index and a shard truncated while the dataset is open (they stay mapped): the
 * reads that fault fail with -EIO, in any thread. */
static void test_truncated_under_open_dataset(void)
{
	char *out = tmp_path("ds"), err[512], name[300];
	const struct catalog *cat;
	struct cut_ctx c = { 0 };
	sigset_t all, old;
	pthread_t t;
	void *wrong;

	REQUIRE(dataset_open(out, &c.ds, err, sizeof(err)) == 0);
	cat = dataset_catalog(c.ds);
	REQUIRE(cat->nshards > 3);
	c.idx_first = cat->shards[1].first_sample;
	c.idx_count = cat->shards[1].samples;
	c.data_first = cat->shards[2].first_sample;
	c.data_count = cat->shards[2].samples;
	snprintf(c.idx_file, sizeof(c.idx_file), "%s", cat->shards[1].file);
	snprintf(name, sizeof(name), "ds/%s", cat->shards[1].index_file);
	chmod(tmp_path(name), 0644);
	/* to 0 bytes, so that every read faults: a cut inside a page leaves zeros up to
	 * the page's end, which read as bad entries and bad samples */
	REQUIRE(truncate(tmp_path(name), 0) == 0);
	snprintf(name, sizeof(name), "ds/%s", cat->shards[2].file);
	chmod(tmp_path(name), 0644);
	REQUIRE(truncate(tmp_path(name), 0) == 0);

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	REQUIRE(pthread_create(&t, NULL, read_cut, &c) == 0);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_join(t, &wrong);
	CHECK((long)wrong == 0);
	dataset_close(c.ds);
}

/* A Megatron .idx truncated while it is packed (it is read through a mapping): the
 * next read of the source fails with -EIO and says so, on a thread with every signal
 * blocked as well as on this one. */
#define MEG_SEQS 3000
static void *read_cut_megatron(void *arg)
{
	const char *prefix = arg;
	char idx[512];
	struct source s;
	struct source_opts o = { 0 };
	struct buf b = BUF_INIT;
	long wrong = 0;
	int rc;

	memset(&s, 0, sizeof(s));
	snprintf(idx, sizeof(idx), "%s.idx", prefix);
	rc = source_open(&s, &source_megatron_ops, idx, &o);
	WRONG(rc != 0);
	if (rc)
		fprintf(stderr, "%s\n", s.err);
	WRONG(source_next(&s, &b) != 1);            /* the first sequence reads */
	WRONG(truncate(idx, 0) != 0);
	b.len = 0;
	while ((rc = source_next(&s, &b)) == 1)      /* the sizes on the first page are cached */
		b.len = 0;
	WRONG(rc != -EIO);
	WRONG(!strstr(s.err, "can no longer be read"));
	source_close(&s);
	buf_release(&b);
	return (void *)wrong;
}

static void write_megatron(const char *prefix)
{
	char path[512];
	uint8_t *idx = calloc(1, 34 + MEG_SEQS * 12 + 8 * 2), *p = idx;
	uint16_t tok[4] = { 1, 2, 3, 4 };
	FILE *bin;
	uint64_t v;

	REQUIRE(idx);
	memcpy(p, "MMIDIDX\0\0", 9);
	v = htole64(1);
	memcpy(p + 9, &v, 8);
	p[17] = 8;                                   /* uint16 */
	v = htole64(MEG_SEQS);
	memcpy(p + 18, &v, 8);
	v = htole64(2);
	memcpy(p + 26, &v, 8);
	for (uint64_t i = 0; i < MEG_SEQS; i++) {
		uint32_t n = htole32(4);
		uint64_t ptr = htole64(i * 8);

		memcpy(p + 34 + i * 4, &n, 4);
		memcpy(p + 34 + MEG_SEQS * 4 + i * 8, &ptr, 8);
	}
	v = htole64(MEG_SEQS);
	memcpy(p + 34 + MEG_SEQS * 12 + 8, &v, 8);   /* document index: 0, MEG_SEQS */
	snprintf(path, sizeof(path), "%s.idx", prefix);
	write_file(path, idx, 34 + MEG_SEQS * 12 + 16);
	snprintf(path, sizeof(path), "%s.bin", prefix);
	bin = fopen(path, "wb");
	REQUIRE(bin);
	for (int i = 0; i < MEG_SEQS; i++)
		REQUIRE(fwrite(tok, sizeof(tok), 1, bin) == 1);
	fclose(bin);
	free(idx);
}

static void test_megatron_idx_truncated_while_packed(void)
{
	sigset_t all, old;
	pthread_t t;
	void *wrong;

	write_megatron(tmp_path("meg"));
	CHECK(read_cut_megatron(tmp_path("meg")) == NULL);
	write_megatron(tmp_path("meg"));
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	REQUIRE(pthread_create(&t, NULL, read_cut_megatron, tmp_path("meg")) == 0);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_join(t, &wrong);
	CHECK((long)wrong == 0);
}

static void test_pack_errors(void)
{
	char *in = tmp_path("bad.jsonl"), *out = tmp_path("bad-ds"), err[512];
	struct stat sb;

	write_file(in, "{\"a\":1}\n[1,2\n", 13);
	CHECK(do_pack(in, out, 1 << 20, 1, 0, err) == -EINVAL);
	CHECK(strstr(err, "bad.jsonl:2: invalid JSON"));
	CHECK(stat(out, &sb) != 0);
	write_file(in, "", 0);
	CHECK(do_pack(in, out, 1 << 20, 1, 0, err) == -ENODATA);
	CHECK(stat(out, &sb) != 0);
}

static void test_parsers(void)
{
	char why[300];
	struct npy_header h;
	uint8_t npy[128];
	const char *clean;
	size_t key_len;

	/* sizes (--shard-size, --seq-len, readahead=) */
	{
		static const struct { const char *s; uint64_t v; } good[] = {
			{ "0", 0 }, { "64", 64 }, { "64B", 64 }, { "2K", 2048 }, { "2k", 2048 },
			{ "2Ki", 2048 }, { "2KiB", 2048 }, { "2KB", 2048 }, { "64M", 64u << 20 },
			{ "1G", 1u << 30 }, { "1T", UINT64_C(1) << 40 },
		};
		static const char *const bad[] = {
			"", "M", "64i", "64iB", "64Q", "64MM", "64M ", "-1", "64KiBB", "16777216T",
		};
		uint64_t v;

		for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
			CHECK(parse_size(good[i].s, &v) == 0 && v == good[i].v);
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			v = 7;
			CHECK(parse_size(bad[i], &v) == -EINVAL && v == 7);
		}
	}

	/* JSONL lines */
	CHECK(jsonl_check_line((const uint8_t *)"{\"a\": [1, 2.5, null]}", 21, why, sizeof(why)) == 0);
	CHECK(jsonl_check_line((const uint8_t *)"\"\\u0000\"", 8, why, sizeof(why)) == 0);
	CHECK(jsonl_check_line((const uint8_t *)"42", 2, why, sizeof(why)) == 0);
	CHECK(jsonl_check_line((const uint8_t *)"{\"a\": 1} x", 10, why, sizeof(why)) == -EINVAL);
	CHECK(jsonl_check_line((const uint8_t *)"{\"a\": \"\xc3\x28\"}", 11, why, sizeof(why)) == -EINVAL);
	CHECK(strstr(why, "UTF-8"));
	CHECK(jsonl_check_line((const uint8_t *)"", 0, why, sizeof(why)) == -EINVAL);

	/* .npy headers */
	{
		const char *hdr = "{'descr': '<u2', 'fortran_order': False, 'shape': (7,), }";
		size_t hl = strlen(hdr);

		memcpy(npy, "\x93NUMPY\x01\x00", 8);
		npy[8] = (uint8_t)hl;
		npy[9] = 0;
		memcpy(npy + 10, hdr, hl);
		CHECK(npy_header_parse(npy, 10 + hl, &h, why, sizeof(why)) == 0);
		CHECK(h.dtype == DTYPE_UINT16 && h.count == 7 && h.data_offset == 10 + hl && !h.swap);
		CHECK(npy_header_parse(npy, 10 + hl - 5, &h, why, sizeof(why)) == -EBADMSG);
		npy[6] = 9;
		CHECK(npy_header_parse(npy, 10 + hl, &h, why, sizeof(why)) == -EINVAL);
	}
	{
		const char *hdr = "{'descr': '>i4', 'shape': (3, ), 'fortran_order': True}";
		size_t hl = strlen(hdr);

		memcpy(npy, "\x93NUMPY\x02\x00", 8);
		npy[8] = (uint8_t)hl;
		npy[9] = npy[10] = npy[11] = 0;
		memcpy(npy + 12, hdr, hl);
		CHECK(npy_header_parse(npy, 12 + hl, &h, why, sizeof(why)) == 0);
		CHECK(h.dtype == DTYPE_INT32 && h.count == 3 && h.swap);
	}
	{
		const char *bad[] = {
			"{'descr': '|O', 'fortran_order': False, 'shape': (3,), }",
			"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
			"{'descr': '<u2', 'fortran_order': False, 'shape': (3, 4), }",
			"{'descr': '<u2', 'fortran_order': False, 'shape': (), }",
			"{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (3,), }",
			"{'descr': '<u2', 'fortran_order': False}",
			"{'descr': '<u2', 'fortran_order': Maybe, 'shape': (3,), }",
		};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			size_t hl = strlen(bad[i]);

			memcpy(npy, "\x93NUMPY\x01\x00", 8);
			npy[8] = (uint8_t)hl;
			npy[9] = 0;
			memcpy(npy + 10, bad[i], hl);
			CHECK(npy_header_parse(npy, 10 + hl, &h, why, sizeof(why)) < 0);
		}
	}

	/* tar member paths */
	CHECK(tar_member_path("./a/b/000.jpg", &clean, &key_len, why, sizeof(why)) == 0);
	CHECK(!strcmp(clean, "a/b/000.jpg") && key_len == 7);
	CHECK(tar_member_path("x.tar.gz", &clean, &key_len, why, sizeof(why)) == 0 && key_len == 1);
	CHECK(tar_member_path("README", &clean, &key_len, why, sizeof(why)) == 0 && key_len == 0);
	CHECK(tar_member_path("a/.hidden", &clean, &key_len, why, sizeof(why)) == 0 && key_len == 0);
	CHECK(tar_member_path("../x.txt", &clean, &key_len, why, sizeof(why)) == -EINVAL);
	CHECK(tar_member_path("a/../../x.txt", &clean, &key_len, why, sizeof(why)) == -EINVAL);
	CHECK(tar_member_path("a/..", &clean, &key_len, why, sizeof(why)) == -EINVAL);
	CHECK(tar_member_path("/etc/x.txt", &clean, &key_len, why, sizeof(why)) == -EINVAL);
	CHECK(tar_member_path("a/..b/x.txt", &clean, &key_len, why, sizeof(why)) == 0);

	/* file groups */
	{
		struct buf b = BUF_INIT;
		struct filegroup_iter it;
		struct filegroup_file f;
		size_t start;

		CHECK(filegroup_begin(&b, &start) == 0);
		CHECK(filegroup_add(&b, start, "k.jpg", 5, "JPEG", 4) == 0);
		CHECK(filegroup_add(&b, start, "k.cls", 5, "", 0) == 0);
		CHECK(filegroup_add(&b, start, "", 0, "x", 1) == -EINVAL);
		CHECK(filegroup_count(&b, start) == 2);
		CHECK(filegroup_iter_init(&it, b.data, b.len) == 0);
		CHECK(filegroup_next(&it, &f) == 1 && f.size == 4 && !memcmp(f.data, "JPEG", 4));
		CHECK(filegroup_next(&it, &f) == 1 && f.size == 0 && !memcmp(f.name, "k.cls", 5));
		CHECK(filegroup_next(&it, &f) == 0);
		for (size_t cut = 0; cut < b.len; cut++) {
			int rc = filegroup_iter_init(&it, b.data, cut);

			while (rc >= 0 && (rc = filegroup_next(&it, &f)) == 1)
				;
			CHECK(rc < 0);
		}
		buf_release(&b);
	}

	/* shard index headers */
	{
		uint8_t idx[32 + 24] = { 0 };
		struct shard_index_header sh;
		uint64_t bad;

		memcpy(idx, SHARD_INDEX_MAGIC, 8);
		idx[8] = SHARD_INDEX_VERSION;
		idx[12] = 24;
		idx[16] = 1;
		idx[40] = 5;  /* stored_len 5 */
		idx[44] = 5;  /* raw_len 5 */
		CHECK(shard_index_parse_header(idx, sizeof(idx), &sh, why, sizeof(why)) == 0);
		CHECK(shard_index_check_all(idx, sizeof(idx), 5, 0, &bad, why, sizeof(why)) == 0);
		CHECK(shard_index_check_all(idx, sizeof(idx), 4, 0, &bad, why, sizeof(why)) == -EBADMSG);
		CHECK(shard_index_check_all(idx, sizeof(idx), 6, 0, &bad, why, sizeof(why)) == -EBADMSG);
		CHECK(shard_index_parse_header(idx, sizeof(idx) - 1, &sh, why, sizeof(why)) == -EBADMSG);
		idx[0] = 'X';
		CHECK(shard_index_parse_header(idx, sizeof(idx), &sh, why, sizeof(why)) == -EBADMSG);
	}
}

int main(void)
{
	scratch_init("pack");
	test_parsers();
	test_pack_errors();
	test_megatron_idx_truncated_while_packed();
	test_roundtrip(1, 0);
	test_corrupt_reads(1);
	rm_rf(tmp_path("ds"));
	test_roundtrip(1, 1);
	test_truncated_under_open_dataset();
	rm_rf(tmp_path("ds"));
	test_roundtrip(0, 0);
	test_corrupt_reads(0);
	rm_rf(tmp_path("ds"));
	test_roundtrip(0, 0);
	test_truncated_under_open_dataset();
	rm_rf(tmp);
	return check_status();
}
