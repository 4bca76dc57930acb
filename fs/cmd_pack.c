/* cmd_pack.c: `zephon pack INPUT... -o DATASET`: the command line around core/pack.h. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cmd.h"
#include "pack.h"
#include "parse.h"

#define NOTICES_SHOWN 20
/* Above this fraction of the raw bytes stored, zstd saves too little to pay for decoding
 * every sample at every read. */
#define NEAR_RAW 0.9

struct pack_ui {
	int bar;                 /* draw a progress bar (stderr is a terminal) */
	int drawn;
	double start, last;
	uint64_t notices;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void progress(void *ctx, const struct pack_progress *p)
{
	struct pack_ui *ui = ctx;
	double t = clock_mono_s(), el = t - ui->start, frac, rate;
	char a[24], b[24], r[24], eta[24] = "";
	char bar[31];
	int fill;

	if (!ui->bar)
		return;
	if (p->done) {
		if (ui->drawn)
			fputs("\r\033[K", stderr);
		return;
	}
	if (t - ui->last < 0.2)
		return;
	ui->last = t;
	frac = p->input_bytes_total ? (double)p->input_bytes / (double)p->input_bytes_total : 0;
	if (frac > 1)
		frac = 1;
	fill = (int)(frac * 30);
	memset(bar, '#', (size_t)fill);
	memset(bar + fill, '.', (size_t)(30 - fill));
	bar[30] = 0;
	rate = el > 0 ? (double)p->input_bytes / el : 0;
	if (rate > 0 && p->input_bytes_total > p->input_bytes) {
		unsigned s = (unsigned)((double)(p->input_bytes_total - p->input_bytes) / rate);

		snprintf(eta, sizeof(eta), "  ETA %u:%02u:%02u", s / 3600, s / 60 % 60, s % 60);
	}
	fprintf(stderr, "\r\033[K%3.0f%% [%s] %s/%s  %" PRIu64 " samples  %.0f samples/s  %s/s%s",
		frac * 100, bar, human_size((double)p->input_bytes, a, sizeof(a)),
		human_size((double)p->input_bytes_total, b, sizeof(b)), p->samples,
		el > 0 ? (double)p->samples / el : 0.0, human_size(rate, r, sizeof(r)), eta);
	ui->drawn = 1;
}

static void notice(void *ctx, const char *msg)
{
	struct pack_ui *ui = ctx;

	if (ui->notices++ >= NOTICES_SHOWN)
		return;
	if (ui->drawn) {
		fputs("\r\033[K", stderr);
		ui->drawn = 0;
	}
	fprintf(stderr, "zephon: pack: warning: %s\n", msg);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zephon pack INPUT... -o DATASET [options]\n"
		"\n"
		"Pack inputs, in the order given, into a new dataset directory whose sample ids\n"
		"run 0..N-1. Formats by name: *.jsonl, *.json.gz (one JSON value per line, validated),\n"
		"*.txt (one sample per non-empty line), a directory (one sample per file, sorted\n"
		"by path), *.tar[.gz|.zst|.xz|.bz2|.lzma|.lz4] (WebDataset: members sharing a\n"
		"key form a sample), *.bin, *.npy and Megatron-LM *.idx/*.bin (tokens, cut into\n"
		"--seq-len windows; a Megatron pair is one input, named by its .idx, its .bin,\n"
		"both or its prefix).\n"
		"zstd-, gzip-, xz-, bzip2-, lzma- and lz4-compressed inputs are detected by their\n"
		"magic bytes and checked to the end of the stream.\n"
		"A file given twice (by any path) is packed twice, with a warning.\n"
		"\n"
		"options:\n"
		"  -o, --output DIR      the dataset directory to create (must not exist)\n"
		"  --format F            auto (default), jsonl, lines, files, tar, tokens, bin, npy,\n"
		"                        megatron: read every input as F\n"
		"  --seq-len L           tokens per sample (required for token inputs)\n"
		"  --overlap 0|1         1: windows of L + 1 tokens, each overlapping the next by\n"
		"                        one token (Megatron's convention: inputs and labels of L\n"
		"                        tokens each, no token lost as a label); default 0\n"
		"  --eod-token ID        append token ID after every document, as Megatron's\n"
		"                        preprocess_data.py --append-eod does: after each document\n"
		"                        of a Megatron .idx (its document index), after each .bin\n"
		"                        or .npy input (one document per file). Recorded in the\n"
		"                        dataset: loaders restart positions after it. Refused\n"
		"                        when ID does not fit the tokens' dtype\n"
		"  --dtype D             dtype of raw .bin tokens: uint8, uint16, uint32, int32\n"
		"  --compress zstd|none  per-sample zstd frames (default) or raw samples\n"
		"  --level N             zstd level (default %d)\n"
		"  --no-dict             do not train a zstd dictionary\n"
		"  --dict-size BYTES     dictionary capacity (default %u)\n"
		"  --shard-size BYTES    start a new shard file past this size (default 1G;\n"
		"                        K, M, G suffixes)\n"
		"  --skip-bad            skip and count bad records instead of failing: invalid\n"
		"                        JSON lines, unreadable files of a directory, tar members\n"
		"                        with unsafe paths (a truncated or corrupt input still\n"
		"                        fails: its remaining records cannot be trusted)\n"
		"  --force               replace DIR if it is an existing dataset\n"
		"  --threads N           validate and compress on N threads (default: one per\n"
		"                        CPU); the dataset is the same for every N\n"
		"  -q, --quiet           no progress bar and no summary\n"
		"\n"
		"Bad input stops the pack with an error naming the file and position; nothing is\n"
		"left behind. A progress bar is drawn when stderr is a terminal.\n",
		PACK_LEVEL_DEFAULT, PACK_DICT_SIZE_DEFAULT);
}

