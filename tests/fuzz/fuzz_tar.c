/* fuzz_tar.c: tar headers and WebDataset grouping through the tar source (libarchive
 * underneath; our member-path rules, grouping and size checks on top). */
#include <string.h>
#include <unistd.h>

#include "filegroup.h"
#include "fuzz.h"
#include "source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct source_opts o = { 0 };
	struct buf b = BUF_INIT;
	const char *path, *clean;
	char why[200], name[256];
	size_t key_len;
	int fd;

	/* the member path rules on the raw bytes as a name */
	if (size < sizeof(name)) {
		memcpy(name, data, size);
		name[size] = 0;
		tar_member_path(name, &clean, &key_len, why, sizeof(why));
	}
	path = fuzz_memfile(data, size, &fd);
	if (!path)
		return 0;
	for (int skip = 0; skip < 2; skip++) {
		struct source s;

		o.skip_bad = skip;
		if (source_open(&s, &source_tar_ops, path, &o) == 0) {
			while (b.len = 0, source_next(&s, &b) == 1) {
				struct filegroup_iter it;
				struct filegroup_file f;

				/* what the source makes must parse back */
				if (filegroup_iter_init(&it, b.data, b.len))
					__builtin_trap();
				int rc;
				while ((rc = filegroup_next(&it, &f)) == 1)
					;
				if (rc != 0)
					__builtin_trap();
			}
		}
		source_close(&s);
	}
	buf_release(&b);
	close(fd);
	return 0;
}
