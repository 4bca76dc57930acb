/*
 * test_readahead.c: the server's read-ahead (core/readahead.c, server_readahead) over a
 * flat token dataset whose pages were evicted: after a rank's read at step t, the pages
 * of exactly its samples of steps t .. t + 1 + ahead are asked of the kernel and arrive,
 * the other rank's and later steps' stay on disk, and a read further on extends the
 * hints. Pages are observed with mincore(2) on a mapping of each shard; eviction is
 * POSIX_FADV_DONTNEED (where the scratch file system ignores it, e.g. tmpfs, the test
 * says so and passes nothing).
 */
#include <errno.h>
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
#include "test_files.h"

#define SAMPLES 256
#define SEQ 2048 /* uint16: one 4 KiB page per sample */

struct shards {
	size_t n;
	const unsigned char *map[SAMPLES];
	int fd[SAMPLES];
	uint64_t first[SAMPLES], count[SAMPLES];
};

static void make_dataset(void)
{
	uint16_t *tok = malloc(SAMPLES * SEQ * sizeof(*tok));
	struct pack_opts o;

	REQUIRE(tok);
	for (size_t i = 0; i < SAMPLES * SEQ; i++)
		tok[i] = (uint16_t)(i * 13 % 50000);
	write_file(tmp_path("big.bin"), tok, SAMPLES * SEQ * sizeof(*tok));
	free(tok);
	pack_opts_init(&o);
	o.shard_bytes = 64 << 10; /* 16 samples a shard: ids map to several files */
	o.have_dtype = 1;
	o.dtype = DTYPE_UINT16;
	o.seq_len = SEQ;
	o.compress = 0;
	pack_one_or_fail(&o, tmp_path("big.bin"), tmp_path("big"));
}

static void map_shards(const struct dataset *ds, struct shards *sh)
{
	memset(sh, 0, sizeof(*sh));
	sh->n = dataset_info(ds)->shards;
	for (size_t i = 0; i < sh->n; i++) {
		const char *dir, *file;
		char path[4096];
		struct stat st;

		REQUIRE(dataset_flat_shard(ds, i, &dir, &file, &sh->first[i], &sh->count[i]) == 0);
		snprintf(path, sizeof(path), "%s/%s", dir, file);
		sh->fd[i] = open(path, O_RDONLY | O_CLOEXEC);
		REQUIRE(sh->fd[i] >= 0 && fstat(sh->fd[i], &st) == 0 && st.st_size > 0);
		sh->map[i] = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, sh->fd[i], 0);
		REQUIRE(sh->map[i] != MAP_FAILED);
	}
}

/* Drop every shard page from the page cache: 0, or -1 where they stay. */
static int evict(struct shards *sh)
{
	for (size_t i = 0; i < sh->n; i++) {
		fdatasync(sh->fd[i]);
		posix_fadvise(sh->fd[i], 0, 0, POSIX_FADV_DONTNEED);
	}
	for (size_t i = 0; i < sh->n; i++) {
		unsigned char v = 0;

		if (mincore((void *)sh->map[i], 1, &v) || (v & 1))
			return -1;
	}
	return 0;
}

static int resident(const struct shards *sh, uint64_t id)
{
	for (size_t i = 0; i < sh->n; i++)
		if (id >= sh->first[i] && id < sh->first[i] + sh->count[i]) {
			unsigned char v = 0;
			const unsigned char *p = sh->map[i] + (id - sh->first[i]) * SEQ * 2;

			REQUIRE(mincore((void *)p, 1, &v) == 0);
			return v & 1;
		}
	REQUIRE(!"an id of no shard");
	return 0;
}

/* Rank's ids of the step at gsn (share 4). */
static void share_of(struct server *s, uint64_t rank, uint64_t gsn, uint64_t ids[4])
{
	REQUIRE(server_share_ids(s, rank, gsn, ids) == 0);
}

/* Wait (up to 20 s: the hints run on the server's thread) until every sample of rank's
 * steps [from, to) (gsns, B = 8) is in memory. 1 when they all arrived. */
static int arrived(struct server *s, const struct shards *sh, uint64_t rank, uint64_t from,
		   uint64_t to)
{
	double until = clock_mono_s() + 20;

	for (;;) {
		int all = 1;

		for (uint64_t g = from; g < to && all; g += 8) {
			uint64_t ids[4];

			share_of(s, rank, g, ids);
			for (int k = 0; k < 4; k++)
				all &= resident(sh, ids[k]);
		}
		if (all)
			return 1;
		if (clock_mono_s() > until)
			return 0;
		usleep(1000);
	}
}

static int none_resident(struct server *s, const struct shards *sh, uint64_t rank,
			 uint64_t from, uint64_t to)
{
	for (uint64_t g = from; g < to; g += 8) {
		uint64_t ids[4];

		share_of(s, rank, g, ids);
		for (int k = 0; k < 4; k++)
			if (resident(sh, ids[k]))
				return 0;
	}
	return 1;
}

static void test_hints_the_ranks_coming_pages(void)
{
	char err[512] = "";
	struct dataset *ds;
	struct rankset ranks;
	struct server_config cfg;
	struct server *s;
	struct shards sh;

	REQUIRE(dataset_open(tmp_path("big"), &ds, err, sizeof(err)) == 0);
	REQUIRE(rankset_parse("0-1", 2, &ranks, err, sizeof(err)) == 0);
	memset(&cfg, 0, sizeof(cfg));
	cfg.layout = (struct layout){ .world_size = 2, .global_batch = 8, .micro_batch = 4 };
	cfg.ranks = &ranks;
	REQUIRE(order_init(&cfg.order, SAMPLES, 5, ORDER_SHUFFLE_GLOBAL) == 0);
	cfg.format = FORMAT_BIN;
	cfg.prefetch = 0;  /* no decode reads a page */
	cfg.workers = 1;
	cfg.readahead = 4 * 4 * SEQ * 2; /* 4 steps of a rank's share */
	REQUIRE(server_new(ds, &cfg, NULL, &s) == 0);
	map_shards(ds, &sh);
	if (evict(&sh)) {
		printf("test_readahead: the scratch file system keeps evicted pages (tmpfs?): "
		       "nothing to observe, skipped\n");
	} else {
		/* a read of step 0: steps 0 .. 4 of rank 0 (1 + 4 ahead) */
		server_readahead(s, 0, 0, 1, 0);
		CHECK(arrived(s, &sh, 0, 0, 5 * 8));
		CHECK(none_resident(s, &sh, 1, 0, 5 * 8));  /* the other rank's: not asked */
		CHECK(none_resident(s, &sh, 0, 5 * 8, 12 * 8)); /* beyond the window */
		/* a read of step 2 with less than half the window left: steps 5 and 6 */
		server_readahead(s, 0, 2 * 8, 1, 0);
		CHECK(arrived(s, &sh, 0, 5 * 8, 7 * 8));
		CHECK(none_resident(s, &sh, 0, 7 * 8, 12 * 8));
		/* an unserved rank and a read past the end: nothing, no error */
		server_readahead(s, 9, 0, 1, 0);
		server_readahead(s, 0, UINT64_C(1) << 62, 1, 0);
	}
	server_free(s);
	for (size_t i = 0; i < sh.n; i++)
		close(sh.fd[i]);
	rankset_release(&ranks);
	dataset_close(ds);
}

int main(void)
{
	scratch_init("readahead");
	make_dataset();
	test_hints_the_ranks_coming_pages();
	rm_rf(tmp);
	return check_status();
}
