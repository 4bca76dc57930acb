/*
 * core/dataset/docindex: what the writer appends the reader gives back (first_token the running
 * sum, lengths, records, sources), docindex_find() names the document of every token of
 * the stream and none past it, across the writer's buffer flushes; a truncated or foreign
 * file is refused with -EBADMSG, a missing one with -ENOENT.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "docindex.h"

#define DOCS 70000u              /* > one writer buffer (1 MiB / 32 bytes) */

static uint64_t len_of(uint64_t i)
{
	return 1 + (i * 7919) % 13;  /* 1..13 tokens */
}

int main(void)
{
	char dir[] = "/tmp/zephon-test-docindex-XXXXXX", path[256], err[256];
	struct docindex_writer *w;
	struct docindex *di;
	struct docindex_entry e;
	uint64_t total = 0;
	FILE *f;

	REQUIRE(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/%s", dir, DOCINDEX_FILE);
	CHECK(docindex_open(dir, &di, err, sizeof(err)) == -ENOENT);
	REQUIRE(docindex_writer_open(path, &w, err, sizeof(err)) == 0);
	CHECK(docindex_writer_open(path, &w, err, sizeof(err)) == -EEXIST);
	for (uint64_t i = 0; i < DOCS; i++)
		REQUIRE(docindex_writer_add(w, len_of(i), i + 1, (uint32_t)(i / 1000), err,
					    sizeof(err)) == 0);
	CHECK_EQ_U64(docindex_writer_count(w), DOCS);
	REQUIRE(docindex_writer_finish(w, err, sizeof(err)) == 0);

	REQUIRE(docindex_open(dir, &di, err, sizeof(err)) == 0);
	CHECK_EQ_U64(docindex_count(di), DOCS);
	for (uint64_t i = 0; i < DOCS; i++) {
		docindex_get(di, i, &e);
		CHECK_EQ_U64(e.first_token, total);
		CHECK_EQ_U64(e.tokens, len_of(i));
		CHECK_EQ_U64(e.record, i + 1);
		CHECK_EQ_U64(e.source, i / 1000);
		for (uint64_t t = total; t < total + e.tokens; t++)
			CHECK_EQ_U64(docindex_find(di, t), i);
		total += e.tokens;
	}
	CHECK_EQ_U64(docindex_find(di, total), DOCS);       /* past the last document */
	CHECK_EQ_U64(docindex_find(di, UINT64_MAX), DOCS);
	docindex_close(di);

	/* cut one entry short: refused */
	REQUIRE(truncate(path, 32 + 32 * (DOCS - 1) + 5) == 0);
	CHECK(docindex_open(dir, &di, err, sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "truncated") != NULL);
	/* not an index at all */
	REQUIRE((f = fopen(path, "w")));
	fputs("{\"not\": \"an index\", \"padding\": \"...................\"}", f);
	fclose(f);
	CHECK(docindex_open(dir, &di, err, sizeof(err)) == -EBADMSG);
	unlink(path);
	rmdir(dir);
	return check_status();
}
