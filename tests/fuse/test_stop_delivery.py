"""A step counts as consumed only when every rank had its batch: a clean stop (SIGTERM,
SIGINT) lets the batches handed out be read, and a kill -9 serves again every batch a
reader did not finish (its close() failed, or never came) and, of those it finished
(closed: its close() returned), at most the last one of each reader (killed between the
close's reply and the delivery's commit); tests/fuse/test_crash_points.py kills the
daemon at each point of that path.

Each round mounts world_size=4,global_batch=4 (one sample per open of next) with
resume=auto on one journal, runs 4 reader processes (one per rank) that read next in a
loop and record each batch they read whole, stops the daemon mid-stream, and checks
what every rank received against the journal's resume point."""
import errno
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from conftest import Mount, batch, mounted, pack, read_all, run, unmount, write_jsonl

N = 50000         # samples: no epoch wraps within a test, so a line names its gsn
W = 4
OPTS = 'world_size=4,global_batch=4'
READER = r'''
import os, sys
path, out = sys.argv[1], sys.argv[2]
with open(out, 'ab', buffering=0) as o:
    while True:
        try:
            f = open(path, 'rb')
        except OSError as e:
            o.write(b'#open %d\n' % e.errno)
            break
        try:
            data = f.read()
        except OSError as e:
            o.write(b'#read %d\n' % e.errno)
            break
        except BaseException:
            f.close()
            raise
        try:
            f.close()
        except OSError as e:  # the daemon died in the close: the batch is not finished
            o.write(data + b'#close %d\n' % e.errno)
            break
        o.write(data)
'''


@pytest.fixture
def ds(tmp_path):
    write_jsonl(tmp_path / 'in.jsonl', N)
    return pack(tmp_path / 'ds', [tmp_path / 'in.jsonl'])


def gsn_of(ds):
    ref = batch(ds, 'world_size=1,global_batch=%d' % N, 0, 0).splitlines()
    assert len(set(ref)) == N
    return {line: g for g, line in enumerate(ref)}


def resume_point(journal):
    out = run('journal', 'resume-point', journal).stdout.decode().strip()
    g, s = out.split(':')[1].split('@')
    return int(g), int(s)


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def one_round(ds, tmp_path, journal, k, gsn, stop, rng):
    """Mount, read, stop(m); returns (start step, {rank: [steps received]}, {rank: how
    the reader ended})."""
    m = Mount(ds, tmp_path / ('mp%d' % k), OPTS + ',journal=%s' % journal,
              allow_errors=stop == 'kill9').start()
    s0 = json.loads(read_all(m.path('status')))['start_step']
    outs = [tmp_path / ('r%d-%d.out' % (k, r)) for r in range(W)]
    readers = [subprocess.Popen([sys.executable, '-c', READER, str(m.path('rank', r, 'next')),
                                 str(outs[r])]) for r in range(W)]
    lines = lambda r: outs[r].read_bytes().count(b'\n') if outs[r].exists() else 0
    target = rng.randint(5, 80)
    wait_for(lambda: all(lines(r) >= target for r in range(W)), 60, 'readers too slow')
    if stop == 'kill9':
        m.kill9()
    else:
        m.proc.send_signal(stop)
        # the daemon lets the batches out be read, unmounts and exits 0 by itself
        m.proc.wait(timeout=30)
        assert m.proc.returncode == 0, m.stderr_path.read_text()
        assert not mounted(m.mp)
    for p in readers:
        p.wait(timeout=30)
    m.stop(check=True)
    unmount(m.mp)
    got, ends = {}, {}
    for r in range(W):
        data = outs[r].read_bytes().splitlines()
        ends[r] = data[-1] if data and data[-1].startswith(b'#') else None
        steps = []
        for line in data:
            if line.startswith(b'#'):
                continue
            g = gsn[line]
            assert g % W == r, (r, g)
            steps.append(g // W)
        got[r] = steps
    return s0, got, ends


@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT], ids=['SIGTERM', 'SIGINT'])
def test_clean_stop_delivers_every_claim(ds, tmp_path, sig):
    """3 rounds: every rank got every step exactly once up to where the next mount
    continues; the only steps served again are those some rank had not received."""
    gsn = gsn_of(ds)
    journal = tmp_path / 'j.sqlite'
    rng = random.Random(int(sig))
    received = {r: [] for r in range(W)}
    for k in range(3):
        s0, got, ends = one_round(ds, tmp_path, journal, k, gsn, sig, rng)
        _, s_next = resume_point(journal)
        for r in range(W):
            # consecutive from the mount's start: nothing skipped or doubled in a mount
            assert got[r] == list(range(s0, s0 + len(got[r]))), (k, r)
            # the reader stopped at an open refused or cut by the unmount, never in the
            # middle of a batch it had claimed
            assert ends[r] is not None and ends[r].startswith(b'#open '), (k, r, ends[r])
            assert int(ends[r].split()[1]) in (errno.ESHUTDOWN, errno.ENOTCONN,
                                               errno.ECONNABORTED, errno.ENOENT), ends[r]
        # everything received was delivered and recorded: resume=auto continues right
        # after the step the slowest rank finished
        assert s_next == min(s0 + len(got[r]) for r in range(W)), (k, s0, s_next,
                                                                   {r: len(got[r]) for r in got})
        for r in range(W):
            received[r] += [t for t in got[r] if t < s_next]
    for r in range(W):
        assert received[r] == list(range(s_next)), r
    assert s_next < N // W   # still in epoch 0: the gsns above were unambiguous


