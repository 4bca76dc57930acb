/*
 * guard.h: reading a file mapping without dying of SIGBUS.
 *
 * A read fault in a MAP_SHARED mapping (the file was truncated under us, or the disk or
 * the network file system returned an I/O error) is delivered as SIGBUS, which kills the
 * process. guard_copy() and guard_run() turn that into -EIO for the one call that
 * faulted: a thread-local sigjmp_buf is armed for the call, and a SIGBUS handler
 * (installed once, process-wide) jumps back to it when the fault happened inside a
 * guarded call of the faulting thread; any other SIGBUS goes to the handler installed
 * before (ASan's, say) or is re-raised with the default action. This is the technique
 * of POSIX sigsetjmp/siglongjmp out of a synchronous signal handler.
 *
 * A fault whose signal is blocked kills the process whatever handler is installed, and
 * threads that must take no asynchronous signal (the decode workers) are created with
 * every signal blocked: so the first guarded call of each thread unblocks SIGBUS for
 * that thread. Only a SIGBUS the kernel raised for a fault is caught; one sent with
 * kill() or raise() never interrupts a guarded call.
 *
 * Every read of a mapping of a file that anyone can change (a dataset's shards and
 * shard indexes, on whatever thread) goes through one of these two calls.
 *
 * Thread-safe; async-signal-safe only in the sense above.
 */
#ifndef ZEPHON_GUARD_H
#define ZEPHON_GUARD_H

#include <stddef.h>

/* memcpy(dst, src, n) where src lies in a file mapping. 0, or -EIO when reading src
 * faulted (dst then holds an unspecified prefix). */
int guard_copy(void *dst, const void *src, size_t n);

/* fn(ctx), which reads a file mapping and touches nothing it would have to undo: 0, or
 * -EIO when it faulted (it was cut short). */
int guard_run(void (*fn)(void *ctx), void *ctx);

#endif
