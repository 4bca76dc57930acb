/*
 * test_readahead.c: the server's read-ahead (core/serve/readahead.c, server_readahead) over a
 * flat token dataset whose pages were evicted: after a rank's read at step t, the pages
 * of exactly its samples of steps t .. t + 1 + ahead are asked of the kernel and arrive,
 * the other rank's and later steps' stay on disk, and a read further on extends the
 * hints; the index pages of the hinted samples are asked for where the reader checks
 * samples against them (next, from/) and not for ids/; a dataset found in the page cache
 * (dataset_resident) costs no ids and no hint. Pages are observed with mincore(2)
 * on a mapping of each shard and index file; eviction is POSIX_FADV_DONTNEED (where the
 * scratch file system ignores it, e.g. tmpfs, the test says so and passes nothing).
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "clock.h"
#include "dataset.h"
#include "pack.h"
#include "serve.h"
#include "shard_index.h"
#include "test_files.h"
#include "test_layout.h"

#define SAMPLES 256
#define SEQ 2048 /* uint16: one 4 KiB page per sample */
#define MAX_SHARDS 64

/* The shard and index files of a dataset, mapped; seq: tokens per sample. */
struct shards {
	size_t n;
	uint64_t seq;
	const unsigned char *map[MAX_SHARDS], *idx[MAX_SHARDS];
	int fd[MAX_SHARDS], ifd[MAX_SHARDS];
	uint64_t first[MAX_SHARDS], count[MAX_SHARDS], idx_len[MAX_SHARDS];
};

/* Dataset `name`: samples windows of seq uint16 tokens, shard_bytes per shard. */
static void make_dataset(const char *name, uint64_t samples, uint64_t seq, uint64_t shard_bytes)
{
	uint16_t *tok = malloc(samples * seq * sizeof(*tok));
	char in[64];
	struct pack_opts o;

	REQUIRE(tok);
	for (size_t i = 0; i < samples * seq; i++)
		tok[i] = (uint16_t)(i * 13 % 50000);
	snprintf(in, sizeof(in), "%s.bin", name);
	write_file(tmp_path(in), tok, samples * seq * sizeof(*tok));
	free(tok);
	pack_opts_init(&o);
	o.shard_bytes = shard_bytes;
	o.have_dtype = 1;
	o.dtype = DTYPE_UINT16;
	o.seq_len = seq;
	o.compress = 0;
	pack_one_or_fail(&o, tmp_path(in), tmp_path(name));
}

static const unsigned char *map_file(const char *path, int *fd, uint64_t *len)
{
	struct stat st;
	const unsigned char *m;

	*fd = open(path, O_RDONLY | O_CLOEXEC);
	REQUIRE(*fd >= 0 && fstat(*fd, &st) == 0 && st.st_size > 0);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, *fd, 0);
	REQUIRE(m != MAP_FAILED);
	*len = (uint64_t)st.st_size;
	return m;
}

static void map_shards(const struct dataset *ds, uint64_t seq, struct shards *sh)
{
	memset(sh, 0, sizeof(*sh));
	sh->n = dataset_info(ds)->shards;
	sh->seq = seq;
	REQUIRE(sh->n <= MAX_SHARDS);
	for (size_t i = 0; i < sh->n; i++) {
		const char *dir, *file;
		char path[4096];
		uint64_t len;

		REQUIRE(dataset_flat_shard(ds, i, &dir, &file, &sh->first[i], &sh->count[i]) == 0);
		snprintf(path, sizeof(path), "%s/%s", dir, file);
		sh->map[i] = map_file(path, &sh->fd[i], &len);
		/* the index beside the shard: shard-NNNNN.raw's is shard-NNNNN.idx */
		REQUIRE(strlen(path) > 4);
		memcpy(path + strlen(path) - 4, ".idx", 4);
		sh->idx[i] = map_file(path, &sh->ifd[i], &sh->idx_len[i]);
	}
}

static void unmap_shards(struct shards *sh)
{
	for (size_t i = 0; i < sh->n; i++) {
		close(sh->fd[i]);
		close(sh->ifd[i]);
	}
}

static int page_in(const unsigned char *p)
{
	unsigned char v = 0;
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);

	REQUIRE(mincore((void *)((uintptr_t)p & ~(page - 1)), 1, &v) == 0);
	return v & 1;
}

