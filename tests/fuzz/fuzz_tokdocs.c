/* fuzz_tokdocs.c: the stream of `zephon pack --tokenizer`'s front end (core/pack/pack_text.c),
 * packed whole by pack_run(); a dataset it accepts has a document index that passes
 * docindex_check() and opens as a dataset. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "dataset.h"
#include "docindex.h"
#include "fuzz.h"
#include "pack.h"

static void remove_tree(const char *dir)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		__builtin_trap();
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
	o.seq_len = 3;
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
		dataset_close(ds);
		remove_tree(out);
	} else if (access(out, F_OK) == 0) {
		__builtin_trap(); /* a refused pack leaves nothing */
	}
	close(fd);
	return 0;
}
