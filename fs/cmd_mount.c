#include "cmd.h"

/* Placeholder until the issue that builds `zephon mount` lands. */
int cmd_mount(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	die_msg("mount: not built yet");
	return 1;
}
