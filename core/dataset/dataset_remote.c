/* dataset_remote.c: the sources of a dataset that live in object storage (dataset.h,
 * "Datasets in object storage"): their catalog and indexes fetched whole into the node
 * cache, their samples fetched by byte range, exactly the samples read or read ahead,
 * coalesced, many at a time, and kept in the node cache (core/remote/cache.h).
 *
 * Locking: one mutex per dataset (struct ds_remote.lock) guards the in-flight marks of
 * every remote shard and the read-ahead bytes in flight; its condition variable is
 * signalled when a fetch ends. Cache bits are atomics of cache.c and need no lock. */
#include "dataset_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache.h"
#include "clock.h"
#include "s3.h"

/* Coalescing: two samples wanted from one shard go in one ranged GET when at most
 * DSR_GAP bytes lie between them (the gap is fetched too: a request costs the server
 * and the link about as much as a few KiB of bytes, tests/bench/RESULTS.md "Object
 * storage"), up to DSR_REQ_MAX bytes a request (a larger one would hold back the samples
 * at its end behind the rest); and at most DSR_INFLIGHT_MAX bytes of read-ahead in
 * flight per dataset (400 Mbit/s x 20 ms is 1 MB: 32 MiB is the product of a link 30
 * times faster or further away, and bounds the memory of fetches in flight). */
#define DSR_GAP (UINT64_C(4) << 10)
#define DSR_REQ_MAX (UINT64_C(1) << 20)
#define DSR_INFLIGHT_MAX (UINT64_C(32) << 20)
/* Fetched bytes that the cache did not keep (its cap reached, the disk full) wait for
 * their readers in memory, up to this many bytes (the oldest dropped first). */
#define DSR_STASH_MAX (UINT64_C(64) << 20)
/* The fill: GETs of 4 MiB (a request's cost is then a small part of its time on a
 * 400 Mbit/s link: 80 ms of bytes beside 20 ms of latency), 4 at a time (16 MiB: 0.3 s
 * of such a link, what a sample the order needs may wait behind them at worst). */
#define DSR_FILL_REQ (UINT64_C(4) << 20)
#define DSR_FILL_INFLIGHT 4
#define DSR_CONNECTIONS 64
#define DSR_TIMEOUT_S 60.0

struct ds_remote {
	struct s3_client *cl;
	struct cache *cache;
	double timeout_s;
	pthread_mutex_t lock;
	pthread_cond_t cond;     /* a fetch ended */
	uint64_t inflight;       /* read-ahead bytes in flight */
	uint64_t samples_fetched, sample_bytes;
	struct want_req *stash;  /* fetched, not kept, not all read yet: newest first */
	uint64_t stash_bytes;
	/* the fill (dataset_remote_opts.fill): every shard's samples in order, DSR_FILL_REQ
	 * bytes a GET, DSR_FILL_INFLIGHT GETs at a time, while the cache keeps them */
	const struct dataset *ds;
	int fill, fill_done;
	size_t fill_shard;
	uint64_t fill_k;
	unsigned fill_inflight;
	uint64_t fill_bytes;
};

struct ds_rsource {
	char bucket[64];
	char prefix[1024];
	struct cache_ds *cds;
	char (*etag)[128];       /* per shard of the source: payload object's, index's */
	char (*ietag)[128];
	uint64_t *size, *isize;
};

struct ds_rshard {
	char *key;               /* the payload object's key */
	const char *bucket;
	const char *etag;        /* as at open */
	struct cache_obj *obj;
	uint8_t *pending;        /* one bit per sample: a fetch of it in flight (under lock) */
};

static struct dataset_remote_opts defaults;
static pthread_mutex_t defaults_lock = PTHREAD_MUTEX_INITIALIZER;
static char defaults_dir[4096];

void dataset_remote_defaults(const struct dataset_remote_opts *o)
{
	pthread_mutex_lock(&defaults_lock);
	defaults = *o;
	snprintf(defaults_dir, sizeof(defaults_dir), "%s", o->cache_dir ? o->cache_dir : "");
	defaults.cache_dir = o->cache_dir ? defaults_dir : NULL;
	pthread_mutex_unlock(&defaults_lock);
}

