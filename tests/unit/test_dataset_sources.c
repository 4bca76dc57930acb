/*
 * test_dataset_sources.c: several packed datasets opened as one (dataset_open_sources()):
 * every id of a union of a dictionary-compressed, a raw and a dictionary-less compressed
 * dataset reads the right bytes through every reader call; the sources' accessors; the
 * union's fingerprint; verify; every incompatibility refused with a message naming the
 * field; nothing left open after a failure.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <sqlite3.h>
#include <xxhash.h>

#include "catalog.h"
#include "check.h"
#include "test_files.h"
#include "dataset.h"
#include "pack.h"

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	REQUIRE(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Line k of source s: distinct across sources, of varying length. */
static int make_line(unsigned s, unsigned k, char *buf, size_t cap)
{
	return snprintf(buf, cap, "{\"src\": %u, \"k\": %u, \"text\": \"%.*s\"}", s, k,
			(int)((k * 7 + s) % 89), "mixtures of web text, code and books mixtures of "
			"web text, code and books mixtures of web text");
}

static void pack_lines(const char *name, unsigned s, unsigned n, int compress, int no_dict)
{
	struct buf all = BUF_INIT;
	struct pack_opts o;
	char line[256], in[64];

	pack_opts_init(&o);
	o.compress = compress;
	o.no_dict = no_dict;
	o.shard_bytes = 8 << 10;
	for (unsigned k = 0; k < n; k++) {
		int len = make_line(s, k, line, sizeof(line));

		REQUIRE(buf_append(&all, line, (size_t)len) == 0);
		REQUIRE(buf_append(&all, "\n", 1) == 0);
	}
	snprintf(in, sizeof(in), "%s.jsonl", name);
	write_file(tmp_path(in), all.data, all.len);
	pack_one_or_fail(&o, tmp_path(in), tmp_path(name));
	buf_release(&all);
}

static struct dataset *open_one(const char *dir)
{
	struct dataset *ds = NULL;
	char err[512];
	int rc = dataset_open(dir, &ds, err, sizeof(err));

	if (rc)
		fprintf(stderr, "dataset_open %s: %d %s\n", dir, rc, err);
	REQUIRE(rc == 0);
	return ds;
}

#define NSRC 3
static const unsigned src_n[NSRC] = { 1200, 700, 900 };
static const char *const src_name[NSRC] = { "dict", "raw", "nodict" };

/* The union's fingerprint computed here from the rule in dataset.h. */
static void expect_union_fp(const char *const *fps, size_t n, char out[33])
{
	char text[1024];
	size_t len = (size_t)snprintf(text, sizeof(text), "zephon-mixture-v1\n");
	XXH128_hash_t h;

	for (size_t s = 0; s < n; s++)
		len += (size_t)snprintf(text + len, sizeof(text) - len, "%s\n", fps[s]);
	h = XXH3_128bits(text, len);
	snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
}

static void on_bad(void *ctx, uint64_t id, const char *msg)
{
	char *last = ctx;

	(void)id;
	snprintf(last, 512, "%s", msg);
}

