/*
 * journal_create.c: a new journal file, made whole or not at all (see journal.h). The
 * file is built in memory (SQLite's serialize of an in-memory database holding the
 * schema and the identity, its header already in WAL mode), written to a file without a
 * name (O_TMPFILE; a temporary name beside the journal where the file system has none),
 * synced, and only then linked at the journal's path, and the directory synced. So a
 * kill or a power cut at any moment of a first mount leaves at the path either nothing
 * (or the empty file that was given) or a complete journal, never a file that a later
 * open would take for someone else's; and since the journal is in WAL mode from its
 * first byte, SQLite never writes a rollback -journal beside it.
 *
 * An older zephon created the journal in place, in one rollback-journal transaction: a
 * kill in it left a file with our header beside a hot -journal whose rollback empties
 * it. jnl_birth_unfinished() recognises that; the open discards it and creates anew.
 *
 * Sources: the database header (offsets 18 and 19: 2 for WAL) and the rollback journal's
 * header (magic, initial database size at offset 16),
 * https://www.sqlite.org/fileformat2.html; sqlite3_serialize(),
 * https://www.sqlite.org/c3ref/serialize.html; O_TMPFILE and linkat(2).
 */
#include "journal_int.h"
#include "sqlite_errno.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bytes of a rollback journal's header that jnl_birth_unfinished() reads. */
#define RJ_HEADER 28

/* "<path><suffix>", malloc'd; NULL when out of memory. */
static char *with_suffix(const char *path, const char *suffix)
{
	size_t n = strlen(path), s = strlen(suffix);
	char *p = malloc(n + s + 1);

	if (p) {
		memcpy(p, path, n);
		memcpy(p + n, suffix, s + 1);
	}
	return p;
}

/* The directory holding path, opened for fsync and O_TMPFILE: an fd or -errno. */
static int open_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = !slash ? strdup(".") : strndup(path, slash == path ? 1 : (size_t)(slash - path));
	int fd;

	if (!dir)
		return -ENOMEM;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	return fd < 0 ? -errno : fd;
}

/* fsync of a directory: file systems that cannot (EINVAL) have nothing to sync. */
static int sync_dir(int dfd)
{
	return fsync(dfd) && errno != EINVAL ? -errno : 0;
}

/* Whether path-journal is hot and began on an empty file (the first RJ_HEADER bytes:
 * its magic, then the initial database size in pages at offset 16). */
static int rollback_empties(const char *path)
{
	static const unsigned char magic[8] = { 0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7 };
	unsigned char h[RJ_HEADER];
	char *rj = with_suffix(path, "-journal");
	int fd = rj ? open(rj, O_RDONLY | O_CLOEXEC) : -1;
	ssize_t n = fd < 0 ? -1 : pread(fd, h, sizeof(h), 0);

	if (fd >= 0)
		close(fd);
	free(rj);
	return n == (ssize_t)sizeof(h) && !memcmp(h, magic, sizeof(magic)) &&
	       !h[16] && !h[17] && !h[18] && !h[19];
}

int jnl_birth_unfinished(const char *path, char *err, size_t errlen)
{
	char *uri;
	sqlite3 *db = NULL;
	int64_t layouts = 0;
	int src;

	if (!rollback_empties(path))
		return 0;
	/* immutable: SQLite neither rolls the journal back nor writes anything */
	uri = jnl_file_uri(path, "immutable=1");
	if (!uri)
		return -ENOMEM;
	src = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI |
			      SQLITE_OPEN_NOMUTEX, NULL);
	free(uri);
	if (src == SQLITE_OK)
		src = jnl_query_i64(db, "SELECT count(*) FROM layout", &layouts);
	sqlite3_close(db);
	if (src == SQLITE_NOMEM)
		return -ENOMEM;
	if (src == SQLITE_OK && layouts > 0)
		return err_set(err, errlen, -EBADMSG, "journal %s has a history, yet beside it "
				"%s-journal would roll it back to nothing: not what a mount leaves; "
				"nothing was written to either: keep both for inspection and pass "
				"another journal=PATH", path, path);
	return 1;
}

