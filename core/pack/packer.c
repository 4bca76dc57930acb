/* packer.c: what every step of `zephon pack` reports through (pack_int.h): errors into
 * the caller's buffer, progress, interruption. The lowest of core/pack/pack*.c: it calls none
 * of the others, so the steps below pack.c call up to nothing. */
#include "pack_int.h"

#include <stdarg.h>

#include "docindex.h"
#include "shard_writer.h"

int pack_fail(struct packer *p, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vset(p->err, p->errlen, rc, fmt, ap);
	va_end(ap);
	return rc;
}

void pack_report(struct packer *p, int done)
{
	if (!p->o->progress)
		return;
	p->prog.input_bytes = p->input_done;
	p->prog.input_bytes_total = p->input_total;
	p->prog.samples = p->samples;
	p->prog.raw_bytes = p->raw_bytes;
	p->prog.stored_bytes = p->w ? shard_writer_stored_bytes(p->w) : 0;
	p->prog.documents = p->docs ? docindex_writer_count(p->docs) : 0;
	p->prog.tokens = p->tokens;
	p->prog.done = done;
	p->o->progress(p->o->ctx, &p->prog);
}

int pack_cancelled(const struct packer *p)
{
	return p->o->cancel && *p->o->cancel;
}
