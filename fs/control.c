/*
 * control.c: /control's commands. Each write() is one command, applied whole or not at
 * all: "checkpoint STEP", "checkpoint samples:G@S" or "rewind STEP", a trailing newline
 * optional; what is refused is logged (and kept for /status by the log).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "ops_int.h"
#include "parse.h"

/* "samples:G@S" of `checkpoint samples:G@S`, each number as parse_u64_canonical() takes
 * it: 0 or -EINVAL. */
static int parse_samples_at(const char *arg, uint64_t *gsn, uint64_t *step)
{
	const char *p = arg + strlen("samples:");
	size_t n = strcspn(p, "@");
	char g[24];

	if (strncmp(arg, "samples:", 8) || !p[n] || n >= sizeof(g))
		return -EINVAL;
	memcpy(g, p, n);
	g[n] = 0;
	return parse_u64_canonical(g, gsn) || parse_u64_canonical(p + n + 1, step) ? -EINVAL : 0;
}

/* One control command: "checkpoint STEP", "checkpoint samples:G@S" or "rewind STEP".
 * 0, -EINVAL (malformed or refused; logged), -EIO, -ENOSYS. */
static int control_line(struct zmount *z, const char *line)
{
	char cmd[16], arg[64], extra[2]; /* the words; numbers go to parse.h */
	uint64_t step, gsn;

	if (sscanf(line, "%15s %63s %1s", cmd, arg, extra) == 2 && !strcmp(cmd, "checkpoint") &&
	    !strncmp(arg, "samples:", 8)) {
		if (parse_samples_at(arg, &gsn, &step)) {
			zmount_log(LOG_WARNING, "control: \"%s\" is not \"checkpoint samples:G@S\"", line);
			return -EINVAL;
		}
		return server_checkpoint_at(z->srv, gsn, step);
	}
	if (sscanf(line, "%15s %63s %1s", cmd, arg, extra) != 2 ||
	    parse_u64_canonical(arg, &step)) {
		zmount_log(LOG_WARNING, "control: \"%s\" is not \"checkpoint STEP\" or \"rewind STEP\"", line);
		return -EINVAL;
	}
	if (!strcmp(cmd, "checkpoint"))
		return server_checkpoint(z->srv, step);
	if (!strcmp(cmd, "rewind"))
		return server_rewind(z->srv, step);
	zmount_log(LOG_WARNING, "control: unknown command \"%s\" (checkpoint STEP | rewind STEP)", cmd);
	return -EINVAL;
}

/* Apply one write (size < CONTROL_MAX) and reply: write, EINVAL, EIO, ENOSYS. */
void control_write(struct zmount *z, fuse_req_t req, const char *data, size_t size)
{
	char line[CONTROL_MAX];
	size_t len = size;
	int rc;

	if (len && data[len - 1] == '\n')
		len--;
	if (len && data[len - 1] == '\r')
		len--;
	memcpy(line, data, len);
	line[len] = 0;
	if (memchr(line, '\n', len) || strlen(line) != len) {
		zmount_log(LOG_WARNING, "control: one command per write, nothing applied");
		rc = -EINVAL;
	} else {
		rc = control_line(z, line);
	}
	pthread_mutex_lock(&z->lock);
	z->control_writes++;
	z->control_errors += rc != 0;
	pthread_mutex_unlock(&z->lock);
	if (rc)
		fuse_reply_err(req, rc == -ENOSYS ? ENOSYS : rc == -EINVAL ? EINVAL : EIO);
	else
		fuse_reply_write(req, size);
}

