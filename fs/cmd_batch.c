#include "cmd.h"

/* Placeholder until the issue that builds `zephon batch` lands. */
int cmd_batch(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	die_msg("batch: not built yet");
	return 1;
}