static int parse_size(const char *s, uint64_t *out)
{
	const char *end = s;
	uint64_t v;
	unsigned shift = 0;

	if (parse_u64_prefix(&end, &v))
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
	if (*end || v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

enum { OPT_FORMAT = 256, OPT_SEQ_LEN, OPT_DTYPE, OPT_COMPRESS, OPT_LEVEL, OPT_NO_DICT,
       OPT_DICT_SIZE, OPT_SHARD_SIZE, OPT_SKIP_BAD, OPT_FORCE, OPT_THREADS, OPT_OVERLAP,
       OPT_EOD_TOKEN };

/* Apply option opt (of getopt_long, with optarg) to o. -1 to go on, or the exit status
 * of a bad value (2, with the message printed). */
static int pack_option(int opt, struct pack_opts *o)
{
	uint64_t v;

	switch (opt) {
	case OPT_FORMAT:
		if (source_format_parse(optarg, &o->format)) {
			die_msg("pack: unknown --format '%s'; use auto, jsonl, lines, files, tar, "
				"tokens, bin, npy or megatron", optarg);
			return 2;
		}
		return -1;
	case OPT_SEQ_LEN:
		if (parse_size(optarg, &o->seq_len) || o->seq_len == 0) {
			die_msg("pack: --seq-len '%s' is not a positive number", optarg);
			return 2;
		}
		return -1;
	case OPT_OVERLAP:
		if (strcmp(optarg, "0") && strcmp(optarg, "1")) {
			die_msg("pack: --overlap takes 0 or 1, not '%s'", optarg);
			return 2;
		}
		o->overlap = optarg[0] == '1';
		return -1;
	case OPT_EOD_TOKEN:
		if (parse_u64(optarg, &o->eod_token) || o->eod_token > UINT32_MAX) {
			die_msg("pack: --eod-token '%s' is not a token id (0 to %u)", optarg,
				UINT32_MAX);
			return 2;
		}
		o->have_eod_token = 1;
		return -1;
	case OPT_DTYPE:
		if (dtype_parse(optarg, &o->dtype)) {
			die_msg("pack: unknown --dtype '%s'; use uint8, uint16, uint32 or int32",
				optarg);
			return 2;
		}
		o->have_dtype = 1;
		return -1;
	case OPT_COMPRESS:
		if (strcmp(optarg, "zstd") && strcmp(optarg, "none")) {
			die_msg("pack: --compress takes zstd or none, not '%s'", optarg);
			return 2;
		}
		o->compress = !strcmp(optarg, "zstd");
		return -1;
	case OPT_LEVEL: {
		char *end;
		long l = strtol(optarg, &end, 10);

		if (*end || end == optarg || l < -131072 || l > 22) {
			die_msg("pack: --level '%s' is not a zstd level", optarg);
			return 2;
		}
		o->level = (int)l;
		return -1;
	}
	case OPT_NO_DICT:
		o->no_dict = 1;
		return -1;
	case OPT_DICT_SIZE:
		if (parse_size(optarg, &v) || v > (1u << 30)) {
			die_msg("pack: --dict-size '%s' is not a size up to 1G", optarg);
			return 2;
		}
		o->dict_size = (size_t)v;
		return -1;
	case OPT_SHARD_SIZE:
		if (parse_size(optarg, &o->shard_bytes) || o->shard_bytes == 0) {
			die_msg("pack: --shard-size '%s' is not a positive size", optarg);
			return 2;
		}
		return -1;
	case OPT_SKIP_BAD:
		o->skip_bad = 1;
		return -1;
	case OPT_FORCE:
		o->force = 1;
		return -1;
	case OPT_THREADS:
		if (parse_size(optarg, &v) || v == 0 || v > 64) {
			die_msg("pack: --threads '%s' is not a number from 1 to 64", optarg);
			return 2;
		}
		o->threads = (unsigned)v;
		return -1;
	}
	return 2; /* not one of ours: cmd_pack handles the rest */
}

/* What `zephon pack` prints after a successful pack (not with -q). */
static void print_summary(const struct pack_opts *o, const struct pack_result *res,
			  double el)
{
	double stored = (double)res->stored_bytes + (double)res->dict_bytes;
	char a[24], b[24], c[24];

	printf("packed %" PRIu64 " samples (%s) from %zu input%s into %s\n", res->samples,
	       dataset_kind_name(res->kind), res->sources, res->sources == 1 ? "" : "s", o->out);
	printf("  %s raw, %s stored (%.2fx), %" PRIu64 " shard%s, dictionary %zu bytes\n",
	       human_size((double)res->raw_bytes, a, sizeof(a)),
	       human_size((double)res->stored_bytes, b, sizeof(b)),
	       res->stored_bytes ? (double)res->raw_bytes / (double)res->stored_bytes : 0.0,
	       res->shards, res->shards == 1 ? "" : "s", res->dict_bytes);
	if (o->compress && res->raw_bytes && stored > NEAR_RAW * (double)res->raw_bytes)
		printf("  compression saves little here (stored, dictionary included, is "
		       "%.0f%% of raw): a pack with --compress none would serve faster, "
		       "with no decoding\n", 100.0 * stored / (double)res->raw_bytes);
	printf("  %s of input in %.2f s (%s/s)\n", human_size((double)res->input_bytes, c, sizeof(c)),
	       el, human_size(el > 0 ? (double)res->input_bytes / el : 0, a, sizeof(a)));
	if (res->skipped) /* bad records (--skip-bad), tar members without an extension,
			   * symlinks and special files: each had its warning */
		printf("  skipped %" PRIu64 " record%s or file%s (see the warnings above)\n",
		       res->skipped, res->skipped == 1 ? "" : "s", res->skipped == 1 ? "" : "s");
	if (res->kind == DATASET_TOKENS && res->remainder_tokens)
		printf("  dropped the last %" PRIu64 " tokens (less than one --seq-len window)\n",
		       res->remainder_tokens);
	printf("  fingerprint %s\n", res->fingerprint);
}

/* pack_run() with SIGINT and SIGTERM turned into a clean cancel (o->cancel). */
static int run_interruptible(const struct pack_opts *o, struct pack_result *res, char *err,
			     size_t errlen)
{
	struct sigaction sa, old_int, old_term;
	int rc;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	rc = pack_run(o, res, err, errlen);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	return rc;
}

int cmd_pack(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "seq-len", required_argument, NULL, OPT_SEQ_LEN },
		{ "dtype", required_argument, NULL, OPT_DTYPE },
		{ "overlap", required_argument, NULL, OPT_OVERLAP },
		{ "eod-token", required_argument, NULL, OPT_EOD_TOKEN },
		{ "compress", required_argument, NULL, OPT_COMPRESS },
		{ "level", required_argument, NULL, OPT_LEVEL },
		{ "no-dict", no_argument, NULL, OPT_NO_DICT },
		{ "dict-size", required_argument, NULL, OPT_DICT_SIZE },
		{ "shard-size", required_argument, NULL, OPT_SHARD_SIZE },
		{ "skip-bad", no_argument, NULL, OPT_SKIP_BAD },
		{ "force", no_argument, NULL, OPT_FORCE },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct pack_opts o;
	struct pack_result res;
	struct pack_ui ui = { 0 };
	char err[1024];
	int quiet = 0, opt, rc;

	pack_opts_init(&o);
	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "o:qh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'o':
			o.out = optarg;
			break;
		case 'q':
			quiet = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case '?':
			if (optopt && optopt < 256)
				die_msg("pack: unknown or incomplete option '-%c'; see zephon pack --help",
					optopt);
			else
				die_msg("pack: unknown or incomplete option '%s'; see zephon pack --help",
					argv[optind - 1]);
			return 2;
		default:
			if ((rc = pack_option(opt, &o)) >= 0)
				return rc;
		}
	}
	if (optind >= argc) {
		die_msg("pack: no inputs; usage: zephon pack INPUT... -o DATASET (see --help)");
		return 2;
	}
	if (!o.out) {
		die_msg("pack: no output; pass -o DATASET (a directory that does not exist yet)");
		return 2;
	}
	o.inputs = (const char *const *)(argv + optind);
	o.ninputs = (size_t)(argc - optind);
	ui.bar = !quiet && isatty(STDERR_FILENO);
	ui.start = ui.last = clock_mono_s();
	o.progress = progress;
	o.notice = notice;
	o.ctx = &ui;
	o.cancel = &interrupted;

	rc = run_interruptible(&o, &res, err, sizeof(err));
	if (ui.drawn)
		fputs("\r\033[K", stderr);
	if (ui.notices > NOTICES_SHOWN)
		fprintf(stderr, "zephon: pack: %" PRIu64 " more warnings not shown\n",
			ui.notices - NOTICES_SHOWN);
	if (rc) {
		die_msg("pack: %s", err[0] ? err : strerror(-rc));
		return 1;
	}
	if (!quiet)
		print_summary(&o, &res, clock_mono_s() - ui.start);
	return 0;
}
