#include "cmd.h"

/* Placeholder until the issue that builds `zephon journal` lands. */
int cmd_journal(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	die_msg("journal: not built yet");
	return 1;
}
