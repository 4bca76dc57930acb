/*
 * scratch.h: the one scratch-directory helper of the C tests (unit and fuzz): a fresh
 * directory, paths in it, whole files written into it, and its removal. Header-only,
 * static.
 */
#ifndef ZEPHON_SCRATCH_H
#define ZEPHON_SCRATCH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* asprintf, nftw (meson passes it; this is for standalone use) */
#endif

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* A fresh scratch directory under $TMPDIR, else `pref` if it is a directory (NULL:
 * none), else /tmp; exits on failure. */
static inline char *scratch_dir_in(const char *tag, const char *pref)
{
	const char *base = getenv("TMPDIR");
	struct stat st;
	char *p;

	if ((!base || !*base) && pref && !stat(pref, &st) && S_ISDIR(st.st_mode) &&
	    !access(pref, W_OK))
		base = pref;
	if (!base || !*base)
		base = "/tmp";
	if (asprintf(&p, "%s/zephon-%s-XXXXXX", base, tag) < 0 || !mkdtemp(p)) {
		perror("mkdtemp");
		exit(1);
	}
	return p;
}

static inline char *scratch_dir(const char *tag)
{
	return scratch_dir_in(tag, NULL);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Remove path and everything under it (what can be removed). */
static inline void rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* dir/name, malloc'd: the caller frees it. Exits when out of memory. */
static inline char *path_in(const char *dir, const char *name)
{
	char *p;

	if (asprintf(&p, "%s/%s", dir, name) < 0)
		exit(1);
	return p;
}

/* Write len bytes of data as the whole file path: 0, or -1 (errno set). */
static inline int spit(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	int ok;

	if (!f)
		return -1;
	ok = fwrite(data, 1, len, f) == len;
	return fclose(f) == 0 && ok ? 0 : -1;
}

#endif
