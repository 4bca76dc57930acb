/*
 * share.c: the pure reads of a mount, each one rank's share of B samples in one encoding
 * (every micro-batch of the step): step/<t> (a step of the mount's layout), at/<G> (the
 * B samples from gsn G), validation/<t> (a step of the split), and from/<G> (a run of
 * at/ shares, read as one file), plus samples/<id>. One description (struct share) names
 * the first three; nothing here claims, moves a cursor or notes anything in the journal.
 */
#include "serve_int.h"
#include "run.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where a share lies (share_locate): its layout (the mount's, or one of its W, B and m
 * from another gsn), the batch of it, and what a decode error names it ("step 7", "at
 * gsn 96"). */
struct located {
	struct layout layout;
	struct batch_spec spec;
	char what[48];
};

/* Build the located share (every micro-batch in one encoding) on a reader of the pool;
 * a decode error is logged as what it was for. Errors as batch_build, -ENOMEM. */
static int build_share_of(struct server *s, const struct located *at, struct batch **out)
{
	struct sample_reader *r = srv_reader_get(s);
	uint64_t bad = 0;
	int rc = -ENOTSUP;

	if (!r)
		return -ENOMEM;
	/* the samples as views of the dataset's mappings where the encoding allows: the
	 * kernel's copy is then the only one */
	if (encode_views_possible(at->spec.info, at->spec.format))
		rc = batch_encode(r, &at->spec, 1, (struct buf)BUF_INIT, out, &bad);
	if (rc == -ENOTSUP)
		rc = batch_encode(r, &at->spec, 0, srv_pool_take(s), out, &bad);
	srv_reader_put(s, r);
	if (rc == -EIO) {
		char msg[96];

		snprintf(msg, sizeof(msg), "rank %" PRIu64 " %s", at->spec.rank, at->what);
		srv_log_decode_error(s, msg, rc, bad);
	}
	return rc;
}

/* The length of rank's share of step (servable), from the order and the index without
 * decoding (encode_batch_len): arithmetic for npy and bin, a sum over the samples for
 * lines, -ENOTSUP for tar. */
static int step_len(struct server *s, uint64_t rank, uint64_t step, uint64_t *len)
{
	const struct layout *l = srv_layout(s);
	uint64_t gsn, count = layout_share(l), total = 0, part, n;
	uint64_t ids[1024];
	struct sample_reader *r;
	int rc = layout_micro_gsn(l, rank, step, 0, &gsn);

	if (rc)
		return rc;
	if (server_get_config(s)->format != FORMAT_LINES) /* npy, bin: arithmetic; tar: -ENOTSUP */
		return encode_batch_len(NULL, srv_info(s), server_get_config(s)->format, NULL,
					count, len);
	r = srv_reader_get(s);
	if (!r)
		return -ENOMEM;
	/* lines: a sum over the samples, taken a thousand ids at a time */
	for (uint64_t done = 0; !rc && done < count; done += part) {
		part = count - done < 1024 ? count - done : 1024;
		rc = order_fill(&server_get_config(s)->order, gsn + done, part, ids);
		if (!rc)
			rc = encode_batch_len(r, srv_info(s), FORMAT_LINES, ids, part, &n);
		if (!rc && __builtin_add_overflow(total, n, &total))
			rc = -EOVERFLOW;
	}
	srv_reader_put(s, r);
	if (!rc)
		*len = total;
	return rc;
}

int server_sample(struct server *s, uint64_t id, struct batch **out)
{
	struct sample_reader *r;
	struct batch *b;
	uint64_t bad = 0;
	int rc;

	if (id >= srv_info(s)->samples)
		return -ERANGE;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ids = malloc(sizeof(*b->ids));
	r = srv_reader_get(s);
	if (!b->ids || !r) {
		srv_reader_put(s, r);
		batch_free(b);
		return -ENOMEM;
	}
	b->ids[0] = id;
	b->count = 1;
	rc = encode_batch(&(struct encode_in){ r, srv_info(s), server_get_config(s)->format,
			  b->ids, 1 }, &b->data, &bad);
	srv_reader_put(s, r);
	if (rc) {
		if (rc == -EIO) {
			char what[40];

			snprintf(what, sizeof(what), "samples/%" PRIu64, id);
			srv_log_decode_error(s, what, rc, bad);
		}
		batch_free(b);
		return rc;
	}
	*out = b;
	return 0;
}

/* The bytes of one rank's share of a step in npy and bin, which every share has (W and B
 * are the mount's whatever the start gsn); -ENOTSUP for lines and tar, whose shares
 * differ. */
static int fixed_share_len(struct server *s, uint64_t *len)
{
	if (!server_shares_fixed(s))
		return -ENOTSUP;
	return encode_batch_len(NULL, srv_info(s), server_get_config(s)->format, NULL,
				layout_share(srv_layout(s)), len);
}

int server_shares_fixed(const struct server *s)
{
	return encode_format_fixed(server_get_config(s)->format);
}

uint64_t server_validation_steps(const struct server *s)
{
	return layout_whole_steps(srv_layout(s), server_get_config(s)->validation.n);
}


/* Where sh lies, into *at (at->spec points into at: do not copy it). 0, -ENOENT (rank
 * not served; validation: no split, or t past the last step), -EINVAL (a step before
 * S0), -EOVERFLOW (gsn + B past ORDER_MAX_GSN). */
static int share_locate(struct server *s, const struct share *sh, struct located *at)
{
	const struct server_config *c = server_get_config(s);
	uint64_t g;
	int rc = 0;

	if (!srv_find_rank(s, sh->rank))
		return -ENOENT;
	at->spec = (struct batch_spec){ srv_info(s), &c->order, &at->layout, c->format,
					sh->rank, 0, 0, 0 };
	switch (sh->kind) {
	case SHARE_STEP:
		if (sh->n < layout_start_step(&c->layout))
			return -EINVAL;
		at->layout = c->layout;
		at->spec.step = sh->n;
		snprintf(at->what, sizeof(at->what), "step %" PRIu64, sh->n);
		break;
	case SHARE_AT:
		snprintf(at->what, sizeof(at->what), "at gsn %" PRIu64, sh->n);
		rc = layout_at(&c->layout, sh->n, &at->layout);
		break;
	case SHARE_VALIDATION:
		if (sh->n >= server_validation_steps(s))
			return -ENOENT;
		at->spec.order = &c->validation;
		snprintf(at->what, sizeof(at->what), "validation step %" PRIu64, sh->n);
		/* validation step t: positions [t * B, (t + 1) * B) of the split, below V */
		rc = layout_gsn_after(&c->layout, 0, sh->n, &g) ? -EOVERFLOW :
		     layout_at(&c->layout, g, &at->layout);
		break;
	default:
		return -EINVAL;
	}
	if (!rc)
		at->spec.micros = layout_micros(&at->layout);
	return rc;
}

int server_share(struct server *s, const struct share *sh, struct batch **out)
{
	struct located at;
	int rc = share_locate(s, sh, &at);

	return rc ? rc : build_share_of(s, &at, out);
}

int server_share_len(struct server *s, const struct share *sh, uint64_t *len)
{
	struct located at;
	int rc = share_locate(s, sh, &at);

	if (rc)
		return rc;
	return sh->kind == SHARE_STEP ? step_len(s, sh->rank, at.spec.step, len) :
	       fixed_share_len(s, len);
}

int server_share_in_stream(struct server *s, const struct share *sh)
{
	struct layout at;

	switch (sh->kind) {
	case SHARE_STEP:
		return layout_step_in_stream(srv_layout(s), srv_limit(s), sh->n);
	case SHARE_AT:
		return layout_at(srv_layout(s), sh->n, &at) == 0 &&
		       layout_step_in_stream(&at, srv_limit(s), 0);
	case SHARE_VALIDATION:
		return sh->n < server_validation_steps(s);
	}
	return 0;
}

int server_run_size(struct server *s, uint64_t rank, uint64_t gsn, uint64_t *share,
		    uint64_t *size)
{
	struct share at = { SHARE_AT, rank, gsn };
	uint64_t steps;
	int rc = server_share_len(s, &at, share);

	if (rc)
		return rc;
	steps = layout_steps_below(srv_layout(s), gsn, srv_limit(s));
	*size = run_bytes(*share, steps);
	return 0;
}

int server_run_open(struct server *s, uint64_t rank, uint64_t gsn, struct share_run **out)
{
	struct share_run *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return -ENOMEM;
	r->s = s;
	r->rank = rank;
	r->gsn = gsn;
	r->share_samples = layout_share(srv_layout(s));
	rc = server_run_size(s, rank, gsn, &r->share, &r->size);
	if (rc) {
		free(r);
		return rc;
	}
	pthread_mutex_init(&r->mu, NULL);
	*out = r;
	return 0;
}

void share_run_free(struct share_run *r)
{
	if (!r)
		return;
	server_batch_free(r->s, r->kept);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

/* Share k of the run into rd (built, or the one the run kept), and the iovecs of its
 * bytes [within, within + take) after rd's. 0, -ENOMEM, -EIO (a share of another size)
 * or batch_build's errors. */
static int run_slice(struct share_run *r, struct share_read *rd, uint64_t k,
		     uint64_t within, size_t take, size_t max_iov)
{
	struct batch *sh = r->kept && r->kept_k == k ? r->kept : NULL;
	size_t room, got;
	int rc;

	if (!sh) {
		struct share at = { SHARE_AT, r->rank, 0 };

		if (layout_gsn_after(srv_layout(r->s), r->gsn, k, &at.n))
			return -EOVERFLOW;
		if (ARRAY_GROW(rd->held, rd->cap_held, rd->nheld + 1))
			return -ENOMEM;
		rc = server_share(r->s, &at, &sh);
		if (!rc && batch_len(sh) != r->share) {
			server_batch_free(r->s, sh);
			rc = -EIO; /* npy and bin shares all have one size */
		}
		if (rc)
			return rc;
		rd->held[rd->nheld++] = sh;
	}
	room = max_iov - rd->niov < 2 + sh->nviews ? max_iov - rd->niov : 2 + sh->nviews;
	if (ARRAY_GROW(rd->iov, rd->cap_iov, rd->niov + room))
		return -ENOMEM;
	/* got < take: the iovecs a reply may have are spent, a short read */
	rd->niov += batch_slice(sh, within, take, rd->iov + rd->niov, room, &got);
	rd->bytes += got;
	return 0;
}

int share_run_read(struct share_run *r, uint64_t off, size_t size, size_t max_iov,
		   struct share_read *rd)
{
	uint64_t pos = off, end;
	int rc = 0;

	memset(rd, 0, sizeof(*rd));
	pthread_mutex_lock(&r->mu);
	if (off >= r->size || !r->share)
		return 0;
	end = r->size - pos < size ? r->size : pos + size;
	while (pos < end && !rc && rd->niov < max_iov) {
		struct run_piece piece;
		size_t before = rd->bytes;

		run_piece(r->share, pos, end, &piece);
		rc = run_slice(r, rd, piece.share, piece.within, (size_t)piece.len, max_iov);
		pos += rd->bytes - before;
	}
	rd->end = pos;
	return rc;
}

void share_run_read_end(struct share_run *r, struct share_read *rd, int ok)
{
	/* the run keeps the last share built; every other one goes */
	if (rd->nheld && ok) {
		server_batch_free(r->s, r->kept);
		r->kept = rd->held[--rd->nheld];
		r->kept_k = run_shares(r->share, rd->end - 1);
	}
	pthread_mutex_unlock(&r->mu);
	for (size_t i = 0; i < rd->nheld; i++)
		server_batch_free(r->s, rd->held[i]);
	free(rd->held);
	free(rd->iov);
	memset(rd, 0, sizeof(*rd));
}

int server_ids_possible(enum encode_format format, int flat)
{
	return encode_format_fixed(format) && flat;
}

int server_ids_served(const struct server *s)
{
	return server_ids_possible(server_get_config(s)->format, srv_flat(s));
}

uint64_t server_ids_share_bytes(const struct server *s)
{
	return layout_share(srv_layout(s)) * sizeof(uint64_t);
}

int server_ids_size(struct server *s, uint64_t rank, uint64_t gsn, uint64_t *size)
{
	uint64_t share, run, per, steps;
	int rc = server_run_size(s, rank, gsn, &share, &run);

	if (rc)
		return rc;
	if (layout_share(srv_layout(s)) > UINT64_MAX / sizeof(uint64_t))
		return -EOVERFLOW;
	per = server_ids_share_bytes(s);
	steps = run_shares(share, run);
	*size = run_bytes(per, steps); /* an endless stream, cut as from/ is */
	return 0;
}

int share_run_ids(struct share_run *r, uint64_t k, uint64_t *ids)
{
	uint64_t g;

	if (layout_gsn_after(srv_layout(r->s), r->gsn, k, &g))
		return -EOVERFLOW;
	return server_share_ids(r->s, r->rank, g, ids);
}

void share_run_ahead(struct share_run *r, uint64_t off, uint64_t len, uint64_t unit,
		     int checked)
{
	struct run_piece first;
	uint64_t g;

	if (!unit || !len)
		return;
	/* the steps the read spans, and one more */
	run_piece(unit, off, off + len, &first);
	if (!layout_gsn_after(srv_layout(r->s), r->gsn, first.share, &g))
		server_readahead(r->s, r->rank, g, run_shares_up(unit, len) + 1, checked);
}