static void default_cache_dir(char *out, size_t len)
{
	const char *v;

	if ((v = getenv("ZEPHON_CACHE_DIR")) && *v)
		snprintf(out, len, "%s", v);
	else if ((v = getenv("XDG_CACHE_HOME")) && *v)
		snprintf(out, len, "%s/zephon", v);
	else
		snprintf(out, len, "%s/.cache/zephon", getenv("HOME") ? getenv("HOME") : "/tmp");
}

/* ds->remote, made at the first remote source. */
static int remote_setup(struct dataset *ds, char *err, size_t errlen)
{
	struct dataset_remote_opts o;
	struct s3_config cfg;
	struct ds_remote *r;
	char dir[4096];
	int rc;

	if (ds->remote)
		return 0;
	pthread_mutex_lock(&defaults_lock);
	o = defaults;
	if (o.cache_dir)
		snprintf(dir, sizeof(dir), "%s", o.cache_dir);
	pthread_mutex_unlock(&defaults_lock);
	if (!o.cache_dir)
		default_cache_dir(dir, sizeof(dir));
	if ((rc = s3_config_load(&cfg, err, errlen)))
		return rc;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->timeout_s = o.timeout_s > 0 ? o.timeout_s : DSR_TIMEOUT_S;
	r->fill = o.fill;
	r->ds = ds;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	ds->remote = r;
	if ((rc = cache_open(dir, o.cache_size, &r->cache, err, errlen)))
		goto out;
	rc = s3_client_new(&cfg, o.connections ? o.connections : DSR_CONNECTIONS, r->timeout_s,
			   &r->cl);
	if (rc)
		err_printf(err, errlen, "cannot start the S3 client: %s", strerror(-rc));
out:
	explicit_bzero(&cfg, sizeof(cfg));
	return rc;
}

/* "PREFIX/NAME" (or NAME with an empty prefix), malloc'd. */
static char *object_key(const struct ds_rsource *rs, const char *name)
{
	char *key;

	if (asprintf(&key, "%s%s%s", rs->prefix, rs->prefix[0] ? "/" : "", name) < 0)
		return NULL;
	return key;
}

/* Whole object `name` of rs (at version etag, size) into the cache; its path into
 * path. 0 or -errno with err. */
static int fetch_whole(struct ds_remote *r, struct ds_rsource *rs, const char *name,
		       const char *etag, uint64_t size, char *path, size_t pathlen, char *err,
		       size_t errlen)
{
	struct s3_req q = { 0 };
	int rc;

	if (cache_whole_path(rs->cds, name, etag, size, path, pathlen))
		return 0;
	q.method = S3_GET;
	q.bucket = rs->bucket;
	q.key = object_key(rs, name);
	q.etag = etag;
	if (!q.key)
		return -ENOMEM;
	rc = s3_run(r->cl, &q);
	if (!rc && q.body_len != size)
		rc = err_set(q.err, sizeof(q.err), -ESTALE, "s3://%s/%s: %" PRIu64 " bytes, %"
			     PRIu64 " when its size was asked", rs->bucket, q.key, q.body_len, size);
	if (rc)
		err_printf(err, errlen, "%s", q.err);
	else if ((rc = cache_whole_put(rs->cds, name, etag, q.body, size, path, pathlen)))
		err_printf(err, errlen, "cache: cannot keep %s: %s", name, strerror(-rc));
	free((char *)q.key);
	free(q.body);
	return rc;
}

