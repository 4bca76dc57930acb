/* cache.c: the node-local object cache of cache.h: its directory, the shared usage
 * counter, datasets held and evicted, whole objects and partial ones with their presence
 * maps. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "buf.h"
#include "clock.h"

#define MAP_HEADER 64
/* After a search found nothing to evict, the next one waits this long: a full cache of
 * live datasets is not searched again at every write. */
#define EVICT_RETRY_S 10.0

struct cache {
	char *dir;
	uint64_t cap;
	int lock_fd;
	int usage_fd;
	uint64_t *used;          /* the shared counter (DIR/usage mapped) */
	pthread_mutex_t lock;    /* stats and evict_after */
	struct cache_stats st;
	double evict_after;
};

struct cache_ds {
	struct cache *c;
	char *dir;               /* DIR/ds/KEY */
	int lock_fd;
};

struct cache_obj {
	struct cache_ds *d;
	int fd;                  /* the data file */
	uint64_t size, units;
	uint8_t *map;            /* the map file mapped: header, then the bits */
	size_t map_len;
};

static void hex128(XXH128_hash_t h, char out[33])
{
	snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
}

static int mkdir_p(const char *path)
{
	char tmp[PATH_MAX];
	size_t n = strlen(path);

	if (n >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0700) && errno != EEXIST)
		return -errno;
	return 0;
}

static uint64_t file_bytes(int dirfd, const char *name)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
		return 0;
	return (uint64_t)st.st_blocks * 512;
}

/* The bytes held under dir (its regular files, and those of its subfolders, one level). */
static uint64_t dir_bytes(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t sum = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char *sub;

		if (e->d_name[0] == '.')
			continue;
		if (e->d_type == DT_DIR && depth > 0) {
			if (asprintf(&sub, "%s/%s", dir, e->d_name) >= 0) {
				sum += dir_bytes(sub, depth - 1);
				free(sub);
			}
		} else if (strcmp(e->d_name, "lock")) {
			sum += file_bytes(dirfd(d), e->d_name);
		}
	}
	closedir(d);
	return sum;
}

static int open_usage(struct cache *c, int alone)
{
	char *path;
	void *m;

	if (asprintf(&path, "%s/usage", c->dir) < 0)
		return -ENOMEM;
	c->usage_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	free(path);
	if (c->usage_fd < 0)
		return -errno;
	if (ftruncate(c->usage_fd, sizeof(uint64_t)))
		return -errno;
	m = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, c->usage_fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	c->used = m;
	if (alone) { /* no other process holds the cache: recount what the disk holds */
		char *ds;

		if (asprintf(&ds, "%s/ds", c->dir) < 0)
			return -ENOMEM;
		__atomic_store_n(c->used, dir_bytes(ds, 2), __ATOMIC_RELAXED);
		free(ds);
	}
	return 0;
}

int cache_open(const char *dir, uint64_t cap, struct cache **out, char *err, size_t errlen)
{
	struct cache *c = calloc(1, sizeof(*c));
	char *path = NULL;
	struct stat st;
	int rc, alone;

	if (!c || !(c->dir = strdup(dir))) {
		free(c);
		return -ENOMEM;
	}
	c->cap = c->st.cap = cap;
	c->lock_fd = c->usage_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
	if ((rc = mkdir_p(dir)) || (stat(dir, &st) ? (rc = -errno) : 0)) {
		err_printf(err, errlen, "cache %s: %s", dir, strerror(-rc));
		goto err_close;
	}
	if (!S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK)) {
		rc = !S_ISDIR(st.st_mode) ? -ENOTDIR : -errno;
		err_printf(err, errlen, "cache %s: %s", dir, strerror(-rc));
		goto err_close;
	}
	if (asprintf(&path, "%s/zephon-cache.lock", dir) < 0) {
		rc = -ENOMEM;
		goto err_close;
	}
	c->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	free(path);
	path = NULL;
	if (c->lock_fd < 0) {
		rc = -errno;
		err_printf(err, errlen, "cache %s: %s", dir, strerror(errno));
		goto err_close;
	}
	alone = flock(c->lock_fd, LOCK_EX | LOCK_NB) == 0;
	if ((rc = open_usage(c, alone))) {
		err_printf(err, errlen, "cache %s: %s", dir, strerror(-rc));
		goto err_close;
	}
	if (flock(c->lock_fd, LOCK_SH)) { /* converts the exclusive one */
		rc = -errno;
		goto err_close;
	}
	if (asprintf(&path, "%s/ds", dir) < 0 || ((rc = mkdir_p(path)))) {
		rc = path ? rc : -ENOMEM;
		err_printf(err, errlen, "cache %s: %s", dir, strerror(-rc));
		free(path);
		goto err_close;
	}
	free(path);
	*out = c;
	return 0;

