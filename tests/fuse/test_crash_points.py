"""The daemon stopped, then killed (-9), at each point of a batch's life, without timing:
ZEPHON_FAULT=<point>:<n> (core/util/fault.h) makes it stop itself (SIGSTOP) at the n-th
passage of that point. One rank, one claim per step, one reader that reads next as
Python users do (`with open(p, 'rb') as f: data = f.read()`: an error at the read or at
the close and the batch is not used). At every point: the journal counts no batch the
reader did not finish (nothing skipped), and serves again at most the last one it did
(the commit of a delivery follows the reply to its close), exactly as docs/journal.md says.
"""
import json
import pathlib
import subprocess
import sys
import time

import pytest

from conftest import Mount, batch, pack, read_all, run, unmount, write_jsonl

OPTS = 'world_size=1,global_batch=1'
N = 200
READER = r'''
import sys
path, out = sys.argv[1], sys.argv[2]
with open(out, 'ab', buffering=0) as o:
    while True:
        where = 'open'
        try:
            with open(path, 'rb') as f:
                where = 'read'
                data = f.read()
                where = 'close'
        except OSError as e:
            o.write(b'#%s %d\n' % (where.encode(), e.errno))
            break
        o.write(data)       # one line per batch: the reader finished it
'''
# What a stop at the 3rd passage of each point leaves: the batches the reader finished
# (a number: exactly; a tuple: at least), and the journal's delivered step (the batches
# before it are not served again; None: only the rules every point keeps). SIGSTOP stops
# the daemon's other threads a moment after the one that raised it, so a reader that
# can go on may get one more request answered: the counts allow for it, where it can.
EXPECTED = {
    'claim': (2, 2),                # the 3rd open is not answered: it fails
    'read-end': (2, 2),             # the 3rd batch's bytes sent; its close waits for
                                    # that read's report, and fails
    'flush': (2, 2),                # the 3rd close is not answered: it fails
    'flush-replied': ((3,), None),  # the close returned, the commit not made: a repeat
    'delivery-committed': ((3,), 3),  # the commit came after the close returned
    'release': ((3,), None),        # the close's commit runs on another thread
}
@pytest.fixture(scope='module')
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp('crash')
    write_jsonl(d / 'in.jsonl', N)
    return pack(d / 'ds', [d / 'in.jsonl'])


def stopped(pid):
    """Whether process pid is stopped (state T in /proc/PID/stat)."""
    stat = pathlib.Path('/proc/%d/stat' % pid).read_text()
    return stat[stat.rindex(')') + 2] in 'Tt'


def wait_stopped(m, what):
    deadline = time.monotonic() + 60  # a bound for a hung test, not a timing assumption
    while not stopped(m.proc.pid):
        assert m.proc.poll() is None, m.stderr_path.read_text()
        assert time.monotonic() < deadline, 'the daemon never reached ' + what
        time.sleep(0.01)


def delivered_step(journal):
    show = json.loads(run('journal', 'show', '--json', journal).stdout)
    (c,) = show['layouts'][-1]['cursors'].values()
    assert c['delivered_micro'] == 0
    return c['delivered_step']


def crash_at(ds, tmp_path, point):
    """Mount, read next until the daemon stops at point's 3rd passage, kill it: (the
    batches the reader finished, how it ended, the journal)."""
    journal = tmp_path / 'j.sqlite'
    out = tmp_path / 'reader.out'
    m = Mount(ds, tmp_path / 'mp', OPTS + ',journal=%s' % journal, allow_errors=True,
              env={'ZEPHON_FAULT': point + ':3'}).start()
    reader = subprocess.Popen([sys.executable, '-c', READER, str(m.path('rank', 0, 'next')),
                               str(out)])
    try:
        wait_stopped(m, point)
        m.kill9()
        reader.wait(timeout=30)
    finally:
        if reader.poll() is None:
            reader.kill()
        m.stop(check=True)
        unmount(m.mp)
    lines = out.read_bytes().splitlines()
    assert lines and lines[-1].startswith(b'#'), lines
    return lines[:-1], lines[-1], journal


@pytest.mark.parametrize('point', list(EXPECTED))
def test_a_kill_at_each_point_skips_nothing(ds, tmp_path, point):
    """Killed at `point` of the 3rd batch: the journal's delivered step never passes what
    the reader finished; it falls short of it by one batch only when the kill came
    between the close's reply and the delivery's commit; and resume=auto serves exactly
    the first batch the journal does not count."""
    got, end, journal = crash_at(ds, tmp_path, point)
    want_finished, want_delivered = EXPECTED[point]
    delivered = delivered_step(journal)
    # nothing skipped, at most the last finished batch served again
    assert delivered <= len(got), ('skipped', point, delivered, len(got), end)
    assert len(got) - 1 <= delivered, ('repeated', point, delivered, len(got), end)
    if isinstance(want_finished, tuple):
        assert len(got) >= want_finished[0], (point, len(got), end)
    else:
        assert len(got) == want_finished, (point, len(got), end)
    for step, line in enumerate(got):
        assert line + b'\n' == batch(ds, OPTS, 0, step), (point, step)
    if want_delivered is not None:
        assert delivered >= want_delivered, (point, delivered)
    out = run('journal', 'resume-point', journal).stdout.decode().strip()
    assert out == 'samples:%d@%d' % (delivered, delivered), out
    with Mount(ds, tmp_path / 'mp2', OPTS + ',journal=%s' % journal) as m:
        again = read_all(m.path('rank', 0, 'next'))
    assert again == batch(ds, OPTS, 0, delivered)
    if delivered < len(got):
        assert again == got[-1] + b'\n'     # the repeat is the last batch finished


def test_a_bad_fault_point_is_refused(ds, tmp_path):
    for bad in ['nowhere', 'flush:0', 'flush:x', 'flush:']:
        m = Mount(ds, tmp_path / 'mp', OPTS, env={'ZEPHON_FAULT': bad})
        with pytest.raises(AssertionError) as e:
            m.start()
        assert 'exited 2' in str(e.value) and 'not a fault point' in str(e.value), e.value
        assert 'flush-replied' in str(e.value)
