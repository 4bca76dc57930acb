#include "sqlite_errno.h"

#include <errno.h>

#include <sqlite3.h>

int sqlite_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return 0;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
	case SQLITE_FORMAT:
	case SQLITE_SCHEMA:
	case SQLITE_MISMATCH:
	case SQLITE_EMPTY:
	case SQLITE_ERROR:
		return -EBADMSG;
	case SQLITE_CONSTRAINT:
	case SQLITE_RANGE:
	case SQLITE_TOOBIG:
		return -EINVAL;
	default: /* SQLITE_IOERR and everything unexpected */
		return -EIO;
	}
}
