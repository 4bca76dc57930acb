/*
 * test_journal_mix: what the journal records of a mixture and of a validation split.
 * Each layout row carries the integer weights journal_set_weights() was given (read back
 * by journal_current() and journal_layouts()); a bad weights text is refused and changes
 * nothing; a journal of schema version 2 (built here from the released DDL and step) is
 * read as is and migrated, its layouts without weights. The split is part of the
 * identity: another split is refused like another seed, and a journal without one (older,
 * or of a mount without a split) has split "".
 */
#include "test_journal_util.h"

#include <sqlite3.h>

#include "check.h"
#include "mix.h"


static char *dir;
static const struct journal_ident ID = { FP_A, 7, ORDER_SHUFFLE_GLOBAL, 1000, "" };

/* The weights of layout row i (oldest first) as journal_layouts() reads them; "?" when
 * there is no such row, "!" when the read fails. */
static const char *weights_of(struct journal *j, size_t i)
{
	static char out[JOURNAL_WEIGHTS_MAX];
	struct journal_layout *ls = NULL;
	size_t n = 0;

	if (journal_layouts(j, &ls, &n))
		return "!";
	snprintf(out, sizeof(out), "%s", i < n ? ls[i].weights : "?");
	free(ls);
	return out;
}

static size_t layout_count(struct journal *j)
{
	struct journal_layout *ls = NULL;
	size_t n = 0;

	REQUIRE(journal_layouts(j, &ls, &n) == 0);
	free(ls);
	return n;
}

