/*
 * replay.c: run a fuzz target over a corpus without libFuzzer, as a meson test.
 *
 * usage: fuzz_X CORPUS_DIR_OR_FILE...
 * Each file is run as is, truncated at every length up to 64 bytes and then at a few
 * more, and under MUTATIONS deterministic mutations (bit flips, byte sets to boundary
 * values, deletions, duplications) from a fixed seed, so every run replays the same
 * inputs. Exits 0 unless the target crashes (sanitizers abort).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

#define MUTATIONS 300

static unsigned long runs;

const char *fuzz_memfile(const uint8_t *data, size_t size, int *fd)
{
	static char path[64];
	size_t off = 0;

	*fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (*fd < 0)
		return NULL;
	while (off < size) {
		ssize_t n = write(*fd, data + off, size - off);

		if (n <= 0) {
			close(*fd);
			*fd = -1;
			return NULL;
		}
		off += (size_t)n;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", *fd);
	return path;
}

#ifndef ZEPHON_LIBFUZZER /* libFuzzer brings its own main; keep only fuzz_memfile */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
	/* xorshift64*: a fixed sequence, so the replay is the same every run */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static void one(const uint8_t *p, size_t n)
{
	/* a private copy, so reads past n are caught by ASan */
	uint8_t *c = malloc(n ? n : 1);

	if (!c)
		abort();
	memcpy(c, p, n);
	LLVMFuzzerTestOneInput(c, n);
	free(c);
	runs++;
}

static void mutate_and_run(const uint8_t *p, size_t n)
{
	static const uint8_t boundary[] = { 0x00, 0xff, 0x7f, 0x80, '.', '/', '"', '\n', '9' };
	uint8_t *m = malloc(2 * n + 16);

	if (!m)
		abort();
	for (int i = 0; i < MUTATIONS; i++) {
		size_t len = n, pos;
		int edits = 1 + (int)(rnd() % 4);

		memcpy(m, p, n);
		for (int e = 0; e < edits && len; e++) {
			pos = (size_t)(rnd() % len);
			switch (rnd() % 5) {
			case 0: m[pos] ^= (uint8_t)(1u << (rnd() % 8)); break;
			case 1: m[pos] = boundary[rnd() % sizeof(boundary)]; break;
			case 2: /* delete a run */
			{
				size_t k = 1 + (size_t)(rnd() % 16);

				if (k > len - pos)
					k = len - pos;
				memmove(m + pos, m + pos + k, len - pos - k);
				len -= k;
				break;
			}
			case 3: /* duplicate a run */
			{
				size_t k = 1 + (size_t)(rnd() % 16);

				if (k > len - pos)
					k = len - pos;
				if (len + k > 2 * n + 16)
					break;
				memmove(m + pos + k, m + pos, len - pos);
				len += k;
				break;
			}
			default: /* big-number bytes where counts and sizes live */
				m[pos] = (uint8_t)rnd();
				break;
			}
		}
		one(m, len);
	}
	free(m);
}

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return 1;
	}
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 4096;
			buf = realloc(buf, cap);
			if (!buf)
				abort();
		}
		size_t r = fread(buf + n, 1, cap - n, f);

		if (r == 0)
			break;
		n += r;
	}
	fclose(f);
	one(buf, n);
	for (size_t cut = 0; cut < n && cut < 64; cut++)
		one(buf, cut);
	for (int i = 0; i < 16 && n > 64; i++)
		one(buf, 64 + (size_t)(rnd() % (n - 64)));
	mutate_and_run(buf, n);
	free(buf);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	int bad = 0, files = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
		return 2;
	}
	one((const uint8_t *)"", 0);
	for (int i = 1; i < argc; i++) {
		struct stat sb;

		if (stat(argv[i], &sb) != 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (S_ISDIR(sb.st_mode)) {
			DIR *d = opendir(argv[i]);
			struct dirent *de;
			char **names = NULL;
			size_t nn = 0;

			while (d && (de = readdir(d))) {
				if (de->d_name[0] == '.')
					continue;
				names = realloc(names, (nn + 1) * sizeof(*names));
				if (!names || asprintf(&names[nn], "%s/%s", argv[i], de->d_name) < 0)
					abort();
				nn++;
			}
			if (d)
				closedir(d);
			qsort(names, nn, sizeof(*names), cmp_str);
			for (size_t k = 0; k < nn; k++) {
				bad |= run_file(names[k]);
				files++;
				free(names[k]);
			}
			free(names);
		} else {
			bad |= run_file(argv[i]);
			files++;
		}
	}
	if (files == 0) {
		fprintf(stderr, "no corpus files\n");
		return 1;
	}
	printf("%lu inputs from %d corpus files: no crash\n", runs, files);
	return bad;
}

#endif /* ZEPHON_LIBFUZZER */
