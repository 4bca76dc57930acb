/*
 * fault.h: deterministic fault injection for the crash tests
 * (tests/fuse/test_crash_points.py). `ZEPHON_FAULT=<point>[:<n>]` in the environment of
 * `zephon mount` (read once, at its start: fault_init) makes the daemon stop itself with
 * SIGSTOP, every thread at once, the n-th time (1 by default) it passes the named point
 * of a claim's life; the test then kills it (-9) right there, so what it checks does not
 * depend on timing. Without it, each point costs one relaxed atomic load.
 *
 * The points, in the order one batch of next passes them (docs/architecture.md):
 *   claim               a claim's journal commit returned; its open not yet answered
 *   read-end            the reply holding a claim's last byte was sent (once per claim)
 *   flush               a close(2) of next arrived; nothing done for it yet
 *   flush-replied       that close was answered, after a read had returned the last
 *                       byte; the batch's delivery not yet committed
 *   delivery-committed  that delivery's commit returned (written, or found written)
 *   release             the last close of a handle of next arrived (FUSE release)
 *
 * Thread-safety: fault_init() before the threads start; fault_point() from any thread.
 */
#ifndef ZEPHON_FAULT_H
#define ZEPHON_FAULT_H

enum fault_point {
	FAULT_CLAIM,
	FAULT_READ_END,
	FAULT_FLUSH,
	FAULT_FLUSH_REPLIED,
	FAULT_DELIVERY_COMMITTED,
	FAULT_RELEASE,
	FAULT_POINTS
};

/* Arm the point that spec names ("flush-replied" or "flush-replied:3"; NULL or "":
 * none). 0, or -EINVAL (an unknown point, or n not a decimal from 1 to 2^32 - 1), and
 * nothing armed. Not thread-safe: call before any fault_point(). */
int fault_init(const char *spec);

/* The armed point's n-th passage: raise(SIGSTOP). Other points, other passages and an
 * unarmed process: nothing. */
void fault_point(enum fault_point p);

/* The name of point p ("claim", ...); NULL past the last. */
const char *fault_name(int p);

#endif
