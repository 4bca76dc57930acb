/*
 * cache.h: the node-local cache of objects fetched from object storage (cache=DIR of a
 * mount), shared by every process on the node that opens the same DIR.
 *
 * Layout (COMPATIBILITY: CACHE_FORMAT names it; another one starts an empty cache):
 *   DIR/zephon-cache.lock   flock: shared by every open cache for its life; exclusive
 *                           briefly by the one that finds itself alone (it recounts usage)
 *   DIR/usage               8 bytes: the bytes of data held (a counter in a shared
 *                           mapping, updated with atomic adds by every process)
 *   DIR/ds/KEY/             one dataset (KEY: 32 hex digits of XXH3-128 of its endpoint,
 *                           bucket and prefix)
 *     lock                  flock: shared by each open of the dataset, exclusive by eviction;
 *                           its mtime is the dataset's last use
 *     whole/NAME.V          a whole object (catalog, index) of version V (16 hex digits of
 *                           XXH3-64 of its ETag and size), written whole and renamed in
 *     NAME.V.data           a partial object (a shard): sparse, the object's size; ranges
 *                           written as they are fetched
 *     NAME.V.map            its presence map: a 64-byte header (CACHE_MAP_MAGIC, size,
 *                           units), then one bit per unit (a sample's bytes): set, with an
 *                           atomic OR in a shared mapping, once the unit's bytes were
 *                           written. A set bit is a claim, not a proof: readers check what
 *                           they read (the sample's XXH3) and cache_obj_forget() a bad one.
 *
 * Eviction: whole datasets, least recently used first, and only those no live process
 * has open (their lock is free): within an epoch every sample is read once, so for the
 * data of datasets in use no byte is worth more than another until the next epoch, and
 * evicting some of it to admit other bytes of it would only trade one miss for another
 * (on a cyclic pass larger than the cache, LRU would miss every time). When the cap is
 * reached with nothing evictable, new bytes are not kept (cache_obj_write says so) and
 * readers use them from memory; the same when the disk is full (ENOSPC).
 *
 * Thread-safety: every call may be made from any thread; several processes may share
 * DIR (locks and atomic counters above).
 */
#ifndef ZEPHON_CACHE_H
#define ZEPHON_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define CACHE_FORMAT "zephon-cache-1"
#define CACHE_MAP_MAGIC "ZPHCMAP1"

struct cache_stats {
	uint64_t hits;           /* units read from the cache */
	uint64_t misses;         /* units that had to be fetched */
	uint64_t written;        /* bytes written into the cache */
	uint64_t not_kept;       /* bytes fetched but not kept (cap reached, disk full) */
	uint64_t evicted;        /* bytes of datasets evicted */
	uint64_t bad;            /* units whose cached bytes failed their check */
	uint64_t used;           /* bytes held now (all processes) */
	uint64_t cap;            /* the cap (0: none) */
	int full;                /* 1 once the disk said ENOSPC */
};

struct cache;
struct cache_ds;
struct cache_obj;

/* Open (creating it, mode 0700) the cache DIR with a cap of cap bytes (0: the disk's
 * free space is the only limit). 0, or -errno with a line in err: -ENOTDIR, -EACCES,
 * -EROFS (DIR cannot be made or written), -ENOMEM. */
int cache_open(const char *dir, uint64_t cap, struct cache **out, char *err, size_t errlen);
void cache_close(struct cache *c);
const char *cache_dir(const struct cache *c);
void cache_get_stats(struct cache *c, struct cache_stats *out);

/* The dataset of key text `id` (its endpoint, bucket and prefix), opened and held
 * shared (eviction leaves it alone until cache_ds_close). 0 or -errno (err says). */
int cache_ds_open(struct cache *c, const char *id, struct cache_ds **out, char *err,
		  size_t errlen);
void cache_ds_close(struct cache_ds *d);

/* The local path of whole object `name` at version (etag, size): into path (len bytes).
 * 1 when the cache has it, 0 when not (path then names where cache_whole_put puts it). */
int cache_whole_path(struct cache_ds *d, const char *name, const char *etag, uint64_t size,
		     char *path, size_t len);
/* Keep the len bytes of whole object name at version (etag, size == len); on success
 * path (len bytes) names it. Counted in the usage but never refused for the cap (a
 * mount needs its catalog and indexes). 0, or -ENOSPC (the disk is full: path then
 * empty), -errno. */
int cache_whole_put(struct cache_ds *d, const char *name, const char *etag, const void *data,
		    uint64_t size, char *path, size_t pathlen);

/* Partial object `name` at version (etag, size) of `units` units: its data and map
 * files opened (made when missing; a map of other size or units is replaced). 0, or
 * -errno with err. */
int cache_obj_open(struct cache_ds *d, const char *name, const char *etag, uint64_t size,
		   uint64_t units, struct cache_obj **out, char *err, size_t errlen);
void cache_obj_close(struct cache_obj *o);
/* 1 when unit k's bytes are held (its bit is set). */
int cache_obj_has(const struct cache_obj *o, uint64_t k);
/* Read len bytes at off from the data file into dst: 0 or -EIO. Counts a hit. */
int cache_obj_read(struct cache_obj *o, void *dst, uint64_t off, size_t len);
/* Write the len bytes at off (units [k0, k0 + n) lie wholly inside them), then set their
 * bits. 1 kept; 0 not kept (cap reached and nothing to evict, or the disk is full: not
 * an error, the caller serves the bytes from memory); -EIO. Counts n misses. */
int cache_obj_write(struct cache_obj *o, const void *src, uint64_t off, size_t len,
		    uint64_t k0, uint64_t n);
/* 0 when new bytes are not kept now (the disk said ENOSPC, or the cap is reached and
 * the last search found nothing to evict): a read-ahead would fetch for nothing. */
int cache_keeping(struct cache *c);
/* Unit k's bytes failed their check: clear its bit (and count it bad). */
void cache_obj_forget(struct cache_obj *o, uint64_t k);

#endif
