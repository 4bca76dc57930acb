/*
 * dataset_int.h: what the files of the dataset reader share (dataset.h is the API):
 * the open dataset (one or several packed directories, its sources), its shards and the
 * sample reader. dataset.c opens a dataset, dataset_read.c
 * reads samples, dataset_warm.c asks the kernel to read a cold batch's pages ahead,
 * dataset_verify.c checks every sample. Internal to core/dataset/dataset*.c. An open dataset is
 * read-only and shared by every thread; a sample reader has one owner at a time.
 */
#ifndef ZEPHON_DATASET_INT_H
#define ZEPHON_DATASET_INT_H

#include <stddef.h>
#include <stdint.h>

#include <zstd.h>

#include "catalog.h"
#include "dataset.h"
#include "shard_index.h"

/* One shard file of one source. Sample ids here are the dataset's: a source's local id i
 * is dataset id source->offset + i, so entry k of the index holds id first_sample + k
 * whatever first_sample its header (local) says. */
struct ds_shard {
	const char *file;        /* for messages: the catalog's name (in its source's cat);
	                          * "<source dir>/<name>" (owned: file_alloc) in a union */
	char *file_alloc;        /* NULL, or the owned file above */
	int fd;
	const uint8_t *data;     /* the payload file mapped read-only, or NULL (then pread) */
	const uint8_t *index;    /* mmapped .idx */
	size_t index_len;
	uint64_t first_sample;   /* dataset id of index entry 0 */
	uint64_t count;
	uint64_t bytes;          /* payload file size */
	int compressed;          /* its source's compress=zstd */
	const ZSTD_DDict *ddict; /* its source's dictionary; NULL without one */
	size_t source;           /* index into ds->src */
};

/* One packed dataset directory of the dataset (a union has several). */
struct ds_source {
	char *dir;
	struct dataset_info info;  /* its own, as in its catalog */
	struct catalog cat;
	ZSTD_DDict *ddict;       /* NULL without a dictionary */
	uint64_t offset;         /* dataset id of its sample 0 */
	size_t first_shard;      /* its shards: ds->shards[first_shard, + info.shards) */
};

struct dataset {
	struct dataset_info info;  /* of the whole: a single source's own, or the union's */
	struct ds_source *src;
	size_t nsrc;
	struct ds_shard *shards; /* every source's in order; first_sample ascending */
	size_t nshards;
};

struct sample_reader {
	const struct dataset *ds;
	ZSTD_DCtx *dctx;
	struct buf scratch;      /* compressed payload */
	unsigned warm_hot;       /* sample_reader_warm(): probes in a row that found all in memory */
	unsigned warm_skip;      /* batches it lets pass before its next probe */
	int warm_known;          /* warm_window is set (at the first cold batch) */
	uint64_t warm_window;    /* dataset_warm.c's window for r->ds, see WARM_WINDOW;
	                          * 0: the payload's own pages */
	char err[320];
};

/* dataset.c */
/* The shard holding id (< N): binary search over first_sample. */
const struct ds_shard *dataset_find_shard(const struct dataset *ds, uint64_t id);
/* The index entry of sample id (of shard s) in the index mapping. */
const uint8_t *dataset_entry_at(const struct ds_shard *s, uint64_t id);
/* Read the index entry of sample id (of shard s) out of the index mapping: 0, or -EIO
 * when the read faulted (the index file was truncated under us, or its disk failed). */
int dataset_entry_read(const struct ds_shard *s, uint64_t id, struct shard_index_entry *e);

/* The fingerprint of a union of count sources whose fingerprints (32 hex digits each)
 * are fps[0..count), into out (dataset_open_sources() states the rule). 0 or -ENOMEM. */
int dataset_union_fingerprint(const char *const *fps, size_t count, char out[33]);

#endif