static void test_union_reads(void)
{
	const char *dirs[NSRC];
	struct dataset *one[NSRC], *ds = NULL;
	const char *fps[NSRC];
	uint64_t total = 0, shards = 0, raw = 0, stored = 0, offs[NSRC + 1];
	struct buf b = BUF_INIT;
	struct sample_reader *r;
	char err[512], line[256], fp[33];

	pack_lines(src_name[0], 0, src_n[0], 1, 0);
	pack_lines(src_name[1], 1, src_n[1], 0, 0);
	pack_lines(src_name[2], 2, src_n[2], 1, 1);
	for (int s = 0; s < NSRC; s++) {
		dirs[s] = strdup(tmp_path(src_name[s]));
		one[s] = open_one(dirs[s]);
		offs[s] = total;
		total += src_n[s];
		shards += dataset_info(one[s])->shards;
		raw += dataset_info(one[s])->raw_bytes;
		stored += dataset_info(one[s])->stored_bytes;
		fps[s] = dataset_info(one[s])->fingerprint;
		/* several shards each: local ids of a later shard start above 0 */
		CHECK(dataset_info(one[s])->shards >= 3);
	}
	offs[NSRC] = total;
	/* what the three are meant to be */
	CHECK(dataset_info(one[0])->compressed && dataset_catalog(one[0])->dict);
	CHECK(!dataset_info(one[1])->compressed);
	CHECK(dataset_info(one[2])->compressed && !dataset_catalog(one[2])->dict);

	CHECK(dataset_open_sources(dirs, NSRC, &ds, err, sizeof(err)) == 0);
	REQUIRE(ds);
	CHECK(dataset_source_count(ds) == NSRC);
	CHECK_EQ_U64(dataset_info(ds)->samples, total);
	CHECK_EQ_U64(dataset_info(ds)->shards, shards);
	CHECK_EQ_U64(dataset_info(ds)->raw_bytes, raw);
	CHECK_EQ_U64(dataset_info(ds)->stored_bytes, stored);
	CHECK(dataset_info(ds)->compressed == 1);
	CHECK(dataset_info(ds)->kind == DATASET_RECORDS);
	CHECK(!strcmp(dataset_info(ds)->record_ext, "json"));
	expect_union_fp(fps, NSRC, fp);
	CHECK(!strcmp(dataset_info(ds)->fingerprint, fp));
	for (int s = 0; s < NSRC; s++)
		CHECK(strcmp(dataset_info(ds)->fingerprint, fps[s]));
	CHECK(!strcmp(dataset_dir(ds), dirs[0]));
	CHECK(dataset_catalog(ds)->dict != NULL); /* the first source's */
	for (size_t s = 0; s <= NSRC; s++) {
		CHECK_EQ_U64(dataset_source_offset(ds, s), offs[s]);
		if (s == NSRC) {
			CHECK(dataset_source_info(ds, s) == NULL);
			CHECK(dataset_source_dir(ds, s) == NULL);
			continue;
		}
		CHECK(!strcmp(dataset_source_dir(ds, s), dirs[s]));
		CHECK(!strcmp(dataset_source_info(ds, s)->fingerprint, fps[s]));
		CHECK_EQ_U64(dataset_source_info(ds, s)->samples, src_n[s]);
		CHECK(dataset_source_info(ds, s)->compressed == dataset_info(one[s])->compressed);
	}

	r = sample_reader_new(ds);
	REQUIRE(r);
	{
		uint64_t all[4096];

		REQUIRE(total <= 4096);
		for (uint64_t id = 0; id < total; id++)
			all[id] = id;
		/* hints only: afterwards every read is still right */
		sample_reader_warm(r, all, (size_t)total);
		sample_reader_warm(r, all, (size_t)total);
	}
	/* every id, in a scrambled order */
	for (uint64_t i = 0; i < total; i++) {
		uint64_t id = (i * 2654435761u) % total, local = UINT64_MAX, len = 0;
		size_t s = dataset_source_of(ds, id, &local);
		unsigned es = id < offs[1] ? 0 : id < offs[2] ? 1 : 2;
		uint64_t el = id - offs[es];
		int n = make_line(es, (unsigned)el, line, sizeof(line));
		const char *name = dataset_shard_name(ds, id), *own;
		uint32_t slen = 0;

		CHECK(s == es);
		CHECK_EQ_U64(local, el);
		sample_reader_prefetch(r, id, 0);
		sample_reader_prefetch(r, id, 1);
		b.len = 0;
		CHECK(sample_reader_read(r, id, &b) == 0);
		CHECK(b.len == (size_t)n && !memcmp(b.data, line, (size_t)n));
		CHECK(dataset_sample_len(ds, id, &slen) == 0 && slen == (uint32_t)n);
		CHECK(sample_reader_raw_len(r, id, &len) == 0 && len == (uint64_t)n);
		/* "<dir>/<that source's own shard of the local id>" */
		own = dataset_shard_name(one[es], el);
		REQUIRE(name && own);
		CHECK(!strncmp(name, dirs[es], strlen(dirs[es])) && name[strlen(dirs[es])] == '/' &&
		      !strcmp(name + strlen(dirs[es]) + 1, own));
	}
	b.len = 0;
	CHECK(sample_reader_read(r, total, &b) == -ERANGE);
	CHECK(dataset_shard_name(ds, total) == NULL);
	{
		uint64_t local = 77;

		CHECK(dataset_source_of(ds, total, &local) == NSRC && local == 77);
		CHECK(dataset_source_of(ds, UINT64_MAX, NULL) == NSRC);
	}

	/* zero-copy views: the raw source's samples; a compressed source's are refused */
	{
		uint64_t ids[3] = { offs[1] + 5, offs[1], offs[2] - 1 }, bad = 0;
		struct iovec v[3];

		CHECK(sample_reader_views(r, ids, 3, v, &bad) == 0);
		for (int i = 0; i < 3; i++) {
			int n = make_line(1, (unsigned)(ids[i] - offs[1]), line, sizeof(line));

			CHECK(v[i].iov_len == (size_t)n && !memcmp(v[i].iov_base, line, (size_t)n));
		}
		ids[1] = offs[0] + 3;
		CHECK(sample_reader_views(r, ids, 3, v, &bad) == -ENOTSUP);
		ids[1] = offs[2] + 3;
		CHECK(sample_reader_views(r, ids, 3, v, &bad) == -ENOTSUP);
		ids[1] = total;
		CHECK(sample_reader_views(r, ids, 3, v, &bad) == -ERANGE);
	}

	{
		struct dataset_verify_report rep;

		CHECK(dataset_verify(ds, NULL, NULL, NULL, &rep) == 0);
		CHECK_EQ_U64(rep.samples_ok, total);
		CHECK_EQ_U64(rep.raw_bytes, raw);
		CHECK(!strcmp(rep.fingerprint, dataset_info(ds)->fingerprint));
	}
	sample_reader_free(r);
	dataset_close(ds);

	/* the same datasets in another order: another mixture */
	{
		const char *rev[NSRC] = { dirs[2], dirs[1], dirs[0] };
		const char *rfps[NSRC] = { fps[2], fps[1], fps[0] };

		REQUIRE(dataset_open_sources(rev, NSRC, &ds, err, sizeof(err)) == 0);
		expect_union_fp(rfps, NSRC, fp);
		CHECK(!strcmp(dataset_info(ds)->fingerprint, fp));
		CHECK(strcmp(dataset_info(ds)->fingerprint, dataset_info(one[0])->fingerprint));
		CHECK(dataset_catalog(ds)->dict == NULL);
		r = sample_reader_new(ds);
		REQUIRE(r);
		/* source "dict" now starts at N(nodict) + N(raw) */
		b.len = 0;
		CHECK(sample_reader_read(r, src_n[2] + src_n[1] + 17, &b) == 0);
		make_line(0, 17, line, sizeof(line));
		CHECK(b.len == strlen(line) && !memcmp(b.data, line, b.len));
		sample_reader_free(r);
		dataset_close(ds);
	}

	/* a flipped byte in the last source: verify of the union names its sample by the
	 * union's id and the source's directory */
	{
		const struct catalog *c = dataset_catalog(one[2]);
		char shard[600], last[512] = "";
		struct dataset_verify_report rep;
		uint64_t first = c->shards[1].first_sample;
		int fd;
		uint8_t x;

		snprintf(shard, sizeof(shard), "%s/%s", dirs[2], c->shards[1].file);
		fd = open(shard, O_RDWR);
		REQUIRE(fd >= 0);
		REQUIRE(pread(fd, &x, 1, 5) == 1);
		x ^= 0x55;
		REQUIRE(pwrite(fd, &x, 1, 5) == 1);
		close(fd);
		REQUIRE(dataset_open_sources(dirs, NSRC, &ds, err, sizeof(err)) == 0);
		CHECK(dataset_verify(ds, on_bad, NULL, last, &rep) == -EBADMSG);
		CHECK(rep.samples_bad >= 1);
		CHECK_EQ_U64(rep.samples_ok + rep.samples_bad, total);
		CHECK(strstr(last, dirs[2]) != NULL);
		{
			char want[64];

			/* the first sample of that shard, numbered in the union */
			snprintf(want, sizeof(want), "sample %" PRIu64 " ", offs[2] + first);
			CHECK(strstr(last, want) != NULL);
		}
		dataset_close(ds);
	}
	for (int s = 0; s < NSRC; s++) {
		dataset_close(one[s]);
		free((char *)dirs[s]);
	}
	buf_release(&b);
}

