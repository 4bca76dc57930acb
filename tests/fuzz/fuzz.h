/*
 * fuzz.h: the fuzz targets of Zephon's parsers of untrusted bytes (zstd's tests/fuzz/
 * habit). Each fuzz_*.c defines LLVMFuzzerTestOneInput(); built with replay.c it is a
 * `meson test` (suite fuzz) that replays the corpus in corpus/<target>/ plus a fixed set
 * of deterministic mutations of every corpus file. The same sources build a libFuzzer
 * binary for real fuzzing:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Icore -Ibuild tests/fuzz/fuzz_npy.c \
 *     build/core/libzephon.a $(pkg-config --libs libzstd jansson libarchive libxxhash \
 *     sqlite3) -lm -o fuzz_npy && ./fuzz_npy tests/fuzz/corpus/npy
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
