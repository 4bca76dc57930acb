/* pack_plan.c: the checks of `zephon pack` before any work (pack_int.h). */
#include "pack_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>

#include <zstd.h>

#include "rowplan.h"

static enum dataset_content content_of(enum source_format f)
{
	switch (f) {
	case SOURCE_JSONL:
	case SOURCE_LINES:
		return CONTENT_TEXT;
	case SOURCE_DIR:
	case SOURCE_TAR:
		return CONTENT_FILES;
	default:
		return CONTENT_TOKENS;
	}
}

/* A dataset written inside a directory input would be read back into itself. */
static int out_outside_inputs(struct packer *p, const enum source_format *formats)
{
	char *copy = strdup(p->o->out), *parent;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	parent = realpath(dirname(copy), NULL);
	for (size_t i = 0; parent && !rc && i < p->o->ninputs; i++) {
		char *in;
		size_t n;

		if (formats[i] != SOURCE_DIR || !(in = realpath(p->o->inputs[i], NULL)))
			continue;
		n = strlen(in);
		if (!strncmp(parent, in, n) && (parent[n] == '/' || parent[n] == 0 || n == 1))
			rc = pack_fail(p, -EINVAL, "%s: the output lies inside the input directory %s; "
				  "choose an output outside it", p->o->out, p->o->inputs[i]);
		free(in);
	}
	free(parent);
	free(copy);
	return rc;
}

/* Warn that input i names the same file as input j before it. */
static void notice_repeat(struct packer *p, size_t i, size_t j)
{
	const char *a = p->o->inputs[i], *b = p->o->inputs[j];
	char msg[1024];

	if (!p->o->notice)
		return;
	if (!strcmp(a, b))
		snprintf(msg, sizeof(msg), "%s: given twice; packing it again (drop one to pack "
			 "it once)", a);
	else
		snprintf(msg, sizeof(msg), "%s: the same file as %s, given before it; packing it "
			 "again (drop one to pack it once)", a, b);
	p->o->notice(p->o->ctx, msg);
}

/*
 * Decide which inputs become sources (p->sources). A Megatron pair is one dataset stored
 * in two files, and a glob over its folder names both: every further name of a pair (its
 * .idx, .bin or PREFIX) is folded into the pair's latest source that lacks that name,
 * so the pair is packed once. A file named again (by any spelling: compared by device
 * and inode) is packed again, since repeating an input is how one upsamples it, but with
 * a warning, as it is as often a slip. An input that cannot be stat()ed is kept as it
 * is: opening it reports the error with its name.
 */
static int resolve_inputs(struct packer *p, const enum source_format *formats)
{
	const struct pack_opts *o = p->o;
	struct source_id *ids = calloc(o->ninputs, sizeof(*ids));
	unsigned *roles = calloc(o->ninputs, sizeof(*roles)); /* names folded into source k */
	int *have = calloc(o->ninputs, sizeof(*have));
	int rc = 0;

	p->sources = calloc(o->ninputs, sizeof(*p->sources));
	if (!ids || !roles || !have || !p->sources) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < o->ninputs; i++) {
		size_t k = p->nsources;

		have[i] = source_identify(o->inputs[i], formats[i], &ids[i]) == 0;
		if (have[i]) {
			/* k: the first source of the same pair that lacks this name, so that
			 * the order of the names does not matter (.idx .idx .bin .bin is
			 * .idx .bin .idx .bin); nsources for none */
			for (size_t m = 0; ids[i].role != SOURCE_ROLE_FILE && m < p->nsources; m++) {
				size_t j = p->sources[m];

				if (have[j] && source_id_same(&ids[i], &ids[j]) &&
				    !(roles[m] & ids[i].role)) {
					k = m;
					break;
				}
			}
			if (k < p->nsources) {
				roles[k] |= ids[i].role;
				continue;
			}
			/* a new source: warn when it repeats one already there */
			for (size_t j = 0; j < i; j++) {
				if (have[j] && source_id_same(&ids[i], &ids[j]) &&
				    ids[i].role == ids[j].role) {
					notice_repeat(p, i, j);
					break;
				}
			}
		}
		roles[p->nsources] = have[i] ? ids[i].role : 0;
		p->sources[p->nsources++] = i;
	}
out:
	free(ids);
	free(roles);
	free(have);
	return rc;
}