int jnl_birth_discard(const char *path, char *err, size_t errlen)
{
	char *rj = with_suffix(path, "-journal");
	int dfd, rc = 0;

	if (!rj)
		return -ENOMEM;
	/* the file first: a kill after it leaves a -journal beside no file, which the
	 * creation that follows removes (jnl_birth_sides) */
	if ((unlink(path) && errno != ENOENT) || (unlink(rj) && errno != ENOENT))
		rc = err_set(err, errlen, -errno, "cannot remove the unfinished journal %s (a "
			      "mount killed while creating it): %s", path, strerror(errno));
	free(rj);
	if (rc)
		return rc;
	dfd = open_dir(path);
	if (dfd >= 0) {
		rc = sync_dir(dfd);
		close(dfd);
	}
	return rc;
}

int jnl_birth_sides(const char *path, char *err, size_t errlen)
{
	char *rj = with_suffix(path, "-journal"), *wal = with_suffix(path, "-wal");
	struct stat st;
	int rc = 0;

	if (!rj || !wal) {
		rc = -ENOMEM;
	} else if (!stat(wal, &st) && st.st_size > 0) {
		rc = err_set(err, errlen, -EEXIST, "journal %s is missing or empty, but its "
			      "write-ahead log %s holds records (a journal deleted without its -wal, "
			      "or moved away from it): put the journal back, or delete %s to start "
			      "over; nothing was written", path, wal, wal);
	} else if ((unlink(rj) && errno != ENOENT) || (unlink(wal) && errno != ENOENT)) {
		/* a rollback journal or an empty log beside no data: what rolls back into an
		 * empty file is nothing, and a new journal must not inherit either */
		rc = err_set(err, errlen, -errno, "cannot remove %s-journal or %s-wal, left "
			      "beside no journal: %s", path, path, strerror(errno));
	}
	free(rj);
	free(wal);
	return rc;
}

/* The bytes of a new journal of identity id: *img (sqlite3_malloc'd) of *len bytes.
 * SQLite's rc. */
