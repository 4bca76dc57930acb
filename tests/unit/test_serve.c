/*
 * test_serve.c: the mount's server (core/serve/serve.h, share.c, prefetch.c, claim.h) over
 * small packed datasets, without FUSE and without a journal: claims hand out the
 * micro-batches batch_build() builds, in order, each once, from the prefetch ring or
 * not; the pure shares (step, at, validation) equal the batches they name and their
 * lengths equal what they build; a from/ run reads the at/ shares back to back, in any
 * split of reads; errors for unserved ranks, steps before S0, validation without a
 * split, the end of a finite stream; the claim's lifecycle (open count, the latest claim
 * of a process, deliver-once, consumed_samples); the refill a paced reader's release
 * starts; and claims and releases of one rank
 * from several threads at once (also what the ThreadSanitizer build runs).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "claim.h"
#include "clock.h"
#include "dataset.h"
#include "pack.h"
#include "serve.h"
#include "test_files.h"
#include "test_layout.h"

static void pack_to(const char *out, const char *input, int tokens)
{
	struct pack_opts o;

	pack_opts_init(&o);
	o.shard_bytes = 8 << 10;
	if (tokens) {
		o.have_dtype = 1;
		o.dtype = DTYPE_UINT16;
		o.seq_len = 8;
		o.compress = 0;
	}
	pack_one_or_fail(&o, input, out);
}

/* 600 lines of varying length, and 4,800 uint16 tokens (600 samples of 8) */
static void make_datasets(void)
{
	struct buf all = BUF_INIT;
	uint16_t tok[4800];
	char line[160];

	for (unsigned k = 0; k < 600; k++) {
		int len = snprintf(line, sizeof(line), "{\"text\": \"line %u %.*s\"}\n", k,
				   (int)(k % 61), "the quick brown fox jumps over the lazy dog again "
				   "and again and");

		REQUIRE(buf_append(&all, line, (size_t)len) == 0);
	}
	write_file(tmp_path("lines.jsonl"), all.data, all.len);
	pack_to(tmp_path("lines"), tmp_path("lines.jsonl"), 0);
	for (unsigned i = 0; i < 4800; i++)
		tok[i] = (uint16_t)(i * 7 % 5000);
	write_file(tmp_path("tok.bin"), tok, sizeof(tok));
	pack_to(tmp_path("tok"), tmp_path("tok.bin"), 1);
	buf_release(&all);
}

struct fixture {
	struct dataset *ds;
	struct rankset ranks;
	struct server_config cfg;
	struct server *s;
	struct sample_reader *r;
};

/* A server over dataset `name`: W=2, B=8, m=2 (A=2), both ranks served unless only_rank
 * >= 0, a validation split of holdout samples when holdout > 0. */
static void setup(struct fixture *fx, const char *name, enum encode_format f, uint64_t epochs,
		  unsigned prefetch, int only_rank, uint64_t holdout)
{
	char err[512] = "";
	uint64_t n;

	memset(fx, 0, sizeof(*fx));
	REQUIRE(dataset_open(tmp_path(name), &fx->ds, err, sizeof(err)) == 0);
	n = dataset_info(fx->ds)->samples;
	REQUIRE(rankset_parse(only_rank >= 0 ? (only_rank ? "1" : "0") : "0-1", 2, &fx->ranks,
			      err, sizeof(err)) == 0);
	fx->cfg.layout = test_layout(2, 8, 2, 0, 0);
	fx->cfg.ranks = &fx->ranks;
	REQUIRE(order_init(&fx->cfg.order, n, 7, ORDER_SHUFFLE_GLOBAL) == 0);
	if (holdout) {
		REQUIRE(order_set_holdout(&fx->cfg.order, holdout, 99) == 0);
		REQUIRE(order_validation(&fx->cfg.order, &fx->cfg.validation) == 0);
	}
	fx->cfg.epochs = epochs;
	fx->cfg.format = f;
	fx->cfg.prefetch = prefetch;
	fx->cfg.workers = 2;
	REQUIRE(server_new(fx->ds, &fx->cfg, NULL, &fx->s) == 0);
	fx->r = sample_reader_new(fx->ds);
	REQUIRE(fx->r);
}

