"""A first mount killed at each fsync of its journal's making, without timing: the
daemon runs with tests/tools/stop_at_sync.c preloaded (STOP_AT_SYNC=N: it stops itself
after its N-th fsync or fdatasync), is killed -9 there, and the next mount of that
journal must start (never "not a Zephon journal"), as must `zephon journal show`
before it. The journal's own refusals and repairs, file by file:
tests/unit/test_journal_birth.c."""
import os
import pathlib
import sqlite3
import subprocess
import time

import pytest

from conftest import Mount, batch, mounted, pack, read_all, run, unmount, write_jsonl
from test_crash_points import stopped

OPTS = 'world_size=1,global_batch=1'
ZEPHON = os.environ.get('ZEPHON', 'build/fs/zephon')
SHIM = os.environ.get('ZEPHON_STOP_AT_SYNC') or str(
    pathlib.Path(ZEPHON).resolve().parents[1] / 'tests' / 'libstop_at_sync.so')


@pytest.fixture(scope='module')
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp('birth')
    write_jsonl(d / 'in.jsonl', 50)
    return pack(d / 'ds', [d / 'in.jsonl'])


def first_mount_stopped_at(ds, tmp_path, n, sync):
    """A first mount of a new journal with the shim, killed once it stopped after its
    n-th sync: whether it stopped before it was mounted (else it mounted first)."""
    journal = tmp_path / 'j.sqlite'
    env = {'LD_PRELOAD': SHIM, 'STOP_AT_SYNC': str(n),
           # the shim comes before the sanitizer's runtime (no effect on a plain build)
           'ASAN_OPTIONS': os.environ.get('ASAN_OPTIONS', '') +
           ':quarantine_size_mb=4:verify_asan_link_order=0'}
    m = Mount(ds, tmp_path / 'mp', OPTS + ',sync=%s,journal=%s' % (sync, journal),
              allow_errors=True, env=env)
    m.mp.mkdir()
    m.err = open(m.stderr_path, 'wb')
    cmd = [ZEPHON, 'mount', str(ds), str(m.mp), '-f', '-o', m.opts]
    m.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=m.err,
                              env=dict(os.environ, **env))
    deadline = time.monotonic() + 60  # a bound for a hung test, not a timing assumption
    while not stopped(m.proc.pid) and not mounted(m.mp):
        assert m.proc.poll() is None, m.stderr_path.read_text()
        assert time.monotonic() < deadline, 'neither stopped nor mounted'
        time.sleep(0.01)
    early = stopped(m.proc.pid) and not mounted(m.mp)
    m.kill9()
    m.stop(check=True)
    unmount(m.mp)
    return early


@pytest.mark.parametrize('sync', ['normal', 'full'])
def test_a_first_mount_killed_at_each_sync_leaves_a_usable_journal(ds, tmp_path, sync):
    """For N = 1, 2, ...: stopped after its N-th sync, killed. Left: nothing, or a
    complete journal (no rollback -journal, no temporary file), which `journal show`
    reads and the next mount uses, starting at step 0; until a first mount gets as far
    as mounting before its N-th sync."""
    for n in range(1, 40):
        d = tmp_path / str(n)
        d.mkdir()
        journal = d / 'j.sqlite'
        early = first_mount_stopped_at(ds, d, n, sync)
        left = sorted(p.name for p in d.iterdir() if p.name.startswith('j.sqlite'))
        if journal.exists():
            show = run('journal', 'show', journal, check=False)
            assert show.returncode == 0, (n, left, show.stderr)
        assert left in ([], ['j.sqlite'], ['j.sqlite', 'j.sqlite-wal']), (n, left)
        with Mount(ds, d / 'mp2', OPTS + ',journal=%s' % journal) as m:
            assert read_all(m.path('rank', 0, 'next')) == batch(ds, OPTS, 0, 0), n
        assert 'not a Zephon journal' not in m.stderr_text
        assert run('journal', 'resume-point', journal).stdout.decode().strip() == \
            'samples:1@1', n
        if not early:
            break
    # the journal's making (its file's sync, its directory's) and its first commits
    assert 3 <= n < 39, n


def test_an_older_zephons_unfinished_journal_is_made_anew(ds, tmp_path):
    """What an older zephon left when killed in its journal's first commit (the whole
    file, in rollback mode, beside a hot -journal that empties it): `journal show` reads
    it as empty and changes nothing; the next mount creates it anew and says so."""
    journal = tmp_path / 'j.sqlite'
    with Mount(ds, tmp_path / 'mp', OPTS + ',journal=%s' % journal):
        pass
    data = bytearray(journal.read_bytes())
    data[18] = data[19] = 1     # still in rollback mode, as the creation left it
    # (it has a layout now: an unfinished creation has none; make it look like one)
    journal.write_bytes(bytes(data))
    con = sqlite3.connect(str(journal))
    con.execute('DELETE FROM cursor')
    con.execute('DELETE FROM layout')
    con.commit()
    con.close()
    hot = bytes([0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7]) + bytes(4) + \
        b'\x5a\x5a\x5a\x5a' + bytes(4) + b'\x00\x00\x02\x00' + b'\x00\x00\x04\x00'
    rollback = tmp_path / 'j.sqlite-journal'
    rollback.write_bytes(hot.ljust(512, b'\0'))
    before = journal.read_bytes(), rollback.read_bytes()
    show = run('journal', 'show', journal, check=False)
    assert show.returncode != 0 and 'is empty' in show.stderr, show.stderr
    assert (journal.read_bytes(), rollback.read_bytes()) == before
    with Mount(ds, tmp_path / 'mp2', OPTS + ',journal=%s' % journal) as m:
        assert read_all(m.path('rank', 0, 'next')) == batch(ds, OPTS, 0, 0)
    assert 'left unfinished' in m.stderr_text and 'created anew' in m.stderr_text
    assert not rollback.exists()
    assert run('journal', 'resume-point', journal).stdout.decode().strip() == 'samples:1@1'
