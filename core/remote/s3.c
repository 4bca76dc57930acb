/* s3.c: the S3 client of s3.h: one thread drives libcurl's multi interface (its
 * connection cache reuses each connection for request after request), requests signed by
 * libcurl's CURLOPT_AWS_SIGV4, transient failures sent again with backoff. The one
 * boundary where libcurl's codes and HTTP statuses become -errno. */
#include "s3.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "clock.h"

#define BACKOFF_FIRST_S 0.05
#define BACKOFF_MAX_S 2.0
/* A connection that moves no byte for this long is dropped (and the request retried):
 * a server that stopped answering is found long before timeout_s. */
#define STALL_S 10L

struct s3_client {
	struct s3_config cfg;
	unsigned max_conns;
	double timeout_s;
	char sigv4[128];
	struct curl_slist *headers;
	CURLM *multi;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;     /* a request finished (s3_run waits on it) */
	struct s3_req *queue, *queue_tail; /* under lock: submitted, not started */
	int stop;                /* under lock */
	/* the thread's own */
	struct s3_req *delayed;  /* waiting to be sent again */
	CURL **idle;
	size_t nidle;
	CURL **busy;             /* the handles in flight, active of them */
	unsigned active;
	struct s3_stats stats;   /* under lock */
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static int global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -ENOMEM;
}

/* S3's percent-encoding of a key: every byte but unreserved ones and '/'. */
static int encode_key(struct buf *b, const char *key)
{
	int rc = 0;

	for (const unsigned char *p = (const unsigned char *)key; *p && !rc; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~/", *p))
			rc = buf_append(b, p, 1);
		else
			rc = buf_printf(b, "%%%02X", *p);
	}
	return rc;
}

static int request_url(const struct s3_client *cl, const struct s3_req *q, struct buf *b)
{
	const char *host = strstr(cl->cfg.endpoint, "://");
	int rc;

	if (cl->cfg.path_style)
		rc = buf_printf(b, "%s/%s/", cl->cfg.endpoint, q->bucket);
	else
		rc = buf_printf(b, "%.*s%s.%s/", (int)(host + 3 - cl->cfg.endpoint),
				cl->cfg.endpoint, q->bucket, host + 3);
	return rc ? rc : encode_key(b, q->key);
}

static void req_fail(struct s3_req *q, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void req_fail(struct s3_req *q, int rc, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(q->err, sizeof(q->err), "s3://%s/%s: ", q->bucket, q->key);

	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(q->err))
		vsnprintf(q->err + n, sizeof(q->err) - (size_t)n, fmt, ap);
	va_end(ap);
	q->rc = rc;
}

static long status_of(struct s3_req *q)
{
	long st = 0;

	curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &st);
	return st;
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
	struct s3_req *q = ctx;
	size_t len = size * n;
	long st = status_of(q);

	if (st >= 300) { /* an error's XML: keep its start for the message */
		size_t room = sizeof(q->errbody) - 1 - q->errbody_len;

		memcpy(q->errbody + q->errbody_len, p, len < room ? len : room);
		q->errbody_len += len < room ? len : room;
		q->errbody[q->errbody_len] = 0;
		return len;
	}
	if (q->len) {
		if (len > q->len - q->got)
			return 0; /* more than asked: the range was not honoured */
		memcpy((uint8_t *)q->dst + q->got, p, len);
	} else {
		uint8_t *nb = realloc(q->body, q->got + len + 1);

		if (!nb)
			return 0;
		q->body = nb;
		memcpy(q->body + q->got, p, len);
	}
	q->got += len;
	return len;
}

/* "Name: value" header lines: ETag and the object's size. */
static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
	struct s3_req *q = ctx;
	size_t len = size * n;
	char line[256];
	const char *v;

	if (len >= sizeof(line))
		return len;
	memcpy(line, p, len);
	line[len] = 0;
	line[strcspn(line, "\r\n")] = 0;
	if (!strncasecmp(line, "etag:", 5)) {
		v = line + 5 + strspn(line + 5, " ");
		snprintf(q->etag_out, sizeof(q->etag_out), "%s", v);
	} else if (!strncasecmp(line, "content-range:", 14) && (v = strchr(line, '/'))) {
		q->size = strtoull(v + 1, NULL, 10);
	} else if (!strncasecmp(line, "content-length:", 15) && !q->hdr_range[0]) {
		q->size = strtoull(line + 15, NULL, 10);
	}
	return len;
}

