/*
 * cmd_batch.c: `zephon batch DATASET -o <mount options> --rank R --step T [--micro K]`
 * writes to stdout the exact bytes the mount serves for that claim (or, without --micro,
 * for /rank/R/step/T), through the same code (core/serve/serve.c). No FUSE; a journal only
 * to read a mixture's weight history from (journal=, read-only).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "opts.h"
#include "parse.h"
#include "serve.h"
#include "served.h"

static void batch_usage(FILE *f)
{
	fprintf(f,
		"usage: zephon batch DATASET -o OPTIONS --rank R --step T [--micro K] [--start-step S0]\n"
		"\n"
		"Write to stdout the bytes the mount serves to rank R at step T: micro-batch K (what\n"
		"the open of /rank/R/next that claims (T, K) returns), or without --micro the whole\n"
		"share of R at T (/rank/R/step/T). Needs no FUSE and writes no journal; for a\n"
		"mixture whose weights changed, journal=PATH reads the run's weight history.\n"
		"\n"
		"The layout starts at step S0 = 0, gsn G0 = 0; with -o resume=samples:G@S it starts\n"
		"at G0 = G numbered S0 = S (resume=samples:G: S0 = --start-step, default G / B):\n"
		"the start_step and start_samples a mount shows in /status after that resume.\n"
		"\n"
		"  --rank R        data-parallel rank (below world_size)\n"
		"  --step T        step number (at least S0)\n"
		"  --micro K       micro-batch within the step (below global_batch/world_size/micro_batch)\n"
		"  --start-step S  S0 of the layout (with resume=samples:G)\n"
		"  -h, --help      this text\n"
		"\n%s", mount_options_help);
}

static int parse_u64_arg(const char *name, const char *s, uint64_t *out)
{
	if (parse_u64(s, out)) {
		char problem[80];

		die_msg("batch: %s wants a non-negative whole number, not '%s': %s", name,
			s ? s : "", parse_u64_problem(s, problem, sizeof(problem)));
		return -1;
	}
	return 0;
}

/* What the command line asks for, beside the mount options. */
struct batch_args {
	uint64_t rank, step, micro, start_step;
	int have_rank, have_step, have_micro, have_start;
};

/* Parse argv into args (the mount options, for mount_options_parse) and *a. 0 to go on,
 * 1 when --help was printed, -1 after a message (a bad option). */
static int parse_args(int argc, char **argv, struct fuse_args *args, struct batch_args *a)
{
	static const struct option longopts[] = {
		{ "rank", required_argument, NULL, 'r' },
		{ "step", required_argument, NULL, 't' },
		{ "micro", required_argument, NULL, 'k' },
		{ "start-step", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	fuse_opt_add_arg(args, "zephon-batch");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			fuse_opt_add_arg(args, "-o");
			fuse_opt_add_arg(args, optarg);
			break;
		case 'r':
			if (parse_u64_arg("--rank", optarg, &a->rank))
				return -1;
			a->have_rank = 1;
			break;
		case 't':
			if (parse_u64_arg("--step", optarg, &a->step))
				return -1;
			a->have_step = 1;
			break;
		case 'k':
			if (parse_u64_arg("--micro", optarg, &a->micro))
				return -1;
			a->have_micro = 1;
			break;
		case 'S':
			if (parse_u64_arg("--start-step", optarg, &a->start_step))
				return -1;
			a->have_start = 1;
			break;
		case 'h':
			batch_usage(stdout);
			return 1;
		default:
			die_msg("batch: unknown or incomplete option '%s'; see zephon batch --help",
				argv[optind - 1]);
			return -1;
		}
	}
	for (; optind < argc; optind++)
		fuse_opt_add_arg(args, argv[optind]);
	return 0;
}

/* S0 and G0 of cfg->layout from the resume rule (no journal: only samples:G[@S] and
 * fresh can be resolved), checked, and the claim of *a inside it. 0, or -1 after a
 * message (invalid options). */
