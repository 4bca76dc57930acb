/* cmd_upload.c: `zephon upload DATASET s3://BUCKET/PREFIX`: put a packed dataset's files
 * into object storage as they are (PREFIX/NAME for each file NAME), shards and indexes
 * first, many at a time, the catalog last: a prefix with a catalog holds every file the
 * catalog names. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "catalog.h"
#include "cmd.h"
#include "dataset.h"
#include "docindex.h"
#include "s3.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zephon upload DATASET s3://BUCKET[/PREFIX] [--create-bucket]\n"
		"\n"
		"Put the files of the packed dataset DATASET into object storage under PREFIX, as\n"
		"they are: shards and indexes first, catalog.sqlite last. Endpoint, region and\n"
		"credentials as for an s3:// dataset (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...: see\n"
		"docs/object-storage.md). --create-bucket makes BUCKET first when it is missing.\n"
		"Exit 0 when every file is up, 1 when one failed, 2 on a usage error.\n");
}

struct upload {
	struct s3_req *q;
	char **keys, **paths;
	size_t n;
};

static int add_file(struct upload *u, const char *dir, const char *prefix, const char *name)
{
	size_t i = u->n++;

	if (asprintf(&u->paths[i], "%s/%s", dir, name) < 0 ||
	    asprintf(&u->keys[i], "%s%s%s", prefix, prefix[0] ? "/" : "", name) < 0)
		return -ENOMEM;
	return 0;
}

/* Make bucket unless it exists. 0 or 1 after a message. */
static int create_bucket(struct s3_client *cl, const char *bucket)
{
	struct s3_req q = { .method = S3_PUT, .bucket = bucket, .key = "", .upload = "/dev/null" };
	int rc = s3_run(cl, &q);

	if (rc && q.status != 409) { /* 409: BucketAlreadyOwnedByYou */
		die_msg("cannot create bucket %s: %s", bucket, q.err);
		return 1;
	}
	return 0;
}

struct waiter {
	size_t left;
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

static void put_done(struct s3_req *q, void *ctx)
{
	struct waiter *w = ctx;

	(void)q;
	pthread_mutex_lock(&w->lock);
	w->left--;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Run the puts [from, to) of u at once (the client sends 16 at a time); 0, or 1 after a
 * message for each that failed. */
static int put_all(struct s3_client *cl, struct upload *u, const char *bucket, size_t from,
		   size_t to)
{
	struct waiter w = { to - from, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER };
	int status = 0;

	for (size_t i = from; i < to; i++) {
		u->q[i] = (struct s3_req){ .method = S3_PUT, .bucket = bucket, .key = u->keys[i],
					   .upload = u->paths[i], .done = put_done, .ctx = &w };
		s3_submit(cl, &u->q[i]);
	}
	pthread_mutex_lock(&w.lock);
	while (w.left)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	for (size_t i = from; i < to; i++) {
		if (u->q[i].rc) {
			die_msg("upload %s: %s", u->paths[i], u->q[i].err);
			status = 1;
		}
	}
	return status;
}

static int upload(const char *dir, const char *url, int create)
{
	char bucket[64], prefix[1024], err[512];
	struct dataset *ds = NULL;
	struct s3_config cfg;
	struct s3_client *cl = NULL;
	struct upload u = { 0 };
	const struct catalog *cat;
	struct stat st;
	int status = 1;

	if (s3_url_parse(url, bucket, sizeof(bucket), prefix, sizeof(prefix), err, sizeof(err))) {
		die_msg("%s", err);
		return 2;
	}
	if (dataset_open(dir, &ds, err, sizeof(err))) {
		die_msg("cannot open dataset %s: %s", dir, err);
		return 1;
	}
	if (s3_config_load(&cfg, err, sizeof(err))) {
		die_msg("%s", err);
		goto out;
	}
	if (s3_client_new(&cfg, 16, 120, &cl)) {
		die_msg("cannot start the S3 client");
		goto out;
	}
	if (create && create_bucket(cl, bucket))
		goto out;
	cat = dataset_catalog(ds);
	u.q = calloc(2 * cat->nshards + 2, sizeof(*u.q));
	u.keys = calloc(2 * cat->nshards + 2, sizeof(*u.keys));
	u.paths = calloc(2 * cat->nshards + 2, sizeof(*u.paths));
	if (!u.q || !u.keys || !u.paths)
		goto oom;
	for (size_t k = 0; k < cat->nshards; k++)
		if (add_file(&u, dir, prefix, cat->shards[k].file) ||
		    add_file(&u, dir, prefix, cat->shards[k].index_file))
			goto oom;
	if (asprintf(&u.paths[u.n], "%s/%s", dir, DOCINDEX_FILE) >= 0 && !stat(u.paths[u.n], &st)) {
		free(u.paths[u.n]);
		if (add_file(&u, dir, prefix, DOCINDEX_FILE))
			goto oom;
	} else {
		free(u.paths[u.n]);
		u.paths[u.n] = NULL;
	}
	if (add_file(&u, dir, prefix, CATALOG_FILE))
		goto oom;
	status = put_all(cl, &u, bucket, 0, u.n - 1);
	if (!status)
		status = put_all(cl, &u, bucket, u.n - 1, u.n);
	if (!status)
		printf("uploaded %zu files of %s to %s\n", u.n, dir, url);
	goto out;
oom:
	die_msg("out of memory");
out:
	for (size_t i = 0; i < u.n; i++) {
		free(u.keys[i]);
		free(u.paths[i]);
	}
	free(u.keys);
	free(u.paths);
	free(u.q);
	s3_client_free(cl);
	explicit_bzero(&cfg, sizeof(cfg));
	dataset_close(ds);
	return status;
}

int cmd_upload(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "create-bucket", no_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, create = 0;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (c == 'c') {
			create = 1;
		} else if (c == 'h') {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 2 || !s3_is_url(argv[optind + 1])) {
		usage(stderr);
		return 2;
	}
	return upload(argv[optind], argv[optind + 1], create);
}
