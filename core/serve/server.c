/*
 * server.c: struct server, its one home (serve_int.h says what the other files of the
 * server read of it, and how): the dataset and configuration it serves, its served
 * ranks' states, the journal, the counters, and the parts the other files own. Below
 * every other file of the server: it calls none of them.
 */
#include "serve_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

const double server_latency_bounds_us[SERVER_LATENCY_BUCKETS - 1] = {
	25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000, 250000,
};

struct server {
	const struct dataset *ds;
	const struct dataset_info *info;
	int flat;                /* dataset_flat(ds), once at srv_alloc: ids/ and the
	                          * read-ahead find payloads from the id */
	int stall_logged;        /* server_finished() said the journal stalls (atomic) */
	int closing;             /* atomic: a clean stop refuses claims (server_stop_claims) */
	struct server_config cfg;
	struct rankset ranks;
	struct journal *journal;
	uint64_t limit;          /* first gsn past the end of the stream */
	struct rank_state *rs;   /* one per served rank, in rank order */
	size_t nranks;
	pthread_mutex_t qlock;   /* guards stats */
	struct server_stats stats;
	struct srv_parts parts;  /* the parts the other files own */
};

uint64_t srv_journal_ci(struct server *s, const struct rank_state *rs)
{
	uint64_t step, micro, ci;

	if (s->journal && journal_cursor(s->journal, rs->rank, &step, &micro) == 0 &&
	    layout_pos_ci(&s->cfg.layout, step, micro, &ci) == 0)
		return ci;
	return rs->ci;
}

/* cfg as server_new() takes it: 0 or -EINVAL. */
static int config_check(const struct dataset *ds, const struct server_config *cfg)
{
	if (!layout_valid(&cfg->layout) || !cfg->ranks || !cfg->ranks->count ||
	    cfg->prefetch > SERVER_MAX_PREFETCH || cfg->workers < 1 ||
	    cfg->workers > SERVER_MAX_WORKERS ||
	    cfg->order.n + cfg->order.holdout != dataset_info(ds)->samples)
		return -EINVAL;
	for (size_t i = 0; i < cfg->ranks->count; i++)
		if (cfg->ranks->ranks[i] >= layout_world_size(&cfg->layout))
			return -EINVAL;
	return 0;
}

int srv_alloc(const struct dataset *ds, const struct server_config *cfg, struct journal *j,
	      struct server **out)
{
	struct server *s;

	if (config_check(ds, cfg))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	*out = s;
	s->ds = ds;
	s->info = dataset_info(ds);
	s->flat = dataset_flat(ds); /* two index entries of every shard, read once */
	s->cfg = *cfg;
	s->journal = j;
	s->limit = order_limit(&cfg->order, cfg->epochs);
	pthread_mutex_init(&s->qlock, NULL);
	s->ranks.ranks = malloc(cfg->ranks->count * sizeof(uint64_t));
	s->rs = calloc(cfg->ranks->count, sizeof(*s->rs));
	if (!s->ranks.ranks || !s->rs)
		return -ENOMEM;
	memcpy(s->ranks.ranks, cfg->ranks->ranks, cfg->ranks->count * sizeof(uint64_t));
	s->ranks.count = cfg->ranks->count;
	s->cfg.ranks = &s->ranks;
	for (size_t i = 0; i < s->ranks.count; i++) {
		struct rank_state *rs = &s->rs[i];

		rs->rank = s->ranks.ranks[i];
		pthread_mutex_init(&rs->lock, NULL);
		pthread_mutex_init(&rs->view_lock, NULL);
		pthread_cond_init(&rs->decoded, NULL);
		if (cfg->prefetch) {
			rs->slots = calloc(cfg->prefetch, sizeof(*rs->slots));
			if (!rs->slots)
				return -ENOMEM;
		}
		s->nranks++;
		rs->ci = srv_journal_ci(s, rs); /* normally S0: where journal_start put it */
		delivery_init(&rs->dv, rs->ci);
	}
	return 0;
}

