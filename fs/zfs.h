/*
 * zfs.h: the state of one mount, shared by the FUSE handlers (fs/ops.c), the renderers
 * of the generated files (fs/render.c) and the mount command (fs/cmd_mount.c).
 */
#ifndef ZEPHON_ZFS_H
#define ZEPHON_ZFS_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "opts.h"
#include "serve.h"

#define ZFS_PID_SLOTS 256

/* Size of a process's latest claim of one rank's next: what a GETATTR without a file
 * handle answers (numpy.fromfile sizes its array from fstat). */
struct pid_claim {
	uint32_t pid;
	uint64_t rank;
	uint64_t size;
};

struct zfs {
	const struct dataset *ds;
	const struct dataset_info *info;
	struct journal *journal;
	struct server *srv;
	/* Offload threads (fs/offload.h) of requests that may wait for the journal, and of
	 * requests that decode; either may be NULL (its requests are then served inline). */
	struct offload *journal_queue, *build_queue;
	struct mount_config *cfg;
	const char *dataset_path;      /* as given on the command line, absolute */
	char resume_applied[256];      /* what journal_start() applied, for /status */
	/* The journal's layout history for /status, read once after journal_start(): only
	 * a mount's start adds to it, and reading it later would wait for any commit. */
	struct journal_layout *layouts;
	size_t nlayouts;
	uid_t uid;
	gid_t gid;
	struct timespec mounted_at;
	char *readme;                  /* static text of /README */
	size_t readme_len;

	pthread_mutex_t lock;          /* guards pids, last_size, counters below */
	struct pid_claim pids[ZFS_PID_SLOTS];
	unsigned pid_next;
	uint64_t bytes_read, opens_next, control_writes, control_errors;
	unsigned inline_claims;        /* claims on request threads now (atomic; fs/ops.c) */
	/* Handles the kernel has not released yet. An unmount can come before the RELEASE of
	 * a closed file (the kernel sends it in the background); they are freed then. */
	struct open_file *open_files;
};

/* Free every handle still open; after the session loop ended (fs/ops.c). */
void zfs_free_open_files(struct zfs *z);

/* Log a message: to stderr in the foreground, to syslog when daemonized (fs/cmd_mount.c).
 * Also the server's log sink. */
void zfs_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The kernel's INIT reached the daemon: the mount is live. A daemonizing `zephon mount`
 * returns success to its caller only now and detaches from the terminal. */
void zfs_ready(void);

/* The latest warning or error zfs_log() wrote, and when (0: none yet). */
time_t zfs_last_error(char *out, size_t len);

/* The low-level operations of the mount. */
extern const struct fuse_lowlevel_ops zfs_ops;

/* Generated files (fs/render.c). Each appends text to out; 0 or -ENOMEM. */
int render_readme(struct zfs *z, struct buf *out);
int render_status(struct zfs *z, struct buf *out);
int render_metrics(struct zfs *z, struct buf *out);
/* -ENOENT when the rank is not served. */
int render_state(struct zfs *z, uint64_t rank, struct buf *out);

#endif
