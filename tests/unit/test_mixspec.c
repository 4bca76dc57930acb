/*
 * test_mixspec.c: the mixture spec file (mixspec.h) written to a temp dir: the happy path
 * (default names, relative datasets resolved against the spec's directory, weight 0),
 * and every refusal with its errno and a message naming the file and JSON path.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "mixspec.h"
#include "scratch.h"

static char *tmp; /* the scratch directory (scratch.h) */
static char spec_path[600];

static void write_spec(const char *text)
{
	FILE *f = fopen(spec_path, "w");

	REQUIRE(f);
	REQUIRE(fputs(text, f) >= 0);
	REQUIRE(fclose(f) == 0);
}

/* Load text as the spec: returns the rc; err holds the message. */
static int load(const char *text, struct mixspec *m, char *err, size_t errlen)
{
	write_spec(text);
	memset(m, 0xab, sizeof(*m)); /* set only on success */
	err[0] = 0;
	return mixspec_load(spec_path, m, err, errlen);
}

/* text is refused with -EINVAL and a one-line message holding each of want[]. */
static void refused(const char *text, const char *want1, const char *want2)
{
	struct mixspec m;
	char err[512];
	int rc = load(text, &m, err, sizeof(err));

	CHECK(rc == -EINVAL);
	CHECK(strstr(err, spec_path) == err); /* names the file first */
	CHECK(strstr(err, want1) != NULL);
	CHECK(!want2 || strstr(err, want2) != NULL);
	CHECK(!strchr(err, '\n'));
	if (rc != -EINVAL || !strstr(err, want1) || (want2 && !strstr(err, want2)))
		fprintf(stderr, "  for %s: rc %d: %s\n", text, rc, err);
	if (rc == 0)
		mixspec_release(&m);
}

static void test_happy(void)
{
	struct mixspec m;
	char err[512], base[PATH_MAX], want[PATH_MAX + 64];
	int rc;

	REQUIRE(realpath(tmp, base));
	rc = load("{\"sources\": [{\"name\": \"web\", \"dataset\": \"web/\", \"weight\": 0.7},\n"
		  " {\"dataset\": \"/data/code\", \"weight\": 0.3},\n"
		  " {\"dataset\": \"sub/math.v2/\", \"weight\": 0},\n"
		  " {\"name\": \"b-1_x.y\", \"dataset\": \"../up\", \"weight\": 2}]}\n",
		  &m, err, sizeof(err));
	CHECK(rc == 0);
	if (rc) {
		fprintf(stderr, "  %s\n", err);
		return;
	}
	CHECK(m.count == 4);
	CHECK(!strcmp(m.sources[0].name, "web"));
	snprintf(want, sizeof(want), "%s/web/", base);
	CHECK(!strcmp(m.sources[0].dir, want));
	CHECK(m.sources[0].weight == 0.7);
	CHECK(!strcmp(m.sources[1].name, "code"));
	CHECK(!strcmp(m.sources[1].dir, "/data/code"));
	CHECK(m.sources[1].weight == 0.3);
	CHECK(!strcmp(m.sources[2].name, "math.v2"));
	snprintf(want, sizeof(want), "%s/sub/math.v2/", base);
	CHECK(!strcmp(m.sources[2].dir, want));
	CHECK(m.sources[2].weight == 0);
	CHECK(!strcmp(m.sources[3].name, "b-1_x.y"));
	snprintf(want, sizeof(want), "%s/../up", base);
	CHECK(!strcmp(m.sources[3].dir, want));
	CHECK(m.sources[3].weight == 2); /* a JSON integer is a number too */
	mixspec_release(&m);
	CHECK(m.count == 0 && m.sources == NULL);
	mixspec_release(&m); /* twice is harmless */

	/* a relative spec path: the datasets still resolve to absolute paths */
	{
		char cwd[PATH_MAX];

		REQUIRE(getcwd(cwd, sizeof(cwd)));
		REQUIRE(chdir(tmp) == 0);
		rc = mixspec_load("mix.json", &m, err, sizeof(err));
		CHECK(rc == 0);
		if (rc == 0) {
			snprintf(want, sizeof(want), "%s/web/", base);
			CHECK(!strcmp(m.sources[0].dir, want));
			mixspec_release(&m);
		}
		REQUIRE(chdir(cwd) == 0);
	}
	/* MIXSPEC_MAX_SOURCES (1,024) sources is the most */
	{
		char *text = malloc((MIXSPEC_MAX_SOURCES + 1) * 64 + 64), too[64], last[16];
		size_t len = 0;

		REQUIRE(text);
		len += (size_t)sprintf(text, "{\"sources\": [");
		for (int i = 0; i <= MIXSPEC_MAX_SOURCES; i++)
			len += (size_t)sprintf(text + len, "%s{\"dataset\": \"d%d\", \"weight\": 1}",
					       i ? ", " : "", i);
		strcpy(text + len, "]}");
		snprintf(too, sizeof(too), "sources: %d sources, at most %d",
			 MIXSPEC_MAX_SOURCES + 1, MIXSPEC_MAX_SOURCES);
		refused(text, too, NULL);
		*strrchr(text, '{') = 0;
		strcpy(strrchr(text, ',') , "]}");
		CHECK(load(text, &m, err, sizeof(err)) == 0);
		CHECK(m.count == MIXSPEC_MAX_SOURCES);
		snprintf(last, sizeof(last), "d%d", MIXSPEC_MAX_SOURCES - 1);
		CHECK(!strcmp(m.sources[MIXSPEC_MAX_SOURCES - 1].name, last));
		mixspec_release(&m);
		free(text);
	}
}

