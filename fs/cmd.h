/*
 * cmd.h: the subcommands of the `zephon` executable. Each takes the arguments after its
 * name (argv[0] is the subcommand name) and returns the process exit status:
 * 0 success, 1 failure of the work (corruption, I/O), 2 usage error.
 */
#ifndef ZEPHON_CMD_H
#define ZEPHON_CMD_H

#include <stddef.h>

int cmd_pack(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_journal(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_upload(int argc, char **argv);
/* `zephon mount DATASET MOUNTPOINT -o ...` and the bare `zephon DATASET MOUNTPOINT -o ...`
 * (argv[0] is then the program name). */
int cmd_mount(int argc, char **argv);

/* cli.c, shared by the subcommands: print "zephon: <msg>\n" to stderr. */
void die_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "20.6 MiB": bytes in binary units (B, KiB, MiB, ...), one decimal; every size the CLI
 * prints uses it. Writes into buf (len >= 16 holds any value) and returns buf. */
const char *human_size(double bytes, char *buf, size_t len);

#endif
