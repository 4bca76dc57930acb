/* test_remote.c: core/remote without a server: the s3:// URL, the AWS configuration's
 * sources and their order, and the node cache (presence bits, whole objects, the shared
 * usage count, the cap, eviction of datasets no process holds). The S3 client itself is
 * tested against a real server by tests/fuse/test_s3.py. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "check.h"
#include "s3.h"
#include "scratch.h"

static void test_url(void)
{
	char b[64], p[64], err[256];

	CHECK(s3_url_parse("s3://bucket/a/b/", b, sizeof(b), p, sizeof(p), err, sizeof(err)) == 0);
	CHECK(!strcmp(b, "bucket") && !strcmp(p, "a/b"));
	CHECK(s3_url_parse("s3://my.bucket-1", b, sizeof(b), p, sizeof(p), err, sizeof(err)) == 0);
	CHECK(!strcmp(b, "my.bucket-1") && !strcmp(p, ""));
	CHECK(s3_url_parse("s3://ab/x", b, sizeof(b), p, sizeof(p), err, sizeof(err)) == -EINVAL);
	CHECK(strstr(err, "bucket name"));
	CHECK(s3_url_parse("s3://Upper/x", b, sizeof(b), p, sizeof(p), err, sizeof(err)) == -EINVAL);
	CHECK(s3_url_parse("/data/x", b, sizeof(b), p, sizeof(p), err, sizeof(err)) == -EINVAL);
	CHECK(s3_url_parse("s3://bucket/0123456789012345678901234567890123456789012345678901234567"
			   "890123456789", b, sizeof(b), p, sizeof(p), err, sizeof(err)) == -EINVAL);
	CHECK(s3_is_url("s3://b/x") && !s3_is_url("/s3://b") && !s3_is_url(NULL));
}

static void clear_env(const char *home)
{
	static const char *vars[] = { "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
		"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_S3_ADDRESSING_STYLE",
		"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("HOME", home, 1);
}

static void test_config(const char *dir)
{
	struct s3_config c;
	char err[512], *aws = path_in(dir, ".aws"), *cred, *conf;
	static const char creds[] = "[default]\naws_access_key_id = DEFKEY\n"
		"aws_secret_access_key = defsecret\n\n[ci]\naws_access_key_id=CIKEY\n"
		"aws_secret_access_key= cisecret\naws_session_token = citoken\n";
	static const char config[] = "[default]\nregion = eu-west-3\n[profile ci]\n"
		"region = ap-south-1\nendpoint_url = http://127.0.0.1:9/\ns3 =\n"
		"  addressing_style = virtual\n[profile onlyconf]\naws_access_key_id = CONFKEY\n"
		"aws_secret_access_key = confsecret\n";

	clear_env(dir);
	CHECK(s3_config_load(&c, err, sizeof(err)) == -EACCES);
	CHECK(strstr(err, "no S3 credentials") && strstr(err, "profile default"));
	mkdir(aws, 0700);
	cred = path_in(aws, "credentials");
	conf = path_in(aws, "config");
	REQUIRE(spit(cred, creds, strlen(creds)) == 0 && spit(conf, config, strlen(config)) == 0);
	/* the default profile; region from the config file, AWS's endpoint, virtual hosts */
	CHECK(s3_config_load(&c, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.access_key, "DEFKEY") && !strcmp(c.secret_key, "defsecret"));
	CHECK(!strcmp(c.region, "eu-west-3") && !c.path_style);
	CHECK(!strcmp(c.endpoint, "https://s3.eu-west-3.amazonaws.com"));
	CHECK(strstr(c.source, "profile default") && !strstr(c.source, "defsecret"));
	/* a named profile: its token, its endpoint (trailing '/' dropped), its style */
	setenv("AWS_PROFILE", "ci", 1);
	CHECK(s3_config_load(&c, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.access_key, "CIKEY") && !strcmp(c.session_token, "citoken"));
	CHECK(!strcmp(c.endpoint, "http://127.0.0.1:9") && !c.path_style);
	CHECK(!strcmp(c.region, "ap-south-1"));
	/* the environment comes first, each variable over the files */
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_REGION", "us-west-2", 1);
	setenv("AWS_ENDPOINT_URL", "http://localhost:8333", 1);
	unsetenv("AWS_PROFILE");
	CHECK(s3_config_load(&c, err, sizeof(err)) == 0);
	CHECK(!strcmp(c.access_key, "ENVKEY") && !c.session_token[0] && c.path_style);
	CHECK(!strcmp(c.region, "us-west-2") && !strcmp(c.endpoint, "http://localhost:8333"));
	setenv("AWS_S3_ADDRESSING_STYLE", "virtual", 1);
	CHECK(s3_config_load(&c, err, sizeof(err)) == 0 && !c.path_style);
	setenv("AWS_S3_ADDRESSING_STYLE", "sideways", 1);
	CHECK(s3_config_load(&c, err, sizeof(err)) == -EINVAL && strstr(err, "sideways"));
	unsetenv("AWS_S3_ADDRESSING_STYLE");
	setenv("AWS_ENDPOINT_URL", "ftp://x", 1);
	CHECK(s3_config_load(&c, err, sizeof(err)) == -EINVAL && strstr(err, "ftp://x"));
	/* keys only in the config file's profile */
	clear_env(dir);
	setenv("AWS_PROFILE", "onlyconf", 1);
	CHECK(s3_config_load(&c, err, sizeof(err)) == 0 && !strcmp(c.access_key, "CONFKEY"));
	CHECK(strstr(c.source, "config"));
	setenv("AWS_PROFILE", "missing", 1);
	CHECK(s3_config_load(&c, err, sizeof(err)) == -EACCES && strstr(err, "profile missing"));
	clear_env(dir);
	free(cred);
	free(conf);
	free(aws);
}

