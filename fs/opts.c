#include "buf.h"
#include "fault.h"
#include "log.h"
#include "opts.h"
#include "parse.h"
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

enum {
	KEY_FOREGROUND, KEY_DEBUG, KEY_SINGLE, KEY_HELP, KEY_VERSION,
	KEY_ALLOW_OTHER, KEY_DEFAULT_PERMISSIONS, KEY_RANKS, KEY_CHECK, KEY_JSON,
};

#define OPT(t, field) { t, offsetof(struct mount_options, field), 0 }
static const struct fuse_opt option_table[] = {
	OPT("world_size=%s", world_size),
	OPT("global_batch=%s", global_batch),
	OPT("micro_batch=%s", micro_batch),
	OPT("seed=%s", seed),
	OPT("shuffle=%s", shuffle),
	OPT("epochs=%s", epochs),
	OPT("format=%s", format),
	OPT("journal=%s", journal),
	OPT("resume=%s", resume),
	OPT("prefetch=%s", prefetch),
	OPT("readahead=%s", readahead),
	OPT("sync=%s", sync),
	OPT("workers=%s", workers),
	OPT("max_threads=%s", max_threads),
	OPT("weights=%s", weights),
	OPT("validation=%s", validation),
	OPT("watch_fd=%s", watch_fd),
	OPT("cache=%s", cache),
	OPT("cache_size=%s", cache_size),
	OPT("s3_connections=%s", s3_connections),
	OPT("s3_timeout=%s", s3_timeout),
	OPT("fetch=%s", fetch),
	FUSE_OPT_KEY("-f", KEY_FOREGROUND),
	FUSE_OPT_KEY("-d", KEY_DEBUG),
	FUSE_OPT_KEY("debug", KEY_DEBUG),
	FUSE_OPT_KEY("-s", KEY_SINGLE),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("--check", KEY_CHECK),
	FUSE_OPT_KEY("--json", KEY_JSON),
	FUSE_OPT_KEY("ranks=", KEY_RANKS),
	FUSE_OPT_KEY("allow_other", KEY_ALLOW_OTHER),
	FUSE_OPT_KEY("default_permissions", KEY_DEFAULT_PERMISSIONS),
	FUSE_OPT_END
};
#undef OPT

const char mount_options_help[] =
	"mount options (-o, comma separated):\n"
	"  world_size=W          data-parallel ranks in the job (default 1)\n"
	"  global_batch=B        samples per optimizer step, a multiple of W (default W)\n"
	"  micro_batch=m         samples per open of next; divides B/W (default B/W)\n"
	"  ranks=LIST            ranks this mount serves, e.g. 0-7 or 8,9,12-15 (default all)\n"
	"  seed=S                shuffle seed (default 0)\n"
	"  shuffle=global|none   order mode (default global)\n"
	"  epochs=E              stop after E epochs (default 0: endless)\n"
	"  format=lines|tar|npy|bin  batch encoding (default by dataset kind)\n"
	"  journal=PATH          cursor journal (default DATASET/journal.sqlite; for a\n"
	"                        mixture spec mix.json: mix.journal.sqlite beside it)\n"
	"  weights=LIST          a mixture's weights from this mount's start on, in source\n"
	"                        order or by name: 0.5+0.5 or web:0.7+code:0.3 (default: the\n"
	"                        spec's); changes only at a step boundary\n"
	"  validation=F          hold out the fraction F (0.01 or 1/100, at most 0.5) of every\n"
	"                        source for /rank/<r>/validation/ (default: none)\n"
	"  resume=auto|fresh|samples:G[@S]|step:S  where the stream starts (default auto)\n"
	"  prefetch=K            decoded micro-batches kept ready per rank (default 2)\n"
	"  readahead=BYTES       of each rank's coming samples, asked of the kernel ahead\n"
	"                        of the rank (page cache; 64M, 1G; 0: none; default 64M)\n"
	"  sync=normal|full      journal durability of each claim (default normal)\n"
	"  workers=N             decode threads (default: number of CPUs, at most 8)\n"
	"  max_threads=N         FUSE requests served at once, 1-256 (default: CPUs, at least 2)\n"
	"  watch_fd=N            stop (as on SIGTERM) once every write end of the pipe\n"
	"                        whose read end is fd N is closed: the mount ends with\n"
	"                        the process that started it, however it dies\n"
	"  cache=DIR             an s3:// dataset's node cache (default ~/.cache/zephon)\n"
	"  cache_size=BYTES      the samples it keeps at most (default: no cap but the disk)\n"
	"  s3_connections=N      requests in flight to object storage, 1-1024 (default 64)\n"
	"  s3_timeout=SECONDS    a failing fetch's retries end after this long (default 60)\n"
	"  fetch=exact|all       exact: the samples the order needs (default); all: every\n"
	"                        sample too, into the cache in the background, 4 MiB a GET\n"
	"  allow_other           let other users read status, samples/ and step/; next, peek\n"
	"                        and control stay the owner's (implies default_permissions)\n"
	"FUSE mount options fsname=, subtype=, auto_unmount, nodev, nosuid, noexec, noatime,\n"
	"ro and rw pass through; fstab-only keys (defaults, auto, noauto, user, users, nofail,\n"
	"_netdev, x-*, comment=) are ignored.\n";

