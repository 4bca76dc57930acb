"""Progress of readers that claim nothing (docs/mounting.md, "Progress"): the
mount learns each rank's position from the reads of from/, at/ and step/ themselves, and
/status, /metrics (and `zephon top`) show it; a mixture's per-source counts follow.
Also: a large read of from/ with small shares answers (short) instead of hanging."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import Mount, ZEPHON, pack, read_all, run, write_tokens

SEQ = 8          # tokens per sample (--seq-len)


@pytest.fixture(scope='module')
def tokens(tmp_path_factory):
    d = tmp_path_factory.mktemp('progress')
    out = {}
    for name, n in (('a', 4000), ('b', 2400), ('c', 1600)):
        write_tokens(d / (name + '.bin'), n, seed=len(name) + n)
        out[name] = pack(d / name, [d / (name + '.bin')], '--format', 'bin', '--dtype',
                         'uint16', '--seq-len', SEQ, '--compress', 'none')
    return out


def status(m):
    return json.loads(read_all(m.path('status')))


def metric(m, line_start):
    for line in read_all(m.path('metrics')).decode().splitlines():
        if line.startswith(line_start + ' '):
            return float(line.split()[-1])
    return None


def read_from(m, rank, g, shares, share_bytes):
    """One open and one read of `shares` shares of rank/<rank>/from/<g>, as ZephonLoader
    reads them."""
    fd = os.open(m.path('rank', rank, 'from', g), os.O_RDONLY)
    try:
        data = os.pread(fd, shares * share_bytes, 0)
    finally:
        os.close(fd)
    assert len(data) == shares * share_bytes
    return data


def test_reads_of_pure_files_are_progress(tokens, tmp_path):
    ds = tokens['a']            # 500 samples of 8 tokens
    # W = 2, B = 8: each rank's share of a step is 4 samples, 64 bytes in format bin
    with Mount(ds, tmp_path / 'm', 'world_size=2,global_batch=8,format=bin,journal=%s'
               % (tmp_path / 'j')) as m:
        st = status(m)
        p = st['progress']
        assert st['consumed_samples'] == 0 and p['consumed_samples_from'] == 'claims'
        assert p['ranks']['0'] == {'step': None, 'gsn': None, 'consumed_samples': None,
                                   'samples': 0, 'samples_per_s': 0.0, 'tokens_per_s': 0.0,
                                   'seconds_since_read': None}
        assert p['seconds_since_read'] is None and p['epoch_samples'] == 500
        share = 4 * SEQ * 2
        read_from(m, 0, 0, 5, share)                  # rank 0: steps 0-4
        read_from(m, 1, 0, 3, share)                  # rank 1: steps 0-2
        st = status(m)
        p = st['progress']
        assert p['consumed_samples_from'] == 'reads'
        assert st['consumed_samples'] == 24           # the slower rank: 3 steps of 8
        assert (p['ranks']['0']['step'], p['ranks']['0']['gsn'],
                p['ranks']['0']['consumed_samples'], p['ranks']['0']['samples']) == (4, 32, 40, 20)
        assert (p['ranks']['1']['step'], p['ranks']['1']['consumed_samples'],
                p['ranks']['1']['samples']) == (2, 24, 12)
        assert 0 <= p['ranks']['1']['seconds_since_read'] < 60
        assert p['tokens_per_s'] is not None
        # nothing was claimed or journaled: cursors stay, claims 0
        assert st['cursors']['0'] == {'step': 0, 'micro': 0} and st['counters']['claims'] == 0
        assert metric(m, 'zephon_consumed_samples') == 24
        assert metric(m, 'zephon_rank_consumed_samples{rank="0"}') == 40
        assert metric(m, 'zephon_rank_read_samples_total{rank="1"}') == 12
        # at/ and step/ count as from/ does; a partial read does not
        with open(m.path('rank', 1, 'at', 24), 'rb', buffering=0) as f:
            f.read(10)
        assert status(m)['progress']['ranks']['1']['samples'] == 12
        read_all(m.path('rank', 1, 'at', 24))
        read_all(m.path('rank', 1, 'step', 4))
        st = status(m)
        assert st['progress']['ranks']['1']['consumed_samples'] == 40
        assert st['consumed_samples'] == 40
        # a loader that goes back (load_state_dict of an earlier checkpoint) moves its
        # position back with its first read; re-reads still count as samples read
        read_all(m.path('rank', 0, 'at', 8))
        p = status(m)['progress']['ranks']['0']
        assert (p['step'], p['consumed_samples'], p['samples']) == (1, 16, 24)
        # a share that starts off this mount's steps has a gsn but no step number
        read_all(m.path('rank', 0, 'at', 13))
        p = status(m)['progress']['ranks']['0']
        assert (p['step'], p['gsn'], p['consumed_samples']) == (None, 13, 21)
    # in memory only: a remount starts where the journal says (nothing was claimed)
    with Mount(ds, tmp_path / 'm', 'world_size=2,global_batch=8,format=bin,journal=%s'
               % (tmp_path / 'j')) as m:
        st = status(m)
        assert st['consumed_samples'] == 0 and st['progress']['ranks']['0']['samples'] == 0


def test_claims_and_validation_reads(tokens, tmp_path):
    """A job that claims keeps the claims' consumed_samples; next reads still show in the
    rates; validation reads are no training progress."""
    with Mount(tokens['a'], tmp_path / 'm', 'global_batch=4,micro_batch=2,format=bin,'
               'validation=0.1,journal=%s' % (tmp_path / 'j')) as m:
        read_all(m.path('rank', 0, 'validation', 0))
        p = status(m)['progress']
        assert p['ranks']['0']['samples'] == 0 and p['seconds_since_read'] is None
        for _ in range(3):
            read_all(m.path('rank', 0, 'next'))
        read_all(m.path('rank', 0, 'step', 7))    # claims decide consumed_samples
        st = status(m)
        assert st['progress']['consumed_samples_from'] == 'claims'
        assert st['consumed_samples'] == 4         # one whole step of 4 claimed and read
        r = st['progress']['ranks']['0']
        assert r['samples'] == 3 * 2 + 4
        assert r['step'] == 7 and r['consumed_samples'] == 32


def test_mixture_source_counts_follow_the_reads(tokens, tmp_path):
    mix = tmp_path / 'mix.json'
    mix.write_text(json.dumps({'sources': [
        {'name': n, 'dataset': str(tokens[n]), 'weight': w}
        for n, w in (('a', 0.5), ('b', 0.3), ('c', 0.2))]}))
    with Mount(mix, tmp_path / 'm', 'world_size=1,global_batch=10,format=bin') as m:
        read_from(m, 0, 0, 7, 10 * SEQ * 2)         # 70 samples: 35, 21, 14 by weight
        st = status(m)
        assert st['consumed_samples'] == 70
        got = {s['name']: (s['consumed_samples'], s['epoch'], s['epoch_samples'])
               for s in st['mixture']['sources']}
        assert got == {'a': (35, 0, 500), 'b': (21, 0, 300), 'c': (14, 0, 200)}
        assert metric(m, 'zephon_source_consumed_samples{source="b"}') == 21
        # c (200 samples, 2 of each 10) begins its second epoch after 1000 samples
        read_from(m, 0, 1000, 1, 10 * SEQ * 2)
        c = [s for s in status(m)['mixture']['sources'] if s['name'] == 'c'][0]
        assert (c['consumed_samples'], c['epoch']) == (202, 1)


def test_a_large_read_of_small_shares_answers(tokens, tmp_path):
    """1 MiB of from/0 in one read spans thousands of 64-byte shares: more iovecs than a
    reply may have. It gets a short read (whole bytes, the same as at/), never a hang."""
    with Mount(tokens['a'], tmp_path / 'm', 'world_size=2,global_batch=8,format=bin') as m:
        code = ('import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); '
                'sys.stdout.buffer.write(os.pread(fd, 1 << 20, 0))')
        p = subprocess.run([sys.executable, '-c', code, str(m.path('rank', 0, 'from', 0))],
                           capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        data = p.stdout
        assert 0 < len(data) < 1 << 20
        k = len(data) // 64
        assert status(m)['progress']['ranks']['0']['samples'] == 4 * k
        assert data[:k * 64] == b''.join(read_all(m.path('rank', 0, 'at', 8 * i))
                                         for i in range(k))


def test_top_once_shows_the_reads(tokens, tmp_path):
    with Mount(tokens['a'], tmp_path / 'm', 'world_size=2,global_batch=8,format=bin') as m:
        read_from(m, 0, 0, 5, 64)
        read_from(m, 1, 0, 3, 64)
        out = run('top', m.mp, '--once').stdout.decode()
    lines = out.splitlines()
    assert any(l.split()[:3] == ['0', '4', '40'] for l in lines), out   # rank, step, consumed
    assert any(l.split()[:3] == ['1', '2', '24'] for l in lines), out
    assert 'consumed_samples 24 (reads)' in out, out
    assert 'epoch 0' in out and '4.8%' in out, out                      # 24 of 500
    assert '\x1b[' not in out                                            # no terminal codes


def test_top_over_a_mixture_and_its_errors(tokens, tmp_path):
    mix = tmp_path / 'mix.json'
    mix.write_text(json.dumps({'sources': [
        {'name': n, 'dataset': str(tokens[n]), 'weight': w}
        for n, w in (('a', 0.5), ('b', 0.3), ('c', 0.2))]}))
    with Mount(mix, tmp_path / 'm', 'global_batch=10,format=bin') as m:
        read_from(m, 0, 0, 7, 160)
        out = run('top', m.mp, '--once').stdout.decode()
    rows = {l.split()[0]: l.split() for l in out.splitlines() if l.split()[:1] in
            (['a'], ['b'], ['c'])}
    assert rows['a'][1:3] == ['5', '35'] and rows['c'][1:3] == ['2', '14'], out
    p = run('top', tmp_path / 'm', '--once', check=False)          # unmounted now
    assert p.returncode == 1 and 'not a zephon mount' in p.stderr, p.stderr
    p = run('top', check=False)
    assert p.returncode == 2 and 'usage: zephon top' in p.stderr, p.stderr
    p = run('top', tmp_path, '--bogus', check=False)
    assert p.returncode == 2 and '--bogus' in p.stderr, p.stderr
    p = run('top', tmp_path, '--interval', '0', check=False)
    assert p.returncode == 2 and '--interval 0: give seconds from 0.1 to 3600' in p.stderr
    assert 'usage: zephon top' in run('top', '--help').stdout.decode()


def test_top_redraws_on_a_terminal_and_ends_on_ctrl_c(tokens, tmp_path):
    import pty
    import select
    import signal
    import time
    try:
        for f in os.openpty():
            os.close(f)
    except OSError as e:
        pytest.skip('no pseudo-terminal here (%s): nothing to draw top on' % e)
    with Mount(tokens['a'], tmp_path / 'm', 'world_size=2,global_batch=8,format=bin') as m:
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(ZEPHON, [ZEPHON, 'top', str(m.mp), '--interval', '0.2'])
        out, frames, deadline = b'', 0, time.time() + 20
        try:
            while frames < 2 and time.time() < deadline:
                if select.select([fd], [], [], 1)[0]:
                    out += os.read(fd, 65536)
                    frames = out.count(b'\x1b[H\x1b[2J')       # home, clear: one per frame
                if frames == 1 and b'read s ago' in out:
                    read_from(m, 0, 0, 2, 64)                  # the next frame shows it
            os.kill(pid, signal.SIGINT)
            _, status_ = os.waitpid(pid, 0)
            try:
                while select.select([fd], [], [], 1)[0]:
                    out += os.read(fd, 65536)
            except OSError:
                pass                                           # EIO: the child's side closed
        finally:
            os.close(fd)
    assert frames >= 2, out
    assert os.WIFEXITED(status_) and os.WEXITSTATUS(status_) == 0, status_
    assert out.endswith(b'\x1b[?25h'), out[-40:]               # the cursor is shown again


def test_top_says_when_the_mount_goes_away(tokens, tmp_path):
    m = Mount(tokens['a'], tmp_path / 'm', 'world_size=2,global_batch=8,format=bin').start()
    try:
        p = subprocess.Popen([ZEPHON, 'top', str(m.mp), '--interval', '0.2'],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = p.stdout.readline()
        assert first.startswith(b'zephon top '), first
    finally:
        m.stop()
    out, err = p.communicate(timeout=20)
    assert p.returncode == 1 and b'went away' in err, err
