/*
 * cmd_batch.c: `zephon batch DATASET -o <mount options> --rank R --step T [--micro K]`
 * writes to stdout the exact bytes the mount serves for that claim (or, without --micro,
 * for /rank/R/step/T), through the same code (core/serve.c). No FUSE, no journal.
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

static void batch_usage(FILE *f)
{
	fprintf(f,
		"usage: zephon batch DATASET -o OPTIONS --rank R --step T [--micro K] [--start-step S0]\n"
		"\n"
		"Write to stdout the bytes the mount serves to rank R at step T: micro-batch K (what\n"
		"the open of /rank/R/next that claims (T, K) returns), or without --micro the whole\n"
		"share of R at T (/rank/R/step/T). Needs no FUSE and touches no journal.\n"
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

int cmd_batch(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "rank", required_argument, NULL, 'r' },
		{ "step", required_argument, NULL, 't' },
		{ "micro", required_argument, NULL, 'k' },
		{ "start-step", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct mount_options o = { .batch_mode = 1 };
	struct mount_config cfg;
	struct dataset *ds = NULL;
	struct sample_reader *r = NULL;
	struct batch *b = NULL;
	struct order ord;
	uint64_t rank = 0, step = 0, micro = 0, start_step = 0, bad = 0;
	int have_rank = 0, have_step = 0, have_micro = 0, have_start = 0, c, status = 2, rc;
	char why[512];

	fuse_opt_add_arg(&args, "zephon-batch");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			fuse_opt_add_arg(&args, "-o");
			fuse_opt_add_arg(&args, optarg);
			break;
		case 'r':
			if (parse_u64_arg("--rank", optarg, &rank))
				goto out;
			have_rank = 1;
			break;
		case 't':
			if (parse_u64_arg("--step", optarg, &step))
				goto out;
			have_step = 1;
			break;
		case 'k':
			if (parse_u64_arg("--micro", optarg, &micro))
				goto out;
			have_micro = 1;
			break;
		case 'S':
			if (parse_u64_arg("--start-step", optarg, &start_step))
				goto out;
			have_start = 1;
			break;
		case 'h':
			batch_usage(stdout);
			status = 0;
			goto out;
		default:
			die_msg("batch: unknown or incomplete option '%s'; see zephon batch --help",
				argv[optind - 1]);
			goto out;
		}
	}
	for (; optind < argc; optind++)
		fuse_opt_add_arg(&args, argv[optind]);
	if (mount_options_parse(&args, &o)) {
		if (o.bad_option)
			die_msg("batch: unknown option '%s'; see zephon batch --help", o.bad_option);
		goto out;
	}
	if (!o.dataset || o.extra_nonopt || !have_rank || !have_step) {
		die_msg("batch: give DATASET, --rank and --step; see zephon batch --help");
		goto out;
	}
	if (mount_config_from(&o, &cfg, why, sizeof(why))) {
		die_msg("batch: invalid options: %s", why);
		goto out;
	}
	if (cfg.resume.rule == RESUME_STEP || (o.resume && cfg.resume.rule == RESUME_AUTO)) {
		/* Where these start depends on a journal's history: computing without it would
		 * print another layout's bytes. */
		die_msg("batch: resume=%s needs the journal's history, and zephon batch reads no "
			"journal: pass resume=samples:G@S (what zephon journal resume-point prints, "
			"or start_samples@start_step from the mount's /status)", o.resume);
		goto out_cfg;
	}
	if (cfg.resume.rule == RESUME_SAMPLES) {
		cfg.layout.start_samples = cfg.resume.value;
		if (cfg.resume.has_step && have_start && cfg.resume.step != start_step) {
			die_msg("batch: resume=samples:G@S and --start-step disagree on the step number");
			goto out_cfg;
		}
		cfg.layout.start_step = cfg.resume.has_step ? cfg.resume.step :
					have_start ? start_step :
					cfg.resume.value / cfg.layout.global_batch;
	} else if (have_start) {
		die_msg("batch: --start-step goes with -o resume=samples:G");
		goto out_cfg;
	}
	if (layout_check(&cfg.layout, why, sizeof(why))) {
		die_msg("batch: invalid options: %s", why);
		goto out_cfg;
	}
	if (rank >= cfg.layout.world_size || step < cfg.layout.start_step ||
	    (have_micro && micro >= layout_micros(&cfg.layout))) {
		die_msg("batch: rank %" PRIu64 " step %" PRIu64 " micro %" PRIu64 " is outside the "
			"layout (world_size %" PRIu64 ", start step %" PRIu64 ", %" PRIu64
			" micro-batch%s per step)", rank, step, micro, cfg.layout.world_size,
			cfg.layout.start_step, layout_micros(&cfg.layout),
			layout_micros(&cfg.layout) == 1 ? "" : "es");
		goto out_cfg;
	}
	status = 1;
	if (dataset_open(o.dataset, &ds, why, sizeof(why))) {
		die_msg("batch: cannot open dataset %s: %s", o.dataset, why);
		goto out_cfg;
	}
	if (mount_config_check_dataset(&cfg, ds, why, sizeof(why))) {
		die_msg("batch: invalid options: %s", why);
		status = 2;
		goto out_ds;
	}
	order_init(&ord, dataset_info(ds)->samples, cfg.seed, cfg.shuffle);
	if (cfg.epochs) {
		uint64_t g, limit = order_limit(&ord, cfg.epochs);

		if (layout_step_gsn(&cfg.layout, step, &g) || g > limit ||
		    cfg.layout.global_batch > limit - g) {
			die_msg("batch: step %" PRIu64 " lies past the end of the stream (epochs=%" PRIu64
				"); the mount answers ENODATA", step, cfg.epochs);
			goto out_ds;
		}
	}
	r = sample_reader_new(ds);
	if (!r) {
		die_msg("batch: out of memory");
		goto out_ds;
	}
	rc = serve_build(r, dataset_info(ds), &ord, &cfg.layout, cfg.format, rank, step,
			 have_micro ? micro : 0, have_micro ? 1 : layout_micros(&cfg.layout), &b, &bad);
	if (rc == -EIO) {
		die_msg("batch: sample %" PRIu64 " in %s failed its checksum; run zephon verify %s",
			bad, dataset_shard_name(ds, bad) ? dataset_shard_name(ds, bad) : "?", o.dataset);
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
	dataset_close(ds);
out_cfg:
	mount_config_release(&cfg);
out:
	mount_options_release(&o);
	fuse_opt_free_args(&args);
	return status;
}