/* Options the kernel or libfuse understand: handed to fuse_session_new/mount. */
static const char *const fuse_passthrough[] = {
	"auto_unmount", "allow_root", "nodev", "dev", "nosuid", "suid", "noexec", "exec",
	"noatime", "atime", "nodiratime", "relatime", "ro", "rw", "sync", "async", "dirsync",
};
static const char *const fuse_passthrough_prefix[] = { "fsname=", "subtype=" };
/* fstab/mount(8) keys that mean nothing to a FUSE daemon: dropped silently. */
static const char *const fstab_only[] = {
	"defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "nofail",
	"_netdev", "loop", "noloop",
};
static const char *const fstab_only_prefix[] = { "x-", "comment=", "X-mount." };

static int in_list(const char *arg, const char *const *list, size_t n, int prefix)
{
	for (size_t i = 0; i < n; i++)
		if (prefix ? !strncmp(arg, list[i], strlen(list[i])) : !strcmp(arg, list[i]))
			return 1;
	return 0;
}

#define IN(arg, list, prefix) in_list(arg, list, sizeof(list) / sizeof(list[0]), prefix)

static int option_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct mount_options *o = data;

	switch (key) {
	case KEY_FOREGROUND: o->foreground = 1; return 0;
	case KEY_DEBUG: o->debug = o->foreground = 1; return o->batch_mode ? 0 : 1;
	case KEY_SINGLE: o->singlethread = 1; return 0;
	case KEY_HELP: o->show_help = 1; return 0;
	case KEY_VERSION: o->show_version = 1; return 0;
	case KEY_CHECK:
		if (o->batch_mode && !o->bad_option)
			o->bad_option = strdup(arg);
		o->check_only = 1;
		return 0;
	case KEY_JSON:
		if (o->batch_mode && !o->bad_option)
			o->bad_option = strdup(arg);
		o->check_json = 1;
		return 0;
	case KEY_ALLOW_OTHER: o->allow_other = 1; return 0;
	case KEY_DEFAULT_PERMISSIONS: o->default_permissions = 1; return 0;
	case FUSE_OPT_KEY_NONOPT:
		if (!o->dataset)
			o->dataset = strdup(arg);
		else if (!o->mountpoint && !o->batch_mode)
			o->mountpoint = strdup(arg);
		else
			o->extra_nonopt = 1;
		return 0;
	case KEY_RANKS:
		free(o->ranks);
		o->ranks = strdup(arg + strlen("ranks="));
		return 0;
	case FUSE_OPT_KEY_OPT:
		/* -o splits at commas, so ranks=8,9,10 arrives as "ranks=8", "9", "10": a bare
		 * rank or range after ranks= continues its list. */
		if (o->ranks && arg[strspn(arg, "0123456789-")] == 0 && arg[0] >= '0' && arg[0] <= '9') {
			size_t n = strlen(o->ranks) + strlen(arg) + 2;
			char *joined = malloc(n);

			if (!joined)
				return -1;
			snprintf(joined, n, "%s,%s", o->ranks, arg);
			free(o->ranks);
			o->ranks = joined;
			return 0;
		}
		if (!o->batch_mode && (IN(arg, fuse_passthrough, 0) || IN(arg, fuse_passthrough_prefix, 1)))
			return 1;
		if (IN(arg, fstab_only, 0) || IN(arg, fstab_only_prefix, 1))
			return 0;
		if (!o->bad_option)
			o->bad_option = strdup(arg);
		return 0;
	default:
		return 1;
	}
	(void)outargs;
}

