/*
 * log.c: the mount's log (log.h). One mutex guards the last error and the rate limits;
 * lines are written outside it.
 */
#include "log.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "clock.h"

static int use_syslog; /* set once by the FUSE init thread, read by every thread: atomic */
static pthread_mutex_t last_error_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[1024];
static time_t last_error_time;

void zmount_log_to_syslog(void)
{
	openlog("zephon", LOG_PID, LOG_DAEMON);
	__atomic_store_n(&use_syslog, 1, __ATOMIC_RELEASE); /* after openlog */
}

static void write_line(int prio, const char *line)
{
	if (__atomic_load_n(&use_syslog, __ATOMIC_ACQUIRE))
		syslog(prio, "%s", line);
	else
		fprintf(stderr, "zephon: %s%s\n", prio <= LOG_ERR ? "error: " :
			prio == LOG_WARNING ? "warning: " : "", line);
}

void zmount_log(int prio, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (prio <= LOG_WARNING) { /* kept for /status: syslog may go nowhere */
		pthread_mutex_lock(&last_error_lock);
		snprintf(last_error, sizeof(last_error), "%s", line);
		last_error_time = time(NULL);
		pthread_mutex_unlock(&last_error_lock);
	}
	write_line(prio, line);
}

void zmount_log_limited(struct zmount_ratelimit *rl, double interval_s, int prio, const char *fmt, ...)
{
	char line[1024];
	uint64_t held = 0;
	double now;
	int write;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	now = clock_mono_s();
	pthread_mutex_lock(&last_error_lock);
	if (prio <= LOG_WARNING) {
		snprintf(last_error, sizeof(last_error), "%s", line);
		last_error_time = time(NULL);
	}
	write = ratelimit_pass(&rl->limit, now, 1, interval_s, &held);
	pthread_mutex_unlock(&last_error_lock);
	if (write && held) {
		size_t n = strlen(line);

		snprintf(line + n, sizeof(line) - n, " (and %" PRIu64 " more like it since the "
			 "last one logged)", held);
	}
	if (write)
		write_line(prio, line);
}

time_t zmount_last_error(char *out, size_t len)
{
	time_t t;

	pthread_mutex_lock(&last_error_lock);
	snprintf(out, len, "%s", last_error);
	t = last_error_time;
	pthread_mutex_unlock(&last_error_lock);
	return t;
}
