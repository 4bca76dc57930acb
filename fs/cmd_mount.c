/*
 * cmd_mount.c: `zephon mount DATASET MOUNTPOINT -o ...` and the bare form mount.fuse3
 * calls. Everything that can fail for a reason the user can fix (options, dataset,
 * journal, mountpoint) fails here, with exit 2 for invalid options and 1 otherwise,
 * before anything is mounted or the process daemonizes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cmd.h"
#include "config_json.h"
#include "log.h"
#include "jobq.h"
#include "s3.h"
#include "zmount.h"
#include "zephon_config.h"

/* Offload threads of each queue (core/util/jobq.h, fs/ops.c): requests that may wait for
 * the journal, and builds of step/ and samples/ files. */
#define OFFLOAD_THREADS 64

static const struct jobq_config offload_cfg = {
	.max_threads = OFFLOAD_THREADS, .name = "zephon-offload",
};

static void server_log(void *ctx, int prio, const char *fmt, va_list ap)
{
	char line[1024];

	(void)ctx;
	vsnprintf(line, sizeof(line), fmt, ap);
	zmount_log(prio, "%s", line);
}

static void mount_usage(FILE *f)
{
	fprintf(f,
		"usage: zephon mount DATASET MOUNTPOINT [-o OPTIONS] [-f] [-d] [-s] [--check [--json]]\n"
		"       zephon DATASET MOUNTPOINT [-o OPTIONS]     (what mount.fuse3 and fstab call)\n"
		"\n"
		"Mount a packed dataset: rank r reads /rank/<r>/next, and every open of it hands\n"
		"out r's next micro-batch. Unmount with fusermount3 -u MOUNTPOINT.\n"
		"\n"
		"  -f          stay in the foreground (log to stderr instead of syslog)\n"
		"  -d          debug: foreground, and print every FUSE request\n"
		"  -s          single-threaded FUSE loop\n"
		"  --check     check the options against the dataset, then exit: 0, or the\n"
		"              status and reason a mount would give; mounts and creates nothing\n"
		"              (the mountpoint and the journal are not looked at). On stdout, a\n"
		"              mixture's weights= as integers and the validation split as\n"
		"              /status would show them (weights=7,3; validation=1/100)\n"
		"  --json      with --check: what the mount would serve, as /status's JSON keys\n"
		"  -h, --help  this text;  -V, --version  the version\n"
		"\n%s", mount_options_help);
}

/* Is path a mount point in this namespace? Reads /proc/self/mountinfo (field 5). */
static int is_mounted(const char *path)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[4096];
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char mp[PATH_MAX];

		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
			continue;
		/* mountinfo escapes space, tab, newline and backslash as octal */
		for (char *s = mp, *d = mp;; s++, d++) {
			if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] && s[3]) {
				*d = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
				s += 3;
			} else {
				*d = *s;
			}
			if (!*s)
				break;
		}
		found = !strcmp(mp, path);
	}
	fclose(f);
	return found;
}

/* Refuse a live mount at mp; clear a stale one (its daemon died: ENOTCONN). 0 or -1.
 * statfs, not stat, probes the mount: the kernel may answer stat from cached attributes,
 * statfs always asks the daemon. */
static int check_mountpoint(const char *mp)
{
	struct statfs sfs;
	struct stat st;
	int e;

	if (is_mounted(mp) && statfs(mp, &sfs) == 0) {
		die_msg("%s is already mounted; unmount it first (fusermount3 -u %s)", mp, mp);
		return -1;
	}
	/* stat's errno, kept before is_mounted() reads /proc (which may change errno) */
	e = stat(mp, &st) == 0 ? 0 : errno;
	if (!e && !is_mounted(mp)) {
		if (!S_ISDIR(st.st_mode)) {
			die_msg("mountpoint %s is not a directory", mp);
			return -1;
		}
		return 0;
	}
	if (!is_mounted(mp)) {
		die_msg("cannot use mountpoint %s: %s", mp, e ? strerror(e) :
			"it was unmounted while being checked; try again");
		return -1;
	}
	/* A FUSE mount whose daemon is gone: detach it, as `fusermount3 -uz` would. */
	if (umount2(mp, MNT_DETACH) != 0) {
		char cmd[PATH_MAX + 64];

		snprintf(cmd, sizeof(cmd), "fusermount3 -uz '%s' 2>/dev/null", mp);
		if (strchr(mp, '\'') || system(cmd) != 0) {
			die_msg("%s is a stale mount (its daemon died) and cannot be cleared: run "
				"fusermount3 -uz %s", mp, mp);
			return -1;
		}
	}
	fprintf(stderr, "zephon: cleared a stale mount at %s\n", mp);
	return 0;
}