int mount_options_parse(struct fuse_args *args, struct mount_options *o)
{
	if (fuse_opt_parse(args, o, option_table, option_proc))
		return -1;
	return o->bad_option ? -1 : 0;
}

void mount_options_release(struct mount_options *o)
{
	char **strs[] = { &o->world_size, &o->global_batch, &o->micro_batch, &o->ranks,
			  &o->seed, &o->shuffle, &o->epochs, &o->format, &o->journal, &o->resume,
			  &o->prefetch, &o->readahead, &o->sync, &o->workers, &o->max_threads,
			  &o->weights, &o->validation, &o->watch_fd, &o->dataset, &o->mountpoint,
			  &o->bad_option, &o->cache, &o->cache_size, &o->s3_connections,
			  &o->s3_timeout, &o->fetch };

	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
		free(*strs[i]);
		*strs[i] = NULL;
	}
}

static int number(const char *name, const char *text, uint64_t dflt, uint64_t *out,
		  char *why, size_t why_len)
{
	if (!text) {
		*out = dflt;
		return 0;
	}
	if (parse_u64(text, out)) {
		char problem[80];

		return err_set(why, why_len, -EINVAL, "%s=%s is not a non-negative whole "
				"number: %s", name, text,
				parse_u64_problem(text, problem, sizeof(problem)));
	}
	return 0;
}

/* world_size, global_batch and micro_batch of o into *l, checked. 0, or -EINVAL with
 * one line in why. */
static int layout_from(const struct mount_options *o, struct layout *l, char *why,
		       size_t why_len)
{
	uint64_t w, b, m;
	int rc;

	if ((rc = number("world_size", o->world_size, 1, &w, why, why_len)))
		return rc;
	if (w > (UINT64_C(1) << 20))
		return err_set(why, why_len, -EINVAL,
				"world_size=%" PRIu64 " is above the supported 2^20 ranks", w);
	/* by default one sample per rank and one micro-batch per step; what is wrong with the
	 * values given is layout_make()'s to say */
	if ((rc = number("global_batch", o->global_batch, w, &b, why, why_len)))
		return rc;
	if ((rc = number("micro_batch", o->micro_batch, layout_default_micro_batch(w, b), &m,
			 why, why_len)))
		return rc;
	return layout_make(&(struct layout_values){ w, b, m, 0, 0 }, l, why, why_len);
}

/* prefetch, readahead, workers and max_threads of o into c, with defaults from the CPUs online. 0,
 * or -EINVAL with one line in why. */