static void test_cache_objects(const char *dir)
{
	struct cache *c, *c2;
	struct cache_ds *d;
	struct cache_obj *o, *o2;
	struct cache_stats st;
	char err[512], path[4096], got[16];
	char *cdir = path_in(dir, "cache");

	REQUIRE(cache_open(cdir, 0, &c, err, sizeof(err)) == 0);
	REQUIRE(cache_ds_open(c, "endpoint\nbucket\nprefix", &d, err, sizeof(err)) == 0);
	/* whole objects: absent, put, found at their version only */
	CHECK(cache_whole_path(d, "catalog.sqlite", "\"e1\"", 5, path, sizeof(path)) == 0);
	CHECK(cache_whole_put(d, "catalog.sqlite", "\"e1\"", "hello", 5, path, sizeof(path)) == 0);
	CHECK(cache_whole_path(d, "catalog.sqlite", "\"e1\"", 5, path, sizeof(path)) == 1);
	CHECK(cache_whole_path(d, "catalog.sqlite", "\"e2\"", 5, path, sizeof(path)) == 0);
	/* a partial object: bits set after a write, read back, forgotten */
	REQUIRE(cache_obj_open(d, "shard-00000.raw", "\"s1\"", 1000, 100, &o, err, sizeof(err)) == 0);
	CHECK(!cache_obj_has(o, 7) && !cache_obj_has(o, 8));
	CHECK(cache_obj_write(o, "0123456789abcdef", 70, 16, 7, 2) == 1);
	CHECK(cache_obj_has(o, 7) && cache_obj_has(o, 8) && !cache_obj_has(o, 9));
	CHECK(!cache_obj_has(o, 100)); /* out of range */
	CHECK(cache_obj_read(o, got, 78, 8) == 0 && !memcmp(got, "89abcdef", 8));
	/* another process's view (a second open of the same DIR): the same bits */
	REQUIRE(cache_open(cdir, 0, &c2, err, sizeof(err)) == 0);
	{
		struct cache_ds *d2;

		REQUIRE(cache_ds_open(c2, "endpoint\nbucket\nprefix", &d2, err, sizeof(err)) == 0);
		REQUIRE(cache_obj_open(d2, "shard-00000.raw", "\"s1\"", 1000, 100, &o2, err,
				       sizeof(err)) == 0);
		CHECK(cache_obj_has(o2, 8));
		cache_obj_forget(o2, 8);
		CHECK(!cache_obj_has(o, 8) && cache_obj_has(o, 7));
		cache_obj_close(o2);
		/* another version of the object: nothing held */
		REQUIRE(cache_obj_open(d2, "shard-00000.raw", "\"s2\"", 1000, 100, &o2, err,
				       sizeof(err)) == 0);
		CHECK(!cache_obj_has(o2, 7));
		cache_obj_close(o2);
		cache_ds_close(d2);
	}
	cache_get_stats(c, &st);
	CHECK_EQ_U64(st.written, 5 + 16);
	CHECK_EQ_U64(st.misses, 2);
	CHECK_EQ_U64(st.hits, 1);
	CHECK(st.used >= 21);
	cache_get_stats(c2, &st);
	CHECK_EQ_U64(st.bad, 1);
	cache_close(c2);
	cache_obj_close(o);
	cache_ds_close(d);
	cache_close(c);
	/* a file where the folder should be; a folder that cannot be made */
	{
		char *f = path_in(dir, "plainfile");

		REQUIRE(spit(f, "", 0) == 0);
		CHECK(cache_open(f, 0, &c, err, sizeof(err)) == -ENOTDIR && strstr(err, f));
		CHECK(cache_open("/proc/no-such/cache", 0, &c, err, sizeof(err)) < 0);
		free(f);
	}
	free(cdir);
}