/* One source is dataset_open(). */
static void test_single(void)
{
	const char *dir = tmp_path(src_name[1]);
	struct dataset *a = open_one(dir), *b = NULL;
	const struct dataset_info *x = dataset_info(a), *y;
	char err[512];
	uint64_t local = 0;

	REQUIRE(dataset_open_sources(&dir, 1, &b, err, sizeof(err)) == 0);
	y = dataset_info(b);
	CHECK(x->kind == y->kind && x->content == y->content && x->samples == y->samples &&
	      x->compressed == y->compressed && x->raw_bytes == y->raw_bytes &&
	      x->stored_bytes == y->stored_bytes && x->shards == y->shards);
	CHECK(!strcmp(x->fingerprint, y->fingerprint) && !strcmp(x->record_ext, y->record_ext));
	CHECK(!strcmp(y->fingerprint, catalog_meta_get(dataset_catalog(b), "fingerprint")));
	CHECK(dataset_source_count(b) == 1);
	CHECK_EQ_U64(dataset_source_offset(b, 0), 0);
	CHECK_EQ_U64(dataset_source_offset(b, 1), y->samples);
	CHECK(dataset_source_of(b, 9, &local) == 0 && local == 9);
	CHECK(!strcmp(dataset_source_info(b, 0)->fingerprint, y->fingerprint));
	CHECK(!strcmp(dataset_dir(b), dir));
	/* shard names as before: the file's name alone */
	CHECK(!strcmp(dataset_shard_name(b, 0), dataset_shard_name(a, 0)));
	CHECK(!strncmp(dataset_shard_name(b, 0), "shard-00000", 11));
	dataset_close(a);
	dataset_close(b);
}