err_close:
	cache_close(c);
	return rc;
}

void cache_close(struct cache *c)
{
	if (!c)
		return;
	if (c->used)
		munmap(c->used, sizeof(uint64_t));
	if (c->usage_fd >= 0)
		close(c->usage_fd);
	if (c->lock_fd >= 0)
		close(c->lock_fd);
	pthread_mutex_destroy(&c->lock);
	free(c->dir);
	free(c);
}

const char *cache_dir(const struct cache *c)
{
	return c->dir;
}

void cache_get_stats(struct cache *c, struct cache_stats *out)
{
	pthread_mutex_lock(&c->lock);
	*out = c->st;
	pthread_mutex_unlock(&c->lock);
	out->used = __atomic_load_n(c->used, __ATOMIC_RELAXED);
}

static void count(struct cache *c, uint64_t *field, uint64_t n)
{
	pthread_mutex_lock(&c->lock);
	*field += n;
	pthread_mutex_unlock(&c->lock);
}

/* Remove the files of dataset folder dir (which the caller holds exclusively through
 * lock_fd): the bytes freed. */
static uint64_t remove_ds(const char *dir)
{
	uint64_t freed = 0;
	char *whole;
	DIR *d;
	struct dirent *e;

	if (asprintf(&whole, "%s/whole", dir) < 0)
		return 0;
	for (int pass = 0; pass < 2; pass++) {
		d = opendir(pass ? dir : whole);
		while (d && (e = readdir(d))) {
			if (e->d_name[0] == '.' || e->d_type == DT_DIR)
				continue;
			freed += strcmp(e->d_name, "lock") ? file_bytes(dirfd(d), e->d_name) : 0;
			unlinkat(dirfd(d), e->d_name, 0);
		}
		if (d)
			closedir(d);
		if (!pass)
			rmdir(whole);
	}
	rmdir(dir);
	free(whole);
	return freed;
}

/* Evict the least recently used dataset that no process holds: the bytes freed, 0 when
 * none could be. */
