/* mixspec.c: the mixture spec file read and checked (mixspec.h). */
#include "mixspec.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "buf.h"

#define SPEC_FORM "{\"sources\": [{\"dataset\": DIR, \"weight\": W}, ...]}"

/* v as compact JSON, cut to fit out, for "got ..." in messages. */
static void show(const json_t *v, char *out, size_t len)
{
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);

	if (!s) {
		snprintf(out, len, "?");
		return;
	}
	if (strlen(s) >= len && len > 4)
		snprintf(out, len, "%.*s...", (int)(len - 4), s);
	else
		snprintf(out, len, "%s", s);
	free(s);
}

/* The keys an object may have, and how a message names them. */
struct key_set {
	const char *const *keys;
	size_t n;
	const char *expect;      /* "\"name\", \"dataset\" or \"weight\"" */
};

/* 0 when every key of object o is one of ks's; else -EINVAL naming the first other. */
static int known_keys(const char *path, const char *where, const json_t *o,
		      const struct key_set *ks, char *err, size_t errlen)
{
	const char *const *keys = ks->keys;
	size_t n = ks->n;
	const char *expect = ks->expect;
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)o, k, v) {
		size_t i = 0;

		while (i < n && strcmp(k, keys[i]))
			i++;
		if (i == n) {
			err_printf(err, errlen, "%s: %s: unknown key \"%s\"; expected %s", path,
				   where, k, expect);
			return -EINVAL;
		}
	}
	return 0;
}

/* A name: 1..MIXSPEC_NAME_MAX bytes of [A-Za-z0-9_.-], not "." or "..". */
static int good_name(const char *s, size_t n)
{
	static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				 "0123456789_.-";

	if (n == 0 || n > MIXSPEC_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!s[i] || !strchr(ok, s[i])) /* strchr finds the NUL too */
			return 0;
	return !(n == 1 && s[0] == '.') && !(n == 2 && s[0] == '.' && s[1] == '.');
}

/* The directory of the spec file at path, absolute: a malloc'ed string, or NULL with
 * errno set. */
static char *spec_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir, *abs;

	if (!slash)
		return realpath(".", NULL);
	dir = slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
	if (!dir)
		return NULL;
	abs = realpath(dir, NULL);
	free(dir);
	return abs;
}

/* Fill src from source object o (sources[i]). 0, -EINVAL or -ENOMEM. */
static int load_source(const char *path, const char *base, size_t i, const json_t *o,
		       struct mixspec_source *src, char *err, size_t errlen)
{
	static const char *const keys[] = { "name", "dataset", "weight" };
	const json_t *jd, *jw, *jn;
	char where[32], got[48];
	const char *d, *name, *end;
	size_t dlen, nlen;

	snprintf(where, sizeof(where), "sources[%zu]", i);
	if (!json_is_object(o)) {
		show(o, got, sizeof(got));
		err_printf(err, errlen, "%s: %s: must be an object like {\"dataset\": DIR, "
			   "\"weight\": W}, got %s", path, where, got);
		return -EINVAL;
	}
	if (known_keys(path, where, o, &(struct key_set){ keys, 3,
		       "\"name\", \"dataset\" or \"weight\"" }, err, errlen))
		return -EINVAL;
	jd = json_object_get(o, "dataset");
	/* (jansson refuses \u0000 in strings: lengths are strlen()'s) */
	if (!jd || !json_is_string(jd) || json_string_length(jd) == 0) {
		if (jd)
			show(jd, got, sizeof(got));
		err_printf(err, errlen, "%s: %s.dataset: %s%s; give the directory of a packed "
			   "dataset", path, where, jd ? "must be a non-empty string, got " :
			   "is missing", jd ? got : "");
		return -EINVAL;
	}
	jw = json_object_get(o, "weight");
	if (!jw || !json_is_number(jw) || !isfinite(json_number_value(jw)) ||
	    json_number_value(jw) < 0) {
		if (jw)
			show(jw, got, sizeof(got));
		err_printf(err, errlen, "%s: %s.weight: %s%s", path, where, jw ?
			   "must be a number >= 0, got " : "is missing; give a number >= 0",
			   jw ? got : "");
		return -EINVAL;
	}
	src->weight = json_number_value(jw);

