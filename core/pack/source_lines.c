/* source_lines.c: one sample per non-empty line of a text file (plain or compressed);
 * the open and close of every line-based source (JSONL too). */
#include "source.h"

#include <errno.h>
#include <stdio.h>

#include "instream.h"

int source_text_open(struct source *s)
{
	struct instream *in;
	int rc = instream_open(s->path, s->hash, &in, s->err, sizeof(s->err));

	if (rc)
		return rc;
	s->priv = in;
	s->content = CONTENT_TEXT;
	s->bytes_total = instream_file_size(in);
	return 0;
}

static int lines_next(struct source *s, struct buf *out)
{
	struct instream *in = s->priv;
	const uint8_t *line;
	size_t len;
	int rc;

	do {
		rc = instream_getline(in, SAMPLE_MAX_BYTES, &line, &len, s->err, sizeof(s->err));
		s->bytes_read = instream_bytes_read(in);
		if (rc <= 0)
			return rc;
		source_text_skip_bom(instream_lineno(in), &line, &len);
	} while (len == 0);
	s->record_line = instream_lineno(in);
	rc = buf_append(out, line, len);
	return rc ? rc : 1;
}

void source_text_close(struct source *s)
{
	instream_close(s->priv);
	s->priv = NULL;
}

const struct source_ops source_lines_ops = {
	.name = "lines",
	.open = source_text_open,
	.next = lines_next,
	.close = source_text_close,
};
