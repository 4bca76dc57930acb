/* pack_publish.c: the temporary directory of `zephon pack` and the move into place
 * (pack_int.h). */
#include "pack_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Remove a directory that holds only files (ours: shards, indexes, catalog, journal). */
int pack_remove_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) != 0)
			rc = -errno;
	}
	closedir(d);
	if (rmdir(path) != 0 && !rc)
		rc = -errno;
	return rc;
}

/* Files a pack writes: the catalog (and SQLite's side files of it) and the shards. */
static int is_dataset_file(const char *name)
{
	return !strncmp(name, CATALOG_FILE, strlen(CATALOG_FILE)) || !strncmp(name, "shard-", 6);
}

/*
 * --force replaces the dataset, not what users keep beside it: the default journal
 * (journal.sqlite and its -wal) and any other file move from the replaced dataset into
 * the new one. A journal so kept still names the old fingerprint: a repack of the same
 * data keeps resuming, a repack of other data is refused at mount with both
 * fingerprints named. A file that cannot be moved stays in `from`, which is then kept.
 */
static int carry_over(struct packer *p, const char *from, const char *to)
{
	DIR *d = opendir(from);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return pack_fail(p, -errno, "%s: cannot list the old dataset: %s", from, strerror(errno));
	while ((de = readdir(d))) {
		char msg[512], *dst = NULL;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    is_dataset_file(de->d_name))
			continue;
		if (asprintf(&dst, "%s/%s", to, de->d_name) < 0) {
			rc = -ENOMEM;
			continue;
		}
		if (renameat(dirfd(d), de->d_name, AT_FDCWD, dst) != 0) {
			rc = pack_fail(p, -errno, "cannot move %s/%s into the new dataset (%s); it is kept "
				  "in %s", from, de->d_name, strerror(errno), from);
		} else if (p->o->notice) {
			snprintf(msg, sizeof(msg), "kept %s from the replaced dataset", de->d_name);
			p->o->notice(p->o->ctx, msg);
		}
		free(dst);
	}
	closedir(d);
	return rc;
}

static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) != 0)
		rc = -errno;
	close(fd);
	return rc;
}

/* This machine's name for temporary directory names: gethostname(), '?' if unknown. */
static void host_name(char *out, size_t len)
{
	if (gethostname(out, len - 1) != 0 || !*out)
		snprintf(out, len, "?");
	out[len - 1] = 0;
	for (char *c = out; *c; c++)
		if (*c == '/')
			*c = '_';
}

/*
 * A pack killed by SIGKILL or a power loss leaves its temporary directory beside out
 * (SIGINT and SIGTERM clean up). Its name says which pack made it,
 * ".NAME.zephon-tmp-HOST-PID-XXXXXX": remove the ones of out whose pack is gone, saying
 * so. Gone means made on this host, by a pid that no longer exists, and with the flock
 * its pack holds free (a pid of another pid namespace, say). Another host's are left
 * alone with a note: that pack may be running. (A ".zephon-old-" directory is the old
 * dataset of a --force replace cut short between its two renames: left alone too.)
 * host is this machine's, from host_name().
 */
static void remove_leftovers(struct packer *p, const char *parent, const char *base,
			     const char *host)
{
	DIR *d = opendir(parent);
	struct dirent *de;
	char *prefix = NULL;

	if (!d || asprintf(&prefix, ".%s.zephon-tmp-", base) < 0) {
		if (d)
			closedir(d);
		return;
	}
	while ((de = readdir(d))) {
		const char *rest = de->d_name + strlen(prefix), *dash;
		char *path = NULL, msg[PATH_MAX + 160], *end;
		long pid;
		int fd, rc;

		if (strncmp(de->d_name, prefix, strlen(prefix)) || strstr(de->d_name, ".zephon-old-"))
			continue;
		/* HOST-PID-XXXXXX, parsed from the right: a host name may hold '-' */
		dash = strrchr(rest, '-');
		if (!dash || dash == rest || strlen(dash + 1) != 6)
			continue;
		while (--dash > rest && *dash != '-')
			;
		if (dash == rest || (pid = strtol(dash + 1, &end, 10)) <= 0 || *end != '-')
			continue;
		if (asprintf(&path, "%s/%s", parent, de->d_name) < 0)
			break;
		if ((size_t)(dash - rest) != strlen(host) || strncmp(rest, host, strlen(host))) {
			snprintf(msg, sizeof(msg), "%s: left by a pack on host %.*s; remove it if no "
				 "pack runs there any more", path, (int)(dash - rest), rest);
			if (p->o->notice)
				p->o->notice(p->o->ctx, msg);
		} else if (kill((pid_t)pid, 0) != 0 && errno == ESRCH &&
			   (fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
					O_NOFOLLOW)) >= 0) {
			if (flock(fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) {
				rc = pack_remove_dir(path);
				snprintf(msg, sizeof(msg), rc ? "cannot remove %s, left by an "
					 "interrupted pack: %s" : "removed %s, left by an interrupted "
					 "pack%s", path, rc ? strerror(-rc) : "");
				if (p->o->notice)
					p->o->notice(p->o->ctx, msg);
			}
			close(fd);
		}
		free(path);
	}
	free(prefix);
	closedir(d);
}

