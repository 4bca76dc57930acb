/*
 * serve_log.c: what the server notices (decode errors, journal failures) goes to
 * cfg.log through a token bucket (ratelimit.h): a reader that retries a failing open in a loop (a full
 * disk, a corrupt sample) would otherwise log a line per attempt. How many were held
 * back is logged with the next one that passes, and at server_free().
 */
#include "serve_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "ratelimit.h"

struct srv_log {
	server_log_fn fn;        /* NULL: nothing is logged */
	void *ctx;
	const struct dataset *ds; /* names the shard of a sample that failed */
	pthread_mutex_t lock;    /* guards limit */
	struct ratelimit limit;
};

int srv_log_new(const struct server_config *cfg, const struct dataset *ds,
		struct srv_log **out)
{
	struct srv_log *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->fn = cfg->log;
	l->ctx = cfg->log_ctx;
	l->ds = ds;
	pthread_mutex_init(&l->lock, NULL);
	*out = l;
	return 0;
}

static void slog_raw(struct srv_log *l, int prio, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void slog_raw(struct srv_log *l, int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	l->fn(l->ctx, prio, fmt, ap);
	va_end(ap);
}

/* Say how many messages were held back (n > 0), bypassing the bucket. */
static void log_dropped(struct srv_log *l, uint64_t n)
{
	if (n)
		slog_raw(l, LOG_WARNING, "%" PRIu64 " more message%s of this mount were not logged "
			 "(at most %d in a row, then one a second)", n, n == 1 ? "" : "s", LOG_BURST);
}

void srv_log_free(struct srv_log *l)
{
	if (!l)
		return;
	if (l->fn)
		log_dropped(l, l->limit.held);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

void srv_log(struct server *s, int prio, const char *fmt, ...)
{
	struct srv_log *l = srv_logger(s);
	uint64_t dropped;
	va_list ap;
	int pass;

	if (!l->fn)
		return;
	pthread_mutex_lock(&l->lock);
	pass = ratelimit_pass(&l->limit, clock_mono_s(), LOG_BURST, LOG_REFILL_S, &dropped);
	pthread_mutex_unlock(&l->lock);
	if (!pass)
		return;
	log_dropped(l, dropped);
	va_start(ap, fmt);
	l->fn(l->ctx, prio, fmt, ap);
	va_end(ap);
}

void srv_log_decode_error(struct server *s, const char *what, int err, uint64_t bad)
{
	const struct dataset *ds = srv_logger(s)->ds;
	struct dataset_fetch_stats f;

	/* in object storage: the read may have failed at the fetch, whose error says why
	 * (the object changed, the server gave no answer) */
	if (err == -EIO && !dataset_fetch_stats(ds, &f) && f.last_error[0])
		srv_log(s, LOG_ERR, "%s: sample %" PRIu64 " in %s could not be fetched or failed its "
			"check; nothing was served (the last fetch error: %s)", what, bad,
			dataset_shard_name(ds, bad) ? dataset_shard_name(ds, bad) : "?",
			f.last_error);
	else if (err == -EIO)
		srv_log(s, LOG_ERR, "%s: sample %" PRIu64 " in %s failed its checksum; nothing "
			"was served (run zephon verify on the dataset)", what, bad,
			dataset_shard_name(ds, bad) ? dataset_shard_name(ds, bad) : "?");
	else
		srv_log(s, LOG_ERR, "%s: cannot build the batch: %s", what, strerror(-err));
}