static void test_cache_cap(const char *dir)
{
	struct cache *c;
	struct cache_ds *a, *b;
	struct cache_obj *oa, *ob;
	struct cache_stats st;
	char err[512], *cdir = path_in(dir, "capped");
	static char block[64 << 10];
	struct stat sb;

	memset(block, 7, sizeof(block));
	/* dataset a fills 256 KiB, then is closed (no process holds it) */
	REQUIRE(cache_open(cdir, 0, &c, err, sizeof(err)) == 0);
	REQUIRE(cache_ds_open(c, "a", &a, err, sizeof(err)) == 0);
	REQUIRE(cache_obj_open(a, "s", "\"1\"", 4 * sizeof(block), 4, &oa, err, sizeof(err)) == 0);
	for (int k = 0; k < 4; k++)
		CHECK(cache_obj_write(oa, block, (uint64_t)k * sizeof(block), sizeof(block), k, 1) == 1);
	cache_obj_close(oa);
	cache_ds_close(a);
	cache_close(c);
	/* reopened alone with a cap of 160 KiB: the usage is recounted from the disk */
	REQUIRE(cache_open(cdir, 160 << 10, &c, err, sizeof(err)) == 0);
	cache_get_stats(c, &st);
	CHECK(st.used >= 4 * sizeof(block) && st.used < 5 * sizeof(block));
	REQUIRE(cache_ds_open(c, "b", &b, err, sizeof(err)) == 0);
	REQUIRE(cache_obj_open(b, "s", "\"1\"", 4 * sizeof(block), 4, &ob, err, sizeof(err)) == 0);
	CHECK(cache_obj_write(ob, block, 0, sizeof(block), 0, 1) == 1);
	/* past the cap: a, held by no one, is evicted whole */
	CHECK(cache_obj_write(ob, block, sizeof(block), sizeof(block), 1, 1) == 1);
	cache_get_stats(c, &st);
	CHECK(st.evicted >= 4 * sizeof(block));
	CHECK(st.used <= 160 << 10);
	{
		char *gone = path_in(cdir, "ds");
		int n = 0;
		DIR *dd = opendir(gone);
		struct dirent *e;

		while (dd && (e = readdir(dd)))
			n += e->d_name[0] != '.';
		if (dd)
			closedir(dd);
		CHECK(n == 1); /* only b's folder */
		free(gone);
	}
	/* b itself is held (its cache_ds is open): never evicted; past the cap, not kept */
	CHECK(cache_obj_write(ob, block, 2 * sizeof(block), sizeof(block), 2, 1) == 0);
	CHECK(!cache_obj_has(ob, 2) && cache_obj_has(ob, 1));
	cache_get_stats(c, &st);
	CHECK(st.used <= 160 << 10);
	CHECK_EQ_U64(st.not_kept, sizeof(block));
	CHECK(!stat(cdir, &sb));
	cache_obj_close(ob);
	cache_ds_close(b);
	cache_close(c);
	free(cdir);
}

int main(void)
{
	char *dir = scratch_dir("remote");

	test_url();
	test_config(dir);
	test_cache_objects(dir);
	test_cache_cap(dir);
	rm_rf(dir);
	free(dir);
	return check_status();
}