static void teardown(struct fixture *fx)
{
	server_free(fx->s);
	sample_reader_free(fx->r);
	rankset_release(&fx->ranks);
	dataset_close(fx->ds);
}

/* The bytes of batch b, data then views. */
static void bytes_of(const struct batch *b, struct buf *out)
{
	struct iovec iov[64];
	size_t got, n = batch_slice(b, 0, (size_t)batch_len(b), iov, 64, &got);

	out->len = 0;
	REQUIRE(got == batch_len(b));
	for (size_t i = 0; i < n; i++)
		REQUIRE(buf_append(out, iov[i].iov_base, iov[i].iov_len) == 0);
}

/* Does b hold exactly the bytes batch_build() gives for (rank, step, micro, micros) of
 * layout l and order o? */
static int same_as_built(struct fixture *fx, const struct batch *b, const struct order *o,
			 const struct layout *l, uint64_t rank, uint64_t step, uint64_t micro,
			 uint64_t micros)
{
	struct buf x = BUF_INIT, y = BUF_INIT;
	struct batch *want = NULL;
	uint64_t bad;
	int same;

	REQUIRE(batch_build(fx->r, &(struct batch_spec){ dataset_info(fx->ds), o, l,
			    fx->cfg.format, rank, step, micro, micros }, &want, &bad) == 0);
	bytes_of(b, &x);
	bytes_of(want, &y);
	same = x.len == y.len && !memcmp(x.data, y.data, x.len) && b->gsn == want->gsn &&
	       b->count == want->count;
	batch_free(want);
	buf_release(&x);
	buf_release(&y);
	return same;
}

/* Claims of each rank are the layout's micro-batches in order, with prefetch or not. */
static void test_claims_in_order(const char *name, enum encode_format f, unsigned prefetch)
{
	struct fixture fx;

	setup(&fx, name, f, 0, prefetch, -1, 0);
	for (uint64_t k = 0; k < 12; k++)
		for (uint64_t rank = 0; rank < 2; rank++) {
			struct batch *b = NULL;

			REQUIRE(server_claim(fx.s, rank, &b) == 0);
			CHECK_EQ_U64(b->step, k / 2);
			CHECK_EQ_U64(b->micro, k % 2);
			CHECK(same_as_built(&fx, b, &fx.cfg.order, &fx.cfg.layout, rank, k / 2, k % 2, 1));
			server_batch_free(fx.s, b);
		}
	teardown(&fx);
}

/* Every share equals the batch it names; its length without building is its length. */
static void test_shares(const char *name, enum encode_format f)
{
	struct fixture fx;
	struct layout at;
	uint64_t len;

	setup(&fx, name, f, 0, 2, -1, 40);
	for (uint64_t t = 0; t < 4; t++)
		for (uint64_t rank = 0; rank < 2; rank++) {
			struct share step = { SHARE_STEP, rank, t }, g = { SHARE_AT, rank, 8 * t + 3 };
			struct share v = { SHARE_VALIDATION, rank, t };
			struct batch *b = NULL;

			REQUIRE(server_share(fx.s, &step, &b) == 0);
			CHECK(same_as_built(&fx, b, &fx.cfg.order, &fx.cfg.layout, rank, t, 0, 2));
			CHECK(server_share_len(fx.s, &step, &len) == (f == FORMAT_TAR ? -ENOTSUP : 0));
			CHECK(f == FORMAT_TAR || len == batch_len(b));
			server_batch_free(fx.s, b);

			/* at/<G> at any gsn: step 0 of the layout that starts there */
			REQUIRE(layout_at(&fx.cfg.layout, 8 * t + 3, &at) == 0);
			REQUIRE(server_share(fx.s, &g, &b) == 0);
			CHECK(same_as_built(&fx, b, &fx.cfg.order, &at, rank, 0, 0, 2));
			if (server_share_len(fx.s, &g, &len) == 0)
				CHECK_EQ_U64(len, batch_len(b));
			else
				CHECK(f == FORMAT_LINES || f == FORMAT_TAR);
			server_batch_free(fx.s, b);

			REQUIRE(layout_at(&fx.cfg.layout, 8 * t, &at) == 0);
			REQUIRE(server_share(fx.s, &v, &b) == 0);
			CHECK(same_as_built(&fx, b, &fx.cfg.validation, &at, rank, 0, 0, 2));
			server_batch_free(fx.s, b);
		}
	CHECK_EQ_U64(server_validation_steps(fx.s), 40 / 8);
	teardown(&fx);
}

