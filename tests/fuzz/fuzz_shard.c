/* fuzz_shard.c: corrupt a packed shard and read every sample back: each read either
 * returns exactly the packed bytes or fails with EIO (docs/design.md §8: "wrong bytes
 * are never served"). The input is a list of edits (u16 little-endian offset, u8 xor
 * mask) applied to the shard file of a small dataset packed once per process. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../unit/scratch.h"
#include "dataset.h"
#include "fuzz.h"
#include "pack.h"

#define N_SAMPLES 40

static char *dir; /* the scratch directory (scratch.h) */
static char ds_path[128], shard_path[160];
static uint8_t *original;
static size_t original_len;
static struct buf expect[N_SAMPLES];

static void cleanup(void)
{
	rm_rf(dir);
	free(dir);
}

static void setup(void)
{
	char in[128], err[512];
	const char *inputs[1] = { in };
	struct pack_opts o;
	struct pack_result res;
	FILE *f;
	int fd;
	struct stat sb;

	dir = scratch_dir("fuzz-shard");
	atexit(cleanup);
	snprintf(in, sizeof(in), "%s/in.jsonl", dir);
	snprintf(ds_path, sizeof(ds_path), "%s/ds", dir);
	f = fopen(in, "w");
	for (int i = 0; i < N_SAMPLES; i++) {
		char line[128];
		int n = snprintf(line, sizeof(line), "{\"i\": %d, \"t\": \"%.*s\"}", i, i % 37,
				 "lorem ipsum dolor sit amet consectetur adipiscing");

		fprintf(f, "%s\n", line);
		buf_append(&expect[i], line, (size_t)n);
	}
	fclose(f);
	pack_opts_init(&o);
	o.inputs = inputs;
	o.ninputs = 1;
	o.out = ds_path;
	o.threads = 1;
	if (pack_run(&o, &res, err, sizeof(err))) {
		fprintf(stderr, "pack: %s\n", err);
		abort();
	}
	snprintf(shard_path, sizeof(shard_path), "%s/shard-00000.zst", ds_path);
	chmod(shard_path, 0644);
	fd = open(shard_path, O_RDONLY);
	if (fd < 0 || fstat(fd, &sb))
		abort();
	original_len = (size_t)sb.st_size;
	original = malloc(original_len);
	if (!original || read(fd, original, original_len) != (ssize_t)original_len)
		abort();
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *shard;
	struct dataset *ds;
	struct sample_reader *r;
	struct buf b = BUF_INIT;
	char err[512];
	int fd;

	if (!original)
		setup();
	shard = malloc(original_len);
	if (!shard)
		abort();
	memcpy(shard, original, original_len);
	for (size_t i = 0; i + 3 <= size; i += 3) {
		size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % original_len;

		shard[off] ^= data[i + 2];
	}
	fd = open(shard_path, O_WRONLY | O_TRUNC);
	if (fd < 0 || write(fd, shard, original_len) != (ssize_t)original_len)
		abort();
	close(fd);
	free(shard);
	if (dataset_open(ds_path, &ds, err, sizeof(err)))
		abort(); /* same size: the catalog still matches */
	r = sample_reader_new(ds);
	for (uint64_t id = 0; id < N_SAMPLES; id++) {
		int rc;

		b.len = 0;
		rc = sample_reader_read(r, id, &b);
		if (rc == 0 && (b.len != expect[id].len || memcmp(b.data, expect[id].data, b.len)))
			__builtin_trap(); /* wrong bytes: the one thing that must never happen */
		if (rc != 0 && (rc != -EIO || b.len != 0))
			__builtin_trap();
	}
	sample_reader_free(r);
	dataset_close(ds);
	buf_release(&b);
	return 0;
}
