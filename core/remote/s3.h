/*
 * s3.h: datasets in S3-compatible object storage: the URL form, where endpoint, region
 * and credentials come from, and one client that runs ranged GETs, HEADs and PUTs many
 * at a time over reused connections (libcurl's multi interface on one thread of its own;
 * requests are signed by libcurl, CURLOPT_AWS_SIGV4: AWS Signature Version 4).
 *
 * URL: s3://BUCKET/PREFIX (PREFIX may be empty, or end with '/'); the objects of a
 * dataset are PREFIX/NAME for each file NAME of the packed directory.
 *
 * Configuration (s3_config_load), the AWS CLI's conventions, each value from the first
 * source that has it:
 *   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); then
 *                profile P (AWS_PROFILE, else "default") in the credentials file
 *                (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials); then profile P
 *                in the config file (AWS_CONFIG_FILE, else ~/.aws/config; "[profile P]",
 *                or "[default]"). None found: -EACCES. (No instance metadata service.)
 *   region       AWS_REGION, AWS_DEFAULT_REGION, the config file's `region`, us-east-1
 *   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the config file's
 *                `endpoint_url`, else https://s3.REGION.amazonaws.com; http:// is allowed
 *   addressing   AWS_S3_ADDRESSING_STYLE (path | virtual), the config file's
 *                `addressing_style`; default path with a custom endpoint (what
 *                S3-compatible servers serve), virtual-hosted on AWS
 * Secrets never appear in a message: only the names of their sources.
 *
 * Thread-safety: a struct s3_client may be used by any number of threads at once.
 */
#ifndef ZEPHON_S3_H
#define ZEPHON_S3_H

#include <stddef.h>
#include <stdint.h>

#define S3_URL_SCHEME "s3://"

struct s3_config {
	char endpoint[512];      /* scheme://host[:port], no trailing '/' */
	char region[64];
	char access_key[256];
	char secret_key[256];
	char session_token[4096]; /* "" when none */
	int path_style;          /* 1: endpoint/BUCKET/KEY; 0: BUCKET.host/KEY */
	char source[320];        /* where the credentials came from (for messages) */
};

/* 1 when path starts with "s3://". */
int s3_is_url(const char *path);

/* Split "s3://BUCKET/PREFIX" into bucket and prefix (prefix without a trailing '/',
 * possibly ""). 0, or -EINVAL with a reason in err (no bucket, a bucket name S3 refuses,
 * too long). */
int s3_url_parse(const char *url, char *bucket, size_t bucket_len, char *prefix,
		 size_t prefix_len, char *err, size_t errlen);

/* Read the configuration described above into *c. 0, -EACCES (no credentials, named
 * sources in err), -EINVAL (a value that cannot be used: a bad endpoint URL or
 * addressing style, a profile file line too long), -ENOMEM. */
int s3_config_load(struct s3_config *c, char *err, size_t errlen);

/* One request. The caller fills the inputs, s3_submit() or s3_run() runs it, done()
 * says it finished; the outputs are then valid. Owned by the caller, who keeps it (and
 * dst) alive until done() ran. */
enum s3_method { S3_GET, S3_HEAD, S3_PUT };
struct s3_req {
	/* in */
	enum s3_method method;
	const char *bucket;
	const char *key;         /* the object's key (not URL-encoded) */
	uint64_t off, len;       /* GET: the bytes [off, off + len) into dst (len > 0);
	                          * len == 0: the whole object into body */
	void *dst;
	const char *etag;        /* GET/HEAD: the ETag the object must still have; NULL: any */
	const char *upload;      /* PUT: path of the local file to upload */
	void (*done)(struct s3_req *q, void *ctx);
	void *ctx;
	/* out */
	int rc;                  /* 0, or -errno as s3_run() returns */
	long status;             /* the last HTTP status, 0 when none came */
	uint64_t size;           /* the object's size (Content-Range, Content-Length) */
	char etag_out[128];      /* its ETag as the server sent it, quotes included */
	uint8_t *body;           /* GET with len == 0: the object (malloc; caller frees) */
	uint64_t body_len;
	unsigned retries;
	char err[320];           /* why it failed: the object, the status, S3's error code */
	/* the client's */
	struct s3_req *next;
	void *easy;
	void *headers;           /* this request's own header list (If-Match), or NULL */
	double start, not_before;
	uint64_t got;
	int finished;
	char hdr_range[64];
	char errbody[512];       /* the start of an error response's body (S3's XML) */
	size_t errbody_len;
};

struct s3_stats {
	uint64_t requests;       /* HTTP requests sent, retries included */
	uint64_t bytes;          /* response body bytes received */
	uint64_t retries;
	uint64_t errors;         /* requests that failed for good */
	uint64_t in_flight;      /* now */
	char last_error[320];    /* "" when none */
};

struct s3_client;

/* A client for config c (copied) with at most `connections` requests in flight (1 to
 * 1024) over reused connections; a request that fails for a transient cause (no
 * connection, a timeout, HTTP 429, 500, 502, 503, 504) is sent again after 50 ms,
 * doubling to 2 s, until timeout_s seconds passed since it was first sent. Starts its
 * thread. 0, -EINVAL (connections out of range), -ENOMEM, -EAGAIN (no thread). */
int s3_client_new(const struct s3_config *c, unsigned connections, double timeout_s,
		  struct s3_client **out);
/* Fails every request still queued or in flight with -ECANCELED, stops the thread. */
void s3_client_free(struct s3_client *cl);

/* Queue q; q->done(q, q->ctx) is called on the client's thread when it finished. */
void s3_submit(struct s3_client *cl, struct s3_req *q);
/* Run q and wait for it. Returns q->rc: 0, or -ENOENT (404: no such bucket or key),
 * -EACCES (403: refused credentials or permissions), -ESTALE (the object's ETag or size
 * is no longer the one asked for: replaced), -EBADMSG (the server answered with other
 * bytes than asked: a short body or a range it did not serve), -ETIMEDOUT (transient
 * failures until timeout_s), -ECANCELED (client freed), -EIO (any other HTTP error),
 * -ENOMEM; q->err says which object and why. q->done is ignored. */
int s3_run(struct s3_client *cl, struct s3_req *q);

/* Counters since s3_client_new, copied out. */
void s3_client_stats(struct s3_client *cl, struct s3_stats *out);

#endif
