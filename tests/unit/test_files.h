/*
 * test_files.h: the one scratch directory of a C unit test that writes many files
 * (test_pack.c, test_encode.c, test_dataset_sources.c, test_serve.c), on scratch.h:
 * scratch_init() makes it, tmp_path() names a file in it, write_file() writes one or
 * fails the test; pack_one() packs one input into a dataset there. Header-only, static.
 */
#ifndef ZEPHON_TEST_FILES_H
#define ZEPHON_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "pack.h"
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

/* Pack the one input into out with o's options (pack_opts_init()'s and what the caller
 * set; the input and out are set here): pack_run()'s 0 or -errno, with its message in
 * err (errlen bytes, the caller's). */
static inline int pack_one(struct pack_opts *o, const char *input, const char *out,
			   char *err, size_t errlen)
{
	const char *inputs[1] = { input };
	struct pack_result res;
	int rc;

	o->inputs = inputs;
	o->ninputs = 1;
	o->out = out;
	rc = pack_run(o, &res, err, errlen);
	o->inputs = NULL; /* inputs[] ends here */
	o->ninputs = 0;
	return rc;
}

/* pack_one(), or fail the test with pack_run()'s message. */
static inline void pack_one_or_fail(struct pack_opts *o, const char *input, const char *out)
{
	char err[1024] = "";
	int rc = pack_one(o, input, out, err, sizeof(err));

	if (rc)
		fprintf(stderr, "pack %s: %d %s\n", input, rc, err);
	REQUIRE(rc == 0);
}

#endif
