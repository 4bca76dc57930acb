/* fuzz_jsonl.c: one JSONL line (jsonl_check_line) and a whole JSONL input, plain, zstd or
 * gzip, through the jsonl source (line splitting, zstd and gzip streaming, skip-bad). */
#include <stdlib.h>
#include <unistd.h>

#include <jansson.h>

#include "fuzz.h"
#include "json_check.h"
#include "source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[300];
	struct source_opts o = { 0 };
	struct buf b = BUF_INIT;
	const char *path;
	int fd;

	jsonl_check_line(data, size, why, sizeof(why));
	/* The fast validator may refuse more than jansson (it then decides), never accept
	 * more: whatever simdjson takes, jansson must take too. */
	if (json_check_fast(data, size)) {
		json_error_t e;
		json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);

		if (!v)
			abort();
		json_decref(v);
	}
	path = fuzz_memfile(data, size, &fd);
	if (!path)
		return 0;
	for (int skip = 0; skip < 2; skip++) {
		struct source s;

		o.skip_bad = skip;
		lseek(fd, 0, SEEK_SET);
		if (source_open(&s, &source_jsonl_ops, path, &o) == 0) {
			while (b.len = 0, source_next(&s, &b) == 1)
				;
		}
		source_close(&s);
	}
	buf_release(&b);
	close(fd);
	return 0;
}
