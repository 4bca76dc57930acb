/* cmd_verify.c: `zephon verify DATASET`: decode every sample, check every checksum. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cmd.h"
#include "mixspec.h"
#include "dataset.h"
#include "docindex.h"
#include "rowindex.h"
#include "catalog.h"

struct verify_ui {
	int bar;
	int drawn;
	double last;
};

static void on_bad(void *ctx, uint64_t id, const char *msg)
{
	struct verify_ui *ui = ctx;

	(void)id;
	if (ui->drawn) {
		fputs("\r\033[K", stderr);
		ui->drawn = 0;
	}
	fprintf(stderr, "zephon: verify: %s\n", msg);
}

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
	struct verify_ui *ui = ctx;
	double t = clock_mono_s();

	if (!ui->bar || t - ui->last < 0.2 || done == total)
		return;
	ui->last = t;
	fprintf(stderr, "\r\033[Kverifying %" PRIu64 "/%" PRIu64 " samples (%.0f%%)", done, total,
		100.0 * (double)done / (double)total);
	ui->drawn = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zephon verify DATASET [-q]\n"
		"\n"
		"Decode every sample of a dataset and check every zstd frame, content checksum and\n"
		"index checksum, the shard layout, and the fingerprint and byte totals in the\n"
		"catalog. Each bad sample is named with its shard file. Exit 0 when clean, 1 on\n"
		"any corruption.\n");
}

/* A dataset of rows: its row index against the catalog (rowindex_check), and every row
 * against its entries (rowindex_check_row). 0, or 1 with the problem printed. */
static int verify_rows(const struct dataset *ds, uint64_t documents)
{
	const struct dataset_info *in = dataset_info(ds);
	struct sample_reader *r = sample_reader_new(ds);
	struct rowindex_entry *e = NULL;
	struct rowindex *ri = NULL;
	struct buf s = BUF_INIT;
	uint64_t first, count, bad = UINT64_MAX;
	char err[512];
	size_t cap = 0;
	int rc = r ? rowindex_open(dataset_dir(ds), &ri, err, sizeof(err)) : -ENOMEM;

	if (!rc)
		rc = rowindex_check(ri, in->samples, in->row_len, documents, err, sizeof(err));
	for (uint64_t id = 0; !rc && id < in->samples; id++) {
		rowindex_row(ri, id, &first, &count);
		s.len = 0;
		if ((rc = ARRAY_GROW(e, cap, count)))
			break;
		for (uint64_t k = 0; k < count; k++)
			rowindex_get(ri, first + k, &e[k]);
		if (sample_reader_read(r, id, &s)) {
			rc = -EIO; /* dataset_verify() named it */
			break;
		}
		if ((rc = rowindex_check_row(s.data, in->row_len, e, count, err, sizeof(err))))
			bad = id;
	}
	if (rc && rc != -EIO && bad != UINT64_MAX)
		die_msg("verify: %s: row %" PRIu64 " (sample %" PRIu64 "): %s", dataset_dir(ds), bad,
			bad, err);
	else if (rc && rc != -EIO)
		die_msg("verify: %s: %s", dataset_dir(ds), rc == -ENOMEM ? strerror(ENOMEM) : err);
	rowindex_close(ri);
	sample_reader_free(r);
	buf_release(&s);
	free(e);
	return rc ? 1 : 0;
}

/* A dataset packed with --tokenizer: its document index against the catalog. 0, or 1
 * with the problem printed. */
static int verify_documents(const struct dataset *ds)
{
	const struct catalog *c = dataset_catalog(ds);
	uint64_t count, tokens;
	struct docindex *di;
	char err[512];
	int rc;

	/* in object storage the document index is not fetched (docs/object-storage.md) */
	if (dataset_is_remote(ds) || catalog_meta_u64(c, "documents", &count))
		return 0;
	if (catalog_meta_u64(c, "tokens", &tokens)) {
		die_msg("verify: %s: the catalog counts documents but not tokens", dataset_dir(ds));
		return 1;
	}
	rc = docindex_open(dataset_dir(ds), &di, err, sizeof(err));
	if (!rc) {
		rc = docindex_check(di, count, tokens, c->nsources, err, sizeof(err));
		docindex_close(di);
	}
	if (rc)
		die_msg("verify: %s: %s", dataset_dir(ds), err);
	if (!rc && dataset_info(ds)->row_len)
		return verify_rows(ds, count);
	return rc ? 1 : 0;
}

int cmd_verify(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct verify_ui ui = { 0 };
	struct dataset_verify_report rep;
	struct dataset *ds;
	const struct dataset_info *in;
	char err[1024];
	int quiet = 0, opt, rc;

	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'q':
			quiet = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			die_msg("verify: unknown option '%s'; see zephon verify --help",
				argv[optind - 1]);
			return 2;
		}
	}
	if (argc - optind != 1) {
		die_msg("verify: give exactly one DATASET; usage: zephon verify DATASET");
		return 2;
	}
	if (mixspec_is_spec(argv[optind])) {
		die_msg("verify: %s is a mixture spec, not a dataset directory: run zephon verify on "
			"each dataset it names (a mount's /status lists them under mixture.sources)",
			argv[optind]);
		return 2;
	}
	rc = dataset_open(argv[optind], &ds, err, sizeof(err));
	if (rc) {
		die_msg("verify: %s", err);
		if (rc == -EBADMSG || rc == -EPROTO)
			die_msg("verify: %s is corrupt; repack it from its inputs", argv[optind]);
		return 1;
	}
	in = dataset_info(ds);
	ui.bar = !quiet && isatty(STDERR_FILENO);
	rc = dataset_verify(ds, on_bad, on_progress, &ui, &rep);
	if (rc == 0 && verify_documents(ds)) {
		rep.problems++;
		rc = -EBADMSG;
	}
	if (ui.drawn)
		fputs("\r\033[K", stderr);
	if (rc == 0) {
		if (!quiet)
			printf("%s: ok: %" PRIu64 " samples in %" PRIu64 " shard%s decoded and "
			       "checked, fingerprint %s\n", argv[optind], in->samples, in->shards,
			       in->shards == 1 ? "" : "s", rep.fingerprint);
	} else if (rc == -EBADMSG) {
		die_msg("verify: %s is corrupt: %" PRIu64 " of %" PRIu64 " samples bad, %" PRIu64
			" problem%s; repack it from its inputs", argv[optind], rep.samples_bad,
			in->samples, rep.problems, rep.problems == 1 ? "" : "s");
	} else {
		die_msg("verify: %s", strerror(-rc));
	}
	dataset_close(ds);
	return rc ? 1 : 0;
}
