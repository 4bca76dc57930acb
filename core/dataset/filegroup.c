#include "filegroup.h"

#include <errno.h>
#include <string.h>

#include "le.h"

int filegroup_begin(struct buf *b, size_t *start)
{
	uint8_t zero[4] = { 0 };

	*start = b->len;
	return buf_append(b, zero, 4);
}

int filegroup_add_header(struct buf *b, size_t start, const char *name, size_t name_len,
			 uint64_t size)
{
	uint8_t hdr[4];
	uint64_t sz = htole64(size);
	size_t old = b->len;
	int rc;

	if (name_len == 0 || name_len > FILEGROUP_NAME_MAX)
		return -EINVAL;
	rc = buf_reserve(b, 12 + name_len);
	if (rc)
		return rc;
	le32_put(hdr, (uint32_t)name_len);
	buf_append(b, hdr, 4);
	buf_append(b, name, name_len);
	buf_append(b, &sz, 8);
	if (filegroup_count(b, start) == UINT32_MAX) {
		b->len = old;
		return -EINVAL;
	}
	le32_put(b->data + start, filegroup_count(b, start) + 1);
	return 0;
}

int filegroup_add(struct buf *b, size_t start, const char *name, size_t name_len,
		  const void *data, uint64_t size)
{
	size_t old = b->len;
	uint32_t count = filegroup_count(b, start);
	int rc;

	if (size > SIZE_MAX)
		return -ENOMEM;
	rc = filegroup_add_header(b, start, name, name_len, size);
	if (rc)
		return rc;
	rc = buf_append(b, data, (size_t)size);
	if (rc) {
		b->len = old;
		le32_put(b->data + start, count);
	}
	return rc;
}

uint32_t filegroup_count(const struct buf *b, size_t start)
{
	return le32_get(b->data + start);
}

int filegroup_iter_init(struct filegroup_iter *it, const uint8_t *p, size_t len)
{
	if (len < 4)
		return -EBADMSG;
	it->p = p;
	it->len = len;
	it->pos = 4;
	it->left = le32_get(p);
	return 0;
}

int filegroup_next(struct filegroup_iter *it, struct filegroup_file *f)
{
	size_t rest = it->len - it->pos;
	uint32_t nlen;
	uint64_t size;

	if (it->left == 0)
		return rest == 0 ? 0 : -EBADMSG;
	if (rest < 4)
		return -EBADMSG;
	nlen = le32_get(it->p + it->pos);
	if (nlen == 0 || nlen > FILEGROUP_NAME_MAX || rest - 4 < (size_t)nlen + 8)
		return -EBADMSG;
	size = le64_get(it->p + it->pos + 4 + nlen);
	if (size > rest - 12 - nlen)
		return -EBADMSG;
	f->name = (const char *)it->p + it->pos + 4;
	f->name_len = nlen;
	f->data = it->p + it->pos + 12 + nlen;
	f->size = size;
	it->pos += 12 + nlen + (size_t)size;
	it->left--;
	return 1;
}
