#include "catalog.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "buf.h"
#include "parse.h"
#include "sqlite_errno.h"

/* schema/catalog.sql, embedded by schema/embed.py. */
extern const char schema_catalog_sql[];

static char *dup_text(sqlite3_stmt *st, int col)
{
	const unsigned char *t = sqlite3_column_text(st, col);

	return strdup(t ? (const char *)t : "");
}

static int col_u64(sqlite3_stmt *st, int col, uint64_t *out)
{
	sqlite3_int64 v;

	if (sqlite3_column_type(st, col) != SQLITE_INTEGER)
		return -EBADMSG;
	v = sqlite3_column_int64(st, col);
	if (v < 0)
		return -EBADMSG;
	*out = (uint64_t)v;
	return 0;
}

/* One row of a table into c: SQLITE_OK, SQLITE_NOMEM, or SQLITE_MISMATCH with a reason
 * in err (a value of the wrong type or sign). */
typedef int (*row_fn)(sqlite3_stmt *st, struct catalog *c, char *err, size_t errlen);

static int meta_row(sqlite3_stmt *st, struct catalog *c, char *err, size_t errlen)
{
	if (sqlite3_column_type(st, 0) != SQLITE_TEXT || sqlite3_column_type(st, 1) != SQLITE_TEXT) {
		err_printf(err, errlen, "meta row is not text");
		return SQLITE_MISMATCH;
	}
	if (catalog_meta_set(c, (const char *)sqlite3_column_text(st, 0),
			     (const char *)sqlite3_column_text(st, 1)))
		return SQLITE_NOMEM;
	return SQLITE_OK;
}

static int dict_row(sqlite3_stmt *st, struct catalog *c, char *err, size_t errlen)
{
	const void *p = sqlite3_column_blob(st, 0);
	int n = sqlite3_column_bytes(st, 0);

	if (sqlite3_column_type(st, 0) != SQLITE_BLOB || n <= 0) {
		err_printf(err, errlen, "dictionary row is not a blob");
		return SQLITE_MISMATCH;
	}
	return catalog_set_dict(c, p, (size_t)n) ? SQLITE_NOMEM : SQLITE_OK;
}

static int source_row(sqlite3_stmt *st, struct catalog *c, char *err, size_t errlen)
{
	struct catalog_source *s;
	const unsigned char *sum;

	if (ARRAY_GROW(c->sources, c->sources_cap, c->nsources + 1))
		return SQLITE_NOMEM;
	s = &c->sources[c->nsources];
	memset(s, 0, sizeof(*s));
	s->path = dup_text(st, 0);
	s->format = dup_text(st, 1);
	c->nsources++;
	if (!s->path || !s->format)
		return SQLITE_NOMEM;
	sum = sqlite3_column_text(st, 3);
	snprintf(s->checksum, sizeof(s->checksum), "%s", sum ? (const char *)sum : "");
	if (col_u64(st, 2, &s->size) || col_u64(st, 4, &s->first_sample) ||
	    col_u64(st, 5, &s->samples)) {
		err_printf(err, errlen, "source %zu has a non-integer or negative field",
			   c->nsources - 1);
		return SQLITE_MISMATCH;
	}
	return SQLITE_OK;
}

static int shard_row(sqlite3_stmt *st, struct catalog *c, char *err, size_t errlen)
{
	struct catalog_shard *sh;

	if (ARRAY_GROW(c->shards, c->shards_cap, c->nshards + 1))
		return SQLITE_NOMEM;
	sh = &c->shards[c->nshards];
	memset(sh, 0, sizeof(*sh));
	sh->file = dup_text(st, 0);
	sh->index_file = dup_text(st, 1);
	c->nshards++;
	if (!sh->file || !sh->index_file)
		return SQLITE_NOMEM;
	if (col_u64(st, 2, &sh->first_sample) || col_u64(st, 3, &sh->samples) ||
	    col_u64(st, 4, &sh->bytes)) {
		err_printf(err, errlen, "shard %zu has a non-integer or negative field",
			   c->nshards - 1);
		return SQLITE_MISMATCH;
	}
	return SQLITE_OK;
}

/* Every row sql selects, through row. 0, or -errno with a reason in err (the row's, or
 * SQLite's message). */