static void test_weights_per_layout(void)
{
	char *p = path_in(dir, "weights.sqlite"), err[512];
	struct journal_layout cl;
	struct journal *j;
	uint64_t s, m;

	unlink(p);
	j = open_id(p, &ID);
	/* a single dataset: no weights */
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(!strcmp(cl.weights, ""));
	REQUIRE(journal_claim_next(j, 0, &s, &m) == 0);
	CHECK(journal_set_weights(j, "7,3,0") == 0);
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(!strcmp(cl.weights, "7,3,0"));
	/* the setting stays for a remount on the same handle */
	REQUIRE(start_text(j, "auto", 4, 8, 2, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(!strcmp(cl.weights, "7,3,0"));
	CHECK(journal_set_weights(j, "1,1") == 0);
	REQUIRE(start_text(j, "auto", 4, 8, 2, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(!strcmp(cl.weights, "1,1"));
	CHECK(journal_set_weights(j, NULL) == 0);
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(!strcmp(cl.weights, ""));
	CHECK(journal_set_weights(j, "2,5") == 0);
	CHECK(journal_set_weights(j, "") == 0); /* "" is none too */
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(!strcmp(cl.weights, ""));
	CHECK(layout_count(j) == 6);
	CHECK(!strcmp(weights_of(j, 0), "") && !strcmp(weights_of(j, 1), "7,3,0") &&
	      !strcmp(weights_of(j, 2), "7,3,0") && !strcmp(weights_of(j, 3), "1,1") &&
	      !strcmp(weights_of(j, 4), "") && !strcmp(weights_of(j, 5), ""));
	journal_close(j);

	/* on disk: NULL for none, the text otherwise */
	CHECK(sql_int(p, "SELECT count(*) FROM layout WHERE weights IS NULL") == 3);
	CHECK(sql_int(p, "SELECT count(*) FROM layout WHERE weights = '7,3,0'") == 2);
	CHECK(sql_int(p, "SELECT id FROM layout WHERE weights = '1,1'") == 4);
	/* and read back by a read-only handle, which cannot set weights */
	REQUIRE(journal_open_readonly(p, &j, err, sizeof(err)) == 0);
	CHECK(!strcmp(weights_of(j, 1), "7,3,0") && !strcmp(weights_of(j, 3), "1,1") &&
	      !strcmp(weights_of(j, 0), ""));
	CHECK(journal_set_weights(j, "1,2") == -EROFS);
	journal_close(j);

	/* a row edited into something this zephon never writes is a damaged journal */
	sql_exec(p, "UPDATE layout SET weights = '7,x' WHERE id = 2");
	REQUIRE(journal_open_readonly(p, &j, err, sizeof(err)) == 0);
	CHECK(!strcmp(weights_of(j, 0), "!"));
	journal_close(j);
	sql_exec(p, "UPDATE layout SET weights = '' WHERE id = 2");
	REQUIRE(journal_open_readonly(p, &j, err, sizeof(err)) == 0);
	CHECK(!strcmp(weights_of(j, 0), "!"));
	journal_close(j);
	free(p);
}

/* Refused with -EINVAL and a reason containing `needle`; the setting before is kept. */
static void expect_bad(struct journal *j, const char *text, const char *needle)
{
	char why[512];
	int rc = journal_set_weights(j, text);

	CHECK(rc == -EINVAL);
	journal_last_error(j, why, sizeof(why));
	if (rc != -EINVAL || !strstr(why, needle))
		fprintf(stderr, "weights \"%.40s\": rc %d, reason \"%s\" (want \"%s\")\n", text,
			rc, why, needle);
	CHECK(strstr(why, needle) != NULL);
	CHECK(strstr(why, "mixture weights") != NULL);
}

static void test_bad_weights(void)
{
	char *p = path_in(dir, "bad.sqlite");
	static const struct { const char *text, *needle; } bad[] = {
		{ "x", "weight 1 (\"x\") is not a decimal integer" },
		{ "7,", "weight 2 (\"\") is not a decimal integer" },
		{ ",7", "weight 1 (\"\") is not a decimal integer" },
		{ "7,,3", "weight 2 (\"\") is not a decimal integer" },
		{ " 7", "weight 1 (\" 7\") is not a decimal integer" },
		{ "7 ,3", "weight 1 (\"7 \") is not a decimal integer" },
		{ "7;3", "weight 1 (\"7;3\") is not a decimal integer" },
		{ "+7", "not a decimal integer" },
		{ "3,-1", "weight 2 (\"-1\") is not a decimal integer" },
		{ "0.7,0.3", "weight 1 (\"0.7\") is not a decimal integer" },
		{ "0x10", "not a decimal integer" },
		{ "0", "every weight is 0" },
		{ "0,0,0", "every weight is 0" },
		{ "07,3", "weight 1 (\"07\") has a leading zero" },
		{ "1,00", "weight 2 (\"00\") has a leading zero" },
		{ "1048576", "weight 1 (\"1048576\") is not below 2^20" },
		{ "1,99999999999999999999999", "is not below 2^20" },
		{ "99999999999999999999999x", "weight 1 (\"99999999999999999999999x\") is not a "
		  "decimal integer" },
		{ "1048575,2", "the weights sum to 1048577" },
	};
	char many[(MIX_MAX_SOURCES + 1) * 2 + 1], toomany[64];
	struct journal_layout cl;
	struct journal *j;
	size_t n;

	unlink(p);
	j = open_id(p, &ID);
	CHECK(journal_set_weights(j, "7,3") == 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_bad(j, bad[i].text, bad[i].needle);
	/* MIX_MAX_SOURCES + 1 sources: one too many; MIX_MAX_SOURCES are fine */
	for (n = 0; n < MIX_MAX_SOURCES + 1; n++)
		memcpy(many + 2 * n, "1,", 2);
	many[2 * (MIX_MAX_SOURCES + 1) - 1] = 0;
	snprintf(toomany, sizeof(toomany), "more than %d weights", MIX_MAX_SOURCES);
	expect_bad(j, many, toomany);
	/* nothing was recorded, the setting before the refusals stands */
	CHECK(layout_count(j) == 0);
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(!strcmp(cl.weights, "7,3"));
	CHECK(layout_count(j) == 1 && !strcmp(weights_of(j, 0), "7,3"));

	/* the edges that are fine: one weight, zeros beside a positive one, 2^20 - 1, a sum
	 * of exactly 2^20, MIX_MAX_SOURCES sources; the longest text fits the field whole */
	CHECK(journal_set_weights(j, "1") == 0);
	CHECK(journal_set_weights(j, "0,1,0") == 0);
	CHECK(journal_set_weights(j, "1048575") == 0);
	CHECK(journal_set_weights(j, "1048575,1") == 0);
	many[2 * MIX_MAX_SOURCES - 1] = 0;
	CHECK(journal_set_weights(j, many) == 0);
	{
		/* MIX_MAX_SOURCES weights of 7 digits, the longest text the digit rules
		 * allow: read to its end (refused for its sum, not for a weight cut short) */
		char longest[JOURNAL_WEIGHTS_MAX], sum[64];
		size_t len = 0;

		for (n = 0; n < MIX_MAX_SOURCES; n++)
			len += (size_t)snprintf(longest + len, sizeof(longest) - len, "%s1000000",
						n ? "," : "");
		CHECK(len == MIX_MAX_SOURCES * 8 - 1 && len < sizeof(longest));
		snprintf(sum, sizeof(sum), "the weights sum to %d000000", MIX_MAX_SOURCES);
		expect_bad(j, longest, sum);
	}
	{
		/* the codec's two halves agree: what journal_weights_format() writes parses back */
		const uint64_t a[3] = {7, 3, 0};
		uint64_t back[MIX_MAX_SOURCES];
		char text[JOURNAL_WEIGHTS_MAX];
		size_t k = 0;

		journal_weights_format(a, 3, text);
		CHECK(!strcmp(text, "7,3,0"));
		CHECK(journal_weights_parse(text, back, &k, NULL, 0) == 0 && k == 3 &&
		      back[0] == 7 && back[1] == 3 && back[2] == 0);
	}
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(strlen(cl.weights) == 2 * MIX_MAX_SOURCES - 1 && !strcmp(cl.weights, many));
	CHECK(!strcmp(weights_of(j, 1), many));
	journal_close(j);
	free(p);
}

/* A journal as a version-2 zephon left it (the released version-1 DDL and the 1 -> 2
 * step): W=2, B=4, m=1 from step 0, cursors of ranks 0-1 at 3.0 and 2.1 (delivered 2.0
 * and 2.1), no split in meta. */
static char *make_v2(const char *name)
{
	static const char step2[] =
		"ALTER TABLE cursor ADD COLUMN delivered_step INTEGER NOT NULL DEFAULT 0 "
		"CHECK (delivered_step >= 0);"
		"ALTER TABLE cursor ADD COLUMN delivered_micro INTEGER NOT NULL DEFAULT 0 "
		"CHECK (delivered_micro >= 0);";
	static const char rows[] =
		"INSERT INTO meta VALUES ('fingerprint', '" FP_A "'), ('seed', '7'), "
		"('shuffle', 'global'), ('samples', '1000'), ('created', '1'), "
		"('zephon_version', '0.2');"
		"INSERT INTO layout VALUES (1, 1, 2, 4, 1, '0-1', 0, 0, 1000000, 'h', 'auto', "
		"'auto: the journal has no layout yet -> step 0, samples:0');"
		"INSERT INTO cursor VALUES (1, 0, 3, 0, 2, 0), (1, 1, 2, 1, 2, 1);"
		"PRAGMA user_version = 2;";
	char *p = path_in(dir, name);

	make_old_journal(p, step2, rows);
	return p;
}

static void test_v2_migration(void)
{
	char *p = make_v2("v2.sqlite"), err[512];
	const char *one[1] = { p };
	struct journal_cursor *cur = NULL;
	struct journal_ident got;
	struct journal_layout cl;
	struct journal *j = NULL;
	struct layout l;
	size_t n = 0;
	uint64_t g, s;

	/* read as is: no migration, no weights, no split */
	REQUIRE(journal_open_readonly(p, &j, err, sizeof(err)) == 0);
	CHECK(layout_count(j) == 1 && !strcmp(weights_of(j, 0), ""));
	journal_identity(j, &got);
	CHECK(!strcmp(got.split, ""));
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 2 && g == 8);
	journal_close(j);
	CHECK(sql_int(p, "PRAGMA user_version") == 2);
	CHECK(journal_resume_point_files(one, 1, &g, &s, err, sizeof(err)) == 0 && s == 2 && g == 8);

	/* a writable open (a mount without a split) migrates: the old row has no weights,
	 * the cursors and the point are as they were */
	j = open_id(p, &ID);
	journal_identity(j, &got);
	CHECK(!strcmp(got.split, "") && !strcmp(got.fingerprint, FP_A));
	CHECK(layout_count(j) == 1 && !strcmp(weights_of(j, 0), ""));
	CHECK(journal_cursors(j, 1, &cur, &n) == 0 && n == 2);
	CHECK(n == 2 && cur[0].step == 3 && cur[0].delivered_step == 2 &&
	      cur[1].delivered_micro == 1);
	free(cur);
	CHECK(journal_resume_point(j, &g, &s) == 0 && s == 2 && g == 8);
	CHECK(journal_set_weights(j, "3,1") == 0);
	CHECK(start_text(j, "auto", 2, 4, 1, "", &l) == 0);
	CHECK(layout_start_step(&l) == 2 && layout_start_samples(&l) == 8);
	REQUIRE(journal_current(j, &cl) == 0);
	CHECK(!strcmp(cl.weights, "3,1"));
	CHECK(!strcmp(weights_of(j, 0), "") && !strcmp(weights_of(j, 1), "3,1"));
	journal_close(j);
	CHECK(sql_int(p, "PRAGMA user_version") == JOURNAL_SCHEMA_VERSION);
	CHECK(sql_int(p, "SELECT count(*) FROM layout WHERE id = 1 AND weights IS NULL") == 1);
	CHECK(sql_int(p, "SELECT count(*) FROM layout WHERE id = 2 AND weights = '3,1'") == 1);
	CHECK(sql_int(p, "SELECT count(*) FROM meta WHERE key = 'split'") == 0);

	/* an old journal has no split: a mount with one is refused, naming it */
	free(p);
	p = make_v2("v2b.sqlite");
	{
		struct journal_ident sid = ID;

		snprintf(sid.split, sizeof(sid.split), "validation=1/100");
		CHECK(journal_open(p, &sid, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -ESTALE);
	}
	CHECK(strstr(err, "split validation=1/100") != NULL);
	CHECK(sql_int(p, "PRAGMA user_version") == 2); /* refused: nothing migrated */
	free(p);
}

static void test_split_identity(void)
{
	char *p = path_in(dir, "held-out.sqlite"), *q = path_in(dir, "plain.sqlite"), err[512];
	const char *both[2] = { p, q };
	struct journal_ident sid = ID, other, got;
	struct journal *j = NULL;
	unsigned char *before;
	size_t n;
	uint64_t g, s;

	unlink(p);
	unlink(q);
	snprintf(sid.split, sizeof(sid.split), "validation=1/100");
	j = open_id(p, &sid);
	journal_identity(j, &got);
	CHECK(!strcmp(got.split, "validation=1/100"));
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	journal_close(j);
	CHECK(sql_int(p, "SELECT count(*) FROM meta WHERE key = 'split' AND "
		      "value = 'validation=1/100'") == 1);
	/* the same split opens, and is what the journal tells */
	j = open_id(p, &sid);
	journal_identity(j, &got);
	CHECK(!strcmp(got.split, "validation=1/100"));
	journal_close(j);
	REQUIRE(journal_open_readonly(p, &j, err, sizeof(err)) == 0);
	journal_identity(j, &got);
	CHECK(!strcmp(got.split, "validation=1/100"));
	journal_close(j);

	before = slurp(p, &n);
	REQUIRE(before);
	/* another split: refused like another seed, naming both */
	other = sid;
	snprintf(other.split, sizeof(other.split), "validation=1/50");
	CHECK(journal_open(p, &other, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -ESTALE);
	CHECK(strstr(err, "split validation=1/100") && strstr(err, "split validation=1/50"));
	CHECK(strstr(err, p) != NULL);
	/* no split: refused too; the message shows a split only where there is one */
	other = sid;
	other.split[0] = 0;
	CHECK(journal_open(p, &other, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -ESTALE);
	CHECK(strstr(err, "split validation=1/100") != NULL);
	CHECK(strstr(strstr(err, "split validation=1/100") + 5, ", split ") == NULL);
	CHECK(file_equals(p, before, n));
	free(before);

	/* a journal of a mount without a split has no key, and refuses a split */
	j = open_id(q, &ID);
	REQUIRE(start_text(j, "auto", 2, 4, 1, "", NULL) == 0);
	journal_close(j);
	CHECK(sql_int(q, "SELECT count(*) FROM meta WHERE key = 'split'") == 0);
	CHECK(journal_open(q, &sid, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -ESTALE);
	CHECK(strstr(err, "split validation=1/100") != NULL);
	/* with no split on either side, messages do not mention one */
	other = ID;
	other.seed = 8;
	CHECK(journal_open(q, &other, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -ESTALE);
	CHECK(strstr(err, "seed 7") && strstr(err, "seed 8") && !strstr(err, ", split "));

	/* the journals of one job share the split */
	CHECK(journal_resume_point_files(both, 2, &g, &s, err, sizeof(err)) == -ESTALE);
	CHECK(strstr(err, "split validation=1/100") != NULL);

	/* an ident whose split is not a string is refused before anything is opened */
	other = ID;
	memset(other.split, 'x', sizeof(other.split));
	CHECK(journal_open(q, &other, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -EINVAL);

	/* a split key this zephon never writes (empty) is a damaged journal */
	sql_exec(q, "INSERT INTO meta VALUES ('split', '')");
	CHECK(journal_open(q, &ID, JOURNAL_SYNC_NORMAL, &j, err, sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "split") != NULL);
	CHECK(journal_open_readonly(q, &j, err, sizeof(err)) == -EBADMSG);
	free(p);
	free(q);
}

int main(void)
{
	dir = scratch_dir("journal-mix");
	test_weights_per_layout();
	test_bad_weights();
	test_v2_migration();
	test_split_identity();
	rm_rf(dir);
	free(dir);
	return check_status();
}
