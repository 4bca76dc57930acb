"""Sanitizer reports of every process a test suite starts (both pytest suites use it).

In the ASan/UBSan build (tests/run's build-asan) a report may come from a process whose
stderr no test reads: a daemonized mount (stderr is /dev/null once it detaches), a
mount started by a script with its stderr discarded, a command whose non-zero exit the
test expects anyway. capture() sets, in os.environ (every child inherits it):
  - ASAN_OPTIONS log_path=<a directory of this session>: ASan and LeakSanitizer reports go
    to files there, and the suites' conftest.py fail each test after which one appeared
    (take()), and the session when one appears after the last test;
  - UBSAN_OPTIONS the same log_path (a UBSan-only build honours it), exitcode=86,
    halt_on_error and print_stacktrace. GCC 12's UBSan inside an ASan build ignores
    log_path and always writes to stderr, so every helper that runs
    zephon scans its stderr (scan()), and a UBSan halt exits with a status no zephon
    command returns, so a test that expects a refusal's 1 or 2 fails on it too;
  - TSAN_OPTIONS the same log_path (the ThreadSanitizer build, tests/run's build-tsan):
    ThreadSanitizer does not halt at a report (its halt_on_error is 0 by default), so the
    daemon goes on serving and a race fails the test during which it was reported.
A plain build writes no report files and never exits 86.
"""
import os
import pathlib
import shutil
import sys
import tempfile

import pytest

# The first line of each kind of report: ASan's "ERROR: AddressSanitizer: ...", LSan's
# "ERROR: LeakSanitizer: ...", UBSan's "file:line:col: runtime error: ..." and its
# "UndefinedBehaviorSanitizer: DEADLYSIGNAL" / "SUMMARY: UndefinedBehaviorSanitizer: ...",
# TSan's "WARNING: ThreadSanitizer: data race ..." / "SUMMARY: ThreadSanitizer: ...".
MARKS = ('AddressSanitizer', 'LeakSanitizer', 'UndefinedBehaviorSanitizer', 'runtime error:',
         'ThreadSanitizer')

UBSAN_EXIT = 86   # the exit status of a process UBSan halted

_dir = None


def reports_in(text):
    """The lines of text that carry a sanitizer mark (empty when there are none)."""
    return [line for line in text.splitlines() if any(m in line for m in MARKS)]


def scan(text, what='a process'):
    """Fail (AssertionError with the whole text) when text holds a sanitizer report."""
    assert not reports_in(text), 'sanitizer report from %s:\n%s' % (what, text)


def capture():
    """Send ASan's and TSan's reports of every process started from now on into a
    directory of this session, and make UBSan halt with exit status UBSAN_EXIT
    (idempotent)."""
    global _dir
    if _dir is None:
        _dir = pathlib.Path(tempfile.mkdtemp(prefix='zephon-sanitizer-'))
        os.chmod(_dir, 0o1777)      # commands run as other users (setpriv) write here too
        log = 'log_path=%s' % (_dir / 'report')
        for var, extra in (('ASAN_OPTIONS', log),
                           ('UBSAN_OPTIONS', log + ':halt_on_error=1:print_stacktrace=1'
                            ':exitcode=%d' % UBSAN_EXIT),
                           ('TSAN_OPTIONS', log)):
            old = os.environ.get(var, '')
            os.environ[var] = (old + ':' if old else '') + extra
    return _dir


def take():
    """The text of every report written since the last call, each report file removed."""
    if _dir is None:
        return ''
    texts = []
    for f in sorted(_dir.iterdir()):
        texts.append('--- %s\n%s' % (f.name, f.read_text(errors='replace')))
        f.unlink()
    return '\n'.join(texts)


def release():
    """Remove the report directory (at the end of the session)."""
    global _dir
    if _dir is not None:
        shutil.rmtree(_dir, ignore_errors=True)
        _dir = None


# The suites' conftest.py import these two (pytest finds a fixture or hook by its name in a
# conftest module): every test fails after which a report appeared, and the session when
# one appears after the last test (in a fixture's teardown).
@pytest.fixture(autouse=True)
def no_sanitizer_reports():
    yield
    reports = take()
    assert not reports, 'sanitizer reports during this test:\n' + reports


def pytest_sessionfinish(session, exitstatus):
    reports = take()
    release()
    if reports:
        print('\nsanitizer reports after the last test:\n' + reports, file=sys.stderr)
        session.exitstatus = 1