/* The gsn a mount by rule would start at, when it can be known before the start: 0,
 * or -1 (step:S, which always starts at a step boundary). */
static int64_t planned_start(struct journal *j, const struct journal_resume *rule)
{
	struct journal_point pt;

	switch (rule->rule) {
	case RESUME_FRESH:
		return 0;
	case RESUME_SAMPLES:
		return (int64_t)rule->value;
	case RESUME_AUTO:
		return journal_resume_point_ex(j, &pt) ? -1 : (int64_t)pt.samples;
	default:
		return -1;
	}
}

/* Before the start: the mixture's weight history from the journal, and the weights this
 * mount records. 0, or an exit status (the journal is abandoned). */
static int prepare_mixture(struct zmount *z)
{
	struct journal_layout *rows = NULL;
	size_t n = 0;
	char why[4096];
	int rc;

	if (!z->served->is_mixture)
		return 0;
	rc = journal_layouts(z->journal, &rows, &n);
	/* resume=fresh starts a new history at gsn 0: the rows before it are kept for
	 * `journal show` but count for nothing, so the spec's (or weights=) weights hold,
	 * as for a new journal. (Its own row, recorded by journal_start() below, is the
	 * latest fresh one that a later mount's replay starts from.) */
	if (!rc)
		rc = served_replay(z->served, rows,
				   z->cfg->resume.rule == RESUME_FRESH ? 0 : n, why, sizeof(why));
	else
		journal_last_error(z->journal, why, sizeof(why));
	if (!rc) {
		int64_t g = planned_start(z->journal, &z->cfg->resume);

		if (g >= 0 && z->cfg->resume.rule != RESUME_FRESH)
			rc = served_check_change(z->served, rows, n, (uint64_t)g, why, sizeof(why));
	}
	/* a row records weights only where this mount sets them */
	if (!rc && (rc = journal_set_weights(z->journal, served_records_weights(z->served) ?
					     z->served->weights_text : NULL)))
		journal_last_error(z->journal, why, sizeof(why));
	free(rows);
	if (!rc)
		return 0;
	die_msg("cannot start the mixture with journal %s: %s", z->cfg->journal,
		*why ? why : strerror(-rc));
	journal_abandon(z->journal);
	z->journal = NULL;
	return rc == -EINVAL ? 2 : 1;
}

/* Open the journal, check it belongs to this dataset and seed, and resolve the resume
 * rule into the layout's S0/G0 (recording the layout). z->journal stays open for the
 * mount's life. 0, or an exit status. */
static int start_journal(struct zmount *z, const struct journal_ident *ident)
{
	char err[1024];
	int rc;

	rc = journal_open(z->cfg->journal, ident, z->cfg->sync, &z->journal, err, sizeof(err));
	if (rc) {
		die_msg("%s", err);
		return 1;
	}
	if (*err) /* what the open repaired */
		zmount_log(LOG_WARNING, "%s", err);
	if ((rc = prepare_mixture(z)))
		return rc;
	rc = journal_start(z->journal, &z->cfg->resume, &z->cfg->ranks, &z->cfg->layout,
			   z->resume_applied, sizeof(z->resume_applied));
	if (!rc && served_start(z->served, layout_start_samples(&z->cfg->layout)))
		rc = -ENOMEM;
	if (rc) {
		char rule[64];

		journal_resume_format(&z->cfg->resume, rule, sizeof(rule));
		journal_last_error(z->journal, err, sizeof(err));
		die_msg("cannot start at resume=%s with journal %s: %s", rule, z->cfg->journal,
			*err ? err : strerror(-rc));
		journal_abandon(z->journal); /* a refused mount leaves no journal behind */
		z->journal = NULL;
		return rc == -EINVAL ? 2 : 1;
	}
	if ((rc = journal_layouts(z->journal, &z->layouts, &z->nlayouts))) {
		journal_last_error(z->journal, err, sizeof(err));
		zmount_log(LOG_WARNING, "status will list no layouts: %s", *err ? err : strerror(-rc));
	}
	return 0;
}

