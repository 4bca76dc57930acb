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

/* One rate-limited log line (zfs_log_limited()); zero-initialized. */
struct zfs_ratelimit {
	double next_s;              /* CLOCK_MONOTONIC seconds before which the line is held */
	unsigned long held;         /* lines held back since the last one written */
};

/* Opens of one rank's next made while another process held that rank's next open. */
struct next_overlap {
	uint64_t rank;
	uint64_t opens;
	struct zfs_ratelimit log;
};

/* Buckets (by rank) of the handles of next not yet released: who holds which rank. */
#define ZFS_HOLD_BUCKETS 256

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

	pthread_mutex_t lock;          /* guards pids, pid_next and everything below */
	struct pid_claim pids[ZFS_PID_SLOTS];
	unsigned pid_next;
	uint64_t bytes_read, opens_next, control_writes, control_errors;
	/* Handles of next not released yet, by rank % ZFS_HOLD_BUCKETS, and the ranks whose
	 * next was opened while another process held it (fs/ops.c): sorted by rank, grown
	 * as ranks are seen, freed by zfs_free_open_files(). */
	struct open_file *next_holders[ZFS_HOLD_BUCKETS];
	struct next_overlap *overlaps;
	size_t noverlaps;
	uint64_t overlaps_total;
	struct zfs_ratelimit unserved_log;  /* reads of a rank this mount does not serve */
	unsigned inline_claims;        /* claims on request threads now (atomic; fs/ops.c) */
	/* Opens of next in progress plus handles of next holding a claim (guarded by
	 * lock): a clean stop waits for 0 (zfs_wait_claims). */
	unsigned open_claims;
	pthread_cond_t claims_done;    /* open_claims reached 0; CLOCK_MONOTONIC */
	/* Handles the kernel has not released yet. An unmount can come before the RELEASE of
	 * a closed file (the kernel sends it in the background); they are freed then. */
	struct open_file *open_files;
};

/* Wait up to timeout_s seconds until no open of next is in progress and every handle of
 * next holding a claim was released (the reader has its batch). 0 or -ETIMEDOUT;
 * *left receives how many are still open. Call after server_stop_claims(). */
int zfs_wait_claims(struct zfs *z, double timeout_s, unsigned *left);

/* Free every handle still open, and the overlap records; after the session loop ended
 * (fs/ops.c). */
void zfs_free_open_files(struct zfs *z);

/* Log a message: to stderr in the foreground, to syslog when daemonized (fs/cmd_mount.c).
 * Also the server's log sink. */
void zfs_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* zfs_log(), but the line itself is written at most once per interval_s seconds per rl
 * (the next one written says how many were held back); every call still becomes
 * /status' last_error. For lines a reader's loop can provoke at any rate. */
void zfs_log_limited(struct zfs_ratelimit *rl, double interval_s, int prio, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* The kernel's INIT reached the daemon: the mount is live. A daemonizing `zephon mount`
 * returns success to its caller only now and detaches from the terminal. */
void zfs_ready(void);

/* The latest warning or error zfs_log() wrote, and when (0: none yet). */
time_t zfs_last_error(char *out, size_t len);

/* The low-level operations of the mount. */
extern const struct fuse_lowlevel_ops zfs_ops;

/* Generated files (fs/render.c). Each appends text to out; 0, -ENOMEM or -EOVERFLOW
 * (out could not grow). */
int render_readme(struct zfs *z, struct buf *out);
int render_status(struct zfs *z, struct buf *out);
int render_metrics(struct zfs *z, struct buf *out);
/* -ENOENT when the rank is not served. */
int render_state(struct zfs *z, uint64_t rank, struct buf *out);

#endif
