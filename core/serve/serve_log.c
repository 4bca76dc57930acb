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
#include <string.h>
#include <syslog.h>

static void slog_raw(struct server *s, int prio, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void slog_raw(struct server *s, int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	s->cfg.log(s->cfg.log_ctx, prio, fmt, ap);
	va_end(ap);
}

void srv_log_dropped(struct server *s, uint64_t n)
{
	if (n)
		slog_raw(s, LOG_WARNING, "%" PRIu64 " more message%s of this mount were not logged "
			 "(at most %d in a row, then one a second)", n, n == 1 ? "" : "s", LOG_BURST);
}

void srv_log(struct server *s, int prio, const char *fmt, ...)
{
	uint64_t dropped;
	va_list ap;
	int pass;

	if (!s->cfg.log)
		return;
	pthread_mutex_lock(&s->log_lock);
	pass = ratelimit_pass(&s->log_limit, clock_mono_s(), LOG_BURST, LOG_REFILL_S, &dropped);
	pthread_mutex_unlock(&s->log_lock);
	if (!pass)
		return;
	srv_log_dropped(s, dropped);
	va_start(ap, fmt);
	s->cfg.log(s->cfg.log_ctx, prio, fmt, ap);
	va_end(ap);
}

void srv_log_decode_error(struct server *s, const char *what, int err, uint64_t bad)
{
	struct dataset_fetch_stats f;

	/* in object storage: the read may have failed at the fetch, whose error says why
	 * (the object changed, the server gave no answer) */
	if (err == -EIO && !dataset_fetch_stats(s->ds, &f) && f.last_error[0])
		srv_log(s, LOG_ERR, "%s: sample %" PRIu64 " in %s could not be fetched or failed its "
			"check; nothing was served (the last fetch error: %s)", what, bad,
			dataset_shard_name(s->ds, bad) ? dataset_shard_name(s->ds, bad) : "?",
			f.last_error);
	else if (err == -EIO)
		srv_log(s, LOG_ERR, "%s: sample %" PRIu64 " in %s failed its checksum; nothing "
			"was served (run zephon verify on the dataset)", what, bad,
			dataset_shard_name(s->ds, bad) ? dataset_shard_name(s->ds, bad) : "?");
	else
		srv_log(s, LOG_ERR, "%s: cannot build the batch: %s", what, strerror(-err));
}
