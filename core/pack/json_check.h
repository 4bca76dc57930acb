/*
 * json_check.h: is this buffer one JSON text (RFC 8259)? The fast path of validating
 * JSONL records at pack time, through simdjson's validating DOM parser (Langdale &
 * Lemire, "Parsing Gigabytes of JSON per Second", VLDB Journal 28, 2019). It builds no
 * tree of values, unlike jansson's json_loadb(): validation is a pack's hottest loop
 * (RESULTS.md, "B6: JSON validation").
 * Errors are not described here: jsonl_check_line() asks jansson why a record failed.
 *
 * Thread-safe: one parser per thread.
 */
#ifndef ZEPHON_JSON_CHECK_H
#define ZEPHON_JSON_CHECK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1: text[0..len) is one JSON value (any type; "\u0000" allowed), with only white space
 * around it. 0: it is not, or simdjson cannot tell (ask jansson). */
int json_check_fast(const uint8_t *text, size_t len);

#ifdef __cplusplus
}
#endif

#endif
