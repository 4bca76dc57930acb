/*
 * served.h: what a mount serves: one packed dataset, or a mixture of several
 * (mixspec.h, docs/design.md §11), opened as one union of sample ids, with the order of
 * its samples: the seed and shuffle, the validation split, and for a mixture the weight
 * segments (mix.h) rebuilt from the journal's layout history.
 *
 * Sequence for a mount: served_open() (the dataset or spec), served_set_order() (seed,
 * shuffle, weights option, validation option), then journal_open() with
 * served_ident(), served_replay() over the journal's layouts, journal_start(), and
 * served_start() at the resolved G0. `zephon batch` does the same without a journal.
 * One owner; read-only (and thread-safe) once the mount serves.
 */
#ifndef ZEPHON_SERVED_H
#define ZEPHON_SERVED_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "journal.h"
#include "mix.h"
#include "mixspec.h"
#include "order.h"

struct served {
	struct dataset *ds;        /* the union (a plain dataset: itself); owned */
	int is_mixture;            /* opened from a spec file */
	struct mixspec spec;       /* is_mixture: the sources as the spec names them */
	size_t k;                  /* sources (1 for a plain dataset) */
	uint64_t *weights;         /* [k] integer weights this mount serves from its start */
	int weights_given;         /* weights= was given (else the spec's, or the history's) */
	size_t history;            /* layout rows whose weights served_replay() applied */
	char weights_text[JOURNAL_WEIGHTS_MAX]; /* the same as "7,3" ("" for a plain dataset) */
	struct mixture *mix;       /* is_mixture: the weight segments; owned */
	struct order order;        /* the order of the union's ids (order.mix = mix) */
	uint64_t split_num, split_den; /* validation fraction (0/1: none) */
	uint64_t *holdout;         /* [k] V_s: held-out samples of each source */
	uint64_t holdout_total;    /* sum of V_s: the validation stream's length */
	char split[32];            /* "" or "validation=NUM/DEN" (NUM, DEN < 10^7), the journal identity's */
	char path[4096];           /* the dataset directory or the spec file, absolute */
};

/* Open a packed dataset directory, or a mixture spec file and every dataset it names.
 * 0, or -errno with a one-line reason in err: -ENOENT (no such path), -EINVAL (a bad
 * spec, datasets that do not mix), and dataset_open()'s errors. On failure nothing
 * stays open. */
int served_open(const char *path, struct served *st, char *err, size_t errlen);
void served_close(struct served *st);

/* The options of the order a mount serves. */
struct served_options {
	uint64_t seed;
	enum order_shuffle shuffle;
	/* NULL: the spec's, or the journal's history, see served_records_weights(); else a
	 * weight list mix_weights_parse() reads, by source name or position; only for a
	 * mixture */
	const char *weights;
	/* NULL: no split; else a fraction in (0, 1/2], "0.01" or "1/100", of every source
	 * held out; each source keeps at least one training sample; a fraction that holds
	 * out nothing is refused */
	const char *validation;
};

/* Build the order of opt. 0, or -EINVAL (an option; a one-line reason in why), -EBADMSG
 * (the spec's own weights cannot be made exact), -ENOMEM. */
int served_set_order(struct served *st, const struct served_options *opt, char *why,
		     size_t why_len);

/* The journal identity of this stream (fingerprint of the union, seed, shuffle, split). */
void served_ident(const struct served *st, struct journal_ident *out);

/* Replay the weights of the journal's layout rows (journal_layouts(): in record order),
 * from the latest row started by `fresh` on, so that the stream before this mount's
 * start is the one those mounts served. Rows without weights keep the weights in force.
 * A mount that starts with resume=fresh passes n = 0: its own start is the latest fresh
 * one, so nothing before it counts and its weights (the spec's or weights=) hold.
 * A plain dataset ignores it. 0, -EINVAL (a row's weights do not fit the sources; why
 * says which), -ENOMEM. */
int served_replay(struct served *st, const struct journal_layout *rows, size_t n,
		  char *why, size_t why_len);

/* Does this mount set weights from its start (and record them in its layout row)? Yes
 * when weights= was given, or when the journal has no weight history (a new journal, or
 * resume=fresh: the spec's weights). Otherwise the recorded history goes on as it was,
 * and the row records none. 1 or 0 (0 for a plain dataset). */
int served_records_weights(const struct served *st);

/* Would this mount change the weights in force at gsn g0? 1 or 0. */
int served_changes_weights(const struct served *st, uint64_t g0);

/* Refuse a weight change inside a step: a start at gsn g that changes the weights in
 * force there, when g is not on a step boundary of the latest of rows (journal_layouts(),
 * after the latest fresh start) with start_samples <= g. (A start by resume=fresh has no
 * steps before it: its caller asks nothing.) 0, or -EINVAL with why naming the two
 * boundaries around g. */
int served_check_change(const struct served *st, const struct journal_layout *rows,
			size_t n, uint64_t g, char *why, size_t why_len);

/* This mount's weights from gsn g0 on (the resolved G0) when it sets them
 * (served_records_weights()); otherwise st->weights becomes the weights in force at g0,
 * for /status. 0, -ENOMEM. */
int served_start(struct served *st, uint64_t g0);

/* Source of union id and its local id (a plain dataset: 0 and id). */
size_t served_source_of(const struct served *st, uint64_t id, uint64_t *local);
/* The name of source s (a plain dataset: "" ). */
const char *served_source_name(const struct served *st, size_t s);

#endif