static int load_table(sqlite3 *db, const char *sql, row_fn row, struct catalog *c, char *err,
		      size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc)
		goto sql_fail;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if ((rc = row(st, c, err, errlen)) != SQLITE_OK)
			goto fail;
	if (rc != SQLITE_DONE)
		goto sql_fail;
	sqlite3_finalize(st);
	return 0;

sql_fail:
	err_printf(err, errlen, "%s", sqlite3_errmsg(db));
fail:
	sqlite3_finalize(st);
	return sqlite_errno(rc) ? sqlite_errno(rc) : -EBADMSG;
}

static int load_rows(sqlite3 *db, struct catalog *c, char *err, size_t errlen)
{
	int rc;

	if ((rc = load_table(db, "SELECT key, value FROM meta ORDER BY key", meta_row, c, err,
			     errlen)) ||
	    (rc = load_table(db, "SELECT bytes FROM dict WHERE id = 1", dict_row, c, err,
			     errlen)) ||
	    (rc = load_table(db, "SELECT path, format, size, checksum, first_sample, samples "
			     "FROM sources ORDER BY idx", source_row, c, err, errlen)) ||
	    (rc = load_table(db, "SELECT file, index_file, first_sample, samples, bytes "
			     "FROM shards ORDER BY idx", shard_row, c, err, errlen)))
		return rc;
	return 0;
}


/* Open a catalog read-only as an immutable file (SQLite URI parameter immutable=1): no
 * locks, no look for a hot journal or a WAL. A packed dataset is never written in place
 * (pack --force writes new files and renames them), so nothing can change under the
 * open; a mixture opens one catalog per source, and the locks and stats were most of
 * its extra mount time (RESULTS.md, "Mixtures"). The path is percent-encoded into the
 * URI (https://www.sqlite.org/uri.html). SQLITE_OK or an SQLite error; *db as
 * sqlite3_open_v2 sets it. */
static int open_immutable(const char *path, sqlite3 **db)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = strlen(path);
	char *uri = malloc(3 * n + sizeof("file:?immutable=1"));
	char *o = uri;
	int rc;

	if (!uri) {
		*db = NULL;
		return SQLITE_NOMEM;
	}
	o += sprintf(o, "file:");
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		    *p == '/' || *p == '.' || *p == '_' || *p == '-' || *p == '~') {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	strcpy(o, "?immutable=1");
	rc = sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
	free(uri);
	return rc;
}