/* pack a token dataset of `tokens` uint8..uint32 ids from a .bin input */
static void pack_tok(const char *name, enum token_dtype dt, uint64_t seq_len, uint64_t overlap,
		     int have_eod, uint64_t eod)
{
	struct pack_opts o;
	unsigned size = dtype_size(dt);
	uint8_t data[64 * 4];
	char in[64];

	pack_opts_init(&o);
	o.have_dtype = 1;
	o.dtype = dt;
	o.seq_len = seq_len;
	o.overlap = overlap;
	o.have_eod_token = have_eod;
	o.eod_token = eod;
	for (unsigned i = 0; i < 64; i++) {
		uint32_t v = i % 50;

		memcpy(data + i * size, &v, size); /* little-endian host */
	}
	snprintf(in, sizeof(in), "%s.bin", name);
	write_file(tmp_path(in), data, 64 * size);
	pack_one_or_fail(&o, tmp_path(in), tmp_path(name));
}

static void expect_refused(const char *x, const char *y, const char *what)
{
	char dx[512], dy[512], err[512] = "";
	const char *dirs[3];
	struct dataset *ds = NULL;
	int fds = count_fds(), rc;

	snprintf(dx, sizeof(dx), "%s", tmp_path(x));
	snprintf(dy, sizeof(dy), "%s", tmp_path(y));
	/* the odd one out third: each source is checked against the first */
	dirs[0] = dx;
	dirs[1] = dx;
	dirs[2] = dy;
	rc = dataset_open_sources(dirs, 3, &ds, err, sizeof(err));
	CHECK(rc == -EINVAL);
	CHECK(ds == NULL);
	CHECK(strstr(err, what) != NULL);
	CHECK(strstr(err, dx) && strstr(err, dy));
	CHECK(strstr(err, "a mixture needs one batch format") != NULL);
	CHECK(!strchr(err, '\n'));
	CHECK(count_fds() == fds);
	if (rc != -EINVAL || !strstr(err, what))
		fprintf(stderr, "  %s + %s: %d %s\n", x, y, rc, err);
	dataset_close(ds);
}

static void test_incompatible(void)
{
	struct pack_opts o;
	char err[512] = "";
	struct dataset *ds = NULL;

	pack_opts_init(&o);
	o.compress = 0;
	write_file(tmp_path("lines.txt"), "one\ntwo\nthree\n", 14);
	pack_one_or_fail(&o, tmp_path("lines.txt"), tmp_path("txt"));
	REQUIRE(mkdir(tmp_path("tree"), 0755) == 0);
	write_file(tmp_path("tree/a.txt"), "a", 1);
	write_file(tmp_path("tree/b.txt"), "b", 1);
	pack_one_or_fail(&o, tmp_path("tree"), tmp_path("files"));
	pack_tok("u16", DTYPE_UINT16, 8, 0, 0, 0);
	pack_tok("u16b", DTYPE_UINT16, 8, 0, 0, 0);
	pack_tok("u32", DTYPE_UINT32, 8, 0, 0, 0);
	pack_tok("u16L16", DTYPE_UINT16, 16, 0, 0, 0);
	pack_tok("u16ov", DTYPE_UINT16, 7, 1, 0, 0); /* windows of 8 tokens, overlapping */
	pack_tok("u16eod0", DTYPE_UINT16, 8, 0, 1, 0);
	pack_tok("u16eod1", DTYPE_UINT16, 8, 0, 1, 1);

	expect_refused(src_name[1], "u16", "differ in kind: records vs tokens");
	expect_refused(src_name[1], "files", "differ in content: text vs files");
	expect_refused(src_name[1], "txt", "differ in record_ext: json vs txt");
	expect_refused("u16", "u32", "differ in dtype: uint16 vs uint32");
	expect_refused("u16", "u16L16", "differ in seq_len: 8 vs 16");
	expect_refused("u16", "u16ov", "differ in overlap: 0 vs 1");
	expect_refused("u16", "u16eod0", "differ in eod_token: none vs 0");
	expect_refused("u16eod0", "u16eod1", "differ in eod_token: 0 vs 1");

	/* alike token datasets mix, whatever their compression */
	{
		char d1[512], d2[512];
		const char *dirs[2] = { d1, d2 };
		uint64_t len = 0;
		struct sample_reader *r;
		struct buf b = BUF_INIT;

		snprintf(d1, sizeof(d1), "%s", tmp_path("u16"));
		snprintf(d2, sizeof(d2), "%s", tmp_path("u16b"));
		REQUIRE(dataset_open_sources(dirs, 2, &ds, err, sizeof(err)) == 0);
		CHECK_EQ_U64(dataset_info(ds)->samples, 16);
		CHECK_EQ_U64(dataset_info(ds)->seq_len, 8);
		r = sample_reader_new(ds);
		REQUIRE(r);
		CHECK(sample_reader_raw_len(r, 15, &len) == 0 && len == 16);
		CHECK(sample_reader_read(r, 9, &b) == 0 && b.len == 16);
		/* token 8 of the input is the first of window 1 */
		CHECK(b.data[0] == 8 && b.data[1] == 0);
		buf_release(&b);
		sample_reader_free(r);
		dataset_close(ds);
	}

	/* no sources */
	ds = NULL;
	CHECK(dataset_open_sources(NULL, 0, &ds, err, sizeof(err)) == -EINVAL && ds == NULL);
	CHECK(err[0] != 0);
}

