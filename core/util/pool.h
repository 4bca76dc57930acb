/*
 * pool.h: a fixed team of threads that runs one function on every member at once
 * (fork-join, like an OpenMP parallel region): pool_run() calls fn(arg, t, n) on n
 * threads (t = 0 is the caller) and returns when all have returned.
 *
 * Used by pack to validate and compress a batch of samples on every core. The caller
 * splits the work by t; fn must not fail in a way that needs the others stopped.
 * One pool_run() at a time per pool (not reentrant); create and free on one thread.
 */
#ifndef ZEPHON_POOL_H
#define ZEPHON_POOL_H

struct pool;

typedef void (*pool_fn)(void *arg, unsigned t, unsigned n);

/* A team of up to n members (n >= 1): the caller and n - 1 threads of a job queue
 * (jobq.h). Threads that cannot be started make the team smaller, down to the caller
 * alone: pool_size() says how many members there are. 0, -EINVAL (n == 0) or -ENOMEM. */
int pool_new(unsigned n, struct pool **out);
/* Members of the team, 1..n. */
unsigned pool_size(const struct pool *p);
/* Call fn(arg, t, pool_size(p)) once for each member t, t = 0 on the caller's thread, and
 * return when every call has returned. */
void pool_run(struct pool *p, pool_fn fn, void *arg);
/* Stop and join the threads. NULL is a no-op. */
void pool_free(struct pool *p);

#endif
