/*
 * inode.h: the mount's static inode table. Every node of the tree is named by its inode
 * number alone, so nothing is allocated per lookup and FORGET has nothing to free.
 *
 *   bits 63..58  node kind (enum node; fs/nodes.c has a row for each)
 *   bits 57..40  rank, for nodes under /rank/<r> (ranks < 2^18)
 *   bits 39..0   step, for /rank/<r>/step/<t> (steps < 2^40); gsn G for
 *                /rank/<r>/at/<G> and /rank/<r>/from/<G> (G < 2^40); validation step t
 *                for /rank/<r>/validation/<t>
 *   bits 57..0   sample id, for /samples/<id> (ids < 2^58)
 * The root is FUSE_ROOT_ID (1), which no encoded inode can equal.
 * COMPATIBILITY: only within one mount; inode numbers are not persisted.
 */
#ifndef ZEPHON_INODE_H
#define ZEPHON_INODE_H

#include <stdint.h>

enum node {
	NODE_ROOT = 0,      /* FUSE_ROOT_ID */
	NODE_README = 1, NODE_STATUS, NODE_METRICS, NODE_CONTROL,
	NODE_RANKDIR,       /* /rank */
	NODE_SAMPLESDIR,    /* /samples */
	NODE_RANK,          /* /rank/<r> */
	NODE_NEXT, NODE_PEEK, NODE_STATE,
	NODE_STEPDIR,       /* /rank/<r>/step */
	NODE_STEP,          /* /rank/<r>/step/<t> */
	NODE_SAMPLE,        /* /samples/<id> */
	NODE_ATDIR,         /* /rank/<r>/at */
	NODE_AT,            /* /rank/<r>/at/<G> */
	NODE_VALDIR,        /* /rank/<r>/validation */
	NODE_VAL,           /* /rank/<r>/validation/<t> */
	NODE_FROMDIR,       /* /rank/<r>/from */
	NODE_FROM,          /* /rank/<r>/from/<G> */
	NODE_IDSDIR,        /* /rank/<r>/ids */
	NODE_IDS,           /* /rank/<r>/ids/<G> */
	NODE_COUNT
};

#define INODE_KIND_BITS 6
#define INODE_KIND_SHIFT (64 - INODE_KIND_BITS)
_Static_assert(NODE_COUNT <= (1 << INODE_KIND_BITS), "node kinds fit their bits");
#define INODE_RANK_BITS 18
#define INODE_STEP_BITS 40
#define INODE_ID_BITS INODE_KIND_SHIFT
_Static_assert(INODE_RANK_BITS + INODE_STEP_BITS <= INODE_KIND_SHIFT, "rank and step fit");
#define INODE_MAX_RANK ((UINT64_C(1) << INODE_RANK_BITS) - 1)
#define INODE_MAX_STEP ((UINT64_C(1) << INODE_STEP_BITS) - 1)
#define INODE_MAX_ID ((UINT64_C(1) << INODE_ID_BITS) - 1)

static inline uint64_t inode_make(enum node type, uint64_t rank, uint64_t step)
{
	if (type == NODE_ROOT)
		return 1;
	return ((uint64_t)type << INODE_KIND_SHIFT) | (rank << INODE_STEP_BITS) | step;
}

static inline uint64_t inode_sample(uint64_t id)
{
	return ((uint64_t)NODE_SAMPLE << INODE_KIND_SHIFT) | id;
}

static inline enum node inode_type(uint64_t ino)
{
	return ino == 1 ? NODE_ROOT : (enum node)(ino >> INODE_KIND_SHIFT);
}

static inline uint64_t inode_rank(uint64_t ino)
{
	return (ino >> INODE_STEP_BITS) & INODE_MAX_RANK;
}

static inline uint64_t inode_step(uint64_t ino)
{
	return ino & INODE_MAX_STEP;
}

static inline uint64_t inode_id(uint64_t ino)
{
	return ino & INODE_MAX_ID;
}

#endif
