/* source_detect.c: which pack input format a path is (by name, by --format, by what
 * exists beside it) and which input it is (device and inode), so that the formats' own
 * files depend on source.c alone and this registry of them on each. */
#include "source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static const struct {
	const char *name;
	enum source_format f;
} format_names[] = {
	{ "auto", SOURCE_AUTO }, { "jsonl", SOURCE_JSONL }, { "lines", SOURCE_LINES },
	{ "files", SOURCE_FILES }, { "dir", SOURCE_DIR }, { "tar", SOURCE_TAR },
	{ "tokens", SOURCE_TOKENS }, { "bin", SOURCE_BIN }, { "npy", SOURCE_NPY },
	{ "megatron", SOURCE_MEGATRON },
};

int source_format_parse(const char *s, enum source_format *out)
{
	for (size_t i = 0; i < sizeof(format_names) / sizeof(format_names[0]); i++) {
		if (!strcmp(s, format_names[i].name)) {
			*out = format_names[i].f;
			return 0;
		}
	}
	return -EINVAL;
}

const struct source_ops *source_ops_for(enum source_format f)
{
	switch (f) {
	case SOURCE_JSONL: return &source_jsonl_ops;
	case SOURCE_LINES: return &source_lines_ops;
	case SOURCE_DIR: return &source_dir_ops;
	case SOURCE_TAR: return &source_tar_ops;
	case SOURCE_BIN: return &source_bin_ops;
	case SOURCE_NPY: return &source_npy_ops;
	case SOURCE_MEGATRON: return &source_megatron_ops;
	default: return NULL;
	}
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcasecmp(s + n - m, suffix);
}

static int is_file(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Does path name a Megatron pair: its .idx (and with both, its .bin too) exists beside
 * it, spelled as megatron_pair_paths() spells them? */
static int megatron_pair_exists(const char *path, int both)
{
	char *idx, *bin;
	int yes;

	if (megatron_pair_paths(path, &idx, &bin))
		return 0;
	yes = is_file(idx) && (!both || is_file(bin));
	free(idx);
	free(bin);
	return yes;
}

/* The format a name says, or SOURCE_AUTO when it says nothing we know. */
static enum source_format by_name(const char *path)
{
	static const char *const tar_ext[] = { ".tar", ".tgz", ".tar.gz", ".tar.xz", ".txz",
		".tar.bz2", ".tbz2", ".tar.zst", ".tzst", ".tar.lzma", ".tlz", ".tar.lz4" };

	static const char *const jsonl_ext[] = { ".jsonl", ".ndjson", ".json.zst", ".json.gz",
		".json.xz", ".json.bz2", ".json.lzma", ".json.lz4" };
	static const char *const zext[] = { "", ".zst", ".gz", ".xz", ".bz2", ".lzma", ".lz4" };

	for (size_t i = 0; i < sizeof(jsonl_ext) / sizeof(jsonl_ext[0]); i++)
		for (size_t z = 0; z < (i < 2 ? sizeof(zext) / sizeof(zext[0]) : 1); z++) {
			char ext[32];

			snprintf(ext, sizeof(ext), "%s%s", jsonl_ext[i], zext[z]);
			if (ends_with(path, ext))
				return SOURCE_JSONL;
		}
	for (size_t z = 0; z < sizeof(zext) / sizeof(zext[0]); z++) {
		char ext[32];

		snprintf(ext, sizeof(ext), ".txt%s", zext[z]);
		if (ends_with(path, ext))
			return SOURCE_LINES;
	}
	for (size_t i = 0; i < sizeof(tar_ext) / sizeof(tar_ext[0]); i++)
		if (ends_with(path, tar_ext[i]))
			return SOURCE_TAR;
	if (ends_with(path, ".npy"))
		return SOURCE_NPY;
	if (ends_with(path, ".idx"))
		return SOURCE_MEGATRON;
	if (ends_with(path, ".bin"))
		return megatron_pair_exists(path, 0) ? SOURCE_MEGATRON : SOURCE_BIN;
	if (megatron_pair_exists(path, 1))
		return SOURCE_MEGATRON;
	return SOURCE_AUTO;
}

int source_detect(const char *path, enum source_format forced, enum source_format *out,
		  char *why, size_t why_len)
{
	struct stat sb;
	enum source_format f;
	int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);

	f = is_dir ? SOURCE_DIR : by_name(path);
	switch (forced) {
	case SOURCE_AUTO:
		if (f == SOURCE_AUTO) {
			snprintf(why, why_len, "%s: cannot tell the input format from the name; "
				 "pass --format jsonl|lines|files|tokens", path);
			return -EINVAL;
		}
		break;
	case SOURCE_JSONL:
	case SOURCE_LINES:
		if (is_dir) {
			snprintf(why, why_len, "%s: is a directory, but --format %s reads files; "
				 "use --format files", path, forced == SOURCE_JSONL ? "jsonl" : "lines");
			return -EINVAL;
		}
		f = forced;
		break;
	case SOURCE_FILES:
		if (f != SOURCE_DIR)
			f = SOURCE_TAR;
		break;
	case SOURCE_TOKENS:
		if (f != SOURCE_BIN && f != SOURCE_NPY && f != SOURCE_MEGATRON) {
			if (is_dir) {
				snprintf(why, why_len, "%s: is a directory, not a token file "
					 "(.bin, .npy, Megatron .idx/.bin)", path);
				return -EINVAL;
			}
			f = SOURCE_BIN;
		}
		break;
	default:
		f = forced;
		break;
	}
	*out = f;
	return 0;
}

int source_identify(const char *path, enum source_format f, struct source_id *out)
{
	struct stat sb, bb;

	memset(out, 0, sizeof(*out));
	if (f == SOURCE_MEGATRON) {
		size_t n = megatron_prefix_len(path), len = strlen(path);
		char *idx, *bin;
		int rc = megatron_pair_paths(path, &idx, &bin);

		if (rc)
			return rc;
		if (stat(idx, &sb) != 0 || stat(bin, &bb) != 0)
			rc = -errno;
		free(idx);
		free(bin);
		if (rc)
			return rc;
		out->dev = sb.st_dev;
		out->ino = sb.st_ino;
		out->bin_dev = bb.st_dev;
		out->bin_ino = bb.st_ino;
		out->role = n == len ? SOURCE_ROLE_PREFIX :
			    !strcasecmp(path + n, ".idx") ? SOURCE_ROLE_IDX : SOURCE_ROLE_BIN;
		return 0;
	}
	if (stat(path, &sb) != 0)
		return -errno;
	out->dev = sb.st_dev;
	out->ino = sb.st_ino;
	out->role = SOURCE_ROLE_FILE;
	return 0;
}

int source_id_same(const struct source_id *a, const struct source_id *b)
{
	/* a Megatron pair never equals a plain file, even its own .bin read raw */
	if ((a->role == SOURCE_ROLE_FILE) != (b->role == SOURCE_ROLE_FILE))
		return 0;
	return a->dev == b->dev && a->ino == b->ino && a->bin_dev == b->bin_dev &&
	       a->bin_ino == b->bin_ino;
}
