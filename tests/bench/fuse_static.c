/*
 * fuse_static: the FUSE transport's ceiling for benchmark B1 (tests/bench/run).
 *
 * A minimal low-level libfuse 3 filesystem with `files` regular files /0, /1, ... that
 * all serve one static in-memory buffer of `size` bytes. With `pool=BYTES` the buffer
 * is `pool` bytes instead and each open serves the next `size`-byte window of it (round
 * robin over pool / size windows): the same transport, with the bytes spread over as
 * much memory as a dataset's (Zephon serves each batch from different pages of the page
 * cache; a 1 MiB buffer served again and again stays in the CPU caches and TLB).
 * `source=FILE` maps FILE (read-only, shared) as the buffer instead: the windows are
 * then the very page-cache pages a dataset's reads come from. It uses the session settings
 * Zephon uses for /rank/<r>/next, so that the only difference between this and Zephon
 * is Zephon's own work (claiming, journaling, decoding):
 *   - open: direct_io (no page cache; each read is a FUSE READ request), seekable,
 *     keep_cache off;
 *   - attr_timeout 0 and entry_timeout 0 by default (Zephon's `next` must answer GETATTR
 *     afresh after each claim), so every open costs a LOOKUP/GETATTR round trip like it;
 *   - st_blksize 1 MiB, so tools ask for big reads;
 *   - a multi-threaded session (fuse_session_loop_mt), optionally with clone_fd (one
 *     /dev/fuse fd per worker thread: no thundering herd on a shared fd);
 *   - the largest request size the kernel grants: libfuse 3.14 negotiates max_pages from
 *     max_write (its buffer is FUSE_MAX_MAX_PAGES = 256 pages + header), so a direct-io
 *     read() of 1 MiB arrives as one 1 MiB READ (fs.fuse.max_pages_limit is 256 here);
 *   - replies with fuse_reply_buf (one writev of the caller's buffer: the kernel copies
 *     straight into the reader's pinned pages); `-o splice` replies with fuse_reply_data
 *     and FUSE_CAP_SPLICE_WRITE instead, to measure whether vmsplice pays off.
 *
 * usage: fuse_static MOUNTPOINT [-f] [-s] [-o size=BYTES,files=K,pool=BYTES,source=FILE,
 *        attr_timeout=S,splice,clone_fd,max_threads=N,max_idle_threads=N]
 * A benchmark tool, not part of Zephon; it prints errors to stderr and exits 1.
 */
#define FUSE_USE_VERSION 314

#include <errno.h>
#include <limits.h>
#include <fuse_lowlevel.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROOT_INO FUSE_ROOT_ID
#define FILE_INO0 2 /* file k has inode FILE_INO0 + k */
#define BLKSIZE (1 << 20)

struct static_opts {
	unsigned long long size;
	unsigned long long pool; /* bytes of the buffer; 0: size */
	unsigned files;
	char *source;            /* a file to map as the buffer, or NULL */
	double attr_timeout;
	int splice;
};

struct static_fs {
	struct static_opts o;
	char *data;           /* o.pool bytes */
	unsigned long long next_window; /* windows handed out so far (atomic) */
};

static struct static_fs fs;

static const struct fuse_opt static_opt_spec[] = {
	{ "size=%llu", offsetof(struct static_opts, size), 0 },
	{ "files=%u", offsetof(struct static_opts, files), 0 },
	{ "pool=%llu", offsetof(struct static_opts, pool), 0 },
	{ "source=%s", offsetof(struct static_opts, source), 0 },
	{ "attr_timeout=%lf", offsetof(struct static_opts, attr_timeout), 0 },
	{ "splice", offsetof(struct static_opts, splice), 1 },
	FUSE_OPT_END
};

static int ino_is_file(fuse_ino_t ino)
{
	return ino >= FILE_INO0 && ino < FILE_INO0 + fs.o.files;
}

static void fill_stat(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_blksize = BLKSIZE;
	if (ino == ROOT_INO) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)fs.o.size;
		st->st_blocks = (blkcnt_t)((fs.o.size + 511) / 512);
	}
}

static void static_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	if (fs.o.splice && (conn->capable & FUSE_CAP_SPLICE_WRITE))
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	else
		conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
}

/* Replies: entry, or ENOENT. */
static void static_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	char *end;
	unsigned long k;

	if (parent != ROOT_INO)
		goto noent;
	k = strtoul(name, &end, 10);
	if (*name < '0' || *name > '9' || *end || k >= fs.o.files)
		goto noent;
	memset(&e, 0, sizeof(e));
	e.ino = FILE_INO0 + k;
	e.attr_timeout = fs.o.attr_timeout;
	e.entry_timeout = fs.o.attr_timeout;
	fill_stat(e.ino, &e.attr);
	fuse_reply_entry(req, &e);
	return;
noent:
	fuse_reply_err(req, ENOENT);
}

/* Replies: attr, or ENOENT. */
static void static_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	if (ino != ROOT_INO && !ino_is_file(ino)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill_stat(ino, &st);
	fuse_reply_attr(req, &st, fs.o.attr_timeout);
}

/* Replies: open, or EISDIR / EACCES / ENOENT. */
static void static_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == ROOT_INO) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (!ino_is_file(ino)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EACCES);
		return;
	}
	fi->direct_io = 1;
	fi->keep_cache = 0;
	/* fh: where this open's window starts in the buffer */
	fi->fh = (__atomic_fetch_add(&fs.next_window, 1, __ATOMIC_RELAXED) %
		  (fs.o.pool / fs.o.size)) * fs.o.size;
	fuse_reply_open(req, fi);
}