static int threads_from(const struct mount_options *o, struct mount_config *c, char *why,
			size_t why_len)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t v;
	int rc;

	if ((rc = number("prefetch", o->prefetch, 2, &v, why, why_len)))
		return rc;
	if (v > SERVER_MAX_PREFETCH)
		return err_set(why, why_len, -EINVAL,
				"prefetch=%" PRIu64 " is above the limit of %u", v,
				SERVER_MAX_PREFETCH);
	c->prefetch = (unsigned)v;
	c->readahead = MOUNT_READAHEAD_DEFAULT;
	if (o->readahead && parse_size(o->readahead, &c->readahead))
		return err_set(why, why_len, -EINVAL, "readahead=%s is not a size in bytes "
				"(e.g. 64M, 1G, 0)", o->readahead);
	if ((rc = number("workers", o->workers, cpus < 1 ? 1 : cpus > 8 ? 8 : (uint64_t)cpus,
			 &v, why, why_len)))
		return rc;
	if (v < 1 || v > SERVER_MAX_WORKERS)
		return err_set(why, why_len, -EINVAL,
				"workers=%" PRIu64 " must be between 1 and %u", v,
				SERVER_MAX_WORKERS);
	c->workers = (unsigned)v;
	/* One request thread per CPU (at least 2): readers that keep every CPU busy get the
	 * shortest tail when the copies of replies do not share the CPUs (tests/bench/
	 * RESULTS.md, "B4: request threads"; docs/mounting.md gives the figures). Requests that
	 * may block (claims, step/ builds) are answered on offload threads (core/util/jobq.h),
	 * so they do not hold up the others. */
	if ((rc = number("max_threads", o->max_threads,
			 cpus < 2 ? 2 : cpus > 256 ? 256 : (uint64_t)cpus, &v, why, why_len)))
		return rc;
	if (v < 1 || v > 256)
		return err_set(why, why_len, -EINVAL,
				"max_threads=%" PRIu64 " must be between 1 and 256", v);
	c->max_threads = (unsigned)v;
	return 0;
}

/* cache=, cache_size=, s3_connections=, s3_timeout= of o into r, and made the process's
 * defaults for the datasets it opens in object storage (dataset_remote_defaults). */
static int remote_from(const struct mount_options *o, struct dataset_remote_opts *r,
		       char *why, size_t why_len)
{
	uint64_t v;
	char *end;
	int rc;

	memset(r, 0, sizeof(*r));
	if (o->cache && !*o->cache)
		return err_set(why, why_len, -EINVAL, "cache= needs a folder");
	r->cache_dir = o->cache;
	if (o->cache_size && parse_size(o->cache_size, &r->cache_size))
		return err_set(why, why_len, -EINVAL, "cache_size=%s is not a size in bytes (e.g. "
			       "100G)", o->cache_size);
	if ((rc = number("s3_connections", o->s3_connections, 64, &v, why, why_len)))
		return rc;
	if (v < 1 || v > 1024)
		return err_set(why, why_len, -EINVAL, "s3_connections=%" PRIu64 " must be between "
			       "1 and 1024", v);
	r->connections = (unsigned)v;
	if (o->s3_timeout) {
		r->timeout_s = strtod(o->s3_timeout, &end);
		if (*end || end == o->s3_timeout || !(r->timeout_s > 0 && r->timeout_s <= 86400))
			return err_set(why, why_len, -EINVAL, "s3_timeout=%s is not a number of "
				       "seconds in (0, 86400]", o->s3_timeout);
	}
	if (o->fetch && strcmp(o->fetch, "exact") && strcmp(o->fetch, "all"))
		return err_set(why, why_len, -EINVAL, "fetch=%s: expected exact or all", o->fetch);
	r->fill = o->fetch && !strcmp(o->fetch, "all");
	dataset_remote_defaults(r);
	return 0;
}