void srv_release(struct server *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nranks; i++) {
		struct rank_state *rs = &s->rs[i];

		free(rs->slots);
		free(rs->last.ids);
		delivery_release(&rs->dv);
		pthread_mutex_destroy(&rs->lock);
		pthread_mutex_destroy(&rs->view_lock);
		pthread_cond_destroy(&rs->decoded);
	}
	free(s->rs);
	pthread_mutex_destroy(&s->qlock);
	rankset_release(&s->ranks);
	free(s);
}

const struct server_config *server_get_config(const struct server *s)
{
	return &s->cfg;
}

const struct dataset *srv_dataset(const struct server *s)
{
	return s->ds;
}

const struct dataset_info *srv_info(const struct server *s)
{
	return s->info;
}

int srv_flat(const struct server *s)
{
	return s->flat;
}

uint64_t srv_limit(const struct server *s)
{
	return s->limit;
}

struct journal *srv_journal(const struct server *s)
{
	return s->journal;
}

size_t srv_nranks(const struct server *s)
{
	return s->nranks;
}

struct rank_state *srv_rank_at(struct server *s, size_t i)
{
	return &s->rs[i];
}

size_t srv_rank_index(const struct server *s, const struct rank_state *rs)
{
	return (size_t)(rs - s->rs);
}

struct rank_state *srv_find_rank(struct server *s, uint64_t rank)
{
	ssize_t i = rankset_index(&s->ranks, rank); /* rs[i] is ranks.ranks[i]'s */

	return i < 0 ? NULL : &s->rs[i];
}

void srv_close(struct server *s)
{
	__atomic_store_n(&s->closing, 1, __ATOMIC_RELEASE);
}

int srv_closing(const struct server *s)
{
	return __atomic_load_n(&s->closing, __ATOMIC_ACQUIRE);
}

int srv_stall_note(struct server *s, int stalled)
{
	return __atomic_exchange_n(&s->stall_logged, stalled, __ATOMIC_RELAXED);
}

struct srv_parts *srv_parts(struct server *s)
{
	return &s->parts;
}

struct srv_log *srv_logger(struct server *s)
{
	return s->parts.log;
}

struct srv_pools *srv_pools(struct server *s)
{
	return s->parts.pools;
}

struct srv_ahead *srv_ahead_of(struct server *s)
{
	return s->parts.ahead;
}

struct claimtab *server_claimtab(struct server *s)
{
	return s->parts.claims;
}

void srv_count(struct server *s, enum srv_counter c, uint64_t n)
{
	pthread_mutex_lock(&s->qlock);
	switch (c) {
	case SRV_PREFETCH_DECODED: s->stats.prefetch_decoded += n; break;
	case SRV_DECODE_ERRORS: s->stats.decode_errors += n; break;
	case SRV_READAHEAD_SAMPLES: s->stats.readahead_samples += n; break;
	case SRV_READAHEAD_RESIDENT: s->stats.readahead_resident += n; break;
	case SRV_JOURNAL_ERRORS: s->stats.journal_errors += n; break;
	}
	pthread_mutex_unlock(&s->qlock);
}

void srv_count_claim(struct server *s, const struct srv_claim_count *c)
{
	unsigned k = 0;

	while (k < SERVER_LATENCY_BUCKETS - 1 && c->us > server_latency_bounds_us[k])
		k++;
	pthread_mutex_lock(&s->qlock);
	if (c->rc == 0) {
		s->stats.claims++;
		s->stats.batch_bytes += c->bytes;
		s->stats.claim_latency[k]++;
		s->stats.claim_latency_sum_s += c->us * 1e-6;
		if (c->hit)
			s->stats.prefetch_hits++;
		else
			s->stats.prefetch_misses++;
	} else if (c->rc == -ENODATA) {
		s->stats.end_of_stream++;
	} else {
		s->stats.claim_errors++;
	}
	if (c->journal_s >= 0) {
		s->stats.journal_commits++;
		s->stats.journal_commit_sum_s += c->journal_s;
	}
	pthread_mutex_unlock(&s->qlock);
}

void server_get_stats(struct server *s, struct server_stats *out)
{
	pthread_mutex_lock(&s->qlock);
	*out = s->stats;
	pthread_mutex_unlock(&s->qlock);
}
