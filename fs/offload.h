/*
 * offload.h: jobs run off the FUSE request threads, by threads of their own.
 *
 * Why: the request threads copy every reply to the kernel, and when readers keep every
 * CPU busy the tail is shortest with one request thread per CPU (tests/bench/RESULTS.md,
 * "B4: request threads"). But a few requests are slow by design: a claim waits for its
 * journal commit (for as long as the journal's file system stalls), a step/ file decodes
 * a whole step. On a request thread of their own, those would hold up every other request
 * of the mount. So the handlers queue them here, and an offload thread answers them
 * (libfuse lets any thread reply to a request).
 *
 * Threads are started as the queue needs them (a job finds no idle thread), up to max,
 * and wait for work once started; none exit before offload_free().
 * Thread-safety: offload_submit() from any thread; offload_new() and offload_free() from
 * one thread, after every submitter has stopped.
 */
#ifndef ZEPHON_OFFLOAD_H
#define ZEPHON_OFFLOAD_H

/* A queued job. run(job, 0) does the work; run(job, 1) means the queue was shut down
 * before the job started: answer without doing it. Either way run owns job (frees it). */
struct offload_job {
	void (*run)(struct offload_job *job, int cancelled);
	struct offload_job *next;
};

struct offload;

/* A queue served by up to max threads (1..1024; none are started yet).
 * 0, -EINVAL (max out of range), -ENOMEM, or a pthread error. */
int offload_new(unsigned max, struct offload **out);

/* Queue job for the next free offload thread, starting one when none is idle and fewer
 * than max run. 0, or -EAGAIN: no offload thread runs and none could be started; the
 * job was not queued, and the caller should run it itself. */
int offload_submit(struct offload *o, struct offload_job *job);

/* Stop: jobs still queued get run(job, 1) on the caller's thread; jobs running are waited
 * for; every thread is joined. NULL is a no-op. */
void offload_free(struct offload *o);

#endif
