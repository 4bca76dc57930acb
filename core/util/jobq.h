/*
 * jobq.h: a queue of jobs served by threads of its own: the one job queue of Zephon.
 * The mount's offload queues (fs/ops.c: requests that may wait for the journal or that
 * decode), the server's prefetch decoders (core/serve/serve.c) and pack's fork-join team
 * (core/util/pool.c) are each one jobq.
 *
 * Jobs are intrusive (the caller embeds a struct jobq_job and owns the memory) and run in
 * the order queued, each exactly once: run(job, ctx, 0) on a queue thread, or, when the
 * queue is freed before the job started, run(job, NULL, 1) on the freeing thread. Threads
 * are started by jobq_start(), or by jobq_submit() when a job finds no idle thread and
 * fewer than max_threads run; once started they wait for work until jobq_free().
 * Each thread may hold a context of its own (thread_init; e.g. a sample reader) that its
 * jobs get as ctx.
 *
 * Thread-safety: jobq_submit() from any thread, also from a job; jobq_new(), jobq_start()
 * and jobq_free() from one thread, jobq_free() after every submitter but the queue's own
 * jobs has stopped.
 */
#ifndef ZEPHON_JOBQ_H
#define ZEPHON_JOBQ_H

struct jobq_job {
	/* Do the job (cancelled 0, ctx the thread's context) or answer that it was not done
	 * (cancelled 1, ctx NULL). Either way run owns job from then on (may free it). */
	void (*run)(struct jobq_job *job, void *ctx, int cancelled);
	struct jobq_job *next;   /* the queue's link */
};

#define JOBQ_MAX_THREADS 1024

struct jobq_config {
	unsigned max_threads;    /* 1..JOBQ_MAX_THREADS */
	const char *name;        /* thread name (at most 15 characters); NULL: inherited */
	int block_signals;       /* threads take no signal: a SIGTERM lands on the caller's */
	/* A thread's context, made on the thread before its first job and passed to
	 * thread_fini when the thread ends; both may be NULL. */
	void *(*thread_init)(void *arg);
	void (*thread_fini)(void *arg, void *ctx);
	void *arg;
};

struct jobq;

/* A queue with cfg (copied; no thread is started yet). 0, -EINVAL (max_threads out of
 * range), -ENOMEM, or the -errno of a pthread initializer. */
int jobq_new(const struct jobq_config *cfg, struct jobq **out);

/* Start threads until n run (n <= max_threads). 0, or the -errno of pthread_create():
 * the threads started still run (jobq_threads() says how many), and max_threads drops to
 * that count, so that jobq_submit() does not try again. */
int jobq_start(struct jobq *q, unsigned n);

/* Threads running now. */
unsigned jobq_threads(struct jobq *q);

/* Queue job (its run set) behind the jobs queued, starting a thread when none is idle
 * and fewer than max_threads run. 0, or -EAGAIN: no thread runs and none could be
 * started, or -ESHUTDOWN: jobq_free() has begun (a running job that queues its sequel);
 * either way the job was not queued and the caller still owns it. */
int jobq_submit(struct jobq *q, struct jobq_job *job);

/* Stop: jobs still queued get run(job, NULL, 1) on the caller's thread; jobs running are
 * waited for; every thread is joined (thread_fini on each). NULL is a no-op. */
void jobq_free(struct jobq *q);

#endif
