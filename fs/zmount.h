/*
 * zmount.h: the state of one mount, shared by the FUSE handlers (fs/ops.c and the files of
 * fs/ops_int.h), the renderers of the generated files (fs/render.c) and the mount
 * command (fs/cmd_mount.c).
 */
#ifndef ZEPHON_ZMOUNT_H
#define ZEPHON_ZMOUNT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "log.h"
#include "opts.h"
#include "progress.h"
#include "serve.h"
#include "served.h"

/* Opens of one rank's next made while another process held that rank's next open. */
struct next_overlap {
	uint64_t rank;
	uint64_t opens;
	struct zmount_ratelimit log;
};

/* Buckets (by rank) of the handles of next not yet released: who holds which rank. */
#define ZMOUNT_HOLD_BUCKETS 256

struct zmount {
	struct served *served;         /* the dataset or mixture and its order (core/serve/served.h) */
	const struct dataset *ds;
	const struct dataset_info *info;
	struct journal *journal;
	struct server *srv;
	int ids_served;                /* server_ids_served(), asked once at the mount */
	/* Offload threads (core/util/jobq.h) of requests that may wait for the journal, and of
	 * requests that decode; either may be NULL (its requests are then served inline). */
	struct jobq *journal_queue, *build_queue;
	struct mount_config *cfg;
	/* What each served rank has read of from/, at/, step/ and next (core/serve/progress.h):
	 * /status' progress and, for a job that claims nothing, its consumed_samples. */
	struct progress *progress;
	const char *dataset_path;      /* as given on the command line, absolute */
	/* Called once the kernel's INIT reached the daemon: the mount is live (a daemonizing
	 * `zephon mount` then returns success to its caller and detaches); may be NULL. */
	void (*ready)(void);
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

	pthread_mutex_t lock;          /* guards everything below */
	uint64_t bytes_read, control_writes, control_errors;
	/* Handles of next not released yet, by rank % ZMOUNT_HOLD_BUCKETS, and the ranks whose
	 * next was opened while another process held it (fs/overlap.c): sorted by rank, grown
	 * as ranks are seen, freed by zmount_free_open_files(). */
	struct open_file *next_holders[ZMOUNT_HOLD_BUCKETS];
	struct next_overlap *overlaps;
	size_t noverlaps, overlaps_cap;
	uint64_t overlaps_total;
	struct zmount_ratelimit unserved_log;  /* reads of a rank this mount does not serve */
	unsigned inline_claims;        /* claims on request threads now (atomic; fs/offload.c) */
	/* Handles the kernel has not released yet. An unmount can come before the RELEASE of
	 * a closed file (the kernel sends it in the background); they are freed then. */
	struct open_file *open_files;
};

/* Wait up to timeout_s seconds until no open of next is in progress and every handle of
 * next holding a claim was released (the reader has its batch): server_wait_claims().
 * 0 or -ETIMEDOUT; *left receives how many are still open. Call after
 * server_stop_claims(). */
int zmount_wait_claims(struct zmount *z, double timeout_s, unsigned *left);

/* Free every handle still open, and the overlap records; after the session loop ended
 * (fs/handle.c). */
void zmount_free_open_files(struct zmount *z);

/* The low-level operations of the mount. */
extern const struct fuse_lowlevel_ops zmount_ops;

/* Generated files (fs/render.c). Each appends text to out; 0, -ENOMEM or -EOVERFLOW
 * (out could not grow). */
int render_readme(struct zmount *z, struct buf *out);
int render_status(struct zmount *z, struct buf *out);
int render_metrics(struct zmount *z, struct buf *out);
/* -ENOENT when the rank is not served. */
int render_state(struct zmount *z, uint64_t rank, struct buf *out);

#endif