static CURL *easy_take(struct s3_client *cl)
{
	CURL *e = cl->nidle ? cl->idle[--cl->nidle] : curl_easy_init();

	if (e)
		curl_easy_reset(e);
	return e;
}

static void easy_put(struct s3_client *cl, CURL *e)
{
	if (cl->nidle < cl->max_conns)
		cl->idle[cl->nidle++] = e;
	else
		curl_easy_cleanup(e);
}

static int easy_setup(struct s3_client *cl, struct s3_req *q, CURL *e, const char *url)
{
	double left = cl->timeout_s - (clock_mono_s() - q->start);
	FILE *f;

	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_PRIVATE, q);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_AWS_SIGV4, cl->sigv4);
	curl_easy_setopt(e, CURLOPT_USERNAME, cl->cfg.access_key);
	curl_easy_setopt(e, CURLOPT_PASSWORD, cl->cfg.secret_key);
	if (q->etag && q->method != S3_PUT) {
		/* the server refuses (412) a version other than the one recorded; the ETag of
		 * the answer is compared too (req_outcome), for servers that ignore If-Match */
		char h[160];
		struct curl_slist *l = NULL;

		snprintf(h, sizeof(h), "If-Match: %s", q->etag);
		for (struct curl_slist *b = cl->headers; b; b = b->next)
			l = curl_slist_append(l, b->data);
		q->headers = l = curl_slist_append(l, h);
		if (!l)
			return -ENOMEM;
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, q->headers ? q->headers : cl->headers);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, q);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, q);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, STALL_S);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(left > 0.001 ? left * 1000 : 1));
	if (q->method == S3_HEAD)
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	if (q->method == S3_GET && q->len) {
		snprintf(q->hdr_range, sizeof(q->hdr_range), "%" PRIu64 "-%" PRIu64, q->off,
			 q->off + q->len - 1);
		curl_easy_setopt(e, CURLOPT_RANGE, q->hdr_range);
	}
	if (q->method == S3_PUT) {
		f = fopen(q->upload, "rb");
		if (!f)
			return -errno;
		fseeko(f, 0, SEEK_END);
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)ftello(f));
		rewind(f);
		curl_easy_setopt(e, CURLOPT_READDATA, f);
		q->dst = f;
	}
	return 0;
}

/* Send q (again). 0, or -errno: q then failed for good. */
static int req_start(struct s3_client *cl, struct s3_req *q)
{
	struct buf url = BUF_INIT;
	CURL *e;
	int rc;

	q->got = 0;
	q->errbody_len = 0;
	q->errbody[0] = 0;
	q->etag_out[0] = 0;
	free(q->body);
	q->body = NULL;
	if (!(e = easy_take(cl)))
		return -ENOMEM;
	rc = request_url(cl, q, &url);
	if (!rc)
		rc = easy_setup(cl, q, e, (const char *)url.data);
	buf_release(&url);
	if (rc) {
		curl_slist_free_all(q->headers);
		q->headers = NULL;
		easy_put(cl, e);
		return rc;
	}
	q->easy = e;
	if (curl_multi_add_handle(cl->multi, e) != CURLM_OK) {
		easy_put(cl, e);
		return -ENOMEM;
	}
	cl->busy[cl->active++] = e;
	pthread_mutex_lock(&cl->lock);
	cl->stats.requests++;
	cl->stats.in_flight++;
	pthread_mutex_unlock(&cl->lock);
	return 0;
}

/* S3's <Code> of an error body, or "" */
static void s3_code(const struct s3_req *q, char *out, size_t len)
{
	const char *a = strstr(q->errbody, "<Code>"), *b = a ? strstr(a, "</Code>") : NULL;

	out[0] = 0;
	if (a && b)
		snprintf(out, len, " %.*s", (int)(b - a - 6), a + 6);
}

static int transient_curl(CURLcode r)
{
	return r == CURLE_COULDNT_CONNECT || r == CURLE_OPERATION_TIMEDOUT ||
	       r == CURLE_RECV_ERROR || r == CURLE_SEND_ERROR || r == CURLE_GOT_NOTHING ||
	       r == CURLE_PARTIAL_FILE || r == CURLE_SSL_CONNECT_ERROR;
}

