/*
 * clock.h: the one monotonic clock of Zephon's timers, rate limits and progress lines:
 * seconds since an arbitrary start that never steps back (CLOCK_MONOTONIC), as a double
 * (nanosecond resolution for some 100 days of uptime). Header-only; thread-safe.
 */
#ifndef ZEPHON_CLOCK_H
#define ZEPHON_CLOCK_H

#include <time.h>

static inline double clock_mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