int dsr_fetch_catalog(struct dataset *ds, struct ds_source *src, const char *url, char **path,
		      char *err, size_t errlen)
{
	struct ds_rsource *rs;
	struct s3_req q = { 0 };
	char id[1700], p[4096];
	uint8_t byte;
	int rc;

	if ((rc = remote_setup(ds, err, errlen)))
		return rc;
	rs = src->remote = calloc(1, sizeof(*rs));
	if (!rs)
		return -ENOMEM;
	if ((rc = s3_url_parse(url, rs->bucket, sizeof(rs->bucket), rs->prefix,
			       sizeof(rs->prefix), err, errlen)))
		return rc;
	snprintf(id, sizeof(id), "%s\n%s\n%s", CACHE_FORMAT, rs->bucket, rs->prefix);
	if ((rc = cache_ds_open(ds->remote->cache, id, &rs->cds, err, errlen)))
		return rc;
	/* its first byte, not a HEAD: the size and ETag come alike, and an error's body
	 * says which (SignatureDoesNotMatch, NoSuchBucket, ...) where a HEAD's has none */
	q.method = S3_GET;
	q.len = 1;
	q.dst = &byte;
	q.bucket = rs->bucket;
	q.key = object_key(rs, CATALOG_FILE);
	if (!q.key)
		return -ENOMEM;
	rc = s3_run(ds->remote->cl, &q);
	if (rc == -ENOENT)
		err_printf(err, errlen, "%s is not a zephon dataset: no %s there (%s); upload a "
			   "packed dataset with zephon upload", url, CATALOG_FILE, q.err);
	else if (rc)
		err_printf(err, errlen, "%s: %s", url, q.err);
	if (!rc)
		rc = fetch_whole(ds->remote, rs, CATALOG_FILE, q.etag_out, q.size, p, sizeof(p),
				 err, errlen);
	free((char *)q.key);
	if (!rc && !(*path = strdup(p)))
		rc = -ENOMEM;
	return rc;
}