/* A finite stream (epochs=E) that is already over at the layout's start: say so before
 * serving. */
static void warn_if_stream_over(const struct mount_config *cfg, const struct order *ord)
{
	uint64_t limit;

	if (!cfg->epochs)
		return;
	limit = order_limit(ord, cfg->epochs);
	if (!layout_step_in_stream(&cfg->layout, limit, layout_start_step(&cfg->layout)))
		zmount_log(LOG_WARNING, "epochs=%" PRIu64 " ends the stream at gsn %" PRIu64
			", and this mount starts at %" PRIu64 " with global_batch %" PRIu64
			": no full step is left, every open of next will fail with ENODATA",
			cfg->epochs, limit, layout_start_samples(&cfg->layout),
			layout_global_batch(&cfg->layout));
}

/*
 * Daemonizing as libfuse's fuse_daemonize() does (fork, setsid, chdir /, stdio to
 * /dev/null), but in two halves around the mount: the parent waits on a pipe until the
 * child has opened the dataset and journal and mounted, prints nothing itself (the
 * child's messages reach the terminal until it detaches) and exits with the child's
 * status. So `zephon mount` returns only once the mount is live, or fails with its
 * reason and exit status, and no SQLite connection or thread ever crosses a fork.
 */
static int notify_fd = -1;

static int daemon_fork(void)
{
	int fds[2];
	pid_t pid;
	unsigned char status = 1;

	if (pipe(fds)) {
		die_msg("cannot daemonize: %s", strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		die_msg("cannot daemonize: %s", strerror(errno));
		return -1;
	}
	if (pid > 0) {
		close(fds[1]);
		if (read(fds[0], &status, 1) != 1)
			status = 1; /* the child died before it could tell */
		_exit(status);
	}
	close(fds[0]);
	notify_fd = fds[1];
	return 0;
}

/* Tell the waiting parent how the mount went; on success detach from the terminal. */
static void daemon_ready(int status)
{
	unsigned char c = (unsigned char)status;
	int nul;

	if (notify_fd < 0)
		return;
	if (status == 0) {
		setsid();
		if (chdir("/")) { /* nothing relies on the cwd after this point */ }
		nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
			if (nul > 2)
				close(nul);
		}
		zmount_log_to_syslog();
	}
	if (write(notify_fd, &c, 1) != 1) { /* the parent is gone: nothing to tell */ }
	close(notify_fd);
	notify_fd = -1;
}

static int add_fuse_defaults(struct fuse_args *args, const struct mount_options *o,
			     const char *dataset)
{
	char opt[PATH_MAX + 32];

	if (o->allow_other) {
		/* allow_other always comes with default_permissions: other users may read
		 * status, samples/ and step/ (0444) but neither claim batches from next nor
		 * peek at them (0400) nor write control (0200). */
		if (fuse_opt_add_arg(args, "-oallow_other,default_permissions"))
			return -1;
	} else if (o->default_permissions && fuse_opt_add_arg(args, "-odefault_permissions")) {
		return -1;
	}
	if (!strchr(dataset, ',') && !strchr(dataset, '\\')) {
		snprintf(opt, sizeof(opt), "-ofsname=zephon:%s,subtype=zephon", dataset);
		if (fuse_opt_add_arg(args, opt))
			return -1;
	}
	return 0;
}

/* zmount.ready: the mount is live. */
static void mount_ready(void)
{
	daemon_ready(0);
}

/*
 * A clean stop. SIGTERM, SIGINT and SIGHUP do not end the session loop at once (as
 * libfuse's handlers do): a reader that had just opened next would then get
 * ECONNABORTED on read(), and its batch, though journaled, would never reach it. The
 * handler only writes the signal to a pipe; the stopper thread then refuses new claims
 * (opens of next fail with ESHUTDOWN), waits up to STOP_WAIT_S for every batch handed
 * out to be read to its end or closed (a second signal cuts the wait short), and only
 * then ends the loop. A batch still out then is not delivered: the journal does not
 * count it, and resume=auto serves it again.
 */
#define STOP_WAIT_S 5.0

static int stop_pipe[2] = { -1, -1 };
static int stop_signals[] = { SIGTERM, SIGINT, SIGHUP };
static int stop_installed[3];

