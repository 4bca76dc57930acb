/*
 * main.c: the `zephon` executable's entry point: dispatch to a subcommand, or treat
 * `zephon DATASET MOUNTPOINT -o ...` (what mount.fuse3 and fstab call) as `mount`.
 */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "cmd.h"
#include "zephon_config.h"

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{ "pack", cmd_pack, "pack inputs into a dataset directory" },
	{ "info", cmd_info, "describe a dataset (--json for machines)" },
	{ "verify", cmd_verify, "decode every sample and check every checksum" },
	{ "upload", cmd_upload, "put a packed dataset into object storage (s3://)" },
	{ "batch", cmd_batch, "write the bytes the mount serves for one claim" },
	{ "journal", cmd_journal, "show a cursor journal, compute resume points" },
	{ "top", cmd_top, "a live view of a mount's progress, redrawn every second" },
	{ "mount", cmd_mount, "mount a dataset (also: zephon DATASET MOUNTPOINT -o ...)" },
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zephon <command> [options]\n"
		"       zephon DATASET MOUNTPOINT -o world_size=W,global_batch=B[,...]\n"
		"\n"
		"Zephon serves a packed dataset as files: every open() of /rank/<r>/next hands\n"
		"rank r its next micro-batch of one global order that survives restarts and\n"
		"changes of world size.\n"
		"\n"
		"commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fprintf(f,
		"\n"
		"`zephon <command> --help` describes each command.\n"
		"Unmount with: fusermount3 -u MOUNTPOINT\n");
}

/* A dataset holds one open file per shard and index: lift the soft limit on open
 * files to the hard limit (1024 by default, a ~1 TB dataset at the default 1 GiB
 * shards) so large datasets open wherever the administrator allows it. */
static void raise_nofile_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int main(int argc, char **argv)
{
	raise_nofile_limit();
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("zephon %s\n", ZEPHON_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	if (argv[1][0] != '-' && argc >= 3)
		return cmd_mount(argc, argv);
	die_msg("unknown command '%s'; see zephon --help", argv[1]);
	return 2;
}
