/*
 * test_files.h: a C unit test's scratch directory and the files it writes there
 * (test_pack.c, test_encode.c, test_dataset_sources.c). Header-only, static. The journal
 * tests have their own in test_journal_util.h.
 */
#ifndef ZEPHON_TEST_FILES_H
#define ZEPHON_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>

#include "check.h"

/* The scratch directory, "/tmp/zephon-test-TAG-XXXXXX" once scratch_init() made it. */
static char tmp[64];

static inline void scratch_init(const char *tag)
{
	snprintf(tmp, sizeof(tmp), "/tmp/zephon-test-%s-XXXXXX", tag);
	REQUIRE(mkdtemp(tmp));
}

/* tmp/name, in one of 8 rotating buffers (so a few can be alive at once). */
static inline char *path_in(const char *name)
{
	static char p[8][512];
	static int k;
	char *s = p[k++ % 8];

	snprintf(s, 512, "%s/%s", tmp, name);
	return s;
}

static inline void write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");

	REQUIRE(f);
	REQUIRE(fwrite(data, 1, n, f) == n);
	REQUIRE(fclose(f) == 0);
}

#endif
