/* source_jsonl.c: JSON Lines (https://jsonlines.org), plain or zstd-compressed. */
#include "source.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "instream.h"
#include "json_check.h"

int jsonl_check_line(const uint8_t *line, size_t len, char *why, size_t why_len)
{
	json_error_t e;
	json_t *v;

	/* simdjson validates without building values; jansson decides the rest and says
	 * what is wrong (column and reason) */
	if (json_check_fast(line, len))
		return 0;
	/* JSON_DECODE_ANY: a line may hold any JSON value, as Python's json.loads takes;
	 * JSON_ALLOW_NUL: "\u0000" is valid JSON (RFC 8259 section 7). */
	v = json_loadb((const char *)line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
	if (!v) {
		char text[JSON_ERROR_TEXT_LENGTH + 16], *eof;

		/* jansson parses the line as a whole text: its "end of file" is the end of
		 * the line ("string or '}' expected near end of file" on line 4 of 10) */
		snprintf(text, sizeof(text), "%s", e.text);
		while ((eof = strstr(text, "end of file")))
			memcpy(eof, "end of line", 11);
		/* jansson says "unable to decode byte 0xff"; say what rule that breaks */
		snprintf(why, why_len, "column %d: %s%s", e.column > 0 ? e.column : 1,
			 json_error_code(&e) == json_error_invalid_utf8 ? "invalid UTF-8: " : "",
			 text);
		return -EINVAL;
	}
	json_decref(v);
	return 0;
}

static int blank(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
			return 0;
	return 1;
}

static int jsonl_next(struct source *s, struct buf *out)
{
	struct instream *in = s->priv;
	const uint8_t *line;
	size_t len;
	char why[300];
	int rc;

	for (;;) {
		rc = instream_getline(in, SAMPLE_MAX_BYTES, &line, &len, s->err, sizeof(s->err));
		s->bytes_read = instream_bytes_read(in);
		if (rc <= 0)
			return rc;
		source_text_skip_bom(instream_lineno(in), &line, &len);
		if (blank(line, len))
			continue;
		s->record_line = instream_lineno(in);
		if (s->opts->defer_checks || jsonl_check_line(line, len, why, sizeof(why)) == 0)
			break;
		if (!s->opts->skip_bad) {
			snprintf(s->err, sizeof(s->err), "%s:%" PRIu64 ": invalid JSON at %s; fix the "
				 "line, or pass --skip-bad to skip bad records", s->path,
				 instream_lineno(in), why);
			return -EINVAL;
		}
		source_notice(s, "%s:%" PRIu64 ": invalid JSON at %s; skipped", s->path,
			      instream_lineno(in), why);
	}
	rc = buf_append(out, line, len);
	return rc ? rc : 1;
}

const struct source_ops source_jsonl_ops = {
	.name = "jsonl",
	.open = source_text_open,
	.next = jsonl_next,
	.close = source_text_close,
};
