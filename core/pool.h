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

/* A team of n threads (n >= 1; n - 1 are started). 0, -EINVAL (n == 0), -ENOMEM, or
 * -EAGAIN (no thread could be started). */
int pool_new(unsigned n, struct pool **out);
unsigned pool_size(const struct pool *p);
void pool_run(struct pool *p, pool_fn fn, void *arg);
/* Stop and join the threads. NULL is a no-op. */
void pool_free(struct pool *p);

#endif
