#include "cmd.h"

/* Placeholder until the issue that builds `zephon info` lands. */
int cmd_info(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	die_msg("info: not built yet");
	return 1;
}
