"""Shared fixtures of Zephon's integration tests (suite `fuse`).

Environment (set by meson, see tests/meson.build):
  ZEPHON       path of the zephon executable under test
  ZEPHON_DATA  ../shared/data (real public files); tests that need it skip without it
"""
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import sanitizers  # noqa: E402  (tests/sanitizers.py)
from sanitizers import no_sanitizer_reports, pytest_sessionfinish  # noqa: E402,F401

ZEPHON = os.environ.get('ZEPHON') or str(
    pathlib.Path(__file__).resolve().parents[2] / 'build' / 'fs' / 'zephon')
DATA = pathlib.Path(os.environ.get('ZEPHON_DATA') or
                    pathlib.Path(__file__).resolve().parents[3] / 'shared' / 'data')


# Every process a test starts writes its sanitizer reports where the harness reads them:
# a test after which one appeared fails (tests/sanitizers.py).
sanitizers.capture()


def built_with(runtime):
    """Whether the zephon under test links a sanitizer runtime, by its entry symbol
    (b'__asan_init': tests/run's build-asan; b'__tsan_init': its build-tsan)."""
    try:
        with open(ZEPHON, 'rb') as f:
            return runtime in f.read()
    except OSError:
        return False


# What a ThreadSanitizer daemon (tests/run's build-tsan) cannot do that the tests ask of
# it: not races, so these tests skip there, each saying why, and run in the other builds.
TSAN = built_with(b'__tsan_init')
tsan_sigbus = pytest.mark.skipif(TSAN, reason=(
    'ThreadSanitizer cannot recover from a SIGBUS: its wrapper of the handler leaves the '
    'signal blocked after the siglongjmp, so a read of a truncated mapping kills the '
    'daemon (the sigbus suite of tests/meson.build)'))
tsan_thread = pytest.mark.skipif(TSAN, reason=(
    "ThreadSanitizer's background thread is named zephon too and counts as one more "
    'request thread'))