static int resolve_layout(const struct mount_options *o, struct mount_config *cfg,
			  const struct batch_args *a)
{
	char why[512];

	if (cfg->resume.rule == RESUME_STEP || (o->resume && cfg->resume.rule == RESUME_AUTO)) {
		/* Where these start depends on a journal's history: computing without it would
		 * print another layout's bytes. */
		die_msg("batch: resume=%s needs the journal's history, and zephon batch reads no "
			"journal: pass resume=samples:G@S (what zephon journal resume-point prints, "
			"or start_samples@start_step from the mount's /status)", o->resume);
		return -1;
	}
	if (cfg->resume.rule == RESUME_SAMPLES) {
		uint64_t s0;

		if (cfg->resume.has_step && a->have_start && cfg->resume.step != a->start_step) {
			die_msg("batch: resume=samples:G@S and --start-step disagree on the step number");
			return -1;
		}
		s0 = cfg->resume.has_step ? cfg->resume.step : a->have_start ? a->start_step :
		     layout_resume_step(NULL, layout_global_batch(&cfg->layout), cfg->resume.value);
		if (layout_start_at(&cfg->layout, s0, cfg->resume.value, &cfg->layout, why,
				    sizeof(why))) {
			die_msg("batch: invalid options: %s", why);
			return -1;
		}
	} else if (a->have_start) {
		die_msg("batch: --start-step goes with -o resume=samples:G");
		return -1;
	}
	if (a->rank >= layout_world_size(&cfg->layout) || a->step < layout_start_step(&cfg->layout) ||
	    (a->have_micro && a->micro >= layout_micros(&cfg->layout))) {
		die_msg("batch: rank %" PRIu64 " step %" PRIu64 " micro %" PRIu64 " is outside the "
			"layout (world_size %" PRIu64 ", start step %" PRIu64 ", %" PRIu64
			" micro-batch%s per step)", a->rank, a->step, a->micro, layout_world_size(&cfg->layout),
			layout_start_step(&cfg->layout), layout_micros(&cfg->layout),
			layout_micros(&cfg->layout) == 1 ? "" : "es");
		return -1;
	}
	return 0;
}

/* A mixture's weights as the run that journal= names served them: the journal must be
 * this stream's (the identity a mount checks), its weight history is replayed, and
 * weights= then changes them from the layout's start as a mount would (refused inside a
 * step). Without journal= the weights given (or the spec's) hold from gsn 0. 0, -EINVAL
 * (why), -ENOMEM, or the journal's error (why). */
static int replay_journal(struct served *st, const char *path, const struct layout *l,
			  char *why, size_t why_len)
{
	struct journal *j = NULL;
	struct journal_layout *rows = NULL;
	struct journal_ident have, want;
	size_t n = 0;
	int rc;

	if (!st->is_mixture || !path)
		return st->is_mixture ? served_start(st, 0) : 0;
	rc = journal_open_readonly(path, &j, why, why_len);
	if (rc == -EBUSY) {
		snprintf(why, why_len, "journal %s is held by a live mount: zephon batch reads it "
			 "only when no mount has it open (read the mount's /status instead, whose "
			 "mixture.segments are the same history, or copy the file)", path);
		return rc;
	}
	if (!rc) {
		journal_identity(j, &have);
		served_ident(st, &want);
		if (!journal_ident_same(&have, &want)) {
			char a[JOURNAL_IDENT_TEXT_MAX], b[JOURNAL_IDENT_TEXT_MAX];

			journal_ident_text(&have, a, sizeof(a));
			journal_ident_text(&want, b, sizeof(b));
			snprintf(why, why_len, "journal %s belongs to another stream (%s) than these "
				 "options give (%s)", path, a, b);
			rc = -EINVAL;
		}
	}
	if (!rc && (rc = journal_layouts(j, &rows, &n)))
		journal_last_error(j, why, why_len);
	if (!rc)
		rc = served_replay(st, rows, n, why, why_len);
	if (!rc)
		rc = served_check_change(st, rows, n, layout_start_samples(l), why, why_len);
	if (!rc)
		rc = served_start(st, layout_start_samples(l));
	free(rows);
	journal_close(j);
	return rc == -ENOMEM ? rc : rc ? -EINVAL : 0;
}