struct head_all {
	struct s3_req *q;
	size_t n, done;
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

static void head_done(struct s3_req *q, void *ctx)
{
	struct head_all *h = ctx;

	(void)q;
	pthread_mutex_lock(&h->lock);
	h->done++;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

/* HEAD every payload and index object of source src, all at once. */
static int head_objects(struct ds_remote *r, struct ds_source *src, char *err, size_t errlen)
{
	struct ds_rsource *rs = src->remote;
	size_t n = src->cat.nshards;
	struct head_all h = { calloc(2 * n + 1, sizeof(struct s3_req)), 2 * n, 0,
			      PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER };
	int rc = 0;

	rs->etag = calloc(n + 1, sizeof(*rs->etag));
	rs->ietag = calloc(n + 1, sizeof(*rs->ietag));
	rs->size = calloc(n + 1, sizeof(*rs->size));
	rs->isize = calloc(n + 1, sizeof(*rs->isize));
	if (!h.q || !rs->etag || !rs->ietag || !rs->size || !rs->isize) {
		free(h.q);
		return -ENOMEM;
	}
	for (size_t i = 0; i < 2 * n; i++) {
		const struct catalog_shard *cs = &src->cat.shards[i / 2];

		h.q[i].method = S3_HEAD;
		h.q[i].bucket = rs->bucket;
		h.q[i].key = object_key(rs, i % 2 ? cs->index_file : cs->file);
		h.q[i].done = head_done;
		h.q[i].ctx = &h;
		if (!h.q[i].key) {
			h.n = i; /* the ones made so far are freed below, none submitted */
			rc = -ENOMEM;
			break;
		}
	}
	for (size_t i = 0; !rc && i < h.n; i++)
		s3_submit(r->cl, &h.q[i]);
	pthread_mutex_lock(&h.lock);
	while (!rc && h.done < h.n)
		pthread_cond_wait(&h.cond, &h.lock);
	pthread_mutex_unlock(&h.lock);
	for (size_t i = 0; i < h.n; i++) {
		if (!rc && h.q[i].rc) {
			rc = h.q[i].rc;
			err_printf(err, errlen, "%s", h.q[i].err);
		}
		snprintf(i % 2 ? rs->ietag[i / 2] : rs->etag[i / 2], 128, "%s", h.q[i].etag_out);
		*(i % 2 ? &rs->isize[i / 2] : &rs->size[i / 2]) = h.q[i].size;
		free((char *)h.q[i].key);
	}
	free(h.q);
	return rc;
}

/* Shard k of source src: its payload object checked, its index fetched and mapped, its
 * cache object opened. */
static int open_one(struct ds_remote *r, struct ds_source *src, size_t k, struct ds_shard *s,
		    char *err, size_t errlen)
{
	struct ds_rsource *rs = src->remote;
	const struct catalog_shard *cs = &src->cat.shards[k];
	struct ds_rshard *h = s->remote = calloc(1, sizeof(*s->remote));
	char path[4096];
	int rc, fd;

	if (!h || !(h->key = object_key(rs, cs->file)) ||
	    !(h->pending = calloc(cs->samples / 8 + 1, 1)))
		return -ENOMEM;
	h->bucket = rs->bucket;
	h->etag = rs->etag[k];
	if (rs->size[k] != cs->bytes)
		return err_set(err, errlen, -EBADMSG, "s3://%s/%s has %" PRIu64 " bytes but the "
			       "catalog says %" PRIu64 " (truncated or replaced)", rs->bucket,
			       h->key, rs->size[k], cs->bytes);
	if ((rc = fetch_whole(r, rs, cs->index_file, rs->ietag[k], rs->isize[k], path,
			      sizeof(path), err, errlen)))
		return rc;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_set(err, errlen, -errno, "cache %s: %s", path, strerror(errno));
	if ((rc = dataset_map_index(fd, cs->index_file, cs, s, err, errlen)))
		return rc;
	return cache_obj_open(rs->cds, cs->file, h->etag, cs->bytes, cs->samples, &h->obj, err,
			      errlen);
}

int dsr_open_shards(struct dataset *ds, size_t si, char *err, size_t errlen)
{
	struct ds_source *src = &ds->src[si];
	int rc = head_objects(ds->remote, src, err, errlen);

	for (size_t k = 0; !rc && k < src->cat.nshards; k++)
		rc = open_one(ds->remote, src, k, &ds->shards[src->first_shard + k], err, errlen);
	return rc;
}

static int pending(const struct ds_rshard *h, uint64_t k)
{
	return (h->pending[k / 8] >> (k % 8)) & 1;
}

static void set_pending(struct ds_rshard *h, uint64_t k, int on)
{
	if (on)
		h->pending[k / 8] |= (uint8_t)(1u << (k % 8));
	else
		h->pending[k / 8] &= (uint8_t)~(1u << (k % 8));
}

int dsr_cached(const struct ds_shard *s, uint64_t id)
{
	return cache_obj_has(s->remote->obj, id - s->first_sample);
}

/* Fetch [e->offset, + stored_len) of s into dst now, keep it in the cache. */
static int fetch_now(struct ds_remote *r, const struct ds_shard *s, uint64_t k,
		     const struct shard_index_entry *e, void *dst, char *why, size_t whylen)
{
	struct s3_req q = { 0 };
	int rc;

	q.method = S3_GET;
	q.bucket = s->remote->bucket;
	q.key = s->remote->key;
	q.off = e->offset;
	q.len = e->stored_len;
	q.dst = dst;
	q.etag = s->remote->etag;
	rc = q.len ? s3_run(r->cl, &q) : 0;
	if (rc) {
		snprintf(why, whylen, "%s", q.err);
		return -EIO;
	}
	pthread_mutex_lock(&r->lock);
	r->samples_fetched++;
	r->sample_bytes += e->stored_len;
	pthread_mutex_unlock(&r->lock);
	if (cache_obj_write(s->remote->obj, dst, e->offset, e->stored_len, k, 1) < 0)
		snprintf(why, whylen, "cache: write failed");
	return 0;
}

static int stash_take(struct ds_remote *r, const struct ds_shard *s, uint64_t k,
		      const struct shard_index_entry *e, void *dst);

int dsr_read(const struct dataset *ds, const struct ds_shard *s, uint64_t id,
	     const struct shard_index_entry *e, void *dst, int fresh, char *why, size_t whylen)
{
	struct ds_remote *r = ds->remote;
	struct ds_rshard *h = s->remote;
	uint64_t k = id - s->first_sample;
	int rc;

	if (fresh)
		cache_obj_forget(h->obj, k);
	pthread_mutex_lock(&r->lock);
	for (;;) {
		if (cache_obj_has(h->obj, k)) {
			pthread_mutex_unlock(&r->lock);
			if (!cache_obj_read(h->obj, dst, e->offset, e->stored_len))
				return 0;
			snprintf(why, whylen, "cache: read failed");
			return -EIO;
		}
		if (!fresh && stash_take(r, s, k, e, dst)) {
			pthread_mutex_unlock(&r->lock);
			return 0;
		}
		if (!pending(h, k))
			break;
		/* a read-ahead has it in flight: it ends (fetched, failed or cancelled) */
		pthread_cond_wait(&r->cond, &r->lock);
	}
	set_pending(h, k, 1);
	pthread_mutex_unlock(&r->lock);
	rc = fetch_now(r, s, k, e, dst, why, whylen);
	pthread_mutex_lock(&r->lock);
	set_pending(h, k, 0);
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/* One coalesced read-ahead request: samples [k0, k0 + n) of shard s, bytes [off, + len). */
struct want_req {
	struct s3_req q;
	struct ds_remote *r;
	const struct ds_shard *s;
	uint64_t k0, n, wanted_bytes, wanted;
	uint64_t left;           /* stashed: reads still to come */
	int fill;                /* a GET of the fill, not of samples the order asked for */
	struct want_req *next;   /* in r->stash */
	uint8_t buf[];
};

/* Stash w (under r->lock): its samples wait in memory for their reads. */
static void stash_put(struct ds_remote *r, struct want_req *w)
{
	struct want_req **pp;

	w->left = w->wanted;
	w->next = r->stash;
	r->stash = w;
	r->stash_bytes += w->q.len;
	while (r->stash_bytes > DSR_STASH_MAX) { /* drop the oldest */
		for (pp = &r->stash; (*pp)->next; pp = &(*pp)->next)
			;
		r->stash_bytes -= (*pp)->q.len;
		free(*pp);
		*pp = NULL;
	}
}

/* Sample k of shard s from the stash into dst (under r->lock): 1, or 0 when not there. */
static int stash_take(struct ds_remote *r, const struct ds_shard *s, uint64_t k,
		      const struct shard_index_entry *e, void *dst)
{
	for (struct want_req **pp = &r->stash, *w; (w = *pp); pp = &w->next) {
		if (w->s != s || k < w->k0 || k >= w->k0 + w->n || e->offset < w->q.off ||
		    e->offset + e->stored_len > w->q.off + w->q.len)
			continue;
		memcpy(dst, w->buf + (e->offset - w->q.off), e->stored_len);
		if (--w->left == 0) {
			*pp = w->next;
			r->stash_bytes -= w->q.len;
			free(w);
		}
		return 1;
	}
	return 0;
}

static void fill_more(struct ds_remote *r);

static void want_done(struct s3_req *q, void *ctx)
{
	struct want_req *w = ctx;
	struct ds_remote *r = w->r;
	int kept = -1, mine;

	(void)q;
	if (!w->q.rc)
		kept = cache_obj_write(w->s->remote->obj, w->buf, w->q.off, w->q.len, w->k0, w->n);
	pthread_mutex_lock(&r->lock);
	for (uint64_t k = w->k0; k < w->k0 + w->n; k++)
		set_pending(w->s->remote, k, 0);
	if (w->fill) {
		r->fill_inflight--;
		r->fill_bytes += w->q.rc ? 0 : w->q.len;
		/* the cache keeps no more, or the client stops: the fill ends */
		r->fill_done |= kept == 0 || w->q.rc == -ECANCELED;
	} else {
		r->inflight -= w->q.len;
	}
	if (!w->q.rc && !w->fill) {
		r->samples_fetched += w->wanted;
		r->sample_bytes += w->wanted_bytes;
	}
	mine = kept != 0 || w->fill; /* else the stash's: a reader may free it at once */
	if (!mine)
		stash_put(r, w);
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	if (mine)
		free(w);
	if (r->fill)
		fill_more(r);
}

struct want_item {
	const struct ds_shard *s;
	uint64_t k;
	struct shard_index_entry e;
};

static int item_cmp(const void *a, const void *b)
{
	const struct want_item *x = a, *y = b;

	if (x->s != y->s)
		return x->s < y->s ? -1 : 1;
	return x->e.offset < y->e.offset ? -1 : x->e.offset > y->e.offset;
}

/* Send the request for items it[0..n) (one shard, ascending, coalescible). */
static void want_send(struct ds_remote *r, const struct want_item *it, size_t n, int wait)
{
	uint64_t off = it[0].e.offset, end = it[n - 1].e.offset + it[n - 1].e.stored_len;
	struct want_req *w = malloc(sizeof(*w) + (end - off));

	pthread_mutex_lock(&r->lock);
	if (!w) {
		for (size_t i = 0; i < n; i++)
			set_pending(it[i].s->remote, it[i].k, 0);
		pthread_cond_broadcast(&r->cond);
		pthread_mutex_unlock(&r->lock);
		return;
	}
	while (wait && r->inflight && r->inflight + (end - off) > DSR_INFLIGHT_MAX)
		pthread_cond_wait(&r->cond, &r->lock);
	r->inflight += end - off;
	pthread_mutex_unlock(&r->lock);
	memset(&w->q, 0, sizeof(w->q));
	w->r = r;
	w->s = it[0].s;
	w->k0 = it[0].k;
	w->n = it[n - 1].k - it[0].k + 1;
	w->wanted = n;
	w->fill = 0;
	w->wanted_bytes = 0;
	for (size_t i = 0; i < n; i++)
		w->wanted_bytes += it[i].e.stored_len;
	w->q.method = S3_GET;
	w->q.bucket = w->s->remote->bucket;
	w->q.key = w->s->remote->key;
	w->q.off = off;
	w->q.len = end - off;
	w->q.dst = w->buf;
	w->q.etag = w->s->remote->etag;
	w->q.done = want_done;
	w->q.ctx = w;
	s3_submit(r->cl, &w->q);
}

/* The samples of ids to fetch (remote, not cached, not in flight: marked in flight now)
 * into it; returns their count. */
static size_t want_collect(const struct dataset *ds, const uint64_t *ids, size_t count,
			   struct want_item *it)
{
	struct ds_remote *r = ds->remote;
	size_t n = 0;

	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < count; i++) {
		const struct ds_shard *s;
		struct shard_index_entry e;
		uint64_t k;

		if (ids[i] >= ds->info.samples)
			continue;
		s = dataset_find_shard(ds, ids[i]);
		k = ids[i] - s->first_sample;
		if (!s->remote || cache_obj_has(s->remote->obj, k) || pending(s->remote, k) ||
		    dataset_entry_read(s, ids[i], &e) || e.offset > s->bytes ||
		    e.stored_len > s->bytes - e.offset || !e.stored_len)
			continue; /* a bad entry: its read reports it */
		set_pending(s->remote, k, 1);
		it[n++] = (struct want_item){ s, k, e };
	}
	pthread_mutex_unlock(&r->lock);
	return n;
}

/* The next fill GET (under r->lock): from sample fill_k of shard fill_shard on, the
 * samples up to DSR_FILL_REQ bytes, unless all are cached or in flight; its samples
 * marked in flight. NULL when the fill is done (or out of memory). */
static struct want_req *fill_next(struct ds_remote *r)
{
	const struct dataset *ds = r->ds;

	while (r->fill_shard < ds->nshards) {
		const struct ds_shard *s = &ds->shards[r->fill_shard];
		struct shard_index_entry a, b;
		uint64_t k0 = r->fill_k, k = k0, todo = 0;
		struct want_req *w;

		if (!s->remote || k0 >= s->count || dataset_entry_read(s, s->first_sample + k0, &a)) {
			r->fill_shard++;
			r->fill_k = 0;
			continue;
		}
		for (b = a; k < s->count; k++) {
			if (dataset_entry_read(s, s->first_sample + k, &b) ||
			    b.offset + b.stored_len - a.offset > DSR_FILL_REQ)
				break;
			todo += !cache_obj_has(s->remote->obj, k) && !pending(s->remote, k);
		}
		if (k == k0)
			k = k0 + 1; /* one sample larger than a GET: alone */
		dataset_entry_read(s, s->first_sample + k - 1, &b);
		r->fill_k = k;
		if (!todo || b.offset + b.stored_len > s->bytes || b.offset < a.offset)
			continue;
		w = malloc(sizeof(*w) + (b.offset + b.stored_len - a.offset));
		if (!w)
			return NULL;
		memset(&w->q, 0, sizeof(w->q));
		w->r = r;
		w->s = s;
		w->k0 = k0;
		w->n = k - k0;
		w->wanted = w->wanted_bytes = 0;
		w->fill = 1;
		for (uint64_t j = k0; j < k; j++)
			set_pending(s->remote, j, 1);
		w->q.method = S3_GET;
		w->q.bucket = s->remote->bucket;
		w->q.key = s->remote->key;
		w->q.off = a.offset;
		w->q.len = b.offset + b.stored_len - a.offset;
		w->q.dst = w->buf;
		w->q.etag = s->remote->etag;
		w->q.done = want_done;
		w->q.ctx = w;
		return w;
	}
	return NULL;
}

/* Keep DSR_FILL_INFLIGHT fill GETs in flight while the cache keeps what comes. */
static void fill_more(struct ds_remote *r)
{
	for (;;) {
		struct want_req *w = NULL;

		pthread_mutex_lock(&r->lock);
		if (!r->fill_done && r->fill_inflight < DSR_FILL_INFLIGHT &&
		    cache_keeping(r->cache)) {
			w = fill_next(r);
			r->fill_done = !w;
			r->fill_inflight += w != NULL;
		}
		pthread_mutex_unlock(&r->lock);
		if (!w)
			return;
		s3_submit(r->cl, &w->q);
	}
}

void dsr_want(const struct dataset *ds, const uint64_t *ids, size_t count, int wait)
{
	struct want_item *it;
	size_t n, a = 0;

	/* a cache that keeps nothing now: what the read-ahead fetched would be fetched again
	 * when read; the reads fetch what they need, a batch at a time */
	if (!ds->remote || !count || (wait && !cache_keeping(ds->remote->cache)) ||
	    !(it = malloc(count * sizeof(*it))))
		return;
	n = want_collect(ds, ids, count, it);
	qsort(it, n, sizeof(*it), item_cmp);
	if (ds->remote->fill)
		fill_more(ds->remote);
	for (size_t b = 1; b <= n; b++) {
		if (b < n && it[b].s == it[a].s &&
		    it[b].e.offset >= it[b - 1].e.offset + it[b - 1].e.stored_len &&
		    it[b].e.offset - (it[b - 1].e.offset + it[b - 1].e.stored_len) <= DSR_GAP &&
		    it[b].e.offset + it[b].e.stored_len - it[a].e.offset <= DSR_REQ_MAX)
			continue;
		want_send(ds->remote, it + a, b - a, wait);
		a = b;
	}
	free(it);
}

int dataset_is_remote(const struct dataset *ds)
{
	return ds->remote != NULL;
}

int dataset_fetch_stats(const struct dataset *ds, struct dataset_fetch_stats *out)
{
	struct ds_remote *r = ds->remote;
	struct cache_stats cs;
	struct s3_stats st;

	if (!r)
		return -ENOTSUP;
	memset(out, 0, sizeof(*out));
	s3_client_stats(r->cl, &st);
	cache_get_stats(r->cache, &cs);
	out->requests = st.requests;
	out->bytes = st.bytes;
	out->retries = st.retries;
	out->errors = st.errors;
	out->in_flight = st.in_flight;
	snprintf(out->last_error, sizeof(out->last_error), "%s", st.last_error);
	pthread_mutex_lock(&r->lock);
	out->samples_fetched = r->samples_fetched;
	out->sample_bytes = r->sample_bytes;
	out->fill_bytes = r->fill_bytes;
	pthread_mutex_unlock(&r->lock);
	out->cache_hits = cs.hits;
	out->cache_written = cs.written;
	out->cache_not_kept = cs.not_kept;
	out->cache_evicted = cs.evicted;
	out->cache_bad = cs.bad;
	out->cache_used = cs.used;
	out->cache_cap = cs.cap;
	out->cache_full = cs.full;
	snprintf(out->cache_dir, sizeof(out->cache_dir), "%s", cache_dir(r->cache));
	return 0;
}

void dsr_free(struct dataset *ds)
{
	struct ds_remote *r = ds->remote;

	/* the client first: no fetch may end (and write a cache object) after its free */
	if (r)
		s3_client_free(r->cl);
	for (size_t k = 0; k < ds->nshards; k++) {
		struct ds_rshard *h = ds->shards[k].remote;

		if (!h)
			continue;
		cache_obj_close(h->obj);
		free(h->pending);
		free(h->key);
		free(h);
	}
	for (size_t s = 0; ds->src && s < ds->nsrc; s++) {
		struct ds_rsource *rs = ds->src[s].remote;

		if (!rs)
			continue;
		cache_ds_close(rs->cds);
		free(rs->etag);
		free(rs->ietag);
		free(rs->size);
		free(rs->isize);
		free(rs);
	}
	while (r && r->stash) {
		struct want_req *w = r->stash;

		r->stash = w->next;
		free(w);
	}
	if (r) {
		cache_close(r->cache);
		pthread_mutex_destroy(&r->lock);
		pthread_cond_destroy(&r->cond);
		free(r);
	}
}