/* The outcome of a finished transfer: 0, 1 to send it again, or -errno (q->err set). */
static int req_outcome(struct s3_req *q, CURLcode r)
{
	long st = q->status = status_of(q);
	char code[96];

	if (r != CURLE_OK && r != CURLE_WRITE_ERROR) {
		req_fail(q, -ETIMEDOUT, "%s", curl_easy_strerror(r));
		return transient_curl(r) ? 1 : -EIO;
	}
	s3_code(q, code, sizeof(code));
	if (st == 429 || st == 500 || st == 502 || st == 503 || st == 504) {
		req_fail(q, -ETIMEDOUT, "HTTP %ld%s", st, code);
		return 1;
	}
	if (st == 403) {
		req_fail(q, -EACCES, "access denied (HTTP 403%s): check the credentials and "
			 "their permissions", code);
		return -EACCES;
	}
	if (st == 404) {
		req_fail(q, -ENOENT, "not found (HTTP 404%s)", code[0] ? code : " NoSuchKey");
		return -ENOENT;
	}
	if (st == 412 || st == 416) {
		req_fail(q, -ESTALE, "the object changed (HTTP %ld%s)", st, code);
		return -ESTALE;
	}
	if (st != 200 && st != 206) {
		req_fail(q, -EIO, "HTTP %ld%s", st, code);
		return -EIO;
	}
	if (q->etag && q->etag_out[0] && strcmp(q->etag, q->etag_out)) {
		req_fail(q, -ESTALE, "the object changed: ETag %s, %s when the dataset was "
			 "opened", q->etag_out, q->etag);
		return -ESTALE;
	}
	if (r == CURLE_WRITE_ERROR || (q->method == S3_GET && q->len && q->got != q->len)) {
		if (q->len && q->got < q->len && q->off + q->len > q->size && q->size)
			req_fail(q, -ESTALE, "the object changed: %" PRIu64 " bytes, the range "
				 "asked ends at %" PRIu64, q->size, q->off + q->len);
		else
			req_fail(q, -EBADMSG, "the server sent %s bytes than the %" PRIu64 " asked "
				 "(HTTP %ld)", r == CURLE_WRITE_ERROR ? "more" : "fewer", q->len, st);
		return q->rc;
	}
	if (q->method == S3_GET && !q->len) {
		q->body_len = q->got;
		if (!q->size)
			q->size = q->got;
	}
	q->rc = 0;
	q->err[0] = 0;
	return 0;
}

static void req_done(struct s3_client *cl, struct s3_req *q)
{
	pthread_mutex_lock(&cl->lock);
	if (q->rc) {
		cl->stats.errors++;
		snprintf(cl->stats.last_error, sizeof(cl->stats.last_error), "%s", q->err);
	}
	pthread_mutex_unlock(&cl->lock);
	if (q->rc) {
		free(q->body);
		q->body = NULL;
	}
	q->done(q, q->ctx);
}

/* A transfer ended: its outcome, a retry after backoff or the end of q. */
static void req_finish(struct s3_client *cl, CURL *e, CURLcode r)
{
	struct s3_req *q = NULL;
	int out;
	double now = clock_mono_s(), wait;

	curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&q);
	curl_multi_remove_handle(cl->multi, e);
	out = req_outcome(q, r);
	if (q->method == S3_PUT && q->dst) {
		fclose(q->dst);
		q->dst = NULL;
	}
	q->easy = NULL;
	curl_slist_free_all(q->headers);
	q->headers = NULL;
	easy_put(cl, e);
	for (unsigned i = 0; i < cl->active; i++)
		if (cl->busy[i] == e) {
			cl->busy[i] = cl->busy[--cl->active];
			break;
		}
	pthread_mutex_lock(&cl->lock);
	cl->stats.in_flight--;
	cl->stats.bytes += q->got;
	pthread_mutex_unlock(&cl->lock);
	wait = BACKOFF_FIRST_S * (double)(1u << (q->retries < 6 ? q->retries : 6));
	wait = wait > BACKOFF_MAX_S ? BACKOFF_MAX_S : wait;
	if (out == 1 && now + wait - q->start < cl->timeout_s) {
		q->retries++;
		pthread_mutex_lock(&cl->lock);
		cl->stats.retries++;
		pthread_mutex_unlock(&cl->lock);
		q->not_before = now + wait;
		q->next = cl->delayed;
		cl->delayed = q;
		return;
	}
	if (out == 1) {
		char why[sizeof(q->err)];

		snprintf(why, sizeof(why), "%s", q->err);
		if (snprintf(q->err, sizeof(q->err), "%s (gave up after %.0f s and %u retries)",
			     why, now - q->start, q->retries) >= (int)sizeof(q->err))
			q->err[sizeof(q->err) - 2] = '~';
		q->rc = -ETIMEDOUT;
	}
	req_done(cl, q);
}

