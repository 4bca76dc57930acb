/*
 * fuzz.h: the fuzz targets of Zephon's parsers of untrusted bytes (zstd's tests/fuzz/
 * habit). Each fuzz_*.c defines LLVMFuzzerTestOneInput(); built with replay.c it is a
 * `meson test` (suite fuzz) that replays the corpus in corpus/<target>/ plus a fixed set
 * of deterministic mutations of every corpus file. The same sources build a libFuzzer
 * binary for real fuzzing (replay.c then only provides fuzz_memfile):
 *   C="core/util/buf.c core/dataset/catalog.c core/dataset/dataset.c core/dataset/dataset_read.c core/dataset/filegroup.c
 *      core/dataset/instream.c core/dataset/shard_index.c core/pack/source*.c build/schema/schema_sql.c"
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *     -DZEPHON_LIBFUZZER -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Icore -Ibuild \
 *     tests/fuzz/fuzz_tar.c tests/fuzz/replay.c $C \
 *     $(pkg-config --libs libzstd jansson libarchive libxxhash sqlite3) -o /tmp/fuzz_tar
 *   /tmp/fuzz_tar -max_total_time=300 -rss_limit_mb=2048 tests/fuzz/corpus/tar
 * (-Ibuild: any configured build dir, for zephon_config.h; fuzz_shard also needs
 * core/pack/pack.c core/pack/shard_writer.c core/pack/compressor.c core/util/pool.c and -lpthread).
 * A target returns 0 and must neither crash nor leak on any input.
 */
#ifndef ZEPHON_FUZZ_H
#define ZEPHON_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Write data into an anonymous memory file and return a path that opens it
 * ("/proc/self/fd/N"), for targets that drive a file-reading source. fd receives the
 * descriptor to close afterwards. */
const char *fuzz_memfile(const uint8_t *data, size_t size, int *fd);

#endif