static void test_refusals(void)
{
	/* not JSON: jansson's line and column */
	refused("{\"sources\": [\n{\"dataset\": \"a\", \"weight\": 1,}]}", "line 2, column", NULL);
	refused("", "line 1", NULL);
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": NaN}]}", "line 1", NULL);
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": 1e999}]}", "line 1", NULL);
	refused("[1, 2]", "must be a JSON object", NULL);
	/* sources */
	refused("{}", "sources: is missing", NULL);
	refused("{\"sources\": []}", "sources: is empty", NULL);
	refused("{\"sources\": {\"dataset\": \"a\"}}", "sources: must be an array", NULL);
	refused("{\"sources\": [3]}", "sources[0]: must be an object", "got 3");
	/* unknown keys */
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": 1}], \"seed\": 3}",
		"top level: unknown key \"seed\"", NULL);
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": 1}, "
		"{\"dataset\": \"b\", \"wieght\": 1}]}", "sources[1]: unknown key \"wieght\"", NULL);
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": 1, \"weight\": 2}]}",
		"duplicate", NULL);
	/* weights */
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": 1}, "
		"{\"dataset\": \"b\", \"weight\": \"abc\"}]}",
		"sources[1].weight: must be a number >= 0, got \"abc\"", NULL);
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": -0.5}]}",
		"sources[0].weight: must be a number >= 0, got -0.5", NULL);
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": true}]}",
		"sources[0].weight: must be a number >= 0, got true", NULL);
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": null}]}",
		"sources[0].weight", "got null");
	refused("{\"sources\": [{\"dataset\": \"a\"}]}", "sources[0].weight: is missing", NULL);
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": 0}, "
		"{\"dataset\": \"b\", \"weight\": 0.0}]}", "weights sum to 0", NULL);
	refused("{\"sources\": [{\"dataset\": \"a\", \"weight\": 1e308}, "
		"{\"dataset\": \"b\", \"weight\": 1e308}]}", "weights sum to inf", NULL);
	/* dataset */
	refused("{\"sources\": [{\"name\": \"a\", \"weight\": 1}]}",
		"sources[0].dataset: is missing", NULL);
	refused("{\"sources\": [{\"dataset\": \"\", \"weight\": 1}]}",
		"sources[0].dataset: must be a non-empty string", NULL);
	refused("{\"sources\": [{\"dataset\": 5, \"weight\": 1}]}",
		"sources[0].dataset: must be a non-empty string, got 5", NULL);
	/* names */
	refused("{\"sources\": [{\"dataset\": \"x/web\", \"weight\": 1}, "
		"{\"dataset\": \"y/web/\", \"weight\": 1}]}",
		"sources[1].name: \"web\" is also the name of sources[0]", NULL);
	refused("{\"sources\": [{\"name\": \"a\", \"dataset\": \"x\", \"weight\": 1}, "
		"{\"name\": \"a\", \"dataset\": \"y\", \"weight\": 1}]}",
		"sources[1].name: \"a\" is also", NULL);
	refused("{\"sources\": [{\"name\": \"\", \"dataset\": \"x\", \"weight\": 1}]}",
		"sources[0].name: \"\" is not a valid name", NULL);
	refused("{\"sources\": [{\"name\": \"a b\", \"dataset\": \"x\", \"weight\": 1}]}",
		"sources[0].name: \"a b\" is not a valid name", NULL);
	refused("{\"sources\": [{\"name\": \"a/b\", \"dataset\": \"x\", \"weight\": 1}]}",
		"\"a/b\" is not a valid name", NULL);
	refused("{\"sources\": [{\"name\": \"..\", \"dataset\": \"x\", \"weight\": 1}]}",
		"\"..\" is not a valid name", NULL);
	refused("{\"sources\": [{\"name\": \"a\\u0000b\", \"dataset\": \"x\", \"weight\": 1}]}",
		"line 1", "\\u0000"); /* jansson refuses NUL in strings */
	refused("{\"sources\": [{\"name\": 7, \"dataset\": \"x\", \"weight\": 1}]}",
		"sources[0].name: must be a string, got 7", NULL);
	refused("{\"sources\": [{\"name\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", "
		"\"dataset\": \"x\", \"weight\": 1}]}", "is not a valid name", "1 to 64 bytes");
	refused("{\"sources\": [{\"dataset\": \"/\", \"weight\": 1}]}",
		"(from \"dataset\")", "give a \"name\"");
	refused("{\"sources\": [{\"dataset\": \"my data\", \"weight\": 1}]}",
		"\"my data\" (from \"dataset\") is not a valid name", NULL);
	/* 64 bytes is the longest name */
	{
		struct mixspec m;
		char err[512];

		CHECK(load("{\"sources\": [{\"name\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
			   "aaaaaaaaaaaaaaaaaaaaaa\", \"dataset\": \"x\", \"weight\": 1}]}", &m,
			   err, sizeof(err)) == 0);
		CHECK(strlen(m.sources[0].name) == 64);
		mixspec_release(&m);
	}
}

