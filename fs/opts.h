/*
 * opts.h: the mount options of docs/mounting.md "Options", parsed with fuse_opt (one table,
 * offsetof into struct mount_options, as libfuse's passthrough_ll.c does) and validated
 * in one function with one message per rule. `zephon mount` and `zephon batch` share it.
 */
#ifndef ZEPHON_OPTS_H
#define ZEPHON_OPTS_H

/* readahead= when not given: 64 MiB of each served rank's coming samples in the page
 * cache, about a second ahead of a reader at 50 MB/s of random reads (tests/bench/
 * RESULTS.md, "Cold, slow storage"), a tenth of a second at 500 MB/s. */
#define MOUNT_READAHEAD_DEFAULT (UINT64_C(64) << 20)

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <fuse_opt.h>

#include "dataset.h"
#include "encode.h"
#include "journal.h"
#include "order.h"

/* The option text as given (NULL when absent); fuse_opt allocates each string. */
struct mount_options {
	char *world_size, *global_batch, *micro_batch, *ranks, *seed, *shuffle, *epochs;
	char *format, *journal, *resume, *prefetch, *sync, *workers, *max_threads;
	char *readahead;              /* readahead=BYTES */
	char *weights, *validation;   /* a mixture's weights; the held-out fraction */
	char *watch_fd;               /* watch_fd=N: stop when that pipe's writers are gone */
	char *cache, *cache_size;     /* an s3:// dataset's node cache: its folder, its cap */
	char *s3_connections, *s3_timeout, *fetch;
	int foreground, debug, singlethread, show_help, show_version;
	int check_only;               /* --check: validate against the dataset, mount nothing */
	int check_json;               /* --json (with --check): print the resolved configuration */
	int allow_other, default_permissions;
	char *dataset, *mountpoint;   /* the first two non-option arguments */
	int extra_nonopt;             /* a third non-option argument: a usage error */
	char *bad_option;             /* the first unknown option, for the message */
	int batch_mode;               /* zephon batch: no mountpoint, fuse options refused */
};

/* Options after validation. */
struct mount_config {
	struct layout layout;         /* W, B, m; S0/G0 zero until the journal resolves them */
	struct rankset ranks;
	uint64_t seed;
	enum order_shuffle shuffle;
	uint64_t epochs;
	int format_given;
	enum encode_format format;     /* resolved against the dataset by mount_config_check_dataset */
	char *journal;                /* malloc'd path */
	struct journal_resume resume;
	unsigned prefetch, workers;
	uint64_t readahead;           /* bytes of each rank's coming samples hinted (0: none) */
	unsigned max_threads;         /* FUSE requests served at once (fuse_loop_cfg_set_max_threads, 1-256) */
	enum journal_sync sync;
	const char *weights;          /* weights= as given (NULL: the spec's); borrowed from
	                               * struct mount_options, like validation */
	const char *validation;       /* validation= as given (NULL: no split) */
	struct dataset_remote_opts remote; /* cache=, cache_size=, s3_connections=, s3_timeout=
	                               * (cache_dir borrowed from struct mount_options) */
	int watch_fd;                 /* the read end of a pipe whose hang-up (every write
	                               * end closed: the launcher died) stops the mount as
	                               * SIGTERM does; -1 without watch_fd= */
};

/* Parse argv into o; options fuse must see (allow_other, fsname=, ...) are kept in
 * fuse_args. Returns 0, or -1 after printing nothing (caller reports o->bad_option). */
int mount_options_parse(struct fuse_args *args, struct mount_options *o);
void mount_options_release(struct mount_options *o);

/* Validate o into c. 0, or -EINVAL with one line in why (which rule failed), -ENOMEM. */
int mount_config_from(const struct mount_options *o, struct mount_config *c,
		      char *why, size_t why_len);
/* Check what depends on the dataset (format, journal default path). 0, -EINVAL (reason
 * in why), -ENOMEM. */
int mount_config_check_dataset(struct mount_config *c, const struct dataset *ds,
			       char *why, size_t why_len);
/* A mixture spec's default journal into c->journal (malloc'd, c owns it): mix.json ->
 * mix.journal.sqlite beside it. 0 or -ENOMEM. */
int mount_config_mixture_journal(struct mount_config *c, const char *spec);
void mount_config_release(struct mount_config *c);

/* ZEPHON_FAULT from the environment (core/util/fault.h: a crash test's point where the
 * daemon stops itself), armed once, before any thread, and logged: 0 (also when unset or
 * empty), or -EINVAL with why (the points there are). */
int mount_fault_arm(char *why, size_t len);

/* The option list for --help. */
extern const char mount_options_help[];

#endif