int mount_config_from(const struct mount_options *o, struct mount_config *c,
		      char *why, size_t why_len)
{
	uint64_t v;
	int rc;

	memset(c, 0, sizeof(*c));
	if ((rc = layout_from(o, &c->layout, why, why_len)))
		return rc;
	if ((rc = number("seed", o->seed, 0, &c->seed, why, why_len)))
		return rc;
	if (o->shuffle && order_shuffle_parse(o->shuffle, &c->shuffle))
		return err_set(why, why_len, -EINVAL, "shuffle=%s: expected global or none",
				o->shuffle);
	if ((rc = number("epochs", o->epochs, 0, &c->epochs, why, why_len)))
		return rc;
	if (o->format) {
		if (encode_format_parse(o->format, &c->format))
			return err_set(why, why_len, -EINVAL, "format=%s: expected lines, tar, "
					"npy or bin", o->format);
		c->format_given = 1;
	}
	if (o->resume) {
		if (journal_resume_parse(o->resume, &c->resume))
			return err_set(why, why_len, -EINVAL, "resume=%s: expected auto, "
					"fresh, samples:G, samples:G@S or step:S", o->resume);
	} else {
		c->resume.rule = RESUME_AUTO;
	}
	if ((rc = threads_from(o, c, why, why_len)))
		return rc;
	if (!o->sync || !strcmp(o->sync, "normal"))
		c->sync = JOURNAL_SYNC_NORMAL;
	else if (!strcmp(o->sync, "full"))
		c->sync = JOURNAL_SYNC_FULL;
	else
		return err_set(why, why_len, -EINVAL, "sync=%s: expected normal or full", o->sync);
	if (o->journal && !*o->journal)
		return err_set(why, why_len, -EINVAL, "journal= needs a path");
	if (o->weights && !*o->weights)
		return err_set(why, why_len, -EINVAL, "weights= needs a list such as 0.7+0.3 "
				"or web:0.7+code:0.3");
	if (o->validation && !*o->validation)
		return err_set(why, why_len, -EINVAL, "validation= needs a fraction such as "
				"0.01 or 1/100");
	c->weights = o->weights;
	c->validation = o->validation;
	if ((rc = remote_from(o, &c->remote, why, why_len)))
		return rc;
	c->watch_fd = -1;
	if (o->watch_fd) {
		if ((rc = number("watch_fd", o->watch_fd, 0, &v, why, why_len)))
			return rc;
		if (o->batch_mode)
			return err_set(why, why_len, -EINVAL, "watch_fd= is a mount's option; "
					"zephon batch serves no mount");
		if (v > INT_MAX || fcntl((int)v, F_GETFD) < 0)
			return err_set(why, why_len, -EINVAL,
					"watch_fd=%" PRIu64 " is not an open file descriptor "
					"of this process (give the read end of a pipe the "
					"launcher passes on)",
					v);
		c->watch_fd = (int)v;
	}
	if (o->journal && !(c->journal = strdup(o->journal)))
		return -ENOMEM;
	if (o->ranks && !*o->ranks) {
		free(c->journal);
		c->journal = NULL;
		return err_set(why, why_len, -EINVAL, "ranks= needs a list such as 0-3 or 8,9 "
				"(leave it out to serve every rank)");
	}
	rc = rankset_parse(o->ranks, layout_world_size(&c->layout), &c->ranks, why, why_len);
	if (rc) {
		free(c->journal);
		c->journal = NULL;
	}
	return rc;
}

/* Bytes a mount may hold in batches: each served rank keeps up to prefetch decoded
 * micro-batches, one being read and one being decoded (docs/design.md §9: memory is
 * O(served ranks x prefetch x batch bytes)). A micro-batch is estimated from the mean
 * sample (raw_bytes / samples) plus its id and view (24 bytes), and a tar member's
 * header and padding (1 KiB); a batch served as views holds no sample bytes at all. */
static double batch_memory(const struct mount_config *c, const struct dataset_info *info)
{
	double per_sample = 24;

	if (!encode_views_possible(info, c->format))
		per_sample += info->samples ? (double)info->raw_bytes / (double)info->samples : 0;
	if (c->format == FORMAT_TAR)
		per_sample += 1024;
	return (double)c->ranks.count * (c->prefetch + 2) *
	       (double)layout_micros_samples(&c->layout, 1) *
	       per_sample;
}

/* The journal of a dataset in object storage, by default: on the node, never in the
 * bucket: CACHE/journals/BUCKET/PREFIX/journal.sqlite, its folders made. */