static void on_stop_signal(int sig)
{
	unsigned char c = (unsigned char)sig;
	int e = errno;

	if (write(stop_pipe[1], &c, 1) != 1) { /* full: a stop is pending anyway */ }
	errno = e;
}

/* Install the stop handlers, over libfuse's and over SIG_IGN for SIGTERM and SIGINT (a
 * shell starts background jobs with SIGINT ignored; a mount must still stop cleanly).
 * SIGHUP stays ignored when it is (nohup). No SA_RESTART: the signal must interrupt the
 * wait of the thread that runs the session loop. 0 or -1. */
static int stop_signals_install(void)
{
	struct sigaction sa, old;

	if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK))
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	for (unsigned i = 0; i < 3; i++) {
		if (stop_signals[i] == SIGHUP && (sigaction(SIGHUP, NULL, &old) ||
		    old.sa_handler == SIG_IGN))
			continue;
		if (sigaction(stop_signals[i], &sa, NULL))
			return -1;
		stop_installed[i] = 1;
	}
	return 0;
}

static void stop_signals_remove(void)
{
	for (unsigned i = 0; i < 3; i++)
		if (stop_installed[i]) {
			signal(stop_signals[i], SIG_DFL);
			stop_installed[i] = 0;
		}
	for (unsigned i = 0; i < 2; i++)
		if (stop_pipe[i] >= 0) {
			close(stop_pipe[i]);
			stop_pipe[i] = -1;
		}
}

/* watch_fd=N (fs/opts.h): the read end of a pipe whose write ends the launcher holds.
 * Its hang-up stops the mount as SIGTERM does, so a mount started by a process (e.g.
 * zephon.mount) ends with that process however it dies, kill -9 included. A pidfd of
 * the parent would miss a launcher that daemonized us; PR_SET_PDEATHSIG fires when the
 * forking *thread* exits, not the process. -1: none, or its hang-up was seen. */
static int watch_fd = -1;
#define WATCH_HANGUP 0xff /* stop_byte()'s byte for it: no signal has this number */

/* The next byte of the stop pipe within timeout_ms (-1: forever): a signal number, 0
 * when the session loop has ended, or WATCH_HANGUP once watch_fd hangs up. 1 when one
 * was read, 0 when none came. Bytes written into watch_fd mean nothing and are dropped. */
static int stop_byte(int timeout_ms, unsigned char *c)
{
	struct pollfd p[2] = { { .fd = stop_pipe[0], .events = POLLIN },
			       { .fd = watch_fd, .events = POLLIN } };
	char junk[64];

	for (;;) {
		if (poll(p, watch_fd >= 0 ? 2 : 1, timeout_ms) <= 0)
			return 0;
		if (p[0].revents)
			return read(stop_pipe[0], c, 1) == 1;
		if (!(p[1].revents & POLLIN) || read(watch_fd, junk, sizeof(junk)) <= 0) {
			close(watch_fd);
			watch_fd = -1;
			*c = WATCH_HANGUP;
			return 1;
		}
	}
}

struct stopper {
	struct zmount *z;
	struct fuse_session *se;
	pthread_t loop;         /* the thread that runs the session loop */
	pthread_t thread;
	int started;
};

static void *stopper_main(void *arg)
{
	struct stopper *st = arg;
	unsigned char c = 0;
	unsigned left = 0;
	double deadline;

	/* what top -H and /proc/PID/task/TID/comm show: not a request thread */
	pthread_setname_np(pthread_self(), "zephon-stop");
	while (!stop_byte(-1, &c))
		;
	if (c == 0)
		return NULL; /* the loop ended by itself (fusermount3 -u) */
	zmount_log(LOG_INFO, "%s: stopping; opens of next now fail with ESHUTDOWN, batches "
		"handed out may be read for up to %.0f s", c == WATCH_HANGUP ?
		"watch_fd hung up (the process that started the mount is gone)" : strsignal(c),
		STOP_WAIT_S);
	deadline = clock_mono_s() + STOP_WAIT_S;
	server_stop_claims(st->z->srv, STOP_WAIT_S);
	for (;;) {
		double rest = deadline - clock_mono_s();

		if (!zmount_wait_claims(st->z, rest < 0.1 ? (rest > 0 ? rest : 0) : 0.1, &left) ||
		    clock_mono_s() >= deadline)
			break;
		if (stop_byte(0, &c)) {
			if (c == 0)
				return NULL;
			break; /* a second signal: stop now */
		}
	}
	if (left)
		zmount_log(LOG_WARNING, "stopping with %u batch%s of next still open; those not read "
			"to their end count as not consumed (resume=auto serves them again)", left,
			left == 1 ? "" : "es");
	fuse_session_exit(st->se);
	/* Wake the loop's thread from its wait; again until the loop says it ended, since
	 * the first signal may come just before that thread starts to wait. */
	do
		pthread_kill(st->loop, SIGTERM);
	while (!stop_byte(100, &c) || c != 0);
	return NULL;
}