/* What cannot be served says why, and a finite stream ends. */
static void test_errors(void)
{
	struct fixture fx;
	struct share step = { SHARE_STEP, 1, 0 }, v = { SHARE_VALIDATION, 0, 0 };
	struct batch *b = NULL;
	uint64_t len, steps = 0;

	setup(&fx, "lines", FORMAT_LINES, 1, 2, 0, 0);
	CHECK(server_claim(fx.s, 1, &b) == -ENOENT);
	CHECK(server_share(fx.s, &step, &b) == -ENOENT);
	CHECK(server_share(fx.s, &v, &b) == -ENOENT);      /* no split */
	CHECK(server_share_len(fx.s, &v, &len) == -ENOENT);
	CHECK(!server_share_in_stream(fx.s, &v));
	CHECK(server_sample(fx.s, 600, &b) == -ERANGE);
	step.rank = 0;
	step.n = 600 / 8;                                   /* epochs=1: 75 whole steps */
	CHECK(!server_share_in_stream(fx.s, &step));
	step.n = 600 / 8 - 1;
	CHECK(server_share_in_stream(fx.s, &step));
	while (server_claim(fx.s, 0, &b) == 0) {
		steps++;
		server_batch_free(fx.s, b);
	}
	CHECK_EQ_U64(steps, 600 / 8 * 2);
	CHECK(server_claim(fx.s, 0, &b) == -ENODATA);
	CHECK(server_run_size(fx.s, 0, 0, &len, &len) == -ENOTSUP); /* lines: shares differ */
	teardown(&fx);
}

/* from/<G>: the at/ shares from G on, back to back, whatever the split of the reads. */
static void test_run(void)
{
	struct fixture fx;
	struct share_run *run = NULL;
	struct buf want = BUF_INIT, got = BUF_INIT, one = BUF_INIT;
	uint64_t share, size;

	setup(&fx, "tok", FORMAT_BIN, 1, 2, -1, 0);
	REQUIRE(server_run_size(fx.s, 1, 5, &share, &size) == 0);
	CHECK_EQ_U64(share, 4 * 8 * 2);            /* B/W samples of 8 uint16 */
	CHECK_EQ_U64(size, (600 - 5) / 8 * share); /* every full step to the end */
	for (uint64_t k = 0; k < 6; k++) {
		struct share at = { SHARE_AT, 1, 5 + 8 * k };
		struct batch *b = NULL;

		REQUIRE(server_share(fx.s, &at, &b) == 0);
		bytes_of(b, &one);
		REQUIRE(buf_append(&want, one.data, one.len) == 0);
		server_batch_free(fx.s, b);
	}
	REQUIRE(server_run_open(fx.s, 1, 5, &run) == 0);
	for (uint64_t off = 0, step = 1; off < want.len; off += step, step = step * 3 % 97 + 1) {
		struct share_read rd;

		REQUIRE(share_run_read(run, off, (size_t)step, 8, &rd) == 0);
		CHECK(rd.niov <= 8);
		for (size_t i = 0; i < rd.niov; i++)
			REQUIRE(buf_append(&got, rd.iov[i].iov_base, rd.iov[i].iov_len) == 0);
		CHECK(rd.bytes > 0 && rd.bytes <= step);
		step = rd.bytes;
		share_run_read_end(run, &rd, 1);
	}
	CHECK(got.len >= want.len && !memcmp(got.data, want.data, want.len));
	{
		struct share_read rd;

		REQUIRE(share_run_read(run, size, 10, 8, &rd) == 0);
		CHECK(rd.bytes == 0);                  /* at the end */
		share_run_read_end(run, &rd, 0);
	}
	share_run_free(run);
	buf_release(&want);
	buf_release(&got);
	buf_release(&one);
	teardown(&fx);
}

