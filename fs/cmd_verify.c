#include "cmd.h"

/* Placeholder until the issue that builds `zephon verify` lands. */
int cmd_verify(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	die_msg("verify: not built yet");
	return 1;
}