/* Replies: buf / data (possibly empty at EOF). */
static void static_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	const char *window = fs.data + fi->fh;
	size_t n = 0;

	(void)ino;
	if (off >= 0 && (unsigned long long)off < fs.o.size) {
		n = fs.o.size - (unsigned long long)off;
		if (n > size)
			n = size;
	}
	if (fs.o.splice) {
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(n);

		bv.buf[0].mem = (char *)window + (n ? off : 0);
		fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
	} else {
		fuse_reply_buf(req, window + (n ? off : 0), n);
	}
}

/* Replies: buf with the entries of the root, or ENOTDIR. */
static void static_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	char buf[4096], name[16];
	size_t used = 0, len;
	struct stat st;

	(void)fi;
	if (ino != ROOT_INO) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (size > sizeof(buf))
		size = sizeof(buf);
	for (off_t i = off; i < (off_t)fs.o.files; i++) {
		snprintf(name, sizeof(name), "%u", (unsigned)i);
		fill_stat(FILE_INO0 + (fuse_ino_t)i, &st);
		len = fuse_add_direntry(req, buf + used, size - used, name, &st, i + 1);
		if (len > size - used)
			break;
		used += len;
	}
	fuse_reply_buf(req, buf, used);
}

static const struct fuse_lowlevel_ops static_ops = {
	.init = static_init,
	.lookup = static_lookup,
	.getattr = static_getattr,
	.open = static_open,
	.read = static_read,
	.readdir = static_readdir,
};

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts opts;
	struct fuse_loop_config *cfg = NULL;
	struct fuse_session *se = NULL;
	int ret = 1;

	fs.o.size = 1 << 20;
	fs.o.files = 4;
	if (fuse_opt_parse(&args, &fs.o, static_opt_spec, NULL) == -1)
		return 1;
	if (fuse_parse_cmdline(&args, &opts) != 0)
		return 1;
	if (opts.show_help || !opts.mountpoint) {
		printf("usage: %s MOUNTPOINT [-f] [-s] [-o size=BYTES,files=K,pool=BYTES,"
		       "source=FILE,attr_timeout=S,splice,clone_fd,max_threads=N]\n", argv[0]);
		fuse_cmdline_help();
		ret = opts.show_help ? 0 : 2;
		goto err_free_opts;
	}
	if (fs.o.files == 0 || fs.o.size == 0) {
		fprintf(stderr, "fuse_static: size and files must be at least 1\n");
		goto err_free_opts;
	}
	if (fs.o.source) {
		int fd = open(fs.o.source, O_RDONLY);
		struct stat st;

		if (fd < 0 || fstat(fd, &st) || st.st_size < (off_t)fs.o.size) {
			fprintf(stderr, "fuse_static: %s: cannot open, or smaller than size\n",
				fs.o.source);
			goto err_free_opts;
		}
		fs.o.pool = (unsigned long long)st.st_size;
		fs.data = mmap(NULL, fs.o.pool, PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (fs.data == MAP_FAILED) {
			fprintf(stderr, "fuse_static: cannot map %s\n", fs.o.source);
			goto err_free_opts;
		}
		/* read every page now (into the page cache and the mapping), like a
		 * dataset read for a while */
		for (unsigned long long i = 0, sum = 0; i < fs.o.pool; i += 4096)
			__atomic_store_n(&sum, sum + (unsigned char)fs.data[i], __ATOMIC_RELAXED);
		goto loaded;
	}
	if (!fs.o.pool)
		fs.o.pool = fs.o.size;
	if (fs.o.pool < fs.o.size) {
		fprintf(stderr, "fuse_static: pool must be at least size\n");
		goto err_free_opts;
	}
	fs.data = malloc(fs.o.pool);
	if (!fs.data) {
		fprintf(stderr, "fuse_static: cannot allocate %llu bytes\n", fs.o.pool);
		goto err_free_opts;
	}
	/* Touch every page now, so the first reads do not pay page faults. */
	for (unsigned long long i = 0; i < fs.o.pool; i++)
		fs.data[i] = (char)('a' + i % 26);
loaded:

	se = fuse_session_new(&args, &static_ops, sizeof(static_ops), NULL);
	if (!se)
		goto err_free_data;
	if (fuse_set_signal_handlers(se) != 0)
		goto err_destroy;
	if (fuse_session_mount(se, opts.mountpoint) != 0)
		goto err_signals;
	if (fuse_daemonize(opts.foreground) != 0)
		goto err_unmount;
	if (opts.singlethread) {
		ret = fuse_session_loop(se);
	} else {
		cfg = fuse_loop_cfg_create();
		if (!cfg)
			goto err_unmount;
		fuse_loop_cfg_set_clone_fd(cfg, (unsigned)opts.clone_fd);
		if (opts.max_idle_threads != UINT_MAX) /* UINT_MAX: not given */
			fuse_loop_cfg_set_idle_threads(cfg, opts.max_idle_threads);
		fuse_loop_cfg_set_max_threads(cfg, opts.max_threads);
		ret = fuse_session_loop_mt(se, cfg);
		fuse_loop_cfg_destroy(cfg);
	}
	ret = ret ? 1 : 0;
err_unmount:
	fuse_session_unmount(se);
err_signals:
	fuse_remove_signal_handlers(se);
err_destroy:
	fuse_session_destroy(se);
err_free_data:
	if (fs.o.source)
		munmap(fs.data, fs.o.pool);
	else
		free(fs.data);
err_free_opts:
	free(opts.mountpoint);
	fuse_opt_free_args(&args);
	return ret;
}