def finished(steps, end):
    """How many of a reader's batches it finished: all it received, but the last when
    its close failed (the daemon died in it: "#close ERRNO")."""
    return len(steps) - (1 if end and end.startswith(b'#close') else 0)


def delivered_steps(journal):
    """rank -> the journal's delivered step of the last layout (m = A = 1 here: one
    claim per step)."""
    show = json.loads(run('journal', 'show', '--json', journal).stdout)
    cursors = show['layouts'][-1]['cursors']
    for c in cursors.values():
        assert c['delivered_micro'] == 0 and c['micro'] == 0, c
    return {int(r): c['delivered_step'] for r, c in cursors.items()}


def test_kill9_skips_nothing_and_repeats_at_most_the_last_finished_batch(ds, tmp_path):
    """3 rounds of kill -9 with 4 readers: no rank's delivered position passes the batches
    its reader finished (a batch whose close failed is not counted: nothing skipped),
    every finished batch but perhaps the last of each reader is in it, and resume=auto
    never starts past a step some rank did not finish."""
    gsn = gsn_of(ds)
    journal = tmp_path / 'j.sqlite'
    rng = random.Random(9)
    received = {r: [] for r in range(W)}
    repeats = finished_total = 0
    for k in range(3):
        s0, got, ends_how = one_round(ds, tmp_path, journal, k, gsn, 'kill9', rng)
        _, s_next = resume_point(journal)
        delivered = delivered_steps(journal)
        ends = {r: s0 + len(got[r]) for r in range(W)}
        for r in range(W):
            assert got[r] == list(range(s0, ends[r])), (k, r)
            done = s0 + finished(got[r], ends_how[r])
            # never past what the reader finished; short of it by its last batch at most
            repeats += max(0, done - delivered[r])
            finished_total += done - s0
            assert delivered[r] <= done, ('skipped', k, r, done, delivered[r], ends_how[r])
            assert done - 1 <= delivered[r], ('repeated', k, r, done, delivered[r])
        assert s_next == min(delivered.values()), (k, s_next, delivered)
        for r in range(W):
            received[r] += [t for t in got[r] if t < s_next]
    print('kill -9: %d batches finished, %d of them served again' % (finished_total, repeats))
    assert finished_total > 0
    for r in range(W):
        assert received[r] == list(range(s_next)), r
    assert s_next < N // W


@pytest.mark.parametrize('unfinished', ['half read', 'read whole, not closed',
                                        'half read, a child exec',
                                        'read whole, a child exec'])
def test_kill9_serves_an_unfinished_batch_again(ds, tmp_path, unfinished):
    """One rank, one claim per step: 3 batches read and closed, a 4th opened and read in
    part (or whole) but not closed when the daemon is killed (or closed only by the
    exec of a child, which inherited the descriptor: a close in another process, whose
    success says nothing of the reader's own close, which fails). The next mount
    (resume=auto) starts at the 4th: the finished ones are not served again, the
    unfinished one is (a batch is finished when the reader's close returns after its
    read returned the last byte)."""
    journal = tmp_path / 'j.sqlite'
    opts = 'world_size=1,global_batch=4,journal=%s' % journal
    m = Mount(ds, tmp_path / 'mp0', opts, allow_errors=True).start()
    first = [read_all(m.path('rank', 0, 'next')) for _ in range(3)]
    f = open(m.path('rank', 0, 'next'), 'rb', buffering=0)   # read(10) reads 10 bytes
    try:
        fourth = f.read() if unfinished.startswith('read whole') else f.read(10)
        if unfinished.endswith('a child exec'):
            subprocess.run(['true'], check=True)
        m.kill9()
    finally:
        try:
            f.close()
        except OSError:
            pass
    unmount(m.mp)
    m.stop(check=True)
    assert delivered_steps(journal) == {0: 3}
    assert resume_point(journal) == (12, 3)
    m = Mount(ds, tmp_path / 'mp1', opts).start()
    again = read_all(m.path('rank', 0, 'next'))
    m.stop()
    assert again not in first and again.startswith(fourth), (again, fourth)
    assert again == batch(ds, 'world_size=1,global_batch=4', 0, 3)