/* fn(fd) on every file of dataset `name`, opened read-only. */
static void each_file(const char *name, void (*fn)(int fd))
{
	DIR *d = opendir(tmp_path(name));
	struct dirent *e;

	REQUIRE(d);
	while ((e = readdir(d))) {
		char path[4096];
		int fd;

		snprintf(path, sizeof(path), "%s/%s", tmp_path(name), e->d_name);
		if (e->d_name[0] == '.' || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		fn(fd);
		close(fd);
	}
	closedir(d);
}

static void evict_fd(int fd)
{
	fdatasync(fd); /* dirty pages stay */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

/* Drop the pages of every file of dataset `name` from the page cache, before it is
 * opened: once a mapping holds a page of a large folio (a file just written is cached in
 * them), the whole folio stays. */
static void evict_files(const char *name)
{
	each_file(name, evict_fd);
}

static void cache_fd(int fd)
{
	static char buf[1 << 16];

	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

/* Read every file of dataset `name` into the page cache with read(2): no mapping holds
 * its pages, so evict_files() can drop them again. */
static void cache_files(const char *name)
{
	each_file(name, cache_fd);
}

/* Whether the shard and index pages are out of the page cache (evict_files() before the
 * dataset's open; its header and flat-check pages aside): 0, or -1 where they stay. */
static int evicted(struct shards *sh)
{
	for (size_t i = 0; i < sh->n; i++)
		if (page_in(sh->map[i]) ||
		    (sh->idx_len[i] > (4u << 12) && page_in(sh->idx[i] + sh->idx_len[i] / 2)))
			return -1; /* (a one-page index is the header page the dataset maps) */
	return 0;
}

/* The shard of id. */
static size_t shard_of(const struct shards *sh, uint64_t id)
{
	for (size_t i = 0; i < sh->n; i++)
		if (id >= sh->first[i] && id < sh->first[i] + sh->count[i])
			return i;
	REQUIRE(!"an id of no shard");
	return 0;
}

/* Whether sample id's first payload page is in memory. */
static int resident(const struct shards *sh, uint64_t id)
{
	size_t i = shard_of(sh, id);

	return page_in(sh->map[i] + (id - sh->first[i]) * sh->seq * 2);
}

/* The index entry of sample id, in its index mapping. */
static const unsigned char *entry_of(const struct shards *sh, uint64_t id)
{
	size_t i = shard_of(sh, id);

	return sh->idx[i] + shard_index_size(id - sh->first[i]);
}

/* Whether sample id's index entry is in memory. */
static int entry_resident(const struct shards *sh, uint64_t id)
{
	return page_in(entry_of(sh, id));
}

/* Rank's ids of the step at gsn (share 4). */
static void share_of(struct server *s, uint64_t rank, uint64_t gsn, uint64_t ids[4])
{
	REQUIRE(server_share_ids(s, rank, gsn, ids) == 0);
}

/* Wait (up to 20 s: the hints run on the server's thread) until in_memory(sh, id) holds
 * for every sample id of rank's steps [from, to) (gsns, B = 8): resident() for their
 * payloads, entry_resident() for their index entries. 1 when they all arrived. */
static int arrived_by(struct server *s, const struct shards *sh, uint64_t rank,
		      uint64_t from, uint64_t to,
		      int (*in_memory)(const struct shards *, uint64_t))
{
	double until = clock_mono_s() + 20;

	for (;;) {
		int all = 1;

		for (uint64_t g = from; g < to && all; g += 8) {
			uint64_t ids[4];

			share_of(s, rank, g, ids);
			for (int k = 0; k < 4; k++)
				all &= in_memory(sh, ids[k]);
		}
		if (all)
			return 1;
		if (clock_mono_s() > until)
			return 0;
		usleep(1000);
	}
}

static int arrived(struct server *s, const struct shards *sh, uint64_t rank, uint64_t from,
		   uint64_t to)
{
	return arrived_by(s, sh, rank, from, to, resident);
}

/* How many of rank's samples of the steps [from, to) (gsns) have their page in memory. */
static int count_resident(struct server *s, const struct shards *sh, uint64_t rank,
			  uint64_t from, uint64_t to)
{
	int n = 0;

	for (uint64_t g = from; g < to; g += 8) {
		uint64_t ids[4];

		share_of(s, rank, g, ids);
		for (int k = 0; k < 4; k++)
			n += resident(sh, ids[k]);
	}
	return n;
}

static int none_resident(struct server *s, const struct shards *sh, uint64_t rank,
			 uint64_t from, uint64_t to)
{
	return count_resident(s, sh, rank, from, to) == 0;
}

/* A server over dataset `name` (samples windows of seq tokens), W=2, B=8, m=4 (a share of
 * 4), both ranks, no prefetch (no decode reads a page), readahead 4 steps of a share; its
 * files evicted before the open and mapped after. */
struct fixture {
	struct dataset *ds;
	struct rankset ranks;
	struct server_config cfg;
	struct server *s;
	struct shards sh;
};

/* 0, or -1 (said) where the scratch file system keeps evicted pages: nothing to observe. */
static int setup(struct fixture *fx, const char *name, uint64_t samples, uint64_t seq)
{
	char err[512] = "";

	memset(fx, 0, sizeof(*fx));
	evict_files(name);
	REQUIRE(dataset_open(tmp_path(name), &fx->ds, err, sizeof(err)) == 0);
	REQUIRE(rankset_parse("0-1", 2, &fx->ranks, err, sizeof(err)) == 0);
	fx->cfg.layout = test_layout(2, 8, 4, 0, 0);
	fx->cfg.ranks = &fx->ranks;
	REQUIRE(order_init(&fx->cfg.order, samples, 5, ORDER_SHUFFLE_GLOBAL) == 0);
	fx->cfg.format = FORMAT_BIN;
	fx->cfg.workers = 1;
	fx->cfg.readahead = 4 * 4 * seq * 2;
	REQUIRE(server_new(fx->ds, &fx->cfg, NULL, &fx->s) == 0);
	map_shards(fx->ds, seq, &fx->sh);
	if (evicted(&fx->sh)) {
		printf("test_readahead: the scratch file system keeps evicted pages (tmpfs?): "
		       "nothing to observe, skipped\n");
		return -1;
	}
	return 0;
}

static void teardown(struct fixture *fx)
{
	server_free(fx->s);
	unmap_shards(&fx->sh);
	rankset_release(&fx->ranks);
	dataset_close(fx->ds);
}

static void test_hints_the_ranks_coming_pages(void)
{
	struct fixture fx;
	struct server *s;

	if (!setup(&fx, "big", SAMPLES, SEQ)) {
		s = fx.s;
		/* a read of step 0: steps 0 .. 4 of rank 0 (1 + 4 ahead) */
		server_readahead(s, 0, 0, 1, 0);
		CHECK(arrived(s, &fx.sh, 0, 0, 5 * 8));
		CHECK(none_resident(s, &fx.sh, 1, 0, 5 * 8));  /* the other rank's: not asked */
		CHECK(none_resident(s, &fx.sh, 0, 5 * 8, 12 * 8)); /* beyond the window */
		/* a read of step 2 with less than half the window left: steps 5 and 6 */
		server_readahead(s, 0, 2 * 8, 1, 0);
		CHECK(arrived(s, &fx.sh, 0, 5 * 8, 7 * 8));
		CHECK(none_resident(s, &fx.sh, 0, 7 * 8, 12 * 8));
		/* an unserved rank and a read past the end: nothing, no error */
		server_readahead(s, 9, 0, 1, 0);
		server_readahead(s, 0, UINT64_C(1) << 62, 1, 0);
	}
	teardown(&fx);
}

static uintptr_t page_of(const unsigned char *p)
{
	return (uintptr_t)p & ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
}

/* Whether the index page of rank's sample entry e is one that is in memory for another
 * reason: the first and last of the index (the flat check reads them), or a page of
 * rank 0's entries of the steps [0, to). */
static int entry_page_shared(struct server *s, const struct shards *sh, const unsigned char *e,
			     uint64_t to)
{
	int shared = page_of(e) == page_of(sh->idx[0]) ||
		     page_of(e) == page_of(sh->idx[0] + sh->idx_len[0] - 1);

	for (uint64_t h = 0; h < to && !shared; h += 8) {
		uint64_t mine[4];

		share_of(s, 0, h, mine);
		for (int q = 0; q < 4; q++)
			shared |= page_of(entry_of(sh, mine[q])) == page_of(e);
	}
	return shared;
}

/* A reader that checks samples against their index (checked: next, from/) gets the
 * index pages of its coming samples asked for with the payloads; one that gathers them
 * itself (ids/) does not. "wide": 65,536 samples of 8 tokens in one shard, so that the
 * index spans 384 pages and the samples of a few steps fall on pages of their own. */
static void test_checked_readers_get_index_pages(void)
{
	struct fixture fx;
	struct server *s;
	int clean = 1;

	if (!setup(&fx, "wide", 65536, 8)) {
		s = fx.s;
		REQUIRE(fx.sh.n == 1);
		server_readahead(s, 0, 0, 1, 1);  /* rank 0 checks: steps 0 .. 4 */
		CHECK(arrived(s, &fx.sh, 0, 0, 5 * 8));
		CHECK(arrived_by(s, &fx.sh, 0, 0, 5 * 8, entry_resident));
		server_readahead(s, 1, 0, 1, 0);  /* rank 1 gathers itself (ids/) */
		CHECK(arrived(s, &fx.sh, 1, 0, 5 * 8));
		for (uint64_t g = 0; g < 5 * 8; g += 8) {
			uint64_t ids[4];

			share_of(s, 1, g, ids);
			for (int k = 0; k < 4; k++)
				if (!entry_page_shared(s, &fx.sh, entry_of(&fx.sh, ids[k]), 5 * 8) &&
				    entry_resident(&fx.sh, ids[k]))
					clean = 0;
		}
		CHECK(clean);
	}
	teardown(&fx);
}

static struct server_stats stats_of(struct server *s)
{
	struct server_stats st;

	server_get_stats(s, &st);
	return st;
}

/* Wait (up to 20 s) until the read-ahead has run `runs` times (resident or not). */
static int ran(struct server *s, uint64_t runs)
{
	double until = clock_mono_s() + 20;

	for (;;) {
		struct server_stats st = stats_of(s);

		if (st.readahead_resident + (st.readahead_samples ? 1 : 0) >= runs)
			return 1;
		if (clock_mono_s() > until)
			return 0;
		usleep(1000);
	}
}

/* dataset_resident(): 1 once every file was read, 0 once evicted; the index counts for
 * a checking reader only ("wide": a 384-page index beside a 256-page payload). */
static void test_dataset_resident(void)
{
	struct fixture fx;
	uint64_t seed = 42;

	if (!setup(&fx, "wide", 65536, 8)) {
		CHECK(!dataset_resident(fx.ds, HINT_FLAT, &seed));
		cache_files("wide");
		CHECK(dataset_resident(fx.ds, HINT_FLAT, &seed));
		CHECK(dataset_resident(fx.ds, HINT_FLAT | HINT_INDEX, &seed));
		for (size_t i = 0; i < fx.sh.n; i++) /* the index alone leaves */
			posix_fadvise(fx.sh.ifd[i], 0, 0, POSIX_FADV_DONTNEED);
		CHECK(dataset_resident(fx.ds, HINT_FLAT, &seed));
		CHECK(!dataset_resident(fx.ds, HINT_FLAT | HINT_INDEX, &seed));
		CHECK(!dataset_resident(fx.ds, 0, &seed));
	}
	teardown(&fx);
}

/* A dataset in the page cache costs the read-ahead no ids (the order's work) and no
 * hint; once it leaves, the next run computes and hints again, and the pages arrive. */
static void test_resident_dataset_is_not_hinted(void)
{
	struct fixture fx;
	struct server *s;

	if (!setup(&fx, "big", SAMPLES, SEQ)) {
		s = fx.s;
		cache_files("big");
		server_readahead(s, 0, 0, 1, 0);
		CHECK(ran(s, 1));
		CHECK(stats_of(s).readahead_resident == 1 && stats_of(s).readahead_samples == 0);
		evict_files("big");
		CHECK(none_resident(s, &fx.sh, 0, 10 * 8, 15 * 8));
		server_readahead(s, 0, 10 * 8, 1, 0); /* past the window: a run of its own */
		CHECK(arrived(s, &fx.sh, 0, 10 * 8, 15 * 8));
		CHECK(ran(s, 2)); /* its counts follow its hints */
		CHECK(stats_of(s).readahead_resident == 1 && stats_of(s).readahead_samples >= 5 * 4);
	}
	teardown(&fx);
}

/* A reader of the pure reads' pool (at/, from/) whose batches found the dataset in
 * memory skips its next probes; the read-ahead (which once borrowed such a reader) must
 * still send its hints once the dataset has left memory. */
static void test_hints_ignore_a_pool_readers_skip(void)
{
	struct fixture fx;
	struct server *s;

	if (!setup(&fx, "big", SAMPLES, SEQ)) {
		s = fx.s;
		cache_files("big");
		for (int k = 0; k < 3; k++) { /* three hot batches: the reader skips the next 7 */
			struct share sh = { SHARE_AT, 1, 0 };
			struct batch *b;

			REQUIRE(server_share(s, &sh, &b) == 0);
			server_batch_free(s, b);
		}
		evict_files("big");
		/* (pages the batches mapped stay: at least half of the 20 leave) */
		CHECK(count_resident(s, &fx.sh, 0, 10 * 8, 15 * 8) <= 10);
		server_readahead(s, 0, 10 * 8, 1, 0);
		CHECK(arrived(s, &fx.sh, 0, 10 * 8, 15 * 8));
	}
	teardown(&fx);
}

int main(void)
{
	scratch_init("readahead");
	make_dataset("big", SAMPLES, SEQ, 64 << 10); /* 16 samples a shard: several files */
	make_dataset("wide", 65536, 8, 4 << 20);
	test_hints_the_ranks_coming_pages();
	test_checked_readers_get_index_pages();
	test_dataset_resident();
	test_resident_dataset_is_not_hinted();
	test_hints_ignore_a_pool_readers_skip();
	rm_rf(tmp);
	return check_status();
}