def run(*args, check=True, input=None, env=None):
    """Run zephon with args; return the CompletedProcess (bytes stdout, text stderr).
    Fails on a sanitizer report in its stderr, whatever its exit status."""
    p = subprocess.run([ZEPHON, *map(str, args)], input=input, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    p.stderr = p.stderr.decode(errors='replace')
    sanitizers.scan(p.stderr, 'zephon %s' % ' '.join(map(str, args)))
    if check and p.returncode != 0:
        raise AssertionError('zephon %s failed (%d): %s' % (
            ' '.join(map(str, args)), p.returncode, p.stderr))
    return p


@pytest.fixture
def data():
    if not DATA.is_dir():
        pytest.skip('shared data folder %s is absent' % DATA)
    return DATA


# ---------------------------------------------------------------------------
# Packing and mounting

import contextlib
import errno as errno_mod
import signal
import time

SANITIZER_MARKS = sanitizers.MARKS


def pack(out, inputs, *opts):
    """zephon pack INPUTS -o OUT [opts]; returns OUT as a pathlib.Path."""
    out = pathlib.Path(out)
    run('pack', *map(str, inputs), '-o', out, *opts)
    return out


def write_jsonl(path, n, size=0):
    """n JSON records {"i": k, "pad": "..."}; returns the list of lines (bytes, no \\n)."""
    lines = []
    for k in range(n):
        pad = ('x%d' % k) * (size // 4)
        lines.append(('{"i": %d, "pad": "%s"}' % (k, pad)).encode())
    pathlib.Path(path).write_bytes(b''.join(l + b'\n' for l in lines))
    return lines


def write_tokens(path, n_tokens, dtype='uint16', seed=1):
    """A raw little-endian token stream of n_tokens; returns the numpy array."""
    import numpy as np
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    arr = rng.integers(0, min(info.max, 50000), size=n_tokens, dtype=dtype)
    arr.astype('<' + np.dtype(dtype).str[1:]).tofile(str(path))
    return arr


def mounted(mp):
    mp = os.path.realpath(mp)
    with open('/proc/self/mountinfo') as f:
        for line in f:
            fields = line.split()
            if fields[4].encode().decode('unicode_escape') == mp:
                return True
    return False


def unmount(mp):
    """fusermount3 -u, then -uz if busy. Never raises."""
    if subprocess.run(['fusermount3', '-u', str(mp)], stderr=subprocess.DEVNULL).returncode:
        subprocess.run(['fusermount3', '-uz', str(mp)], stderr=subprocess.DEVNULL)


class Mount:
    """A zephon daemon in the foreground on a temp mountpoint.

    m = Mount(dataset, mp, 'world_size=4,global_batch=8'); m.start(); ...; m.stop()
    stop() unmounts, waits for the daemon and fails on sanitizer reports (in its stderr or
    the harness's report files) or unexpected error lines in its stderr (pass
    allow_errors=True where a test provokes them).
    """

    def __init__(self, dataset, mp, opts='', allow_errors=False, extra=(), env=None):
        # an s3:// URL stays a string (a Path would fold its '//')
        self.dataset = dataset if str(dataset).startswith('s3://') else pathlib.Path(dataset)
        self.mp = pathlib.Path(mp)
        self.opts = opts
        self.allow_errors = allow_errors
        self.extra = list(extra)
        self.env = dict(env or {})     # added to the daemon's environment
        self.proc = None
        self.stderr_path = self.mp.parent / (self.mp.name + '.stderr')
        self.stderr_text = ''

    def start(self, timeout=20):
        try:
            self.mp.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            # A stale mount (its daemon killed) that the kernel no longer answers stat on
            # from cached attributes: it exists, and the daemon is the one to clear it.
            if e.errno != errno_mod.ENOTCONN:
                raise
        args = [ZEPHON, 'mount', str(self.dataset), str(self.mp), '-f'] + self.extra
        if self.opts:
            args += ['-o', self.opts]
        self.err = open(self.stderr_path, 'wb')
        env = dict(os.environ)
        # ASan's quarantine would make the daemon's RSS grow with every freed batch and
        # hide whether memory stays flat; keep it small (no effect on a plain build).
        env['ASAN_OPTIONS'] = env.get('ASAN_OPTIONS', '') + ':quarantine_size_mb=4'
        env.update(self.env)
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.err, env=env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.err.close()
                raise AssertionError('zephon mount exited %d: %s' % (
                    self.proc.returncode, self.stderr_path.read_text(errors='replace')))
            # mounted, and answering (a stale mount is in mountinfo too)
            if mounted(self.mp) and os.path.exists(self.mp / 'status'):
                return self
            time.sleep(0.02)
        self.stop()
        raise AssertionError('mount did not appear within %ss' % timeout)

    def __enter__(self):
        if not self.proc:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def path(self, *parts):
        return self.mp.joinpath(*map(str, parts))

    def kill9(self):
        """kill -9 the daemon, leaving a stale mount (as a crash would)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.err.close()

    def stop(self, check=True):
        if self.proc is None:
            return
        hung = False
        if self.proc.poll() is None:
            unmount(self.mp)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                hung = True
                self.proc.kill()
                self.proc.wait(timeout=30)
        if mounted(self.mp):
            unmount(self.mp)
        if not self.err.closed:
            self.err.close()
        self.stderr_text = self.stderr_path.read_text(errors='replace')
        proc, self.proc = self.proc, None
        # with the reports in the harness's files (TSan's race, LSan's leak at exit): this
        # failure, not the exit status below, is the one pytest shows of a teardown
        sanitizers.scan(self.stderr_text + '\n' + sanitizers.take(), 'zephon mount')
        if not check:
            return
        # Killed here, the daemon wrote nothing at its stop (the deliveries since each
        # rank's last claim): a test that counts on a clean unmount must not pass on it.
        assert not hung, 'zephon mount did not exit within 30 s of its unmount: ' + \
            self.stderr_text
        if not self.allow_errors:
            bad = [l for l in self.stderr_text.splitlines() if 'error' in l.lower()]
            assert not bad, self.stderr_text
        assert proc.returncode in (0, -signal.SIGKILL), (proc.returncode, self.stderr_text)


@pytest.fixture
def mount(tmp_path):
    """Factory: mount(dataset, opts='', **kw) -> started Mount; all are stopped after."""
    mounts = []

    def make(dataset, opts='', name=None, **kw):
        m = Mount(dataset, tmp_path / (name or 'mnt%d' % len(mounts)), opts, **kw)
        mounts.append(m)
        return m.start()
    yield make
    errors = []
    for m in mounts:
        try:
            m.stop()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, errors


def batch(dataset, opts, rank, step, micro=None, *extra):
    """The reference bytes of a claim: zephon batch."""
    args = ['batch', dataset, '-o', opts, '--rank', rank, '--step', step]
    if micro is not None:
        args += ['--micro', micro]
    return run(*args, *extra).stdout


def read_all(path):
    with open(path, 'rb') as f:
        return f.read()


def open_errno(path):
    """The errno of open(path) for reading, or 0 when it opens."""
    try:
        with open(path, 'rb'):
            return 0
    except OSError as e:
        return e.errno
