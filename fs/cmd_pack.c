/* cmd_pack.c: `zephon pack INPUT... -o DATASET`: the command line around core/pack/pack.h. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cmd.h"
#include "instream.h"
#include "pack.h"
#include "parse.h"
#include "source.h"

#define NOTICES_SHOWN 20
/* Above this fraction of the raw bytes stored, zstd saves too little to pay for decoding
 * every sample at every read. */
#define NEAR_RAW 0.9

struct pack_ui {
	int bar;                 /* draw a progress bar (stderr is a terminal) */
	int tokenizer;           /* --tokenizer: count documents and tokens */
	int drawn;
	double start, last;
	uint64_t notices;
};

static volatile sig_atomic_t interrupted;

/* The --tokenizer front end: its options and, once started, its process and pipe. */
struct front_end {
	const char *tokenizer, *text_field, *column, *split, *format;
	/* --chat (docs/fine-tuning.md): its fields, and what to do with a prompt that does not
	 * tokenize to a prefix of its conversation */
	int chat;
	const char *messages_field, *prompt_field, *response_field, *prompt_mismatch;
	const char *python;
	pid_t pid;
	int fd;
};

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
	if (ui->tokenizer)
		fprintf(stderr, "\r\033[K%3.0f%% [%s] %s/%s  %" PRIu64 " documents  %" PRIu64
			" tokens  %.0f tokens/s  %s/s%s", frac * 100, bar,
			human_size((double)p->input_bytes, a, sizeof(a)),
			human_size((double)p->input_bytes_total, b, sizeof(b)), p->documents,
			p->tokens, el > 0 ? (double)p->tokens / el : 0.0,
			human_size(rate, r, sizeof(r)), eta);
	else
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

static void usage_rows(FILE *f);

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
		"raw text (docs/packing.md, \"Raw text to tokens\"): with --tokenizer the inputs are text,\n"
		"tokenized with Hugging Face tokenizers by zephon's Python front end\n"
		"(pip install 'zephon[tokenize]'; ZEPHON_PYTHON names its interpreter, default\n"
		"python3) and packed as tokens, one document after the other, each with the BOS\n"
		"and EOS that TorchTitan's HuggingFaceTokenizer adds:\n"
		"  --tokenizer PATH      a tokenizer.json, or a folder with tokenizer.json and\n"
		"                        tokenizer_config.json (BOS/EOS come from the config)\n"
		"  --text-field F        JSONL: the field holding the text (default text)\n"
		"  --column C            Parquet and datasets folders: the string column (default\n"
		"                        text)\n"
		"  --split S             a Hub folder of several splits: the one to pack (default\n"
		"                        train)\n"
		"  --format F            auto (by name), jsonl, text (one document per file),\n"
		"                        lines (one per non-empty line), parquet, arrow\n"
		"Inputs: *.jsonl, *.json[l].gz/.zst/.xz/.bz2/.lzma/.lz4, *.parquet, text files, a\n"
		"folder saved by datasets' save_to_disk, a folder of Parquet shards, a folder of\n"
		"text files. --dtype defaults to uint16 below 65,536 ids, else uint32.\n"
		"\n"
		"Bad input stops the pack with an error naming the file and position; nothing is\n"
		"left behind. A progress bar is drawn when stderr is a terminal.\n",
		PACK_LEVEL_DEFAULT, PACK_DICT_SIZE_DEFAULT);
	usage_rows(f);
}

/* The options of fine-tuning data, the end of usage(). */
static void usage_rows(FILE *f)
{
	fputs("\n"
		"fine-tuning data (docs/fine-tuning.md): rows of whole documents, placed by one\n"
		"plan over the whole dataset; each sample is int32 inputs, labels (-100: no loss)\n"
		"and positions of --seq-len positions, padded as TorchTitan pads:\n"
		"  --whole-documents     rows of whole documents (each document's labels all kept)\n"
		"  --chat                chat samples, as TorchTitan's ChatProcessor tokenizes them\n"
		"                        (the tokenizer's chat template); only the assistant's\n"
		"                        turns are trained. Implies --whole-documents\n"
		"  --messages-field F    --chat: the list of {role, content} (default messages)\n"
		"  --prompt-field F, --response-field F\n"
		"                        --chat: a user prompt and an assistant response instead\n"
		"  --max-context-length C  the longest document kept, in input tokens (its tokens\n"
		"                        - 1); longer ones are dropped and counted (default --seq-len)\n"
		"  --prompt-mismatch drop|keep  --chat: a sample whose prompt alone does not\n"
		"                        tokenize to a prefix of the whole: drop it (default) or\n"
		"                        keep TorchTitan's mask; counted either way\n", f);
}

