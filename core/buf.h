/*
 * buf.h: a growable byte buffer (git's strbuf, reduced to what Zephon needs).
 *
 * Invariant: data is NULL with cap == 0, or points to cap bytes of which the first len
 * are valid. A buf owns its memory; buf_release() frees it and leaves an empty buf.
 * Not thread-safe; one owner at a time (batch buffers are handed between threads whole).
 */
#ifndef ZEPHON_BUF_H
#define ZEPHON_BUF_H

#include <stddef.h>
#include <stdint.h>

struct buf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

#define BUF_INIT { NULL, 0, 0 }

/* Make room for at least `extra` more bytes after len. 0, or -ENOMEM (buf unchanged),
 * or -EOVERFLOW when len + extra does not fit in size_t. */
int buf_reserve(struct buf *b, size_t extra);

/* Append n bytes. 0, -ENOMEM or -EOVERFLOW (buf unchanged). */
int buf_append(struct buf *b, const void *src, size_t n);

/* Append printf-formatted text (no NUL counted in len, but data stays NUL-terminated).
 * 0, -ENOMEM or -EOVERFLOW (buf unchanged), -EINVAL (vsnprintf refused the format). */
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Write a one-line message into a caller's error buffer (err may be NULL or errlen 0:
 * then nothing). The errors of core/ travel this way: core never prints. */
void err_printf(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Free the memory; b becomes BUF_INIT. */
void buf_release(struct buf *b);

/* Take the bytes out: returns data (caller frees), b becomes BUF_INIT. */
uint8_t *buf_detach(struct buf *b, size_t *len);

#endif
