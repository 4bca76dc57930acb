/*
 * check.h: the assertions of Zephon's C unit tests. A failed CHECK prints file:line and
 * the expression and marks the test failed; the test goes on so one run shows every
 * failure. Tests return check_status(): 0 when every CHECK held, 1 otherwise.
 */
#ifndef ZEPHON_TEST_CHECK_H
#define ZEPHON_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
		check_failures++; \
	} \
} while (0)

#define CHECK_EQ_U64(a, b) do { \
	uint64_t check_a_ = (a), check_b_ = (b); \
	if (check_a_ != check_b_) { \
		fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%" PRIu64 " != %" PRIu64 ")\n", \
			__FILE__, __LINE__, #a, #b, check_a_, check_b_); \
		check_failures++; \
	} \
} while (0)

/* Stop the test at once (for failures that make the rest meaningless). */
#define REQUIRE(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
		exit(1); \
	} \
} while (0)

static inline int check_status(void)
{
	if (check_failures)
		fprintf(stderr, "%d check(s) failed\n", check_failures);
	return check_failures ? 1 : 0;
}

#endif
