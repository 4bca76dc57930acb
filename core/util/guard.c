#include "guard.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

/* volatile: the stores around memcpy() must happen; to the compiler, memcpy reads
 * nothing of ours and the first store would be dead */
static __thread sigjmp_buf *volatile guard_jump;
static __thread int guard_thread_ready;   /* SIGBUS unblocked in this thread */
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static struct sigaction guard_previous;

static void guard_handler(int sig, siginfo_t *info, void *ctx)
{
	sigjmp_buf *jump = guard_jump;

	/* si_code > 0: raised by the kernel for a fault of this thread (BUS_ADRERR, ...);
	 * kill(), sigqueue() and tgkill() give SI_USER, SI_QUEUE, SI_TKILL (<= 0) */
	if (jump && info && info->si_code > 0) {
		guard_jump = NULL;
		siglongjmp(*jump, 1);
	}
	/* Not ours: behave as if we had never been installed. */
	if (guard_previous.sa_flags & SA_SIGINFO && guard_previous.sa_sigaction) {
		guard_previous.sa_sigaction(sig, info, ctx);
		return;
	}
	if (guard_previous.sa_handler != SIG_DFL && guard_previous.sa_handler != SIG_IGN) {
		guard_previous.sa_handler(sig);
		return;
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void guard_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = guard_handler;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &guard_previous);
}

/* Install the handler (once per process) and unblock SIGBUS in this thread (once per
 * thread). */
static void guard_prepare_thread(void)
{
	sigset_t bus;

	pthread_once(&guard_once, guard_install);
	sigemptyset(&bus);
	sigaddset(&bus, SIGBUS);
	pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
	guard_thread_ready = 1;
}

int guard_run(void (*fn)(void *ctx), void *ctx)
{
	sigjmp_buf jump;

	if (__builtin_expect(!guard_thread_ready, 0))
		guard_prepare_thread();
	/* The mask is not saved: the handler runs with SA_NODEFER and an empty sa_mask, so
	 * jumping out of it leaves the thread's mask as it was. Saving it would cost a
	 * rt_sigprocmask system call per guarded call, and there is one per sample served. */
	if (sigsetjmp(jump, 0)) {
		guard_jump = NULL;
		return -EIO;
	}
	guard_jump = &jump;
	fn(ctx);
	guard_jump = NULL;
	return 0;
}

struct copy_args {
	void *dst;
	const void *src;
	size_t n;
};

static void do_copy(void *ctx)
{
	struct copy_args *a = ctx;

	memcpy(a->dst, a->src, a->n);
}

int guard_copy(void *dst, const void *src, size_t n)
{
	struct copy_args a = { dst, src, n };

	return guard_run(do_copy, &a);
}
