/* fuzz_npy.c: .npy headers (npy_header_parse) and the npy token source. */
#include <unistd.h>

#include "fuzz.h"
#include "npy.h"
#include "source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct npy_header h;
	struct source_opts o = { 0 };
	struct source s;
	struct buf b = BUF_INIT;
	char why[300];
	const char *path;
	int fd;

	if (npy_header_parse(data, size, &h, why, sizeof(why)) == 0 && h.data_offset > size &&
	    h.data_offset > (1u << 20) + 12)
		__builtin_trap(); /* the header never points past what it was given */
	path = fuzz_memfile(data, size, &fd);
	if (!path)
		return 0;
	if (source_open(&s, &source_npy_ops, path, &o) == 0) {
		while (b.len = 0, source_next(&s, &b) == 1)
			;
	}
	source_close(&s);
	buf_release(&b);
	close(fd);
	return 0;
}