int catalog_load(const char *path, struct catalog *out, char *err, size_t errlen)
{
	struct catalog c = CATALOG_INIT;
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	struct stat sb;
	int rc;

	if (stat(path, &sb) != 0) {
		rc = -errno;
		err_printf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	if (!S_ISREG(sb.st_mode)) {
		err_printf(err, errlen, "%s: not a regular file", path);
		return -EBADMSG;
	}
	rc = open_immutable(path, &db);
	if (rc != SQLITE_OK) {
		err_printf(err, errlen, "%s: %s", path, db ? sqlite3_errmsg(db) : "cannot open");
		rc = sqlite_errno(rc);
		goto out;
	}
	rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		c.user_version = sqlite3_column_int(st, 0);
	else {
		err_printf(err, errlen, "%s: %s", path, sqlite3_errmsg(db));
		rc = sqlite_errno(rc ? rc : sqlite3_errcode(db));
		if (!rc)
			rc = -EBADMSG;
		goto out;
	}
	sqlite3_finalize(st);
	st = NULL;
	rc = load_rows(db, &c, err, errlen);
	if (rc) {
		/* prefix the file name to the reason */
		char why[256];

		snprintf(why, sizeof(why), "%s", err ? err : "");
		err_printf(err, errlen, "%s: %s", path, why);
		goto out;
	}
	*out = c;
	memset(&c, 0, sizeof(c));
out:
	sqlite3_finalize(st);
	sqlite3_close(db);
	catalog_release(&c);
	return rc;
}

static int exec_bind_meta(sqlite3_stmt *st, const struct catalog_meta *m)
{
	int rc;

	sqlite3_reset(st);
	sqlite3_bind_text(st, 1, m->key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, m->value, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The INSERTs of catalog_save(), one table each, in the open transaction of db. Each
 * prepares into *st and finalizes it when done: SQLITE_OK, or the failing SQLite code
 * with *st left for the caller to finalize after it has taken sqlite3_errmsg(). */
static int save_meta(sqlite3 *db, sqlite3_stmt **st, const struct catalog *c)
{
	int rc;

	rc = sqlite3_prepare_v2(db, "INSERT INTO meta (key, value) VALUES (?1, ?2)", -1, st, NULL);
	if (rc)
		return rc;
	for (size_t i = 0; i < c->nmeta; i++)
		if ((rc = exec_bind_meta(*st, &c->meta[i])))
			return rc;
	sqlite3_finalize(*st);
	*st = NULL;
	return SQLITE_OK;
}

static int save_dict(sqlite3 *db, sqlite3_stmt **st, const struct catalog *c)
{
	int rc;

	if (!c->dict)
		return SQLITE_OK;
	rc = sqlite3_prepare_v2(db, "INSERT INTO dict (id, bytes) VALUES (1, ?1)", -1, st, NULL);
	if (rc)
		return rc;
	sqlite3_bind_blob64(*st, 1, c->dict, c->dict_len, SQLITE_STATIC);
	if ((rc = sqlite3_step(*st)) != SQLITE_DONE)
		return rc;
	sqlite3_finalize(*st);
	*st = NULL;
	return SQLITE_OK;
}

static int save_sources(sqlite3 *db, sqlite3_stmt **st, const struct catalog *c)
{
	int rc;

	rc = sqlite3_prepare_v2(db, "INSERT INTO sources (idx, path, format, size, checksum, "
				"first_sample, samples) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
				-1, st, NULL);
	if (rc)
		return rc;
	for (size_t i = 0; i < c->nsources; i++) {
		const struct catalog_source *s = &c->sources[i];

		sqlite3_reset(*st);
		sqlite3_bind_int64(*st, 1, (sqlite3_int64)i);
		sqlite3_bind_text(*st, 2, s->path, -1, SQLITE_STATIC);
		sqlite3_bind_text(*st, 3, s->format, -1, SQLITE_STATIC);
		sqlite3_bind_int64(*st, 4, (sqlite3_int64)s->size);
		sqlite3_bind_text(*st, 5, s->checksum, -1, SQLITE_STATIC);
		sqlite3_bind_int64(*st, 6, (sqlite3_int64)s->first_sample);
		sqlite3_bind_int64(*st, 7, (sqlite3_int64)s->samples);
		if ((rc = sqlite3_step(*st)) != SQLITE_DONE)
			return rc;
	}
	sqlite3_finalize(*st);
	*st = NULL;
	return SQLITE_OK;
}

static int save_shards(sqlite3 *db, sqlite3_stmt **st, const struct catalog *c)
{
	int rc;

	rc = sqlite3_prepare_v2(db, "INSERT INTO shards (idx, file, index_file, first_sample, "
				"samples, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6)", -1, st, NULL);
	if (rc)
		return rc;
	for (size_t i = 0; i < c->nshards; i++) {
		const struct catalog_shard *sh = &c->shards[i];

		sqlite3_reset(*st);
		sqlite3_bind_int64(*st, 1, (sqlite3_int64)i);
		sqlite3_bind_text(*st, 2, sh->file, -1, SQLITE_STATIC);
		sqlite3_bind_text(*st, 3, sh->index_file, -1, SQLITE_STATIC);
		sqlite3_bind_int64(*st, 4, (sqlite3_int64)sh->first_sample);
		sqlite3_bind_int64(*st, 5, (sqlite3_int64)sh->samples);
		sqlite3_bind_int64(*st, 6, (sqlite3_int64)sh->bytes);
		if ((rc = sqlite3_step(*st)) != SQLITE_DONE)
			return rc;
	}
	sqlite3_finalize(*st);
	*st = NULL;
	return SQLITE_OK;
}

int catalog_save(const char *path, const struct catalog *c, char *err, size_t errlen)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int rc, fd;

	if (access(path, F_OK) == 0) {
		err_printf(err, errlen, "%s already exists", path);
		return -EEXIST;
	}
	rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (rc != SQLITE_OK)
		goto fail;
	rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
	if (rc)
		goto fail;
	rc = sqlite3_exec(db, schema_catalog_sql, NULL, NULL, NULL);
	if (rc)
		goto fail;

	if ((rc = save_meta(db, &st, c)) || (rc = save_dict(db, &st, c)) ||
	    (rc = save_sources(db, &st, c)) || (rc = save_shards(db, &st, c)))
		goto fail;
	rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	if (rc)
		goto fail;
	rc = sqlite3_close(db);
	db = NULL;
	if (rc)
		goto fail;
	/* The rollback journal is gone after COMMIT; make the file itself durable. */
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) != 0) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		err_printf(err, errlen, "%s: %s", path, strerror(-rc));
		unlink(path);
		return rc;
	}
	close(fd);
	return 0;