/* Start what may start: delayed requests whose time came, then the queue. */
static void start_ready(struct s3_client *cl)
{
	double now = clock_mono_s();
	struct s3_req **pp = &cl->delayed, *q;
	int rc;

	while ((q = *pp) && cl->active < cl->max_conns) {
		if (q->not_before > now) {
			pp = &q->next;
			continue;
		}
		*pp = q->next;
		if ((rc = req_start(cl, q))) {
			req_fail(q, rc, "cannot send the request: %s", strerror(-rc));
			req_done(cl, q);
		}
	}
	while (cl->active < cl->max_conns) {
		pthread_mutex_lock(&cl->lock);
		q = cl->queue;
		if (q && !(cl->queue = q->next))
			cl->queue_tail = NULL;
		pthread_mutex_unlock(&cl->lock);
		if (!q)
			break;
		q->start = clock_mono_s();
		if ((rc = req_start(cl, q))) {
			req_fail(q, rc, "cannot send the request: %s", strerror(-rc));
			req_done(cl, q);
		}
	}
}

static void fail_all(struct s3_client *cl)
{
	struct s3_req *q;

	while (cl->active) {
		CURL *e = cl->busy[--cl->active];

		q = NULL;
		curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&q);
		curl_multi_remove_handle(cl->multi, e);
		if (q->method == S3_PUT && q->dst)
			fclose(q->dst);
		curl_slist_free_all(q->headers);
		q->headers = NULL;
		curl_easy_cleanup(e);
		pthread_mutex_lock(&cl->lock);
		cl->stats.in_flight--;
		pthread_mutex_unlock(&cl->lock);
		req_fail(q, -ECANCELED, "cancelled: the client stopped");
		req_done(cl, q);
	}
	while ((q = cl->delayed)) {
		cl->delayed = q->next;
		req_fail(q, -ECANCELED, "cancelled: the client stopped");
		req_done(cl, q);
	}
	pthread_mutex_lock(&cl->lock);
	while ((q = cl->queue)) {
		cl->queue = q->next;
		pthread_mutex_unlock(&cl->lock);
		req_fail(q, -ECANCELED, "cancelled: the client stopped");
		req_done(cl, q);
		pthread_mutex_lock(&cl->lock);
	}
	cl->queue_tail = NULL;
	pthread_mutex_unlock(&cl->lock);
}

static void *client_thread(void *arg)
{
	struct s3_client *cl = arg;

	for (;;) {
		double next;
		int running, stop;
		CURLMsg *m;

		pthread_mutex_lock(&cl->lock);
		stop = cl->stop;
		pthread_mutex_unlock(&cl->lock);
		if (stop)
			break;
		start_ready(cl);
		curl_multi_perform(cl->multi, &running);
		while ((m = curl_multi_info_read(cl->multi, &running)))
			if (m->msg == CURLMSG_DONE)
				req_finish(cl, m->easy_handle, m->data.result);
		/* until the next retry is due (a request that just failed included) */
		next = 1.0;
		for (struct s3_req *q = cl->delayed; q; q = q->next)
			if (q->not_before - clock_mono_s() < next)
				next = q->not_before - clock_mono_s();
		curl_multi_poll(cl->multi, NULL, 0, next > 0 ? (int)(next * 1000) + 1 : 0, NULL);
	}
	fail_all(cl);
	return NULL;
}

int s3_client_new(const struct s3_config *c, unsigned connections, double timeout_s,
		  struct s3_client **out)
{
	struct s3_client *cl;
	char tok[4200];

