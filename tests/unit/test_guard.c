/*
 * core/util/guard: a read fault in a file mapping (the file was truncated under us) becomes
 * -EIO for the one guarded call, again and again, in any thread (one created with every
 * signal blocked too), and leaves the thread's signal mask as it was but for SIGBUS; an
 * unguarded SIGBUS, or one sent with kill() during a guarded call, still kills.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "guard.h"

#define PAGES 4

struct mapping {
	int fd;
	uint8_t *p;
	size_t len;
};

/* A file of PAGES pages of 0x5a mapped shared, then truncated to one page: reading the
 * first page works and reading any later one raises SIGBUS. */
static struct mapping truncated_mapping(void)
{
	char path[] = "/tmp/zephon-test-guard-XXXXXX";
	struct mapping m;
	uint8_t page[4096];

	m.len = PAGES * sizeof(page);
	m.fd = mkstemp(path);
	REQUIRE(m.fd >= 0);
	unlink(path);
	memset(page, 0x5a, sizeof(page));
	for (int i = 0; i < PAGES; i++)
		REQUIRE(write(m.fd, page, sizeof(page)) == (ssize_t)sizeof(page));
	m.p = mmap(NULL, m.len, PROT_READ, MAP_SHARED, m.fd, 0);
	REQUIRE(m.p != MAP_FAILED);
	REQUIRE(ftruncate(m.fd, sizeof(page)) == 0);
	return m;
}

static int sigbus_blocked(void)
{
	sigset_t now;

	pthread_sigmask(SIG_BLOCK, NULL, &now);
	return sigismember(&now, SIGBUS);
}

static void count_bytes(void *ctx)
{
	const struct mapping *m = ctx;
	volatile unsigned sum = 0;

	for (size_t i = 0; i < m->len; i++)
		sum += m->p[i];
}

static void *faults(void *arg)
{
	struct mapping *m = arg;
	uint8_t dst[4096];
	long bad = 0;

	for (int i = 0; i < 100; i++) {
		bad += guard_copy(dst, m->p + 4096 * (1 + i % (PAGES - 1)), 64) != -EIO;
		bad += guard_copy(dst, m->p, sizeof(dst)) != 0 || dst[0] != 0x5a;
		bad += guard_run(count_bytes, m) != -EIO;
		bad += sigbus_blocked();
	}
	return (void *)bad;
}

/* A thread created with every signal blocked, as the decode workers are: its guarded
 * calls fail with -EIO (a blocked SIGBUS would kill the process), SIGBUS is unblocked
 * from then on, and every other signal stays blocked. */
static void *faults_all_blocked(void *arg)
{
	sigset_t now;
	long bad = (long)faults(arg);

	pthread_sigmask(SIG_BLOCK, NULL, &now);
	bad += sigismember(&now, SIGBUS) || !sigismember(&now, SIGTERM) ||
	       !sigismember(&now, SIGINT) || !sigismember(&now, SIGUSR1);
	return (void *)bad;
}

static void raise_sigbus(void *ctx)
{
	(void)ctx;
	raise(SIGBUS);
}

/* Run fn in a child with stderr silenced; its wait status. */
static int in_child(void (*fn)(void *), void *ctx)
{
	int status;
	pid_t pid = fork();

	REQUIRE(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		if (null >= 0)
			dup2(null, 2); /* ASan's report of the expected signal */
		fn(ctx);
		_exit(0);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	return status;
}

static int died_of_sigbus(int status)
{
	/* the default action, or ASan's handler, which reports and exits with 1 */
	return (WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) ||
	       (WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

static void guarded_raise(void *ctx)
{
	guard_run(raise_sigbus, ctx);
}

static void unguarded_read(void *ctx)
{
	const struct mapping *m = ctx;
	volatile uint8_t x = m->p[3 * 4096];

	(void)x;
}

int main(void)
{
	struct mapping m = truncated_mapping();
	uint8_t dst[8192];
	pthread_t t[4];

	memset(dst, 0, sizeof(dst));
	CHECK(guard_copy(dst, m.p, 4096) == 0);
	CHECK(dst[0] == 0x5a && dst[4095] == 0x5a);
	/* a fault mid-copy: -EIO, and the next fault is caught as well */
	for (int i = 0; i < 1000; i++) {
		CHECK(guard_copy(dst, m.p + 2048, 4096) == -EIO);
		CHECK(!sigbus_blocked());
	}
	CHECK(guard_run(count_bytes, &m) == -EIO);

	for (int i = 0; i < 4; i++)
		REQUIRE(pthread_create(&t[i], NULL, faults, &m) == 0);
	for (int i = 0; i < 4; i++) {
		void *bad;

		pthread_join(t[i], &bad);
		CHECK((long)bad == 0);
	}

	{
		sigset_t all, old;

		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		for (int i = 0; i < 2; i++)
			REQUIRE(pthread_create(&t[i], NULL, faults_all_blocked, &m) == 0);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		for (int i = 0; i < 2; i++) {
			void *bad;

			pthread_join(t[i], &bad);
			CHECK((long)bad == 0);
		}
	}

	/* Outside a guarded call the previous action runs: the default (death by SIGBUS),
	 * or under ASan its own handler, which reports the fault and exits with 1. */
	CHECK(died_of_sigbus(in_child(unguarded_read, &m)));
	/* a SIGBUS sent, not raised by a fault, is no fault of the guarded call */
	CHECK(died_of_sigbus(in_child(guarded_raise, NULL)));

	munmap(m.p, m.len);
	close(m.fd);
	return check_status();
}