	d = json_string_value(jd);
	dlen = strlen(d);
	jn = json_object_get(o, "name");
	if (jn) {
		if (!json_is_string(jn)) {
			show(jn, got, sizeof(got));
			err_printf(err, errlen, "%s: %s.name: must be a string, got %s", path, where,
				   got);
			return -EINVAL;
		}
		name = json_string_value(jn);
		nlen = json_string_length(jn);
	} else {
		/* the dataset directory's last component, trailing slashes aside */
		end = d + dlen;
		while (end > d && end[-1] == '/')
			end--;
		name = end;
		while (name > d && name[-1] != '/')
			name--;
		nlen = (size_t)(end - name);
	}
	if (!good_name(name, nlen)) {
		err_printf(err, errlen, "%s: %s.name: \"%.*s\"%s is not a valid name: give 1 to %d "
			   "bytes of A-Z a-z 0-9 _ . - (not \".\" or \"..\")%s", path, where,
			   (int)(nlen > 80 ? 80 : nlen), name, jn ? "" : " (from \"dataset\")",
			   MIXSPEC_NAME_MAX, jn ? "" : "; give a \"name\"");
		return -EINVAL;
	}
	src->name = strndup(name, nlen);
	if (d[0] == '/' || !strncmp(d, "s3://", 5)) /* absolute, or in object storage */
		src->dir = strdup(d);
	else if (asprintf(&src->dir, "%s%s%s", base, strcmp(base, "/") ? "/" : "", d) < 0)
		src->dir = NULL;
	return src->name && src->dir ? 0 : -ENOMEM;
}

/* Everything of mixspec_load() past reading the JSON. */
static int load_tree(const char *path, const json_t *root, struct mixspec *spec, char *err,
		     size_t errlen)
{
	static const char *const keys[] = { "sources" };
	const json_t *arr;
	char *base = NULL, got[48];
	double sum = 0;
	int rc;

	if (!json_is_object(root)) {
		show(root, got, sizeof(got));
		err_printf(err, errlen, "%s: must be a JSON object like " SPEC_FORM ", got %s",
			   path, got);
		return -EINVAL;
	}
	if (known_keys(path, "top level", root, &(struct key_set){ keys, 1, "\"sources\"" }, err,
		       errlen))
		return -EINVAL;
	arr = json_object_get(root, "sources");
	if (!arr || !json_is_array(arr) || json_array_size(arr) == 0) {
		err_printf(err, errlen, "%s: sources: %s; a mixture spec is " SPEC_FORM, path,
			   !arr ? "is missing" : !json_is_array(arr) ? "must be an array" :
			   "is empty");
		return -EINVAL;
	}
	if (json_array_size(arr) > MIXSPEC_MAX_SOURCES) {
		err_printf(err, errlen, "%s: sources: %zu sources, at most %d can be mixed", path,
			   json_array_size(arr), MIXSPEC_MAX_SOURCES);
		return -EINVAL;
	}
	base = spec_dir(path);
	if (!base) {
		rc = -errno;
		err_printf(err, errlen, "%s: its directory: %s", path, strerror(errno));
		return rc;
	}
	spec->sources = calloc(json_array_size(arr), sizeof(*spec->sources));
	if (!spec->sources) {
		free(base);
		return -ENOMEM;
	}
	for (size_t i = 0; i < json_array_size(arr); i++) {
		struct mixspec_source *src = &spec->sources[i];

		spec->count++;
		rc = load_source(path, base, i, json_array_get(arr, i), src, err, errlen);
		if (rc)
			goto out;
		for (size_t j = 0; j < i; j++) {
			if (strcmp(spec->sources[j].name, src->name))
				continue;
			err_printf(err, errlen, "%s: sources[%zu].name: \"%s\" is also the name of "
				   "sources[%zu]; names must be unique (give \"name\")", path, i,
				   src->name, j);
			rc = -EINVAL;
			goto out;
		}
		sum += src->weight;
	}
	if (!(sum > 0) || !isfinite(sum)) {
		err_printf(err, errlen, "%s: sources: the weights sum to %g; give at least one "
			   "weight > 0 (and a finite sum)", path, sum);
		rc = -EINVAL;
		goto out;
	}
	rc = 0;
out:
	free(base);
	return rc;
}

int mixspec_load(const char *path, struct mixspec *out, char *err, size_t errlen)
{
	struct mixspec spec = { 0, NULL };
	json_error_t je;
	struct stat sb;
	json_t *root;
	FILE *f;
	int rc;

	f = fopen(path, "re");
	if (!f) {
		rc = -errno;
		err_printf(err, errlen, "%s: %s%s", path, strerror(errno), rc == -ENOENT ?
			   "; give the path of a mixture spec (JSON) or of a packed dataset" : "");
		return rc;
	}
	if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
		fclose(f);
		err_printf(err, errlen, "%s: is a directory, not a mixture spec file", path);
		return -EISDIR;
	}
	root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
	fclose(f);
	if (!root) {
		err_printf(err, errlen, "%s: line %d, column %d: %s; a mixture spec is JSON: "
			   SPEC_FORM, path, je.line, je.column, je.text);
		return -EINVAL;
	}
	rc = load_tree(path, root, &spec, err, errlen);
	json_decref(root);
	if (rc) {
		mixspec_release(&spec);
		return rc;
	}
	*out = spec;
	return 0;
}

void mixspec_release(struct mixspec *spec)
{
	for (size_t i = 0; spec->sources && i < spec->count; i++) {
		free(spec->sources[i].name);
		free(spec->sources[i].dir);
	}
	free(spec->sources);
	spec->sources = NULL;
	spec->count = 0;
}

int mixspec_is_spec(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}