static uint64_t evict_one(struct cache *c)
{
	char *top, *best = NULL, *path;
	struct timespec oldest = { 0, 0 };
	DIR *d;
	struct dirent *e;
	uint64_t freed = 0;
	int fd;

	if (asprintf(&top, "%s/ds", c->dir) < 0)
		return 0;
	d = opendir(top);
	while (d && (e = readdir(d))) {
		struct stat st;

		if (e->d_name[0] == '.' || asprintf(&path, "%s/%s/lock", top, e->d_name) < 0)
			continue;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		free(path);
		if (fd < 0)
			continue;
		if (!flock(fd, LOCK_EX | LOCK_NB) && !fstat(fd, &st) &&
		    (!best || st.st_mtim.tv_sec < oldest.tv_sec)) {
			free(best);
			best = strdup(e->d_name);
			oldest = st.st_mtim;
		}
		close(fd); /* releases the probe's lock */
	}
	if (d)
		closedir(d);
	if (best && asprintf(&path, "%s/%s", top, best) >= 0) {
		char *lock;

		if (asprintf(&lock, "%s/lock", path) >= 0) {
			fd = open(lock, O_RDONLY | O_CLOEXEC);
			/* taken again: it may have been opened since the probe */
			if (fd >= 0 && !flock(fd, LOCK_EX | LOCK_NB))
				freed = remove_ds(path);
			if (fd >= 0)
				close(fd);
			free(lock);
		}
		free(path);
	}
	free(best);
	free(top);
	if (freed) {
		__atomic_sub_fetch(c->used, freed < __atomic_load_n(c->used, __ATOMIC_RELAXED) ?
				   freed : __atomic_load_n(c->used, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
		count(c, &c->st.evicted, freed);
	}
	return freed;
}

/* Room for n more bytes under the cap: 1 (counted in usage), 0 (none to be had). */
static int reserve(struct cache *c, uint64_t n)
{
	for (;;) {
		uint64_t u = __atomic_add_fetch(c->used, n, __ATOMIC_RELAXED);
		double now;
		int skip;

		if (!c->cap || u <= c->cap)
			return 1;
		__atomic_sub_fetch(c->used, n, __ATOMIC_RELAXED);
		now = clock_mono_s();
		pthread_mutex_lock(&c->lock);
		skip = now < c->evict_after;
		pthread_mutex_unlock(&c->lock);
		if (skip)
			return 0;
		if (!evict_one(c)) {
			pthread_mutex_lock(&c->lock);
			c->evict_after = now + EVICT_RETRY_S;
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
	}
}

int cache_ds_open(struct cache *c, const char *id, struct cache_ds **out, char *err,
		  size_t errlen)
{
	struct cache_ds *d = calloc(1, sizeof(*d));
	char key[33], *path = NULL;
	int rc = -ENOMEM;

	if (!d)
		return -ENOMEM;
	d->c = c;
	d->lock_fd = -1;
	hex128(XXH3_128bits(id, strlen(id)), key);
	if (asprintf(&d->dir, "%s/ds/%s", c->dir, key) < 0) {
		d->dir = NULL;
		goto err_free;
	}
	for (int tries = 0; tries < 3; tries++) {
		struct stat a, b;

		free(path);
		if (asprintf(&path, "%s/whole", d->dir) < 0) {
			path = NULL;
			goto err_free;
		}
		if ((rc = mkdir_p(path)))
			break;
		free(path);
		if (asprintf(&path, "%s/lock", d->dir) < 0) {
			path = NULL;
			rc = -ENOMEM;
			goto err_free;
		}
		d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (d->lock_fd < 0 || flock(d->lock_fd, LOCK_SH)) {
			rc = -errno;
			break;
		}
		/* an eviction may have removed the folder between our open and our lock */
		if (!fstat(d->lock_fd, &a) && !stat(path, &b) && a.st_ino == b.st_ino) {
			futimens(d->lock_fd, NULL); /* the dataset's last use */
			free(path);
			*out = d;
			return 0;
		}
		close(d->lock_fd);
		d->lock_fd = -1;
		rc = -EAGAIN;
	}
	err_printf(err, errlen, "cache %s: %s", d->dir, strerror(-rc));
err_free:
	free(path);
	cache_ds_close(d);
	return rc;
}

void cache_ds_close(struct cache_ds *d)
{
	if (!d)
		return;
	if (d->lock_fd >= 0)
		close(d->lock_fd);
	free(d->dir);
	free(d);
}

/* 16 hex digits naming version (etag, size) of an object. */
static void version_of(const char *etag, uint64_t size, char out[17])
{
	char text[300];
	int n = snprintf(text, sizeof(text), "%s\n%" PRIu64, etag ? etag : "", size);

	snprintf(out, 17, "%016" PRIx64, (uint64_t)XXH3_64bits(text, (size_t)n));
}

int cache_whole_path(struct cache_ds *d, const char *name, const char *etag, uint64_t size,
		     char *path, size_t len)
{
	char v[17];
	struct stat st;

	version_of(etag, size, v);
	snprintf(path, len, "%s/whole/%s.%s", d->dir, name, v);
	return !stat(path, &st) && S_ISREG(st.st_mode) && (uint64_t)st.st_size == size;
}

static int write_full(int fd, const void *src, size_t len, uint64_t off)
{
	const uint8_t *p = src;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

int cache_whole_put(struct cache_ds *d, const char *name, const char *etag, const void *data,
		    uint64_t size, char *path, size_t pathlen)
{
	char tmp[PATH_MAX];
	int fd, rc;

	cache_whole_path(d, name, etag, size, path, pathlen);
	/* a mount cannot go without its catalog and indexes: counted, never refused for
	 * the cap (they are small beside the shards, whose bytes the cap governs) */
	__atomic_add_fetch(d->c->used, size, __ATOMIC_RELAXED);
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%lx", path, (int)getpid(),
		     (unsigned long)pthread_self()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	rc = fd < 0 ? -errno : write_full(fd, data, size, 0);
	if (fd >= 0)
		close(fd);
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (rc) {
		unlink(tmp);
		__atomic_sub_fetch(d->c->used, size, __ATOMIC_RELAXED);
		if (rc == -ENOSPC || rc == -EDQUOT) {
			pthread_mutex_lock(&d->c->lock);
			d->c->st.full = 1;
			d->c->st.not_kept += size;
			pthread_mutex_unlock(&d->c->lock);
			rc = -ENOSPC;
		}
		path[0] = 0;
		return rc;
	}
	count(d->c, &d->c->st.written, size);
	return 0;
}

static uint64_t map_bytes(uint64_t units)
{
	return MAP_HEADER + (units + 63) / 64 * 8;
}

/* Whether the map file fd is one of (size, units). */
static int map_fits(int fd, uint64_t size, uint64_t units)
{
	uint8_t h[MAP_HEADER];
	uint64_t s, u;
	struct stat st;

	if (fstat(fd, &st) || (uint64_t)st.st_size != map_bytes(units) ||
	    pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) || memcmp(h, CACHE_MAP_MAGIC, 8))
		return 0;
	memcpy(&s, h + 8, 8);
	memcpy(&u, h + 16, 8);
	return s == size && u == units;
}

/* Open (making it when missing or unfit) the map file at path. fd or -errno. */
static int map_open(const char *path, uint64_t size, uint64_t units)
{
	char tmp[PATH_MAX];
	uint8_t h[MAP_HEADER] = { 0 };
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd >= 0 && map_fits(fd, size, units))
		return fd;
	if (fd >= 0)
		close(fd);
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%lx", path, (int)getpid(),
		     (unsigned long)pthread_self()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	memcpy(h, CACHE_MAP_MAGIC, 8);
	memcpy(h + 8, &size, 8);
	memcpy(h + 16, &units, 8);
	if (ftruncate(fd, (off_t)map_bytes(units)) || write_full(fd, h, sizeof(h), 0) ||
	    rename(tmp, path)) {
		int rc = -errno;

		close(fd);
		unlink(tmp);
		return rc ? rc : -EIO;
	}
	return fd;
}

int cache_obj_open(struct cache_ds *d, const char *name, const char *etag, uint64_t size,
		   uint64_t units, struct cache_obj **out, char *err, size_t errlen)
{
	struct cache_obj *o = calloc(1, sizeof(*o));
	char v[17], path[PATH_MAX];
	struct stat st;
	int mfd = -1, rc;
	void *m;

	if (!o)
		return -ENOMEM;
	o->d = d;
	o->fd = -1;
	o->size = size;
	o->units = units;
	version_of(etag, size, v);
	snprintf(path, sizeof(path), "%s/%s.%s.data", d->dir, name, v);
	o->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (o->fd < 0 || fstat(o->fd, &st) ||
	    ((uint64_t)st.st_size != size && ftruncate(o->fd, (off_t)size)))
		goto err_errno;
	snprintf(path, sizeof(path), "%s/%s.%s.map", d->dir, name, v);
	if ((mfd = map_open(path, size, units)) < 0) {
		errno = -mfd;
		goto err_errno;
	}
	o->map_len = (size_t)map_bytes(units);
	m = mmap(NULL, o->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	close(mfd);
	if (m == MAP_FAILED)
		goto err_errno;
	o->map = m;
	*out = o;
	return 0;

err_errno:
	rc = -errno;
	err_printf(err, errlen, "cache %s: %s", path, strerror(errno));
	cache_obj_close(o);
	return rc;
}

void cache_obj_close(struct cache_obj *o)
{
	if (!o)
		return;
	if (o->map)
		munmap(o->map, o->map_len);
	if (o->fd >= 0)
		close(o->fd);
	free(o);
}

static uint64_t *word_of(const struct cache_obj *o, uint64_t k)
{
	return (uint64_t *)(void *)(o->map + MAP_HEADER) + k / 64;
}

int cache_obj_has(const struct cache_obj *o, uint64_t k)
{
	return k < o->units && (__atomic_load_n(word_of(o, k), __ATOMIC_ACQUIRE) >> (k % 64)) & 1;
}

int cache_obj_read(struct cache_obj *o, void *dst, uint64_t off, size_t len)
{
	uint8_t *p = dst;

	while (len) {
		ssize_t n = pread(o->fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	count(o->d->c, &o->d->c->st.hits, 1);
	return 0;
}

int cache_obj_write(struct cache_obj *o, const void *src, uint64_t off, size_t len,
		    uint64_t k0, uint64_t n)
{
	struct cache *c = o->d->c;
	int rc, full;

	count(c, &c->st.misses, n);
	pthread_mutex_lock(&c->lock);
	full = c->st.full;
	pthread_mutex_unlock(&c->lock);
	if (full || !reserve(c, len)) {
		count(c, &c->st.not_kept, len);
		return 0;
	}
	rc = write_full(o->fd, src, len, off);
	if (rc) {
		__atomic_sub_fetch(c->used, len, __ATOMIC_RELAXED);
		pthread_mutex_lock(&c->lock);
		c->st.not_kept += len;
		if (rc == -ENOSPC || rc == -EDQUOT)
			c->st.full = 1;
		pthread_mutex_unlock(&c->lock);
		return rc == -ENOSPC || rc == -EDQUOT ? 0 : -EIO;
	}
	count(c, &c->st.written, len);
	for (uint64_t k = k0; k < k0 + n && k < o->units; k++)
		__atomic_fetch_or(word_of(o, k), UINT64_C(1) << (k % 64), __ATOMIC_RELEASE);
	return 1;
}

int cache_keeping(struct cache *c)
{
	int keep;

	pthread_mutex_lock(&c->lock);
	keep = !c->st.full && !(c->cap && __atomic_load_n(c->used, __ATOMIC_RELAXED) >= c->cap &&
				clock_mono_s() < c->evict_after);
	pthread_mutex_unlock(&c->lock);
	return keep;
}

void cache_obj_forget(struct cache_obj *o, uint64_t k)
{
	if (k >= o->units)
		return;
	__atomic_fetch_and(word_of(o, k), ~(UINT64_C(1) << (k % 64)), __ATOMIC_RELEASE);
	count(o->d->c, &o->d->c->st.bad, 1);
}