/* The claim's lifecycle: counted open until freed, the latest claim of a process,
 * delivered once, consumed_samples from whole delivered steps. */
static void test_claim_lifecycle(void)
{
	struct fixture fx;
	struct claim *c[4];
	unsigned left = 0;
	int found, k;

	setup(&fx, "lines", FORMAT_LINES, 0, 2, -1, 0);
	CHECK(server_wait_claims(fx.s, 0, &left) == 0);
	for (int i = 0; i < 4; i++)
		REQUIRE(claim_open(fx.s, (uint64_t)i % 2, 100 + (uint32_t)i % 2, &c[i]) == 0);
	CHECK(server_wait_claims(fx.s, 0.01, &left) == -ETIMEDOUT);
	CHECK_EQ_U64(left, 4);
	CHECK_EQ_U64(server_claim_size(fx.s, 101, 1, &found), batch_len(c[3]->batch));
	CHECK(found);
	server_claim_size(fx.s, 101, 0, &found);
	CHECK(!found);
	CHECK_EQ_U64(server_consumed(fx.s), 0);
	/* rank 0's whole step 0 is delivered, rank 1's half: nothing consumed yet */
	claim_delivered(c[0]);
	claim_delivered(c[0]);                         /* once */
	claim_delivered(c[2]);
	claim_delivered(c[1]);
	CHECK_EQ_U64(server_consumed(fx.s), 0);
	CHECK(claim_tail_begin(c[3], 0, (size_t)batch_len(c[3]->batch)) == 1);
	CHECK(claim_tail_begin(c[3], 0, 1) == 0);
	claim_tail_end(c[3], 1);
	/* c[3]: a close before its last byte was read delivers nothing; nor does the read
	 * of the last byte alone, nor a close by another file table (a forked child), nor
	 * the reader's close whose reply failed; the reader's close answered does */
	CHECK(claim_closing(c[3], 7) == 0);
	CHECK(claim_closed(c[3], 0, 1) == 0);
	CHECK(claim_read_end(c[3], 7) == 1);
	CHECK(claim_read_end(c[3], 7) == 0);           /* once */
	CHECK_EQ_U64(server_consumed(fx.s), 0);
	CHECK(claim_closing(c[3], 9) == 0);
	k = claim_closing(c[3], 7);
	CHECK(k == 1);
	CHECK(claim_closed(c[3], k, 0) == 0);
	CHECK_EQ_U64(server_consumed(fx.s), 0);
	k = claim_closing(c[3], 0);                    /* the closer's owner not known */
	CHECK(k == 1);
	CHECK(claim_closed(c[3], k, 1) == 1);
	CHECK_EQ_U64(server_consumed(fx.s), 8);
	CHECK(claim_finish(c[3]) == 0);                /* no journal: nothing to write */
	claim_release(c[3]);
	for (int i = 0; i < 4; i++)
		claim_free(c[i], 1);
	CHECK_EQ_U64(server_consumed(fx.s), 8);
	CHECK(server_wait_claims(fx.s, 0, &left) == 0);
	CHECK_EQ_U64(left, 0);
	teardown(&fx);
}

struct claimer {
	struct server *s;
	struct claim *c;
	int rc, done;           /* done: atomic */
};

