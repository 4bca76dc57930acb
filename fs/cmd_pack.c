#include "cmd.h"

/* Placeholder until the issue that builds `zephon pack` lands. */
int cmd_pack(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	die_msg("pack: not built yet");
	return 1;
}