static void stopper_start(struct stopper *st)
{
	sigset_t all, old;

	st->loop = pthread_self();
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	st->started = stop_pipe[0] >= 0 && !pthread_create(&st->thread, NULL, stopper_main, st);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!st->started)
		zmount_log(LOG_WARNING, "no stopper thread: SIGTERM and SIGINT will not stop the mount; "
			"unmount with fusermount3 -u");
}

/* The loop ended: the stopper goes. */
static void stopper_join(struct stopper *st)
{
	unsigned char zero = 0;

	if (!st->started)
		return;
	while (write(stop_pipe[1], &zero, 1) != 1 && errno == EAGAIN) {
		unsigned char c;

		if (read(stop_pipe[0], &c, 1) != 1) /* a full pipe of signals: make room */
			break;
	}
	pthread_join(st->thread, NULL);
}

static int serve(struct zmount *z, struct fuse_session *se, const struct mount_options *o)
{
	struct stopper stopper = { .z = z, .se = se };
	int frc;
	struct server_config sc = {
		.layout = z->cfg->layout,
		.ranks = &z->cfg->ranks,
		.epochs = z->cfg->epochs,
		.format = z->cfg->format,
		.prefetch = z->cfg->prefetch, .readahead = z->cfg->readahead,
		.workers = z->cfg->workers,
		.log = server_log,
	};
	struct buf readme = BUF_INIT;
	int rc;

	watch_fd = z->cfg->watch_fd;
	sc.order = z->served->order;
	order_validation(&sc.order, &sc.validation); /* leaves n = 0 without a split */
	if (o->singlethread)
		z->cfg->max_threads = 1; /* -s: the one thread must never wait in a claim */
	rc = server_new(z->ds, &sc, z->journal, &z->srv);
	if (!rc && (rc = progress_new(z->cfg->ranks.ranks, z->cfg->ranks.count, &sc.layout,
				      &z->progress)))
		server_free(z->srv);
	if (rc) {
		zmount_log(LOG_ERR, "cannot start serving: %s", strerror(-rc));
		return 1;
	}
	z->ids_served = server_ids_served(z->srv); /* fixed at mount */
	/* Threads are started as the queue needs them. Without offload threads the
	 * handlers answer every request themselves. */
	if ((rc = jobq_new(&offload_cfg, &z->journal_queue)) ||
	    (rc = jobq_new(&offload_cfg, &z->build_queue)))
		zmount_log(LOG_WARNING, "no offload threads (%s): claims and step/ builds are served "
			"on the request threads", strerror(-rc));
	if (render_readme(z, &readme) == 0) {
		z->readme_len = readme.len;
		z->readme = (char *)buf_detach(&readme, NULL);
	}
	zmount_log(LOG_INFO, "serving %s: world_size=%" PRIu64 " global_batch=%" PRIu64
		" micro_batch=%" PRIu64 ", %s; %u decode workers, %u request threads, up to %u "
		"offload threads",
		z->dataset_path, layout_world_size(&sc.layout), layout_global_batch(&sc.layout),
		layout_micro_batch(&sc.layout), z->resume_applied, sc.workers,
		z->cfg->max_threads,
		(z->journal_queue ? OFFLOAD_THREADS : 0) + (z->build_queue ? OFFLOAD_THREADS : 0));
	stopper_start(&stopper);
	if (o->singlethread) {
		rc = fuse_session_loop(se);
	} else {
		struct fuse_loop_config *lc = fuse_loop_cfg_create();

		fuse_loop_cfg_set_clone_fd(lc, 0);
		fuse_loop_cfg_set_idle_threads(lc, z->cfg->max_threads < 16 ? z->cfg->max_threads : 16);
		fuse_loop_cfg_set_max_threads(lc, z->cfg->max_threads);
		rc = fuse_session_loop_mt(se, lc);
		fuse_loop_cfg_destroy(lc);
	}
	stopper_join(&stopper);
	/* every handler has returned: nothing submits any more */
	jobq_free(z->journal_queue);
	jobq_free(z->build_queue);
	z->journal_queue = z->build_queue = NULL;
	zmount_free_open_files(z);
	server_free(z->srv);
	z->srv = NULL;
	progress_free(z->progress);
	z->progress = NULL;
	/* the deliveries since each rank's last claim: a remount counts them as consumed */
	if (z->journal && (frc = journal_flush_delivered(z->journal)) != 0) {
		char why[512];

		journal_last_error(z->journal, why, sizeof(why));
		zmount_log(LOG_ERR, "the journal could not record the last batches delivered (%s); "
			"resume=auto will serve them again", *why ? why : strerror(-frc));
	}
	free(z->readme);
	return rc < 0 ? 1 : 0;
}