/* Open the dataset, build the claim of *a and write its bytes to stdout. The exit
 * status: 0, 1 (the dataset, the build or stdout failed), 2 (the options do not fit
 * the dataset). */
static int write_batch(const struct mount_options *o, struct mount_config *cfg,
		       const struct batch_args *a)
{
	struct served st;
	struct dataset *ds;
	struct sample_reader *r = NULL;
	struct batch *b = NULL;
	uint64_t bad = 0, a_micros = layout_micros(&cfg->layout);
	char why[1024];
	int status = 1, rc;

	if (served_open(o->dataset, &st, why, sizeof(why))) {
		die_msg("batch: cannot open dataset %s: %s", o->dataset, why);
		return 1;
	}
	ds = st.ds;
	rc = served_set_order(&st, &(struct served_options){ cfg->seed, cfg->shuffle, cfg->weights,
			      cfg->validation },
			      why, sizeof(why));
	if (!rc)
		rc = mount_config_check_dataset(cfg, ds, why, sizeof(why));
	if (!rc)
		rc = replay_journal(&st, o->journal, &cfg->layout, why, sizeof(why));
	if (rc) {
		die_msg("batch: invalid options: %s", rc == -ENOMEM ? "out of memory" : why);
		status = 2;
		goto out_ds;
	}
	if (cfg->epochs &&
	    !layout_step_in_stream(&cfg->layout, order_limit(&st.order, cfg->epochs), a->step)) {
		die_msg("batch: step %" PRIu64 " lies past the end of the stream (epochs=%" PRIu64
			"); the mount answers ENODATA", a->step, cfg->epochs);
		goto out_ds;
	}
	r = sample_reader_new(ds);
	if (!r) {
		die_msg("batch: out of memory");
		goto out_ds;
	}
	rc = batch_build(r, &(struct batch_spec){ dataset_info(ds), &st.order, &cfg->layout,
			 cfg->format, a->rank, a->step, a->have_micro ? a->micro : 0,
			 a->have_micro ? 1 : a_micros }, &b, &bad);
	if (rc == -EIO) {
		die_msg("batch: sample %" PRIu64 " in %s failed its checksum; run zephon verify %s",
			bad, dataset_shard_name(ds, bad) ? dataset_shard_name(ds, bad) : "?", o->dataset);
	} else if (rc) {
		die_msg("batch: cannot build the batch: %s", strerror(-rc));
	} else if (fwrite(b->data.data, 1, b->data.len, stdout) != b->data.len || fflush(stdout)) {
		die_msg("batch: cannot write to stdout: %s", strerror(errno));
	} else {
		status = 0;
	}
	batch_free(b);
	sample_reader_free(r);
out_ds:
	served_close(&st);
	return status;
}

int cmd_batch(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct mount_options o = { .batch_mode = 1 };
	struct mount_config cfg;
	struct batch_args a = { 0 };
	char why[512];
	int status = 2, rc;

	rc = parse_args(argc, argv, &args, &a);
	if (rc) {
		status = rc > 0 ? 0 : 2;
		goto out;
	}
	if (mount_options_parse(&args, &o)) {
		if (o.bad_option)
			die_msg("batch: unknown option '%s'; see zephon batch --help", o.bad_option);
		goto out;
	}
	if (!o.dataset || o.extra_nonopt || !a.have_rank || !a.have_step) {
		die_msg("batch: give DATASET, --rank and --step; see zephon batch --help");
		goto out;
	}
	if (mount_config_from(&o, &cfg, why, sizeof(why))) {
		die_msg("batch: invalid options: %s", why);
		goto out;
	}
	if (!resolve_layout(&o, &cfg, &a))
		status = write_batch(&o, &cfg, &a);
	mount_config_release(&cfg);
out:
	mount_options_release(&o);
	fuse_opt_free_args(&args);
	return status;
}