enum { OPT_FORMAT = 256, OPT_SEQ_LEN, OPT_DTYPE, OPT_COMPRESS, OPT_LEVEL, OPT_NO_DICT,
       OPT_DICT_SIZE, OPT_SHARD_SIZE, OPT_SKIP_BAD, OPT_FORCE, OPT_THREADS, OPT_OVERLAP,
       OPT_EOD_TOKEN, OPT_TOKENIZER, OPT_TEXT_FIELD, OPT_COLUMN, OPT_SPLIT,
       OPT_DECODE_LINES, OPT_WHOLE_DOCS, OPT_CHAT, OPT_MESSAGES_FIELD, OPT_PROMPT_FIELD,
       OPT_RESPONSE_FIELD, OPT_MAX_CONTEXT, OPT_PROMPT_MISMATCH };

/* pack_option() for the options that say what the input is (format, tokens, dtype). */
static int pack_input_option(int opt, struct pack_opts *o)
{
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
	}
	return 2; /* not one of ours: cmd_pack handles the rest */
}

/* Apply option opt (of getopt_long, with optarg) to o. -1 to go on, or the exit status
 * of a bad value (2, with the message printed). */
static int pack_option(int opt, struct pack_opts *o)
{
	uint64_t v;

	switch (opt) {
	case OPT_FORMAT: case OPT_SEQ_LEN: case OPT_OVERLAP: case OPT_EOD_TOKEN: case OPT_DTYPE:
		return pack_input_option(opt, o);
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
	if (res->documents)
		printf("  %" PRIu64 " documents, %" PRIu64 " tokens (BOS and EOS included), largest "
		       "id %" PRIu64 "\n", res->documents, res->tokens, res->max_token);
	if (o->rows)
		printf("  %" PRIu64 " rows of %" PRIu64 " positions, %.2f%% padding; %" PRIu64
		       " documents longer than --max-context-length dropped\n", res->samples,
		       o->seq_len, res->samples ? 100.0 * (double)res->padding /
		       ((double)res->samples * (double)o->seq_len) : 0.0, res->dropped);
	if (res->prompt_mismatch)
		printf("  %" PRIu64 " chat samples whose prompt is not a prefix of the whole "
		       "(see the warnings above)\n", res->prompt_mismatch);
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

/* `zephon pack --decode-lines FILE` (for the --tokenizer front end): FILE's lines,
 * each ended by '\n', on stdout, through the readers of pack's own text inputs: every
 * compression they take, checked to the end, a BOM on line 1 dropped, a '\r' before
 * '\n' dropped. Exit 1 with "zephon: FILE:LINE: reason" on stderr. */
static int decode_lines(const char *path)
{
	struct instream *in;
	const uint8_t *line;
	size_t len;
	char err[1024];
	int rc;

	if (instream_open(path, NULL, &in, err, sizeof(err))) {
		die_msg("%s", err);
		return 1;
	}
	while ((rc = instream_getline(in, SAMPLE_MAX_BYTES, &line, &len, err, sizeof(err))) == 1) {
		source_text_skip_bom(instream_lineno(in), &line, &len);
		if (fwrite(line, 1, len, stdout) != len || putchar('\n') == EOF) {
			rc = -EIO;
			snprintf(err, sizeof(err), "%s: writing its lines: %s", path, strerror(errno));
			break;
		}
	}
	instream_close(in);
	if (fflush(stdout) != 0 && !rc) {
		rc = -EIO;
		snprintf(err, sizeof(err), "%s: writing its lines: %s", path, strerror(errno));
	}
	if (rc < 0) {
		die_msg("%s", err);
		return 1;
	}
	return 0;
}

/* Start the --tokenizer front end: `$ZEPHON_PYTHON -m zephon.pack_text` (python3 by
 * default) with the text options and the inputs, its stdout a pipe (fe->fd) that
 * carries the token documents (core/pack/pack_text.c). 0, or -1 with the message printed. */
static int front_end_start(struct front_end *fe, const struct pack_opts *o,
			   char *const *inputs, size_t ninputs)
{
	const char *py = getenv("ZEPHON_PYTHON");
	const char **argv = calloc(ninputs + 32, sizeof(*argv));
	char self[4096], eod[32], ctx[32];
	/* the options passed on as they were given, each "--name value" where set */
	const char *const passed[][2] = {
		{ "--text-field", fe->text_field },
		{ "--column", fe->column },
		{ "--split", fe->split },
		{ "--format", fe->format },
		{ "--dtype", o->have_dtype ? dtype_name(o->dtype) : NULL },
		{ "--eod-token", o->have_eod_token ? eod : NULL },
		{ "--messages-field", fe->messages_field },
		{ "--prompt-field", fe->prompt_field },
		{ "--response-field", fe->response_field },
		{ "--prompt-mismatch", fe->prompt_mismatch },
		/* a chat sample the packer will drop as too long is not checked for a mismatch */
		{ "--max-context-length", fe->chat ? ctx : NULL },
	};
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int p[2];
	size_t k = 0;

	if (!argv || n <= 0 || pipe2(p, O_CLOEXEC)) {
		die_msg("pack: cannot start the tokenizer front end: %s", strerror(errno));
		free(argv);
		return -1;
	}
	self[n] = 0;
	fe->python = py && *py ? py : "python3";
	argv[k++] = fe->python;
	argv[k++] = "-m";
	argv[k++] = "zephon.pack_text";
	argv[k++] = "--tokenizer";
	argv[k++] = fe->tokenizer;
	argv[k++] = "--zephon";
	argv[k++] = self;
	snprintf(eod, sizeof(eod), "%" PRIu64, o->eod_token);
	snprintf(ctx, sizeof(ctx), "%" PRIu64, o->max_context ? o->max_context : o->seq_len);
	for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++) {
		if (passed[i][1]) {
			argv[k++] = passed[i][0];
			argv[k++] = passed[i][1];
		}
	}
	if (o->skip_bad)
		argv[k++] = "--skip-bad";
	if (fe->chat)
		argv[k++] = "--chat";
	argv[k++] = "--";
	for (size_t i = 0; i < ninputs; i++)
		argv[k++] = inputs[i];
	argv[k] = NULL;
	fflush(NULL);
	fe->pid = fork();
	if (fe->pid < 0) {
		die_msg("pack: cannot start the tokenizer front end: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		free(argv);
		return -1;
	}
	if (fe->pid == 0) {
		dup2(p[1], STDOUT_FILENO); /* dup2 clears O_CLOEXEC on the copy */
		execvp(fe->python, (char *const *)argv);
		fprintf(stderr, "zephon: pack: cannot run %s: %s\n", fe->python, strerror(errno));
		_exit(127);
	}
	close(p[1]);
	free(argv);
	fe->fd = p[0];
	return 0;
}

/* Close the pipe, stop the front end if the pack failed, reap it. rc: pack_run()'s;
 * returns the pack's status, with err explaining a front end that could not run. */
static int front_end_finish(struct front_end *fe, int rc, char *err, size_t errlen)
{
	int status = 0;

	close(fe->fd);
	if (rc)
		kill(fe->pid, SIGTERM);
	while (waitpid(fe->pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!rc || rc == -ECANCELED)
		return rc;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
		snprintf(err, errlen, "--tokenizer needs Python 3 with zephon's tokenize extra "
			 "(pip install 'zephon[tokenize]'), and %s did not run; set ZEPHON_PYTHON "
			 "to the interpreter that has it", fe->python);
	else if (strstr(err, "before its first output"))
		snprintf(err, errlen, "the tokenizer front end (%s -m zephon.pack_text) failed "
			 "before its first output (its message is above): --tokenizer needs the "
			 "zephon Python package with its tokenize extra in that interpreter (pip "
			 "install 'zephon[tokenize]'; ZEPHON_PYTHON names another interpreter)",
			 fe->python);
	return rc;
}

/* The long options of `zephon pack` (see usage()). */
static const struct option pack_longopts[] = {
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
	{ "tokenizer", required_argument, NULL, OPT_TOKENIZER },
	{ "text-field", required_argument, NULL, OPT_TEXT_FIELD },
	{ "column", required_argument, NULL, OPT_COLUMN },
	{ "split", required_argument, NULL, OPT_SPLIT },
	{ "decode-lines", required_argument, NULL, OPT_DECODE_LINES },
	{ "whole-documents", no_argument, NULL, OPT_WHOLE_DOCS },
	{ "chat", no_argument, NULL, OPT_CHAT },
	{ "messages-field", required_argument, NULL, OPT_MESSAGES_FIELD },
	{ "prompt-field", required_argument, NULL, OPT_PROMPT_FIELD },
	{ "response-field", required_argument, NULL, OPT_RESPONSE_FIELD },
	{ "max-context-length", required_argument, NULL, OPT_MAX_CONTEXT },
	{ "prompt-mismatch", required_argument, NULL, OPT_PROMPT_MISMATCH },
	{ NULL, 0, NULL, 0 },
};

/* The options of rows and chat samples (fe, o) once all are read. -1 to go on, or 2
 * after the message of a combination that does not fit. */
static int rows_options(struct front_end *fe, struct pack_opts *o)
{
	if (fe->chat)
		o->rows = 1;
	if (!fe->tokenizer && (o->rows || o->max_context)) {
		die_msg("pack: --whole-documents, --chat and --max-context-length make rows of "
			"--tokenizer documents; pass --tokenizer PATH");
		return 2;
	}
	if (!fe->chat && (fe->messages_field || fe->prompt_field || fe->response_field ||
			  fe->prompt_mismatch)) {
		die_msg("pack: --messages-field, --prompt-field, --response-field and "
			"--prompt-mismatch read chat samples; pass --chat");
		return 2;
	}
	if (fe->chat && fe->text_field) {
		die_msg("pack: --text-field reads plain documents; chat samples are read from "
			"--messages-field (or --prompt-field and --response-field)");
		return 2;
	}
	if (!fe->prompt_field != !fe->response_field || (fe->prompt_field && fe->messages_field)) {
		die_msg("pack: --chat reads either --messages-field or both --prompt-field and "
			"--response-field");
		return 2;
	}
	if (fe->prompt_mismatch && strcmp(fe->prompt_mismatch, "drop") &&
	    strcmp(fe->prompt_mismatch, "keep")) {
		die_msg("pack: --prompt-mismatch takes drop or keep, not '%s'", fe->prompt_mismatch);
		return 2;
	}
	if (o->max_context && !o->rows) {
		die_msg("pack: --max-context-length bounds the documents of rows; pass "
			"--whole-documents or --chat");
		return 2;
	}
	return -1;
}

/* pack_option() for the options of the --tokenizer front end, of rows and of chat
 * samples; -1 to go on, 2 after the message of a bad value, 3 for an option that is not
 * one of them. */
static int front_end_option(int opt, struct front_end *fe, struct pack_opts *o)
{
	switch (opt) {
	case OPT_TOKENIZER:
		fe->tokenizer = optarg;
		return -1;
	case OPT_TEXT_FIELD:
		fe->text_field = optarg;
		return -1;
	case OPT_COLUMN:
		fe->column = optarg;
		return -1;
	case OPT_SPLIT:
		fe->split = optarg;
		return -1;
	case OPT_WHOLE_DOCS:
		o->rows = 1;
		return -1;
	case OPT_CHAT:
		fe->chat = 1;
		return -1;
	case OPT_MESSAGES_FIELD:
		fe->messages_field = optarg;
		return -1;
	case OPT_PROMPT_FIELD:
		fe->prompt_field = optarg;
		return -1;
	case OPT_RESPONSE_FIELD:
		fe->response_field = optarg;
		return -1;
	case OPT_PROMPT_MISMATCH:
		fe->prompt_mismatch = optarg;
		return -1;
	case OPT_MAX_CONTEXT:
		if (parse_size(optarg, &o->max_context) || o->max_context == 0) {
			die_msg("pack: --max-context-length '%s' is not a positive number", optarg);
			return 2;
		}
		return -1;
	}
	return 3;
}

/* --format, read once all options are (its names depend on --tokenizer), into o or
 * fe->format; and the options that only --tokenizer reads. -1 to go on, or the exit status
 * of a bad value (2, with the message printed). */
static int format_option(struct front_end *fe, const char *format_name, struct pack_opts *o)
{
	if (!fe->tokenizer && (fe->text_field || fe->column || fe->split)) {
		die_msg("pack: --text-field, --column and --split read text for --tokenizer; "
			"pass --tokenizer PATH");
		return 2;
	}
	fe->format = format_name;
	if (format_name && !fe->tokenizer) {
		optarg = (char *)format_name;
		return pack_option(OPT_FORMAT, o);
	}
	if (format_name && fe->tokenizer && strcmp(format_name, "auto") &&
	    strcmp(format_name, "jsonl") && strcmp(format_name, "lines") &&
	    strcmp(format_name, "text") && strcmp(format_name, "parquet") &&
	    strcmp(format_name, "arrow")) {
		die_msg("pack: --format '%s' with --tokenizer: use auto, jsonl, text (one document "
			"per file), lines, parquet or arrow", format_name);
		return 2;
	}
	return -1;
}

/* Clear the progress line, count the warnings not shown, say why a pack failed (rc:
 * pack_run()'s, err its message). 0, or 1 when the pack failed. */
static int pack_ui_finish(struct pack_ui *ui, int rc, const char *err)
{
	if (ui->drawn)
		fputs("\r\033[K", stderr);
	if (ui->notices > NOTICES_SHOWN)
		fprintf(stderr, "zephon: pack: %" PRIu64 " more warnings not shown\n",
			ui->notices - NOTICES_SHOWN);
	if (rc) {
		die_msg("pack: %s", err[0] ? err : strerror(-rc));
		return 1;
	}
	return 0;
}

/* The message of getopt_long()'s '?' (an unknown option, or one without its value). */
static void bad_option(char **argv)
{
	if (optopt && optopt < 256)
		die_msg("pack: unknown or incomplete option '-%c'; see zephon pack --help", optopt);
	else
		die_msg("pack: unknown or incomplete option '%s'; see zephon pack --help",
			argv[optind - 1]);
}

/* Start the tokenizer front end over inputs, its documents into o->tokdocs_fd. -1 to go
 * on, or the exit status (2: no --seq-len; 1: it could not start) after a message. */
static int tokenizer_start(struct front_end *fe, struct pack_opts *o, struct pack_ui *ui,
			   char **inputs, size_t ninputs)
{
	if (!o->seq_len) {
		die_msg("pack: --tokenizer packs tokens and needs a window length; pass "
			"--seq-len L");
		return 2;
	}
	ui->tokenizer = 1;
	if (front_end_start(fe, o, inputs, ninputs))
		return 1;
	o->tokdocs_fd = fe->fd;
	return -1;
}

int cmd_pack(int argc, char **argv)
{
	struct front_end fe = { .pid = -1 };
	const char *format_name = NULL;
	struct pack_opts o;
	struct pack_result res;
	struct pack_ui ui = { 0 };
	char err[1024];
	int quiet = 0, opt, rc;

	pack_opts_init(&o);
	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "o:qh", pack_longopts, NULL)) != -1) {
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
			bad_option(argv);
			return 2;
		case OPT_DECODE_LINES:
			return decode_lines(optarg);
		case OPT_FORMAT: /* its names depend on --tokenizer, which may come later */
			format_name = optarg;
			break;
		default:
			if ((rc = front_end_option(opt, &fe, &o)) == 3)
				rc = pack_option(opt, &o);
			if (rc >= 0)
				return rc;
		}
	}
	if ((rc = format_option(&fe, format_name, &o)) >= 0 || (rc = rows_options(&fe, &o)) >= 0)
		return rc;
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
	if (fe.tokenizer && (rc = tokenizer_start(&fe, &o, &ui, argv + optind,
						   (size_t)(argc - optind))) >= 0)
		return rc;

	rc = run_interruptible(&o, &res, err, sizeof(err));
	if (fe.tokenizer)
		rc = front_end_finish(&fe, rc, err, sizeof(err));
	if (pack_ui_finish(&ui, rc, err))
		return 1;
	if (!quiet)
		print_summary(&o, &res, clock_mono_s() - ui.start);
	return 0;
}
