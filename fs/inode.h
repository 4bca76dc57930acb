/*
 * inode.h: the mount's static inode table. Every node of the tree is named by its inode
 * number alone, so nothing is allocated per lookup and FORGET has nothing to free.
 *
 *   bits 63..60  node type (enum node)
 *   bit  59      in NODE_ATDIR and NODE_AT: /rank/<r>/validation(/<t>) instead of at/
 *   bit  58      in NODE_ATDIR and NODE_AT: /rank/<r>/from(/<G>) instead of at/
 *   bits 57..40  rank, for nodes under /rank/<r> (ranks < 2^18)
 *   bits 39..0   step, for /rank/<r>/step/<t> (steps < 2^40); gsn G for
 *                /rank/<r>/at/<G> and /rank/<r>/from/<G> (G < 2^40); validation step t
 *   bits 59..0   sample id, for /samples/<id> (ids < 2^60)
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
	NODE_COUNT
};
_Static_assert(NODE_COUNT <= 16, "node type takes 4 bits");

#define INODE_RANK_BITS 18
#define INODE_STEP_BITS 40
#define INODE_ID_BITS 60
#define INODE_MAX_RANK ((UINT64_C(1) << INODE_RANK_BITS) - 1)
#define INODE_MAX_STEP ((UINT64_C(1) << INODE_STEP_BITS) - 1)
#define INODE_MAX_ID ((UINT64_C(1) << INODE_ID_BITS) - 1)
/* The flag that makes NODE_ATDIR and NODE_AT the validation directory and its files. */
#define INODE_VALIDATION (UINT64_C(1) << 59)
/* The flag that makes them /rank/<r>/from and its files. */
#define INODE_FROM (UINT64_C(1) << 58)

static inline uint64_t inode_make(enum node type, uint64_t rank, uint64_t step)
{
	if (type == NODE_ROOT)
		return 1;
	return ((uint64_t)type << 60) | (rank << INODE_STEP_BITS) | step;
}

static inline uint64_t inode_sample(uint64_t id)
{
	return ((uint64_t)NODE_SAMPLE << 60) | id;
}

static inline enum node inode_type(uint64_t ino)
{
	return ino == 1 ? NODE_ROOT : (enum node)(ino >> 60);
}

static inline uint64_t inode_rank(uint64_t ino)
{
	return (ino >> INODE_STEP_BITS) & INODE_MAX_RANK;
}

static inline int inode_is_validation(uint64_t ino)
{
	enum node t = inode_type(ino);

	return (t == NODE_ATDIR || t == NODE_AT) && (ino & INODE_VALIDATION);
}

static inline int inode_is_from(uint64_t ino)
{
	enum node t = inode_type(ino);

	return (t == NODE_ATDIR || t == NODE_AT) && (ino & INODE_FROM);
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
