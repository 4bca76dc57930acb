/*
 * buf.h: a growable byte buffer (git's strbuf, reduced to what Zephon needs).
 *
 * Invariant: data is NULL with cap == 0, or points to cap bytes of which the first len
 * are valid. A buf owns its memory; buf_release() frees it and leaves an empty buf.
 * Not thread-safe; one owner at a time (batch buffers are handed between threads whole).
 */
#ifndef ZEPHON_BUF_H
#define ZEPHON_BUF_H

#include <stdarg.h>
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

/* Growable arrays (git's ALLOC_GROW): make room for at least `need` elements of `size`
 * bytes in the array whose pointer is at *(void **)parr and whose capacity is *cap
 * elements, growing it to max(need, 2 * *cap, 16) with realloc(). The pointer and *cap
 * change only on success. 0 (room made, or there was room), -EOVERFLOW (the size in bytes
 * does not fit in size_t), -ENOMEM. Use ARRAY_GROW(ptr, cap, need) for a typed array. */
int array_grow(void *parr, size_t *cap, size_t need, size_t size);
#define ARRAY_GROW(ptr, cap, need) array_grow(&(ptr), &(cap), (need), sizeof(*(ptr)))

/* The error text of core/: write a one-line message into a caller's error buffer (err
 * may be NULL or errlen 0: then nothing) and return rc, for
 * `return err_set(err, errlen, -EINVAL, "...")`. core never prints; its errors travel
 * this way. err_vset() takes a va_list (for wrappers with a buffer of their own),
 * err_printf() returns nothing. */
int err_set(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int err_vset(char *err, size_t errlen, int rc, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));
void err_printf(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Free the memory; b becomes BUF_INIT. */
void buf_release(struct buf *b);

/* Take the bytes out: returns data (caller frees), b becomes BUF_INIT. */
uint8_t *buf_detach(struct buf *b, size_t *len);

#endif