	if (connections < 1 || connections > 1024)
		return -EINVAL;
	pthread_once(&global_once, global_init);
	if (global_rc)
		return global_rc;
	cl = calloc(1, sizeof(*cl));
	if (!cl)
		return -ENOMEM;
	cl->cfg = *c;
	cl->max_conns = connections;
	cl->timeout_s = timeout_s;
	snprintf(cl->sigv4, sizeof(cl->sigv4), "aws:amz:%s:s3", c->region);
	cl->headers = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
	if (c->session_token[0]) {
		snprintf(tok, sizeof(tok), "x-amz-security-token: %s", c->session_token);
		cl->headers = curl_slist_append(cl->headers, tok);
	}
	cl->idle = calloc(connections, sizeof(*cl->idle));
	cl->busy = calloc(connections, sizeof(*cl->busy));
	cl->multi = curl_multi_init();
	if (!cl->headers || !cl->idle || !cl->busy || !cl->multi)
		goto err_free;
	curl_multi_setopt(cl->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)connections);
	curl_multi_setopt(cl->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)connections);
	curl_multi_setopt(cl->multi, CURLMOPT_MAXCONNECTS, (long)connections);
	pthread_mutex_init(&cl->lock, NULL);
	pthread_cond_init(&cl->cond, NULL);
	if (pthread_create(&cl->thread, NULL, client_thread, cl)) {
		pthread_mutex_destroy(&cl->lock);
		pthread_cond_destroy(&cl->cond);
		curl_multi_cleanup(cl->multi);
		curl_slist_free_all(cl->headers);
		free(cl->idle);
		free(cl->busy);
		free(cl);
		return -EAGAIN;
	}
	*out = cl;
	return 0;

err_free:
	curl_multi_cleanup(cl->multi);
	curl_slist_free_all(cl->headers);
	free(cl->idle);
	free(cl->busy);
	free(cl);
	return -ENOMEM;
}

void s3_client_free(struct s3_client *cl)
{
	if (!cl)
		return;
	pthread_mutex_lock(&cl->lock);
	cl->stop = 1;
	pthread_mutex_unlock(&cl->lock);
	curl_multi_wakeup(cl->multi);
	pthread_join(cl->thread, NULL);
	while (cl->nidle)
		curl_easy_cleanup(cl->idle[--cl->nidle]);
	curl_multi_cleanup(cl->multi);
	curl_slist_free_all(cl->headers);
	pthread_mutex_destroy(&cl->lock);
	pthread_cond_destroy(&cl->cond);
	explicit_bzero(&cl->cfg, sizeof(cl->cfg));
	free(cl->idle);
	free(cl->busy);
	free(cl);
}

void s3_submit(struct s3_client *cl, struct s3_req *q)
{
	q->next = NULL;
	q->rc = 0;
	q->retries = 0;
	q->size = 0;
	q->body = NULL;
	q->body_len = 0;
	q->hdr_range[0] = 0;
	q->headers = NULL;
	q->finished = 0;
	pthread_mutex_lock(&cl->lock);
	if (cl->queue_tail)
		cl->queue_tail->next = q;
	else
		cl->queue = q;
	cl->queue_tail = q;
	pthread_mutex_unlock(&cl->lock);
	curl_multi_wakeup(cl->multi);
}

static void run_done(struct s3_req *q, void *ctx)
{
	struct s3_client *cl = ctx;

	pthread_mutex_lock(&cl->lock);
	q->finished = 1;
	pthread_cond_broadcast(&cl->cond);
	pthread_mutex_unlock(&cl->lock);
}

int s3_run(struct s3_client *cl, struct s3_req *q)
{
	q->done = run_done;
	q->ctx = cl;
	s3_submit(cl, q);
	pthread_mutex_lock(&cl->lock);
	while (!q->finished)
		pthread_cond_wait(&cl->cond, &cl->lock);
	pthread_mutex_unlock(&cl->lock);
	return q->rc;
}

void s3_client_stats(struct s3_client *cl, struct s3_stats *out)
{
	pthread_mutex_lock(&cl->lock);
	*out = cl->stats;
	pthread_mutex_unlock(&cl->lock);
}