static int remote_journal(struct mount_config *c, const struct dataset *ds, char *why,
			  size_t why_len)
{
	struct dataset_fetch_stats st;
	const char *url = dataset_dir(ds) + strlen("s3://");

	if (dataset_fetch_stats(ds, &st) ||
	    asprintf(&c->journal, "%s/journals/%s/journal.sqlite", st.cache_dir, url) < 0) {
		c->journal = NULL;
		return -ENOMEM;
	}
	for (char *p = c->journal + strlen(st.cache_dir) + 1; (p = strchr(p, '/')); p++) {
		*p = 0;
		if (mkdir(c->journal, 0700) && errno != EEXIST) {
			int rc = -errno;

			snprintf(why, why_len, "cannot make the journal's folder %s: %s", c->journal,
				 strerror(errno));
			*p = '/';
			return rc;
		}
		*p = '/';
	}
	return 0;
}

int mount_config_check_dataset(struct mount_config *c, const struct dataset *ds,
			       char *why, size_t why_len)
{
	const struct dataset_info *info = dataset_info(ds);
	double need, mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
	int rc;

	if (!c->format_given)
		c->format = encode_format_default(info);
	rc = encode_format_check(info, c->format, why, why_len);
	if (rc)
		return rc;
	/* refused here, not by an ENOMEM at every open of next */
	need = batch_memory(c, info);
	if (need > mem)
		return err_set(why, why_len, -EINVAL,
				"micro-batches of %" PRIu64 " samples need about %.1f GB for "
				"the %zu served rank%s (prefetch=%u, plus one being read and "
				"one being decoded per rank), more than this machine's %.1f GB "
				"of memory: lower global_batch or micro_batch, or prefetch, or "
				"serve fewer ranks per mount (ranks=)",
				layout_micro_batch(&c->layout), need / 1e9, c->ranks.count,
				c->ranks.count == 1 ? "" : "s", c->prefetch, mem / 1e9);
	if (!c->journal && !strncmp(dataset_dir(ds), "s3://", 5))
		return remote_journal(c, ds, why, why_len);
	if (!c->journal) {
		size_t n = strlen(dataset_dir(ds)) + sizeof("/journal.sqlite");

		c->journal = malloc(n);
		if (!c->journal)
			return -ENOMEM;
		snprintf(c->journal, n, "%s/journal.sqlite", dataset_dir(ds));
	}
	return 0;
}

/* A mixture spec's default journal: mix.json -> mix.journal.sqlite beside it. 0 or
 * -ENOMEM. */
int mount_config_mixture_journal(struct mount_config *cfg, const char *spec)
{
	size_t n = strlen(spec);

	if (n > 5 && !strcmp(spec + n - 5, ".json"))
		n -= 5;
	cfg->journal = malloc(n + sizeof(".journal.sqlite"));
	if (!cfg->journal)
		return -ENOMEM;
	memcpy(cfg->journal, spec, n);
	strcpy(cfg->journal + n, ".journal.sqlite");
	return 0;
}

void mount_config_release(struct mount_config *c)
{
	rankset_release(&c->ranks);
	free(c->journal);
	c->journal = NULL;
}

int mount_fault_arm(char *why, size_t len)
{
	const char *spec = getenv("ZEPHON_FAULT");
	size_t n;

	if (!fault_init(spec)) {
		if (spec && *spec)
			zmount_log(LOG_WARNING, "ZEPHON_FAULT=%s: this mount stops itself there (a "
				   "crash test)", spec);
		return 0;
	}
	n = (size_t)snprintf(why, len, "ZEPHON_FAULT=%s: not a fault point; give one of", spec);
	for (int p = 0; fault_name(p) && n < len; p++)
		n += (size_t)snprintf(why + n, len - n, "%s %s", p ? "," : "", fault_name(p));
	if (n < len)
		snprintf(why + n, len - n, ", optionally followed by :N (stop at its N-th passage)");
	return -EINVAL;
}