/* The options of a dataset of rows (pack.h, o->rows). 0, or -EINVAL with the reason. */
static int rows_options(struct packer *p)
{
	const struct pack_opts *o = p->o;

	if (o->tokdocs_fd < 0)
		return pack_fail(p, -EINVAL, "rows of whole documents are made of --tokenizer "
				 "documents; pass --tokenizer");
	if (o->overlap)
		return pack_fail(p, -EINVAL, "--overlap cuts windows; rows of whole documents take "
				 "none (drop --overlap)");
	if (o->seq_len > ROWPLAN_CAPACITY_MAX)
		return pack_fail(p, -EINVAL, "--seq-len %" PRIu64 ": rows of whole documents hold "
				 "at most %" PRIu32 " positions", o->seq_len, ROWPLAN_CAPACITY_MAX);
	if (o->max_context > o->seq_len)
		return pack_fail(p, -EINVAL, "--max-context-length %" PRIu64 " is longer than the "
				 "rows (--seq-len %" PRIu64 "): a document must fit a row",
				 o->max_context, o->seq_len);
	if (o->have_dtype && o->dtype != DTYPE_INT32)
		return pack_fail(p, -EINVAL, "--dtype %s: rows are int32 (inputs, labels with "
				 "-100, positions); drop --dtype", dtype_name(o->dtype));
	return 0;
}

/* Check the inputs and options before any work. */
int pack_plan(struct packer *p, enum source_format *formats)
{
	const struct pack_opts *o = p->o;
	char why[600];
	int rc;

	if (o->tokdocs_fd >= 0) {
		/* the front end read, checked and tokenized the inputs */
		p->content = CONTENT_TOKENS;
		p->kind = DATASET_TOKENS;
		goto options;
	}
	if (o->ninputs == 0)
		return pack_fail(p, -EINVAL, "no inputs; give one or more files or directories");
	p->all_jsonl = 1;
	for (size_t i = 0; i < o->ninputs; i++) {
		enum dataset_content c;
		rc = source_detect(o->inputs[i], o->format, &formats[i], why, sizeof(why));
		if (rc)
			return pack_fail(p, rc, "%s", why);
		c = content_of(formats[i]);
		if (formats[i] != SOURCE_JSONL)
			p->all_jsonl = 0;
		if (i == 0) {
			p->content = c;
		} else if (c != p->content) {
			return pack_fail(p, -EINVAL, "%s: holds %s but %s holds %s; one dataset has one "
				    "kind of sample, pack them separately", o->inputs[i],
				    dataset_content_name(c), o->inputs[0],
				    dataset_content_name(p->content));
		}
	}
	p->kind = p->content == CONTENT_TOKENS ? DATASET_TOKENS : DATASET_RECORDS;
options:
	if (p->kind == DATASET_TOKENS && o->seq_len == 0)
		return pack_fail(p, -EINVAL, "token inputs need a window length; pass --seq-len L");
	if (p->kind != DATASET_TOKENS && o->seq_len)
		return pack_fail(p, -EINVAL, "--seq-len applies to token inputs only (%s holds %s)",
			    o->inputs[0], dataset_content_name(p->content));
	if (p->kind != DATASET_TOKENS && o->overlap)
		return pack_fail(p, -EINVAL, "--overlap applies to token inputs only (%s holds %s)",
			    o->inputs[0], dataset_content_name(p->content));
	if (o->overlap > 1)
		return pack_fail(p, -EINVAL, "--overlap %" PRIu64 ": give 0 or 1", o->overlap);
	if (p->kind != DATASET_TOKENS && o->have_eod_token)
		return pack_fail(p, -EINVAL, "--eod-token applies to token inputs only (%s holds %s)",
				 o->inputs[0], dataset_content_name(p->content));
	if (p->kind == DATASET_TOKENS && o->seq_len > SAMPLE_MAX_BYTES / 4)
		return pack_fail(p, -EINVAL, "--seq-len %" PRIu64 " is too large", o->seq_len);
	if (o->rows && (rc = rows_options(p)))
		return rc;
	if (o->compress && (o->level < ZSTD_minCLevel() || o->level > ZSTD_maxCLevel()))
		return pack_fail(p, -EINVAL, "--level %d is outside zstd's %d..%d", o->level,
			    ZSTD_minCLevel(), ZSTD_maxCLevel());
	if (o->shard_bytes == 0)
		return pack_fail(p, -EINVAL, "--shard-size must be positive");
	if (o->have_dtype) {
		p->have_dtype = 1;
		p->dtype = o->dtype;
		p->dtype_from = "--dtype";
		p->itemsize = dtype_size(o->dtype);
	}
	if (o->tokdocs_fd >= 0)
		return 0;
	if (out_outside_inputs(p, formats))
		return -EINVAL;
	if (resolve_inputs(p, formats))
		return -ENOMEM;
	for (size_t k = 0; k < p->nsources; k++) {
		size_t i = p->sources[k];
		struct stat sb;

		if (formats[i] != SOURCE_DIR && formats[i] != SOURCE_MEGATRON &&
		    stat(o->inputs[i], &sb) == 0 && S_ISREG(sb.st_mode))
			p->input_total += (uint64_t)sb.st_size;
	}
	return 0;
}
