/*
 * stop_at_sync.c: an LD_PRELOAD shim for the crash tests (tests/fuse/test_journal_birth.py).
 * With STOP_AT_SYNC=N in its environment, the process stops itself (SIGSTOP) right after
 * its N-th fsync(2) or fdatasync(2), counted together, has returned: the test then kills
 * it (-9) between that sync and the next, wherever SQLite or Zephon put them (a journal's
 * creation, a commit), without timing. Without STOP_AT_SYNC (or with 0) it only passes
 * the calls on.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>

int fsync(int fd);
int fdatasync(int fd);

static unsigned long syncs; /* returned so far (atomic) */

static int synced(int rc)
{
	const char *at = getenv("STOP_AT_SYNC");
	unsigned long n = at ? strtoul(at, NULL, 10) : 0;

	if (__atomic_add_fetch(&syncs, 1, __ATOMIC_ACQ_REL) == n && n)
		raise(SIGSTOP);
	return rc;
}

int fsync(int fd)
{
	int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");

	return synced(real(fd));
}

int fdatasync(int fd)
{
	int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");

	return synced(real(fd));
}
