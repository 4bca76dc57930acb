#include "buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int buf_reserve(struct buf *b, size_t extra)
{
	size_t need, cap;
	uint8_t *p;

	if (__builtin_add_overflow(b->len, extra, &need) || need == SIZE_MAX)
		return -EOVERFLOW;
	need++; /* room for a terminating NUL that buf_printf keeps */
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *src, size_t n)
{
	int rc = buf_reserve(b, n);

	if (rc)
		return rc;
	if (n)
		memcpy(b->data + b->len, src, n);
	b->len += n;
	b->data[b->len] = 0;
	return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n, rc;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	rc = buf_reserve(b, (size_t)n);
	if (rc)
		return rc;
	va_start(ap, fmt);
	vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void buf_release(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

uint8_t *buf_detach(struct buf *b, size_t *len)
{
	uint8_t *p = b->data;

	if (len)
		*len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}

int array_grow(void *parr, size_t *cap, size_t need, size_t size)
{
	size_t ncap, bytes;
	void *p;

	if (need <= *cap)
		return 0;
	ncap = *cap > SIZE_MAX / 2 ? SIZE_MAX : *cap * 2;
	if (ncap < 16)
		ncap = 16;
	if (ncap < need)
		ncap = need;
	if (__builtin_mul_overflow(ncap, size, &bytes)) {
		/* the doubling overflows: try exactly what is needed */
		ncap = need;
		if (__builtin_mul_overflow(ncap, size, &bytes))
			return -EOVERFLOW;
	}
	memcpy(&p, parr, sizeof(p));
	p = realloc(p, bytes ? bytes : 1);
	if (!p)
		return -ENOMEM;
	memcpy(parr, &p, sizeof(p));
	*cap = ncap;
	return 0;
}

int err_vset(char *err, size_t errlen, int rc, const char *fmt, va_list ap)
{
	if (err && errlen)
		vsnprintf(err, errlen, fmt, ap);
	return rc;
}

int err_set(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vset(err, errlen, rc, fmt, ap);
	va_end(ap);
	return rc;
}

void err_printf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vset(err, errlen, 0, fmt, ap);
	va_end(ap);
}
