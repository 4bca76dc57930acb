/* source_dir.c: one sample per regular file under a directory, sorted by relative path. */
#include "source.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "filegroup.h"

struct dir_file {
	char *rel;
	uint64_t size;
};

struct dir_src {
	int root;
	struct dir_file *files;
	size_t n, cap, next;
};

static int cmp_rel(const void *a, const void *b)
{
	return strcmp(((const struct dir_file *)a)->rel, ((const struct dir_file *)b)->rel);
}

static int add_file(struct dir_src *d, const char *rel, uint64_t size)
{
	int rc = ARRAY_GROW(d->files, d->cap, d->n + 1);

	if (rc)
		return rc;
	d->files[d->n].rel = strdup(rel);
	if (!d->files[d->n].rel)
		return -ENOMEM;
	d->files[d->n].size = size;
	d->n++;
	return 0;
}

/* Walk directory fd (relative path prefix `rel`), never following a symlink. */
static int scan(struct source *s, struct dir_src *d, int fd, const char *rel, unsigned depth)
{
	DIR *dir;
	struct dirent *de;
	int rc = 0;

	if (depth > 256) {
		source_error(s, 0, "%s/%s: directories nest too deep", s->path, rel);
		close(fd);
		return -ELOOP;
	}
	dir = fdopendir(fd);
	if (!dir) {
		rc = -errno;
		close(fd);
		source_error(s, 0, "%s/%s: cannot list: %s", s->path, rel,
			 strerror(-rc));
		return rc;
	}
	while ((errno = 0, de = readdir(dir))) {
		char child[4096];
		struct stat sb;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(child, sizeof(child), "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
		    (int)sizeof(child)) {
			source_error(s, 0, "%s/%s/%s: path too long", s->path, rel,
				 de->d_name);
			rc = -ENAMETOOLONG;
			break;
		}
		if (fstatat(dirfd(dir), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = -errno;
			source_error(s, 0, "%s/%s: %s", s->path, child, strerror(-rc));
			break;
		}
		if (S_ISREG(sb.st_mode)) {
			s->bytes_total += (uint64_t)sb.st_size;
			rc = add_file(d, child, (uint64_t)sb.st_size);
		} else if (S_ISDIR(sb.st_mode)) {
			int cfd = openat(dirfd(dir), de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (cfd < 0) {
				rc = -errno;
				source_error(s, 0, "%s/%s: cannot open: %s", s->path,
					 child, strerror(-rc));
			} else {
				rc = scan(s, d, cfd, child, depth + 1);
			}
		} else if (S_ISLNK(sb.st_mode)) {
			source_notice(s, "%s/%s: is a symlink, not followed; skipped", s->path, child);
		} else {
			source_notice(s, "%s/%s: is not a regular file; skipped", s->path, child);
		}
		if (rc)
			break;
	}
	if (!rc && errno) {
		rc = -errno;
		source_error(s, 0, "%s/%s: cannot list: %s", s->path, rel,
			 strerror(-rc));
	}
	closedir(dir);
	return rc;
}

static void dir_close(struct source *s)
{
	struct dir_src *d = s->priv;

	for (size_t i = 0; i < d->n; i++)
		free(d->files[i].rel);
	free(d->files);
	if (d->root >= 0)
		close(d->root);
	free(d);
	s->priv = NULL;
}

static int dir_open(struct source *s)
{
	struct dir_src *d = calloc(1, sizeof(*d));
	int fd, rc;

	if (!d)
		return -ENOMEM;
	s->priv = d;
	s->content = CONTENT_FILES;
	d->root = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->root < 0) {
		rc = -errno;
		source_error(s, 0, "%s: cannot open directory: %s", s->path,
			 strerror(-rc));
		return rc;
	}
	fd = dup(d->root);
	if (fd < 0)
		return -errno;
	rc = scan(s, d, fd, "", 0);
	if (rc)
		return rc;
	if (d->n)
		qsort(d->files, d->n, sizeof(*d->files), cmp_rel);
	return 0;
}

/* Open rel under root with no symlink anywhere on the way (the tree may change between
 * the scan and the read). */
static int open_beneath(int root, const char *rel)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, root, rel, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = openat(root, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	return (int)fd;
}

/* Read one file into a group at the end of out. 0 or -errno with s->err set. */
static int read_file(struct source *s, struct dir_src *d, const struct dir_file *f,
		     struct buf *out)
{
	size_t start, old = out->len;
	struct stat sb;
	uint64_t size, got = 0, le;
	int fd, rc;

	fd = open_beneath(d->root, f->rel);
	if (fd < 0 || fstat(fd, &sb) != 0) {
		rc = -errno;
		source_error(s, 0, "%s/%s: cannot open: %s", s->path, f->rel,
			 strerror(-rc));
		goto fail;
	}
	if (!S_ISREG(sb.st_mode)) {
		rc = -EINVAL;
		source_error(s, 0, "%s/%s: is no longer a regular file", s->path,
			 f->rel);
		goto fail;
	}
	size = (uint64_t)sb.st_size;
	if (size > SAMPLE_MAX_BYTES - 12 - strlen(f->rel) - 4) {
		rc = -EFBIG;
		source_error(s, 0, "%s/%s: %ju bytes exceed the %u-byte sample "
			 "limit", s->path, f->rel, (uintmax_t)size, (unsigned)SAMPLE_MAX_BYTES);
		goto fail;
	}
	if ((rc = filegroup_begin(out, &start)) ||
	    (rc = filegroup_add_header(out, start, f->rel, strlen(f->rel), size)) ||
	    (rc = buf_reserve(out, (size_t)size))) {
		source_error(s, 0, "%s/%s: out of memory", s->path, f->rel);
		goto fail;
	}
	while (got < size) {
		ssize_t n = read(fd, out->data + out->len + got, (size_t)(size - got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			source_error(s, 0, "%s/%s: read error at byte %ju: %s",
				 s->path, f->rel, (uintmax_t)got,
				 n < 0 ? strerror(errno) : "the file shrank while being packed");
			goto fail;
		}
		got += (uint64_t)n;
	}
	/* The checksum covers names, sizes and bytes, so a rename changes it. */
	le = htole64(size);
	XXH3_128bits_update(s->hash, f->rel, strlen(f->rel) + 1);
	XXH3_128bits_update(s->hash, &le, 8);
	XXH3_128bits_update(s->hash, out->data + out->len, (size_t)size);
	out->len += (size_t)size;
	out->data[out->len] = 0;
	close(fd);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	out->len = old;
	return rc;
}

static int dir_next(struct source *s, struct buf *out)
{
	struct dir_src *d = s->priv;

	while (d->next < d->n) {
		const struct dir_file *f = &d->files[d->next++];
		int rc = read_file(s, d, f, out);

		s->bytes_read += f->size;
		if (rc == 0)
			return 1;
		if (!s->opts->skip_bad || rc == -ENOMEM)
			return rc;
		source_notice(s, "%s; skipped", s->err);
		s->err[0] = 0;
	}
	return 0;
}

const struct source_ops source_dir_ops = {
	.name = "files",
	.open = dir_open,
	.next = dir_next,
	.close = dir_close,
};