static int build_image(const struct journal_ident *id, unsigned char **img, sqlite3_int64 *len)
{
	sqlite3 *mem = NULL;
	int src = sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
				  NULL);

	/* 1 KiB pages: a claim rewrites one page, so every claim appends one page frame to
	 * the WAL; small frames halve the claim cost on disk */
	if (src == SQLITE_OK)
		src = jnl_exec(mem, "PRAGMA page_size = 1024");
	if (src == SQLITE_OK)
		src = jnl_create_schema(mem, id);
	if (src == SQLITE_OK) {
		*img = sqlite3_serialize(mem, "main", len, 0);
		src = *img && *len > 100 ? SQLITE_OK : SQLITE_NOMEM;
	}
	if (src == SQLITE_OK)
		(*img)[18] = (*img)[19] = 2; /* WAL from the first byte */
	sqlite3_close(mem);
	return src;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* A file without a name in the directory dfd (O_TMPFILE), or, where the file system has
 * none, a temporary name beside path (*tmp, malloc'd): an fd or -errno. */
static int open_unnamed(int dfd, const char *path, mode_t mode, char **tmp)
{
	int fd = openat(dfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, mode);

	*tmp = NULL;
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd < 0 ? -errno : fd;
	for (int tries = 0; tries < 8; tries++) {
		unsigned long long r = 0;
		char suffix[48];

		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (unsigned long long)getpid() << 20 ^ (unsigned long long)tries;
		snprintf(suffix, sizeof(suffix), ".zephon-new-%016llx", r);
		free(*tmp);
		*tmp = with_suffix(path, suffix);
		if (!*tmp)
			return -ENOMEM;
		fd = open(*tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	if (fd < 0) {
		int e = errno;

		free(*tmp);
		*tmp = NULL;
		return -e;
	}
	return fd;
}

/* Give the synced file fd (or tmp) the name path, which must not exist: 0, -EEXIST (it
 * appeared meanwhile), or -errno. */
static int link_at(int fd, const char *tmp, const char *path)
{
	char proc[64];

	if (tmp)
		return link(tmp, path) ? -errno : 0;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (!linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW))
		return 0;
	if (errno == ENOENT && !linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH)) /* no /proc */
		return 0;
	return -errno;
}

/* The empty file given at path goes (once the new one is written and synced, so that a
 * failure before leaves it), its mode noted in *mode; a kill after that leaves nothing,
 * which the next mount creates. 0, -EAGAIN (it is no longer empty: open it as it is),
 * or -errno with err. */
static int drop_empty(const char *path, mode_t *mode, char *err, size_t errlen)
{
	struct stat st;

	if (stat(path, &st))
		return errno == ENOENT ? 0 : err_set(err, errlen, -errno, "cannot write journal "
						      "%s: %s", path, strerror(errno));
	*mode = st.st_mode & 07777;
	if (st.st_size != 0)
		return -EAGAIN;
	if (unlink(path) && errno != ENOENT)
		return err_set(err, errlen, -errno, "cannot write journal %s: %s", path,
				strerror(errno));
	return 0;
}

/* Write img to a new unnamed file in dfd, sync it and link it at path (over_empty: in
 * place of the empty file there, whose mode it takes): 0, -EAGAIN (path appeared, or
 * the empty file was written, meanwhile), or -errno with err. */
static int place_image(int dfd, const char *path, int over_empty, const unsigned char *img,
		       size_t len, char *err, size_t errlen)
{
	char *tmp = NULL;
	mode_t mode = 0644;
	int rc, fd = open_unnamed(dfd, path, mode, &tmp);

	if (fd < 0)
		return fd == -ENOMEM ? fd : err_set(err, errlen, fd, "cannot create journal %s: %s; "
				"pass journal=PATH on a writable file system", path, strerror(-fd));
	rc = write_all(fd, img, len);
	if (!rc && fsync(fd))
		rc = -errno;
	if (rc)
		err_set(err, errlen, rc, "cannot create journal %s: %s", path, strerror(-rc));
	if (!rc && over_empty && !(rc = drop_empty(path, &mode, err, errlen)) &&
	    (fchmod(fd, mode) || fsync(fd)))
		rc = err_set(err, errlen, -errno, "cannot create journal %s: %s", path,
			      strerror(errno));
	if (!rc) {
		rc = link_at(fd, tmp, path);
		if (rc == -EEXIST)
			rc = -EAGAIN;
		else if (rc)
			err_set(err, errlen, rc, "cannot create journal %s: %s", path, strerror(-rc));
	}
	if (tmp)
		unlink(tmp);
	free(tmp);
	close(fd);
	return rc;
}

int jnl_create_file(const char *path, int over_empty, const struct journal_ident *want,
		    char *err, size_t errlen)
{
	unsigned char *img = NULL;
	sqlite3_int64 len = 0;
	int src, rc, dfd = open_dir(path);

	if (dfd == -ENOENT)
		return err_set(err, errlen, -ENOENT, "cannot create journal %s: its directory "
				"does not exist; create it, or pass another journal=PATH", path);
	if (dfd < 0)
		return dfd == -ENOMEM ? dfd : err_set(err, errlen, dfd, "cannot create journal %s: "
				"%s; pass journal=PATH on a writable file system", path, strerror(-dfd));
	src = build_image(want, &img, &len);
	if (src != SQLITE_OK) {
		close(dfd);
		return err_set(err, errlen, sqlite_errno(src) == -ENOMEM ? -ENOMEM : -EIO,
				"cannot create journal %s: %s", path, sqlite3_errstr(src));
	}
	rc = jnl_birth_sides(path, err, errlen);
	if (!rc)
		rc = place_image(dfd, path, over_empty, img, (size_t)len, err, errlen);
	if (!rc && (rc = sync_dir(dfd)))
		err_set(err, errlen, rc, "cannot create journal %s: syncing its directory: %s",
			 path, strerror(-rc));
	sqlite3_free(img);
	close(dfd);
	return rc;
}