/* The command line into *o: 0 to mount, 1 when --help or --version was answered, -1
 * after a message (exit status 2). */
static int parse_command_line(struct fuse_args *args, struct mount_options *o)
{
	if (mount_options_parse(args, o)) {
		if (o->bad_option && strpbrk(o->bad_option, " \t\n\r\v\f"))
			die_msg("unknown mount option '%s': it holds a space; write NAME=VALUE "
				"options separated by commas alone", o->bad_option);
		else if (o->bad_option)
			die_msg("unknown mount option '%s'; see zephon mount --help", o->bad_option);
		return -1;
	}
	if (o->show_help) {
		mount_usage(stdout);
		return 1;
	}
	if (o->show_version) {
		printf("zephon %s (libfuse %s)\n", ZEPHON_VERSION, fuse_pkgversion());
		return 1;
	}
	if (o->check_json && !o->check_only)
		return die_msg("--json goes with --check: zephon mount DS MP --check --json"), -1;
	if (!o->dataset || !o->mountpoint || o->extra_nonopt) {
		die_msg(o->extra_nonopt ? "mount takes two arguments, DATASET and MOUNTPOINT, and "
			"-o OPTIONS; see zephon mount --help" : "mount needs DATASET and MOUNTPOINT; "
			"see zephon mount --help");
		return -1;
	}
	return 0;
}

/* The mount's state before the journal: what it serves and its locks. */
static void zmount_setup(struct zmount *z, struct served *st, struct mount_config *cfg,
		      const char *dataset)
{
	z->served = st;
	z->ds = st->ds;
	z->info = dataset_info(st->ds);
	z->cfg = cfg;
	z->dataset_path = dataset;
	z->ready = mount_ready;
	z->uid = getuid();
	z->gid = getgid();
	clock_gettime(CLOCK_REALTIME, &z->mounted_at);
	pthread_mutex_init(&z->lock, NULL);
}

/* o's DATASET (an s3:// URL as given) and MOUNTPOINT as absolute paths, each PATH_MAX bytes:
 * 0, or -1 after a message. A stale FUSE mountpoint (ENOTCONN) stays as written. */
static int resolve_paths(const struct mount_options *o, char *dataset, char *mp)
{
	if (s3_is_url(o->dataset) ? snprintf(dataset, PATH_MAX, "%s", o->dataset) >= PATH_MAX :
	    !realpath(o->dataset, dataset)) {
		die_msg("cannot open dataset %s: %s", o->dataset, strerror(s3_is_url(o->dataset) ?
			ENAMETOOLONG : errno));
		return -1;
	}
	if (!o->check_only && !realpath(o->mountpoint, mp)) {
		int e = errno;

		if (e != ENOTCONN || strlen(o->mountpoint) >= PATH_MAX) {
			die_msg("cannot use mountpoint %s: %s", o->mountpoint, strerror(e));
			return -1;
		}
		strcpy(mp, o->mountpoint);
	}
	return 0;
}

/* The dataset into *st, ordered by cfg and checked against it: 0, or the exit status (1,
 * or 2 for options the dataset refuses) after a message, with *st closed. */
