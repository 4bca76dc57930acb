/*
 * overlap.c: several processes reading one rank's next at once split its batches
 * between them, out of order (a DataLoader with num_workers >= 2 over next). Each
 * handle of next is noted while open, by rank (z->next_holders); an open that finds a
 * handle of another process is counted (/status, /metrics) and said, once a minute per
 * rank.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "ops_int.h"

/* The process (thread group) of thread tid, or 0 when it is gone or a zombie: a process
 * that has exited holds no file. FUSE names the calling thread, not its process. */
static uint32_t tgid_of(uint32_t tid)
{
	char path[40], line[128];
	unsigned long tgid = 0;
	int alive = 1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%" PRIu32 "/status", tid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char state;

		if (sscanf(line, "State: %c", &state) == 1)
			alive = state != 'Z' && state != 'X';
		else if (sscanf(line, "Tgid: %lu", &tgid) == 1)
			break;
	}
	fclose(f);
	return alive ? (uint32_t)tgid : 0;
}

/* Count an open of rank's next by process mine while process theirs held it, and say
 * so (once a minute per rank). Under z->lock. */
static void next_overlap_locked(struct zmount *z, uint64_t rank, uint32_t mine, uint32_t theirs)
{
	struct next_overlap *o;
	size_t i = 0;

	while (i < z->noverlaps && z->overlaps[i].rank < rank)
		i++;
	if (i == z->noverlaps || z->overlaps[i].rank != rank) {
		if (ARRAY_GROW(z->overlaps, z->overlaps_cap, z->noverlaps + 1))
			return;
		o = z->overlaps;
		memmove(o + i + 1, o + i, (z->noverlaps - i) * sizeof(*o));
		o[i] = (struct next_overlap){ .rank = rank };
		z->noverlaps++;
	}
	o = &z->overlaps[i];
	o->opens++;
	z->overlaps_total++;
	zmount_log_limited(&o->log, 60, LOG_WARNING, "rank %" PRIu64 ": processes %" PRIu32 " and %"
			PRIu32 " hold rank/%" PRIu64 "/next open at once (%" PRIu64 " such opens "
			"so far); every open claims the rank's next batch, so they split the "
			"batches between them and the trainer gets them out of order (a DataLoader "
			"with num_workers >= 2 over next does this); read next from one process, "
			"or read rank/%" PRIu64 "/step/<t> from several",
			rank, theirs, mine, rank, o->opens, rank);
}

#define HOLDERS_CHECKED 8

/* Reads /proc only when another thread holds the rank's next. */
void next_hold(struct zmount *z, struct open_file *f, uint64_t rank, uint32_t tid)
{
	struct open_file **head = &z->next_holders[rank % ZMOUNT_HOLD_BUCKETS];
	uint32_t others[HOLDERS_CHECKED], mine, theirs = 0;
	size_t n = 0;

	f->rank = rank;
	f->tid = tid;
	pthread_mutex_lock(&z->lock);
	f->hold_prev = NULL;
	f->hold_next = *head;
	if (*head)
		(*head)->hold_prev = f;
	*head = f;
	f->holding = 1;
	for (const struct open_file *g = f->hold_next; g && tid && n < HOLDERS_CHECKED; g = g->hold_next) {
		size_t k = 0;

		while (k < n && others[k] != g->tid)
			k++;
		if (g->rank == rank && g->tid && g->tid != tid && k == n)
			others[n++] = g->tid;
	}
	pthread_mutex_unlock(&z->lock);
	if (!n || !(mine = tgid_of(tid)))
		return;
	for (size_t k = 0; k < n && !theirs; k++) {
		uint32_t t = tgid_of(others[k]);

		if (t && t != mine)
			theirs = t;
	}
	if (!theirs)
		return; /* threads of one process, or holders that have exited */
	pthread_mutex_lock(&z->lock);
	next_overlap_locked(z, rank, mine, theirs);
	pthread_mutex_unlock(&z->lock);
}

void next_unhold_locked(struct zmount *z, struct open_file *f)
{
	if (f->holding) {
		if (f->hold_prev)
			f->hold_prev->hold_next = f->hold_next;
		else
			z->next_holders[f->rank % ZMOUNT_HOLD_BUCKETS] = f->hold_next;
		if (f->hold_next)
			f->hold_next->hold_prev = f->hold_prev;
		f->holding = 0;
	}
}

