/*
 * log.h: the mount's log: stderr in the foreground, syslog once daemonized; the latest
 * warning or error kept for /status; rate limits for lines a reader can provoke at any
 * rate. Thread-safe: any request, offload or server thread may log.
 */
#ifndef ZEPHON_LOG_H
#define ZEPHON_LOG_H

#include <stddef.h>
#include <time.h>

#include "ratelimit.h"

/* One rate-limited log line (zmount_log_limited()); zero-initialized. */
struct zmount_ratelimit {
	struct ratelimit limit;     /* a burst of 1, refilled each interval_s */
};

/* From now on write to syslog (ident "zephon", LOG_DAEMON), not stderr: the daemon has
 * detached from its terminal. */
void zmount_log_to_syslog(void);

/* Log a message: to stderr, or to syslog after zmount_log_to_syslog(). Also the server's
 * log sink (fs/cmd_mount.c). Warnings and errors become zmount_last_error(). */
void zmount_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* zmount_log(), but the line itself is written at most once per interval_s seconds per rl
 * (the next one written says how many were held back); every call still becomes
 * /status' last_error. For lines a reader's loop can provoke at any rate. */
void zmount_log_limited(struct zmount_ratelimit *rl, double interval_s, int prio, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* The latest warning or error zmount_log() wrote, and when (0: none yet). */
time_t zmount_last_error(char *out, size_t len);

#endif
