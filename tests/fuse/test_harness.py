"""The harness itself (tests/sanitizers.py): a sanitizer report of any process a test
starts fails the test, whatever happens to that process's stderr; UBSan halts, TSan goes on."""
import shutil
import subprocess

import pytest

from conftest import sanitizers

UB = r'''
#include <limits.h>
#include <stdio.h>
int main(int argc, char **argv)
{
	volatile int big = INT_MAX;
	int sum = big + argc;            /* signed overflow: undefined */
	puts("past the overflow");
	return sum == 0;
}
'''

HEAP = r'''
#include <stdlib.h>
int main(int argc, char **argv)
{
	volatile char *p = malloc(4);
	p[4 + argc] = 1;                 /* heap overflow */
	return 0;
}
'''

RACE = r'''
#include <pthread.h>
#include <stdio.h>
static long counter;                 /* written by two threads, no lock: a data race */
static void *bump(void *arg)
{
	for (int i = 0; i < 1000; i++)
		counter++;
	return arg;
}
int main(void)
{
	pthread_t t;
	pthread_create(&t, NULL, bump, NULL);
	bump(NULL);
	pthread_join(t, NULL);
	printf("past the race: %ld\n", counter);
	return 0;
}
'''

# tests/run's sanitizer build
ASAN_BUILD = ('-fsanitize=address,undefined', '-fno-sanitize-recover=undefined')


def sanitized(tmp_path, name, src, *flags):
    cc = shutil.which('cc') or shutil.which('gcc')
    if not cc:
        pytest.skip('no C compiler')
    (tmp_path / (name + '.c')).write_text(src)
    exe = tmp_path / name
    p = subprocess.run([cc, '-O0', '-g', *flags, str(tmp_path / (name + '.c')), '-o', str(exe)],
                       stderr=subprocess.PIPE, text=True)
    if p.returncode:
        pytest.skip('cannot build with %s: %s' % (' '.join(flags), p.stderr))
    return str(exe)


def test_an_asan_report_reaches_the_harness_with_stderr_discarded(tmp_path):
    exe = sanitized(tmp_path, 'heap', HEAP, *ASAN_BUILD)
    p = subprocess.run([exe], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reports = sanitizers.take()   # taken here, so that this test's own check passes
    assert p.returncode != 0
    assert 'ERROR: AddressSanitizer: heap-buffer-overflow' in reports, reports
    assert sanitizers.reports_in(reports)


def test_ubsan_in_the_asan_build_halts_with_its_own_status(tmp_path):
    exe = sanitized(tmp_path, 'ub', UB, *ASAN_BUILD)
    p = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == sanitizers.UBSAN_EXIT, (p.returncode, p.stderr)
    assert 'past the overflow' not in p.stdout
    with pytest.raises(AssertionError):
        sanitizers.scan(p.stderr)
    sanitizers.take()


def test_ubsan_alone_halts_and_reports_to_the_harness(tmp_path):
    exe = sanitized(tmp_path, 'ub', UB, '-fsanitize=undefined')   # recoverable checks
    p = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    reports = sanitizers.take()
    assert p.returncode == sanitizers.UBSAN_EXIT
    assert 'past the overflow' not in p.stdout   # halt_on_error
    assert 'runtime error: signed integer overflow' in reports, reports


def test_a_tsan_report_reaches_the_harness_with_stderr_discarded(tmp_path):
    """A race in a process whose stderr nobody reads (a daemonized mount's): the report
    file fails the test; the process runs on to its end (halt_on_error=0) and exits with
    TSan's exitcode, 66."""
    exe = sanitized(tmp_path, 'race', RACE, '-fsanitize=thread', '-pthread')
    p = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    reports = sanitizers.take()
    assert 'past the race' in p.stdout and p.returncode == 66, (p.returncode, p.stdout)
    assert 'WARNING: ThreadSanitizer: data race' in reports, reports
    assert sanitizers.reports_in(reports)


def test_scan_fails_on_each_kind_of_report():
    for text in ('==1==ERROR: AddressSanitizer: heap-use-after-free on address',
                 '==1==ERROR: LeakSanitizer: detected memory leaks',
                 'core/x.c:3:5: runtime error: signed integer overflow',
                 'SUMMARY: UndefinedBehaviorSanitizer: undefined-behavior core/x.c:3:5',
                 'WARNING: ThreadSanitizer: data race (pid=1)'):
        with pytest.raises(AssertionError):
            sanitizers.scan('zephon: ok\n' + text + '\n')
    sanitizers.scan('zephon: an error that is not a sanitizer report\n')