static void test_files(void)
{
	struct mixspec m;
	char err[512], dir[600], missing[600];

	snprintf(missing, sizeof(missing), "%s/nope.json", tmp);
	memset(&m, 0xab, sizeof(m));
	CHECK(mixspec_load(missing, &m, err, sizeof(err)) == -ENOENT);
	CHECK(strstr(err, missing) == err);
	CHECK(m.count != 0); /* untouched */
	snprintf(dir, sizeof(dir), "%s/ds", tmp);
	REQUIRE(mkdir(dir, 0755) == 0);
	CHECK(mixspec_load(dir, &m, err, sizeof(err)) == -EISDIR);
	CHECK(strstr(err, dir) == err);

	write_spec("{\"sources\": [{\"dataset\": \"a\", \"weight\": 1}]}");
	CHECK(mixspec_is_spec(spec_path) == 1);
	CHECK(mixspec_is_spec(dir) == 0);
	CHECK(mixspec_is_spec(missing) == 0);
	CHECK(mixspec_is_spec("/dev/null") == 0);
	{
		char link[700];

		snprintf(link, sizeof(link), "%s/link.json", tmp);
		REQUIRE(symlink(spec_path, link) == 0);
		CHECK(mixspec_is_spec(link) == 1);
	}
}

int main(void)
{
	tmp = scratch_dir("mixspec");
	snprintf(spec_path, sizeof(spec_path), "%s/mix.json", tmp);
	test_happy();
	test_refusals();
	test_files();
	rm_rf(tmp);
	free(tmp);
	return check_status();
}
