/*
 * sqlite_errno.h: the one table from SQLite result codes to -errno, shared by the two
 * modules that hold SQLite files (the journal, core/journal/journal*.c, and catalog.c), so that
 * a cause reads the same whichever file it happened to.
 *
 * Pure, no globals, thread-safe.
 */
#ifndef ZEPHON_SQLITE_ERRNO_H
#define ZEPHON_SQLITE_ERRNO_H

/*
 * -errno for a SQLite result code, primary or extended (only the low byte, the primary
 * code, is looked at). 0 for SQLITE_OK, SQLITE_ROW and SQLITE_DONE; otherwise
 *   -ENOMEM   SQLITE_NOMEM
 *   -EBUSY    SQLITE_BUSY, SQLITE_LOCKED: another connection holds the file
 *   -EROFS    SQLITE_READONLY: this connection cannot write the database (opened
 *             read-only, or the file or its file system is); a permission refused at
 *             open is SQLITE_CANTOPEN or SQLITE_PERM, not this
 *   -EACCES   SQLITE_PERM, SQLITE_AUTH
 *   -ENOSPC   SQLITE_FULL
 *   -ENOENT   SQLITE_CANTOPEN
 *   -EBADMSG  SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_FORMAT, SQLITE_SCHEMA,
 *             SQLITE_MISMATCH, SQLITE_EMPTY, SQLITE_ERROR: the file is not what this
 *             build wrote (both modules run only their own fixed statements, so a
 *             statement that fails to run means a missing or altered table)
 *   -EINVAL   SQLITE_CONSTRAINT, SQLITE_RANGE, SQLITE_TOOBIG: a value breaks a rule of
 *             the schema
 *   -EIO      SQLITE_IOERR and every other code.
 */
int sqlite_errno(int rc);

#endif