static void test_missing_and_leaks(void)
{
	char d0[512], d1[512], d2[512], err[512] = "";
	const char *dirs[3] = { d0, d1, d2 };
	struct dataset *ds = NULL;
	int fds = count_fds();

	snprintf(d0, sizeof(d0), "%s", tmp_path(src_name[0]));
	snprintf(d1, sizeof(d1), "%s", tmp_path(src_name[1]));
	snprintf(d2, sizeof(d2), "%s", tmp_path("no-such-dataset"));
	CHECK(dataset_open_sources(dirs, 3, &ds, err, sizeof(err)) == -ENOENT);
	CHECK(ds == NULL && strstr(err, d2) != NULL);
	CHECK(count_fds() == fds);

	/* a directory that is no dataset */
	snprintf(d2, sizeof(d2), "%s", tmp_path("tree"));
	CHECK(dataset_open_sources(dirs, 3, &ds, err, sizeof(err)) == -ENOENT);
	CHECK(ds == NULL && strstr(err, d2) && strstr(err, "not a zephon dataset"));
	CHECK(count_fds() == fds);

	/* a source whose shards are broken: found after the others' shards were opened,
	 * and those are closed again */
	{
		char shard[1100];

		snprintf(d2, sizeof(d2), "%s", tmp_path("broken"));
		snprintf(shard, sizeof(shard), "cp -r %s %s", d1, d2);
		REQUIRE(system(shard) == 0);
		snprintf(shard, sizeof(shard), "%s/shard-00001.idx", d2);
		REQUIRE(truncate(shard, 10) == 0);
		CHECK(dataset_open_sources(dirs, 3, &ds, err, sizeof(err)) == -EBADMSG);
		CHECK(ds == NULL && strstr(err, d2) != NULL);
		CHECK(count_fds() == fds);
	}
}

/* More samples than a union may number: refused before any shard is opened. */
static void test_overflow(void)
{
	char d0[512], d1[512], cmd[1200], err[512] = "";
	const char *dirs[2] = { d0, d1 };
	struct dataset *ds = NULL;
	sqlite3 *db;
	int fds = count_fds();

	snprintf(d0, sizeof(d0), "%s", tmp_path(src_name[1]));
	snprintf(d1, sizeof(d1), "%s", tmp_path("huge"));
	snprintf(cmd, sizeof(cmd), "cp -r %s %s", d0, d1);
	REQUIRE(system(cmd) == 0);
	snprintf(cmd, sizeof(cmd), "%s/%s", d1, CATALOG_FILE);
	REQUIRE(sqlite3_open(cmd, &db) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, "UPDATE meta SET value = '4611686018427387800' WHERE key = "
			     "'samples'", NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(db);
	CHECK(dataset_open_sources(dirs, 2, &ds, err, sizeof(err)) == -EOVERFLOW);
	CHECK(ds == NULL && strstr(err, "2^62") != NULL);
	CHECK(count_fds() == fds);
	/* alone, it is a dataset whose shards do not add up */
	CHECK(dataset_open(d1, &ds, err, sizeof(err)) == -EBADMSG && ds == NULL);
}

int main(void)
{
	scratch_init("dssrc");
	test_union_reads();
	test_single();
	test_incompatible();
	test_missing_and_leaks();
	test_overflow();
	rm_rf(tmp);
	return check_status();
}
