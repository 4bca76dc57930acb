/*
 * cli.c: what the subcommands share (cmd.h): their messages and the sizes they print.
 * Below every cmd_*.c and main.c, which dispatches to them: it calls none of them.
 */
#include <stdarg.h>
#include <stdio.h>

#include "cmd.h"

void die_msg(const char *fmt, ...)
{
	va_list ap;

	fputs("zephon: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

const char *human_size(double bytes, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	unsigned u = 0;

	while (bytes >= 1024 && u < 5) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
	return buf;
}
