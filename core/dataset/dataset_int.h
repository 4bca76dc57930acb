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
	struct ds_rshard *remote; /* a shard in object storage (dataset_remote.c): fd -1, data
	                          * NULL, index mapped from the node cache; NULL when local */
};

/* One packed dataset directory of the dataset (a union has several). */
struct ds_source {
	char *dir;
	struct dataset_info info;  /* its own, as in its catalog */
	struct catalog cat;
	ZSTD_DDict *ddict;       /* NULL without a dictionary */
	uint64_t offset;         /* dataset id of its sample 0 */
	size_t first_shard;      /* its shards: ds->shards[first_shard, + info.shards) */
	struct ds_rsource *remote; /* an s3:// source (dataset_remote.c); NULL when local */
};

struct dataset {
	struct dataset_info info;  /* of the whole: a single source's own, or the union's */
	struct ds_source *src;
	size_t nsrc;
	struct ds_shard *shards; /* every source's in order; first_sample ascending */
	size_t nshards;
	struct ds_remote *remote; /* the client and node cache of its s3:// sources; NULL when
	                           * every source is local */
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
	int check_failed;        /* the last read's bytes came but failed a check */
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

/* Map the open index file ifd (closed here) of shard s, catalog row cs, named name in
 * messages, and check its header against the catalog. 0, -EBADMSG, -EIO (err says). */
int dataset_map_index(int ifd, const char *name, const struct catalog_shard *cs,
		      struct ds_shard *s, char *err, size_t errlen);

/* dataset_remote.c: sources in object storage (s3.h), through the node cache (cache.h).
 * Catalog of source src at url: fetched (or found in the cache), its local path into
 * *path (malloc). 0 or -errno with err (the message names the URL). */
int dsr_fetch_catalog(struct dataset *ds, struct ds_source *src, const char *url, char **path,
		      char *err, size_t errlen);
/* Every shard of remote source si: size and ETag of each object (HEADs in parallel,
 * checked against the catalog), its index fetched (or found) and mapped, its cache
 * object opened. 0 or -errno with err. */
int dsr_open_shards(struct dataset *ds, size_t si, char *err, size_t errlen);
/* The bytes of sample id of remote shard s (entry e checked) into dst: from the node
 * cache, else fetched (waiting for a read-ahead already in flight). fresh: bypass the
 * cache (its bytes failed their check: forget them first). 0, or -EIO, -ENOMEM with
 * why (one line, names the object). */
int dsr_read(const struct dataset *ds, const struct ds_shard *s, uint64_t id,
	     const struct shard_index_entry *e, void *dst, int fresh, char *why, size_t whylen);
/* Fetch ahead the samples ids[0..count) of remote shards that are neither cached nor in
 * flight, coalesced (DSR_GAP, DSR_REQ_MAX). wait: block while the read-ahead bytes in
 * flight pass DSR_INFLIGHT_MAX (the read-ahead thread); 0: never block (a batch). */
void dsr_want(const struct dataset *ds, const uint64_t *ids, size_t count, int wait);
/* Whether sample id of remote shard s is in the node cache. */
int dsr_cached(const struct ds_shard *s, uint64_t id);
/* Free the remote state of ds (its shards' cache objects, sources, client, cache). */
void dsr_free(struct dataset *ds);

/* The fingerprint of a union of count sources whose fingerprints (32 hex digits each)
 * are fps[0..count), into out (dataset_open_sources() states the rule). 0 or -ENOMEM. */
int dataset_union_fingerprint(const char *const *fps, size_t count, char out[33]);

#endif