fail:
	err_printf(err, errlen, "%s: %s", path, db ? sqlite3_errmsg(db) : "cannot create");
	sqlite3_finalize(st);
	sqlite3_close(db);
	unlink(path);
	rc = sqlite_errno(rc);
	return rc == -EBADMSG || rc == 0 ? -EIO : rc;
}

const char *catalog_meta_get(const struct catalog *c, const char *key)
{
	for (size_t i = 0; i < c->nmeta; i++)
		if (!strcmp(c->meta[i].key, key))
			return c->meta[i].value;
	return NULL;
}

int catalog_meta_u64(const struct catalog *c, const char *key, uint64_t *out)
{
	const char *v = catalog_meta_get(c, key);

	if (!v)
		return -ENOENT;
	return parse_u64(v, out) ? -EBADMSG : 0;
}

int catalog_meta_set(struct catalog *c, const char *key, const char *value)
{
	char *v = strdup(value), *k;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < c->nmeta; i++) {
		if (!strcmp(c->meta[i].key, key)) {
			free(c->meta[i].value);
			c->meta[i].value = v;
			return 0;
		}
	}
	k = strdup(key);
	if (!k || ARRAY_GROW(c->meta, c->meta_cap, c->nmeta + 1)) {
		free(k);
		free(v);
		return -ENOMEM;
	}
	c->meta[c->nmeta].key = k;
	c->meta[c->nmeta].value = v;
	c->nmeta++;
	return 0;
}

int catalog_meta_set_u64(struct catalog *c, const char *key, uint64_t value)
{
	char s[24];

	snprintf(s, sizeof(s), "%" PRIu64, value);
	return catalog_meta_set(c, key, s);
}

int catalog_set_dict(struct catalog *c, const void *dict, size_t dict_len)
{
	uint8_t *p = malloc(dict_len ? dict_len : 1);

	if (!p)
		return -ENOMEM;
	memcpy(p, dict, dict_len);
	free(c->dict);
	c->dict = p;
	c->dict_len = dict_len;
	return 0;
}

int catalog_add_source(struct catalog *c, const struct catalog_source *s)
{
	struct catalog_source *d;

	if (ARRAY_GROW(c->sources, c->sources_cap, c->nsources + 1))
		return -ENOMEM;
	d = &c->sources[c->nsources];
	*d = *s;
	d->path = strdup(s->path);
	d->format = strdup(s->format);
	if (!d->path || !d->format) {
		free(d->path);
		free(d->format);
		return -ENOMEM;
	}
	c->nsources++;
	return 0;
}

int catalog_add_shard(struct catalog *c, const struct catalog_shard *sh)
{
	struct catalog_shard *d;

	if (ARRAY_GROW(c->shards, c->shards_cap, c->nshards + 1))
		return -ENOMEM;
	d = &c->shards[c->nshards];
	*d = *sh;
	d->file = strdup(sh->file);
	d->index_file = strdup(sh->index_file);
	if (!d->file || !d->index_file) {
		free(d->file);
		free(d->index_file);
		return -ENOMEM;
	}
	c->nshards++;
	return 0;
}

void catalog_release(struct catalog *c)
{
	for (size_t i = 0; i < c->nmeta; i++) {
		free(c->meta[i].key);
		free(c->meta[i].value);
	}
	for (size_t i = 0; i < c->nsources; i++) {
		free(c->sources[i].path);
		free(c->sources[i].format);
	}
	for (size_t i = 0; i < c->nshards; i++) {
		free(c->shards[i].file);
		free(c->shards[i].index_file);
	}
	free(c->meta);
	free(c->dict);
	free(c->sources);
	free(c->shards);
	memset(c, 0, sizeof(*c));
}
