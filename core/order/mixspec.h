/*
 * mixspec.h: the mixture spec file, a small JSON file that names the packed datasets of
 * a mixture and their weights:
 *
 *   {"sources": [{"name": "web", "dataset": "web/", "weight": 0.7},
 *                {"name": "code", "dataset": "/data/code", "weight": 0.3}]}
 *
 * Owns parsing and checking it; it opens no dataset (dataset_open_sources() does, and
 * reports a missing one). Invariants of a loaded spec: 1 <= count <= MIXSPEC_MAX_SOURCES;
 * names unique, 1..MIXSPEC_NAME_MAX bytes of [A-Za-z0-9_.-], neither "." nor ".." (they
 * become file names and metric labels); every weight finite and >= 0, their sum finite
 * and > 0. No globals; thread-safe.
 */
#ifndef ZEPHON_MIXSPEC_H
#define ZEPHON_MIXSPEC_H

#include <stddef.h>

#define MIXSPEC_MAX_SOURCES 1024
#define MIXSPEC_NAME_MAX 64

struct mixspec_source {
	char *name;     /* as given, or the last path component of "dataset" */
	char *dir;      /* "dataset"; a relative one joined to the spec file's directory
	                 * made absolute (realpath(3)), so it holds after a chdir */
	double weight;  /* as given: finite, >= 0; not normalised (0: served nothing) */
};

struct mixspec {
	size_t count;
	struct mixspec_source *sources;  /* count entries, in the file's order */
};

/* Read and check the spec file at path into *out (owned by the caller: free with
 * mixspec_release()). Keys: top level "sources" only; per source "dataset" (a non-empty
 * string, required), "weight" (a number, required), "name" (a string, optional); any
 * other key, or a key twice, is an error, so that a typo cannot pass unnoticed.
 * 0, or -errno with one line in err that names the file and, for a bad value, its JSON
 * path ("mix.json: sources[1].weight: must be a number >= 0, got \"abc\""):
 * -ENOENT (no such file), -EACCES, -EISDIR (a directory), -EINVAL (not JSON: with line
 * and column; no or empty "sources", more than MIXSPEC_MAX_SOURCES, an unknown key, a
 * weight that is not a finite number >= 0, all weights zero, a missing or empty
 * "dataset", a bad or duplicate name), -ENOMEM. *out is set only on success. */
int mixspec_load(const char *path, struct mixspec *out, char *err, size_t errlen);

/* Free what mixspec_load() allocated and zero *spec; safe on a zeroed spec. */
void mixspec_release(struct mixspec *spec);

/* 1 when path is a regular file (after symlinks): a mixture spec to load; 0 when it is a
 * directory (a packed dataset), missing, or anything else. */
int mixspec_is_spec(const char *path);

#endif
