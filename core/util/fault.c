#include "fault.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "parse.h"

static const char *const names[FAULT_POINTS] = {
	[FAULT_CLAIM] = "claim",
	[FAULT_READ_END] = "read-end",
	[FAULT_FLUSH] = "flush",
	[FAULT_FLUSH_REPLIED] = "flush-replied",
	[FAULT_DELIVERY_COMMITTED] = "delivery-committed",
	[FAULT_RELEASE] = "release",
};

static int armed = -1;          /* the armed point, -1: none */
static uint64_t armed_at;       /* its passage that stops the process */
static uint64_t passages;       /* of the armed point so far (atomic) */

const char *fault_name(int p)
{
	return p >= 0 && p < FAULT_POINTS ? names[p] : NULL;
}

int fault_init(const char *spec)
{
	const char *colon;
	uint64_t n = 1;
	size_t len;

	armed = -1;
	passages = 0;
	if (!spec || !*spec)
		return 0;
	colon = strchr(spec, ':');
	len = colon ? (size_t)(colon - spec) : strlen(spec);
	if (colon && (parse_u64(colon + 1, &n) || n < 1 || n > UINT32_MAX))
		return -EINVAL;
	for (int p = 0; p < FAULT_POINTS; p++)
		if (strlen(names[p]) == len && !memcmp(names[p], spec, len)) {
			armed_at = n;
			armed = p;
			return 0;
		}
	return -EINVAL;
}

void fault_point(enum fault_point p)
{
	if (__atomic_load_n(&armed, __ATOMIC_RELAXED) != (int)p)
		return;
	if (__atomic_add_fetch(&passages, 1, __ATOMIC_ACQ_REL) == armed_at)
		raise(SIGSTOP);
}
