/* fuzz_tokdocs.c: the stream of `zephon pack --tokenizer`'s front end (core/pack/pack_text.c),
 * packed whole by pack_run(); a dataset it accepts has a document index that passes
 * docindex_check() and opens as a dataset. An input of odd size is packed into rows
 * (--whole-documents; a stream with masks=1 is --chat's): then its row index passes
 * rowindex_check() and every row rowindex_check_row() (what `zephon verify` checks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "dataset.h"
#include "docindex.h"
#include "fuzz.h"
#include "pack.h"
#include "rowindex.h"

static void remove_tree(const char *dir)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		__builtin_trap();
}

/* The rows of a dataset of rows pass the checks of `zephon verify`. */
static void check_rows(const struct dataset *ds, uint64_t documents)
{
	const struct dataset_info *in = dataset_info(ds);
	struct sample_reader *r = sample_reader_new(ds);
	struct rowindex_entry e[64];
	struct rowindex *ri;
	struct buf s = BUF_INIT;
	uint64_t first, count;
	char err[512];

	if (!r || rowindex_open(dataset_dir(ds), &ri, err, sizeof(err)) ||
	    rowindex_check(ri, in->samples, in->row_len, documents, err, sizeof(err)))
		__builtin_trap();
	for (uint64_t id = 0; id < in->samples; id++) {
		rowindex_row(ri, id, &first, &count);
		if (count > 64)          /* a row of 64 positions holds at most 64 documents */
			__builtin_trap();
		for (uint64_t k = 0; k < count; k++)
			rowindex_get(ri, first + k, &e[k]);
		s.len = 0;
		if (sample_reader_read(r, id, &s) ||
		    rowindex_check_row(s.data, in->row_len, e, count, err, sizeof(err)))
			__builtin_trap();
	}
	buf_release(&s);
	rowindex_close(ri);
	sample_reader_free(r);
}

static char base[64];

static void remove_base(void)
{
	rmdir(base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[128], err[1024];
	struct pack_opts o;
	struct pack_result res;
	struct dataset *ds;
	struct docindex *di;
	int fd;

	if (!base[0]) {
		snprintf(base, sizeof(base), "/tmp/zephon-fuzz-tokdocs-XXXXXX");
		if (!mkdtemp(base))
			return 0;
		atexit(remove_base);
	}
	if (!fuzz_memfile(data, size, &fd))
		return 0;
	if (lseek(fd, 0, SEEK_SET) != 0) /* read the stream from its start, as from a pipe */
		__builtin_trap();
	snprintf(out, sizeof(out), "%s/ds", base);
	pack_opts_init(&o);
	o.out = out;
	o.rows = (int)(size & 1);
	o.seq_len = o.rows ? 64 : 3;
	o.threads = 1;
	o.no_dict = 1;
	o.tokdocs_fd = fd;
	if (pack_run(&o, &res, err, sizeof(err)) == 0) {
		const struct catalog *c;
		uint64_t count, tokens;

		if (dataset_open(out, &ds, err, sizeof(err)) != 0)
			__builtin_trap(); /* what pack accepts, a dataset opens */
		c = dataset_catalog(ds);
		if (catalog_meta_u64(c, "documents", &count) || catalog_meta_u64(c, "tokens", &tokens) ||
		    docindex_open(out, &di, err, sizeof(err)) ||
		    docindex_check(di, count, tokens, c->nsources, err, sizeof(err)))
			__builtin_trap();
		docindex_close(di);
		if (o.rows)
			check_rows(ds, count);
		dataset_close(ds);
		remove_tree(out);
	} else if (access(out, F_OK) == 0) {
		__builtin_trap(); /* a refused pack leaves nothing */
	}
	close(fd);
	return 0;
}
