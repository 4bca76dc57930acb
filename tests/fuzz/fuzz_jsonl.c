/* fuzz_jsonl.c: one JSONL line (jsonl_check_line) and a whole JSONL input, plain or zstd,
 * through the jsonl source (line splitting, zstd streaming, skip-bad). */
#include <unistd.h>

#include "fuzz.h"
#include "source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[300];
	struct source_opts o = { 0 };
	struct buf b = BUF_INIT;
	const char *path;
	int fd;

	jsonl_check_line(data, size, why, sizeof(why));
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