static int open_served(struct mount_config *cfg, struct served *st, const char *dataset)
{
	char why[512];
	int rc;

	if ((rc = served_open(dataset, st, why, sizeof(why)))) {
		die_msg("cannot open dataset %s: %s", dataset, why);
		/* s3://: credentials, bucket, prefix, URL: the user's to fix, as an option */
		return (s3_is_url(dataset) && (rc == -EACCES || rc == -ENOENT || rc == -EINVAL)) + 1;
	}
	rc = served_set_order(st, &(struct served_options){ cfg->seed, cfg->shuffle, cfg->weights,
			      cfg->validation }, why, sizeof(why));
	if (!rc && st->is_mixture && !cfg->journal)
		rc = mount_config_mixture_journal(cfg, dataset);
	if (!rc)
		rc = mount_config_check_dataset(cfg, st->ds, why, sizeof(why));
	if (rc == -ENOMEM)
		die_msg("out of memory");
	else if (rc == -EBADMSG) /* the spec's own content */
		die_msg("cannot open dataset %s: %s", dataset, why);
	else if (rc)
		die_msg("invalid mount options: %s", why);
	if (rc)
		served_close(st);
	return rc == 0 ? 0 : rc == -ENOMEM || rc == -EBADMSG ? 1 : 2;
}

/* The FUSE session on mp, served until unmounted or stopped: the exit status. *live is
 * set once the mount was made (the journal then is kept). */
static int mount_and_serve(struct zmount *z, struct fuse_args *args, struct mount_options *o,
			   const char *dataset, const char *mp, int *live)
{
	struct fuse_session *se;
	int status = 1;

	if (add_fuse_defaults(args, o, dataset))
		return 1;
	se = fuse_session_new(args, &zmount_ops, sizeof(zmount_ops), z);
	if (!se)
		return 1;
	if (fuse_set_signal_handlers(se))
		goto out_session;
	if (stop_signals_install())
		goto out_handlers;
	if (fuse_session_mount(se, mp)) {
		die_msg("cannot mount on %s (is /dev/fuse usable? see the message above)", mp);
		goto out_handlers;
	}
	*live = 1;
	status = serve(z, se, o);
	fuse_session_unmount(se);
out_handlers:
	fuse_remove_signal_handlers(se);
	stop_signals_remove();
out_session:
	fuse_session_destroy(se);
	return status;
}

int cmd_mount(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct mount_options o = { 0 };
	struct mount_config cfg;
	struct journal_ident ident = { 0 };
	struct served st = { 0 };
	struct zmount z = { 0 };
	char why[512], dataset[PATH_MAX], mp[PATH_MAX];
	int status = 2, live = 0, rc;

	rc = parse_command_line(&args, &o);
	if (rc) {
		status = rc > 0 ? 0 : 2;
		goto out_opts;
	}
	if (mount_config_from(&o, &cfg, why, sizeof(why))) {
		die_msg("invalid mount options: %s", why);
		goto out_opts;
	}
	if (mount_fault_arm(why, sizeof(why))) {
		die_msg("%s", why);
		goto out_cfg;
	}
	if (!o.foreground && !o.check_only && daemon_fork()) {
		status = 1;
		goto out_cfg;
	}
	status = 1;
	if (resolve_paths(&o, dataset, mp))
		goto out_cfg;
	status = open_served(&cfg, &st, dataset);
	if (status)
		goto out_cfg;
	if (o.check_only) {
		status = config_check_print(&(struct mount_view){ dataset, &st, &cfg, &cfg.layout, 0 },
					    o.check_json, stdout);
		goto out_ds;
	}
	status = 1;
	zmount_setup(&z, &st, &cfg, dataset);
	served_ident(&st, &ident);
	if (check_mountpoint(mp))
		goto out_ds;
	status = start_journal(&z, &ident);
	if (status)
		goto out_ds;
	warn_if_stream_over(&cfg, &st.order);
	status = mount_and_serve(&z, &args, &o, dataset, mp, &live);
	free(z.layouts);
	if (live)
		journal_close(z.journal);
	else
		journal_abandon(z.journal); /* never served: leave no journal it created */
out_ds:
	served_close(&st);
out_cfg:
	mount_config_release(&cfg);
	daemon_ready(status);
out_opts:
	mount_options_release(&o);
	fuse_opt_free_args(&args);
	return status;
}