static void *claimer_run(void *arg)
{
	struct claimer *cl = arg;

	cl->rc = claim_open(cl->s, 0, 5, &cl->c);
	__atomic_store_n(&cl->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* A claim of a rank waits while a close of that rank is being answered (claim_closing
 * to claim_closed), so that its commit holds that close's delivery: the claimer is
 * still waiting a while later, and goes on once the close is recorded. */
static void test_claim_waits_for_a_close_being_answered(void)
{
	struct fixture fx;
	struct claimer cl = { 0 };
	struct claim *c = NULL;
	struct timespec nap = { 0, 50 * 1000000 };
	pthread_t t;
	int k;

	setup(&fx, "lines", FORMAT_LINES, 0, 2, -1, 0);
	cl.s = fx.s;
	REQUIRE(claim_open(fx.s, 0, 5, &c) == 0);
	CHECK(claim_read_end(c, 3) == 1);
	k = claim_closing(c, 3);
	REQUIRE(k == 1);
	REQUIRE(pthread_create(&t, NULL, claimer_run, &cl) == 0);
	nanosleep(&nap, NULL); /* room for a claim that would not wait to go through */
	CHECK(!__atomic_load_n(&cl.done, __ATOMIC_ACQUIRE));
	CHECK(claim_closed(c, k, 1) == 1);
	pthread_join(t, NULL);
	CHECK(cl.done && cl.rc == 0);
	claim_free(c, 1);
	claim_free(cl.c, 1);
	teardown(&fx);
}

/* Decodes the workers finished so far, once it reaches at least want (30 s at most). */
static uint64_t decoded_at_least(struct server *s, uint64_t want)
{
	struct server_stats st;
	double deadline = clock_mono_s() + 30;

	do {
		server_get_stats(s, &st);
		if (st.prefetch_decoded >= want)
			break;
		sched_yield();
	} while (clock_mono_s() < deadline);
	return st.prefetch_decoded;
}

/* A paced reader (its claim comes long after the last close, as the first one does):
 * the claim leaves its ring's refill to the release of the batch, and the release
 * starts it. */
static void test_release_refills(void)
{
	struct fixture fx;
	struct claim *c = NULL;

	setup(&fx, "tok", FORMAT_NPY, 0, 2, 0, 0);
	CHECK_EQ_U64(decoded_at_least(fx.s, 2), 2);    /* the ring primed at the start */
	REQUIRE(claim_open(fx.s, 0, 1, &c) == 0);      /* claim index 0: a hit */
	CHECK_EQ_U64(decoded_at_least(fx.s, 2), 2);    /* no refill yet */
	claim_release(c);
	CHECK_EQ_U64(decoded_at_least(fx.s, 3), 3);    /* claim index 2 decoded now */
	claim_free(c, 1);
	teardown(&fx);
}

struct hammer {
	struct server *s;
	uint64_t rank;
	uint64_t seen[64];  /* claim index -> times claimed */
	pthread_mutex_t *mu;
};

static void *hammer_run(void *arg)
{
	struct hammer *h = arg;

	for (int i = 0; i < 16; i++) {
		struct claim *c = NULL;

		REQUIRE(claim_open(h->s, h->rank, 7, &c) == 0);
		pthread_mutex_lock(h->mu);
		h->seen[c->batch->step * 2 + c->batch->micro]++;
		pthread_mutex_unlock(h->mu);
		claim_delivered(c);
		claim_release(c);
		claim_free(c, 1);
	}
	return NULL;
}

/* Two threads claim and release one rank at once: every claim index once, in 32 claims;
 * the releases that find the rank busy are applied, never lost or waited for. */
static void test_concurrent_claims(void)
{
	struct fixture fx;
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct hammer h = { .rank = 1, .mu = &mu };
	pthread_t t[2];
	unsigned left;

	setup(&fx, "tok", FORMAT_NPY, 0, 3, 1, 0);
	h.s = fx.s;
	for (int i = 0; i < 2; i++)
		REQUIRE(pthread_create(&t[i], NULL, hammer_run, &h) == 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int k = 0; k < 32; k++)
		CHECK_EQ_U64(h.seen[k], 1);
	CHECK(server_wait_claims(fx.s, 0, &left) == 0);
	CHECK_EQ_U64(server_consumed(fx.s), 16 * 8);  /* one rank served: its steps */
	teardown(&fx);
}

int main(void)
{
	scratch_init("serve");
	make_datasets();
	test_claims_in_order("lines", FORMAT_LINES, 0);
	test_claims_in_order("lines", FORMAT_LINES, 2);
	test_claims_in_order("tok", FORMAT_NPY, 3);
	test_claims_in_order("tok", FORMAT_BIN, 1);
	test_shares("lines", FORMAT_LINES);
	test_shares("tok", FORMAT_NPY);
	test_shares("tok", FORMAT_BIN);
	test_errors();
	test_run();
	test_claim_lifecycle();
	test_claim_waits_for_a_close_being_answered();
	test_release_refills();
	test_concurrent_claims();
	rm_rf(tmp);
	return check_status();
}