/* Make the temporary directory beside out, named and locked as this pack's
 * (remove_leftovers). */
int pack_make_tmp(struct packer *p)
{
	char *copy1 = strdup(p->o->out), *copy2 = strdup(p->o->out), host[256];
	int rc = 0;

	host_name(host, sizeof(host));
	if (copy1 && copy2) {
		char *parent = dirname(copy1), *base = basename(copy2);

		remove_leftovers(p, parent, base, host);
		if (asprintf(&p->tmpdir, "%s/.%s.zephon-tmp-%s-%d-XXXXXX", parent, base, host,
			     (int)getpid()) < 0)
			p->tmpdir = NULL;
	}
	if (!p->tmpdir) {
		rc = -ENOMEM;
	} else if (!mkdtemp(p->tmpdir)) {
		rc = pack_fail(p, -errno, "%s: cannot create a directory beside it: %s", p->o->out,
			  strerror(errno));
		free(p->tmpdir);
		p->tmpdir = NULL;
	} else if ((p->dirfd = open(p->tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		rc = pack_fail(p, -errno, "%s: %s", p->tmpdir, strerror(errno));
	} else {
		/* held until the pack ends; unsupported on some network file systems, where
		 * the pid in the name is the guard */
		flock(p->dirfd, LOCK_EX);
		/* mkdtemp makes 0700; a dataset is as readable as any new directory */
		mode_t mask = umask(0);

		umask(mask);
		fchmod(p->dirfd, 0777 & ~mask);
	}
	free(copy1);
	free(copy2);
	return rc;
}

/* Whether path is a directory with nothing in it. */
static int empty_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int empty = d != NULL;

	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = 0;
	if (d)
		closedir(d);
	return empty;
}

/* Move the finished dataset into place (replacing an old one under --force). */
int pack_publish(struct packer *p)
{
	const char *out = p->o->out;
	char *old = NULL, *parent_copy = strdup(out);
	struct stat sb;
	int rc = 0;

	if (!parent_copy)
		return -ENOMEM;
	/* rename(2) replaces an empty directory by itself */
	if (lstat(out, &sb) == 0 && !(S_ISDIR(sb.st_mode) && empty_dir(out))) {
		if (!p->o->force) {
			rc = pack_fail(p, -EEXIST, "%s already exists; choose another -o or pass --force "
				  "to replace it", out);
			goto done;
		}
		if (asprintf(&old, "%s.zephon-old-%d", p->tmpdir, (int)getpid()) < 0) {
			old = NULL;
			rc = -ENOMEM;
			goto done;
		}
		if (rename(out, old) != 0) {
			rc = pack_fail(p, -errno, "%s: cannot move the old dataset aside: %s", out,
				  strerror(errno));
			goto done;
		}
	}
	if (rename(p->tmpdir, out) != 0) {
		rc = pack_fail(p, -errno, "%s: cannot rename the new dataset into place: %s", out,
			  strerror(errno));
		if (old)
			rename(old, out);
		goto done;
	}
	free(p->tmpdir);
	p->tmpdir = NULL;
	fsync_path(dirname(parent_copy));
	if (old && carry_over(p, old, out) == 0)
		pack_remove_dir(old);
done:
	free(old);
	free(parent_copy);
	return rc;
}

/* An existing output must be an empty directory (`mkdir out && zephon pack ... -o out`),
 * or, under --force, a dataset: never delete a stranger. */
int pack_check_out(struct packer *p)
{
	const struct pack_opts *o = p->o;
	struct stat sb;
	char *cat = NULL;
	int ok;

	if (lstat(o->out, &sb) != 0 || (S_ISDIR(sb.st_mode) && empty_dir(o->out)))
		return 0;
	if (!o->force)
		return pack_fail(p, -EEXIST, "%s already exists; choose another -o or pass --force to "
			    "replace it", o->out);
	if (!S_ISDIR(sb.st_mode))
		return pack_fail(p, -EEXIST, "%s exists and is not a directory; refusing to replace it",
			    o->out);
	if (asprintf(&cat, "%s/%s", o->out, CATALOG_FILE) < 0)
		return -ENOMEM;
	ok = access(cat, F_OK) == 0;
	free(cat);
	if (!ok)
		return pack_fail(p, -EEXIST, "%s exists and is not a zephon dataset; refusing to "
			    "replace it", o->out);
	return 0;
}
