/*
 * test_files.h: the one scratch directory of a C unit test that writes many files
 * (test_pack.c, test_encode.c, test_dataset_sources.c), on scratch.h: scratch_init()
 * makes it, tmp_path() names a file in it, write_file() writes one or fails the test.
 * Header-only, static.
 */
#ifndef ZEPHON_TEST_FILES_H
#define ZEPHON_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "scratch.h"

/* The scratch directory once scratch_init() made it (scratch_dir(): malloc'd, kept). */
static char *tmp;

static inline void scratch_init(const char *tag)
{
	tmp = scratch_dir(tag);
}

/* path_in(tmp, name), owned here and valid until the 8th call after this one (so a few
 * can be alive at once without the caller freeing any). */
static inline char *tmp_path(const char *name)
{
	static char *p[8];
	static int k;
	char **s = &p[k++ % 8];

	free(*s);
	*s = path_in(tmp, name);
	return *s;
}

static inline void write_file(const char *path, const void *data, size_t n)
{
	REQUIRE(spit(path, data, n) == 0);
}

#endif
