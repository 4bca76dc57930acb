/*
 * core/util/buf: array_grow() grows geometrically, keeps the elements, and refuses a size in
 * bytes that does not fit in size_t (-EOVERFLOW) without touching the array; a buf
 * refuses an append whose length would overflow.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "buf.h"
#include "check.h"

static void test_grow_keeps_elements(void)
{
	uint64_t *a = NULL;
	size_t cap = 0;

	for (size_t i = 0; i < 1000; i++) {
		REQUIRE(ARRAY_GROW(a, cap, i + 1) == 0);
		CHECK(cap >= i + 1);
		a[i] = i * 7;
	}
	for (size_t i = 0; i < 1000; i++)
		CHECK_EQ_U64(a[i], i * 7);
	/* room already there: nothing moves */
	{
		uint64_t *before = a;
		size_t cap_before = cap;

		CHECK(ARRAY_GROW(a, cap, 10) == 0);
		CHECK(a == before);
		CHECK_EQ_U64(cap, cap_before);
	}
	free(a);
}

static void test_grow_overflow(void)
{
	uint64_t *a = NULL;
	size_t cap = 0;
	uint64_t *kept;

	REQUIRE(ARRAY_GROW(a, cap, 4) == 0);
	a[3] = 42;
	kept = a;
	/* need * 8 bytes wraps around size_t */
	CHECK(ARRAY_GROW(a, cap, SIZE_MAX / 8 + 1) == -EOVERFLOW);
	CHECK(ARRAY_GROW(a, cap, SIZE_MAX) == -EOVERFLOW);
	CHECK(a == kept);
	CHECK_EQ_U64(cap, 16);
	CHECK_EQ_U64(a[3], 42);
	/* the doubling of a huge capacity would overflow, the need itself does not: the
	 * helper must not wrap the capacity around to something small */
	{
		size_t big = SIZE_MAX / 2 + 1;
		void *p = NULL;
		size_t c = big;

		CHECK(array_grow(&p, &c, big + 1, 2) == -EOVERFLOW);
		CHECK(p == NULL);
		CHECK(c == big);
	}
	free(a);
}

static void test_buf_overflow(void)
{
	struct buf b = BUF_INIT;

	REQUIRE(buf_append(&b, "abc", 3) == 0);
	CHECK(buf_reserve(&b, SIZE_MAX - 2) == -EOVERFLOW);
	CHECK(buf_reserve(&b, SIZE_MAX) == -EOVERFLOW);
	CHECK_EQ_U64(b.len, 3);
	CHECK(memcmp(b.data, "abc", 4) == 0);
	buf_release(&b);
}

int main(void)
{
	test_grow_keeps_elements();
	test_grow_overflow();
	test_buf_overflow();
	return check_status();
}
