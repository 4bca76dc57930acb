/*
 * ratelimit.h: the one rate limiter of Zephon's logs, a token bucket: up to burst lines
 * in a row, then one each refill_s seconds; the lines held back are counted, for the next
 * one that passes to say. The server's log (core/serve/serve_log.c: 20 in a row, then one a
 * second) and the mount's repeated warnings (fs/log.c: a burst of 1, one per interval)
 * use it. Header-only; not locked: its owner's lock guards it.
 */
#ifndef ZEPHON_RATELIMIT_H
#define ZEPHON_RATELIMIT_H

#include <stdint.h>

/* Zero-initialized: a full bucket. */
struct ratelimit {
	double tokens;              /* lines that may pass now, up to burst */
	double t;                   /* clock_mono_s() of the last call; 0: never called */
	uint64_t held;              /* lines held back since the last one that passed */
};

/* Whether a line may pass at now (clock_mono_s() seconds): 1, with *held the lines held
 * back before it (then counted from 0 again); or 0, the line counted as held back.
 * burst >= 1, refill_s > 0. */
static inline int ratelimit_pass(struct ratelimit *rl, double now, unsigned burst,
				 double refill_s, uint64_t *held)
{
	rl->tokens = rl->t == 0 ? burst : rl->tokens + (now - rl->t) / refill_s;
	if (rl->tokens > burst)
		rl->tokens = burst;
	rl->t = now;
	if (rl->tokens < 1) {
		rl->held++;
		return 0;
	}
	rl->tokens -= 1;
	*held = rl->held;
	rl->held = 0;
	return 1;
}

#endif
