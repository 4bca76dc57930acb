"""The journal through the mount: claims survive kill -9, a full disk fails
opens with EIO and loses nothing, foreign or corrupt journals are refused, /control."""
import collections
import concurrent.futures
import errno
import hashlib
import json
import os
import pathlib
import random
import re
import sqlite3
import subprocess
import threading
import time

import pytest

from conftest import (ZEPHON, Mount, batch, mounted, open_errno, pack, read_all, run,
                      unmount, write_jsonl)


@pytest.fixture
def ds(tmp_path):
    write_jsonl(tmp_path / 'in.jsonl', 300, size=20)
    return pack(tmp_path / 'ds', [tmp_path / 'in.jsonl'])


def journal_cursors(path):
    """rank -> (step, micro) of the last layout, via zephon journal show --json."""
    show = json.loads(run('journal', 'show', '--json', path).stdout)
    return {int(r): (c['step'], c['micro']) for r, c in show['layouts'][-1]['cursors'].items()}


def test_kill9_during_concurrent_readers_loses_no_claim(ds, tmp_path):
    """20 times: 8 reader threads over 4 ranks, the daemon killed with SIGKILL mid-read;
    the journal passes integrity_check and holds every claim a reader received."""
    opts = 'world_size=4,global_batch=16,micro_batch=1'   # A = 4 per step
    journal = tmp_path / 'j.sqlite'
    rng = random.Random(7)
    # the W=1 stream, one line per gsn: the reference for every claim (m = 1), made
    # longer whenever a round's claims run past it (how far they go depends on speed)
    ref = []

    def ref_upto(n):
        if len(ref) < n:
            size = max(20000, 2 * n)
            ref[:] = batch(ds, 'world_size=1,global_batch=%d' % size, 0, 0).splitlines(
                keepends=True)
        return ref
    for round_ in range(20):
        m = Mount(ds, tmp_path / ('mp%d' % round_), opts + ',journal=%s' % journal).start()
        status = json.loads(read_all(m.path('status')))
        s0 = status['start_step']
        got = {r: [] for r in range(4)}
        lock, stop = threading.Lock(), threading.Event()

        def reader(r):
            while not stop.is_set():
                try:
                    data = read_all(m.path('rank', r, 'next'))
                except OSError:
                    return
                with lock:
                    got[r].append(data)
        threads = [threading.Thread(target=reader, args=(r % 4,)) for r in range(8)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.02, 0.2))
        m.kill9()
        stop.set()
        for t in threads:
            t.join(timeout=30)
            assert not t.is_alive()
        unmount(m.mp)
        m.stop(check=True)
        con = sqlite3.connect(str(journal))
        assert con.execute('PRAGMA integrity_check').fetchone() == ('ok',)
        con.close()
        cursors = journal_cursors(journal)
        for r in range(4):
            claimed = (cursors[r][0] - s0) * 4 + cursors[r][1]
            # every batch a reader received is journaled; at most the 2 in flight (one
            # per reader thread of the rank) were journaled and then lost with the
            # daemon, and one more a close reserved (its commit carries the rank's next
            # claim) and no open took
            assert len(got[r]) <= claimed <= len(got[r]) + 3, (round_, r, len(got[r]), claimed)
            # and what they received were that rank's claims: its slice of each step
            g0 = status['start_samples']
            ref_upto(g0 + (claimed // 4 + 1) * 16)
            want = [ref[g0 + (k // 4) * 16 + r * 4 + k % 4] for k in range(claimed)]
            assert not (collections.Counter(got[r]) - collections.Counter(want)), (round_, r)
        if round_ == 0:
            assert sum(len(v) for v in got.values()) > 0


@pytest.fixture
def small_fs(tmp_path):
    """A 2 MiB tmpfs for a journal (root only; skip where mounting is impossible)."""
    d = tmp_path / 'small'
    d.mkdir()
    p = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', str(d)],
                       stderr=subprocess.PIPE)
    if p.returncode:
        pytest.skip('cannot mount a tmpfs here: %s' % p.stderr.decode().strip())
    yield d
    subprocess.run(['umount', '-l', str(d)])


def test_full_disk_fails_opens_with_eio_and_loses_nothing(ds, tmp_path, small_fs):
    opts = 'world_size=2,global_batch=4,micro_batch=1,prefetch=0,journal=%s' % (small_fs / 'j.sqlite')
    m = Mount(ds, tmp_path / 'mp', opts, allow_errors=True).start()
    try:
        got = [read_all(m.path('rank', 0, 'next')) for _ in range(3)]
        # fill the file system to the last block
        filler = small_fs / 'filler'
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        for chunk in (65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b'\0' * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        os.close(fd)
        fails = 0
        for _ in range(200):   # the WAL may hold free pages for a while; it must end in EIO
            e = open_errno(m.path('rank', 0, 'next'))
            if e == errno.EIO:
                fails += 1
                if fails >= 3:
                    break
            else:
                assert e == 0
                got.append(None)   # a claim that still fit: bytes checked below
        assert fails >= 3, 'opens never failed on a full disk'
        state = json.loads(read_all(m.path('rank', 0, 'state')))
        served = len(got)
        assert (state['step'] * 2 + state['micro']) == served
        filler.unlink()
        after = read_all(m.path('rank', 0, 'next'))
        k = served   # no gap: the claim after the failures is the next one in order
        assert after == batch(ds, 'world_size=2,global_batch=4,micro_batch=1', 0, k // 2, k % 2)
    finally:
        m.stop(check=False)
    assert 'the journal could not record the claim' in m.stderr_text


@pytest.mark.parametrize('how,mark', [('deleted', False), ('replaced', False),
                                      ('deleted', True)])
def test_a_journal_deleted_under_the_mount_fails_claims_with_eio(ds, tmp_path, how, mark):
    """A journal removed (a /tmp cleaner) or replaced (a restored copy) under a live mount:
    SQLite would go on committing into the orphaned file and every later claim would be
    lost. Opens of next fail with EIO instead, and the error names the samples:G@S that
    resume=auto would have used (the cursors, or the checkpoint mark when there is one:
    the trainer restores that model), which continues the stream exactly."""
    opts = 'world_size=2,global_batch=4,micro_batch=1'
    j = tmp_path / 'j.sqlite'
    m = Mount(ds, tmp_path / 'mp', opts + ',prefetch=0,journal=%s' % j, allow_errors=True).start()
    point, step = ('4@1', 1) if mark else ('8@2', 2)
    try:
        for _ in range(6):          # steps 0-2 of rank 0, steps 0-1 of rank 1
            read_all(m.path('rank', 0, 'next'))
        for _ in range(4):
            read_all(m.path('rank', 1, 'next'))
        if mark:
            with open(m.path('control'), 'w') as f:
                f.write('checkpoint 1\n')
        if how == 'deleted':
            for p in tmp_path.glob('j.sqlite*'):
                p.unlink()
        else:
            (tmp_path / 'copy').write_bytes(j.read_bytes())
            os.replace(tmp_path / 'copy', j)
        time.sleep(0.05)   # claims look at the journal's path every 10 ms at most
        for r in (0, 1):
            assert open_errno(m.path('rank', r, 'next')) == errno.EIO
        with pytest.raises(OSError) as e:
            with open(m.path('control'), 'w') as f:
                f.write('checkpoint 2\n')
        assert e.value.errno == errno.EIO
        status = json.loads(read_all(m.path('status')))
        msg = status['last_error']['message']
        assert 'was deleted or replaced under the mount' in msg
        assert 'remount with resume=samples:%s' % point in msg, msg
        assert ('checkpoint mark at step 1' in msg) == mark, msg
    finally:
        m.stop(check=False)
    assert 'remount with resume=samples:%s' % point in m.stderr_text
    with Mount(ds, tmp_path / 'mp2', opts + ',resume=samples:%s,journal=%s' % (
            point, tmp_path / 'new.sqlite')) as m2:
        assert read_all(m2.path('rank', 1, 'next')) == batch(ds, opts, 1, step, 0)


def mount_fails(ds, tmp_path, opts):
    mp = tmp_path / 'mp-fail'
    mp.mkdir(exist_ok=True)
    p = subprocess.run([ZEPHON, 'mount', str(ds), str(mp), '-o', opts], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    assert not mounted(mp)
    return p.returncode, p.stderr.decode()


def test_journal_of_another_dataset_or_seed_is_refused(ds, tmp_path):
    journal = tmp_path / 'j.sqlite'
    with Mount(ds, tmp_path / 'mp', 'world_size=1,global_batch=2,journal=%s' % journal) as m:
        read_all(m.path('rank', 0, 'next'))
    before = journal.read_bytes()
    write_jsonl(tmp_path / 'other.jsonl', 50)
    other = pack(tmp_path / 'other', [tmp_path / 'other.jsonl'])
    fp = json.loads(run('info', '--json', ds).stdout)['fingerprint']
    fp_other = json.loads(run('info', '--json', other).stdout)['fingerprint']
    code, err = mount_fails(other, tmp_path, 'journal=%s' % journal)
    assert code == 1 and fp in err and fp_other in err and 'journal=' in err, err
    code, err = mount_fails(ds, tmp_path, 'seed=9,journal=%s' % journal)
    assert code == 1 and 'seed' in err, err
    code, err = mount_fails(ds, tmp_path, 'shuffle=none,journal=%s' % journal)
    assert code == 1 and 'shuffle' in err, err
    assert journal.read_bytes() == before


def journal_files(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith('j.sqlite'))


BEYOND = 'samples:%d@0' % (2**62 - 1)      # its first step would end past gsn 2^62


@pytest.mark.parametrize('resume', ['step:999999999999', BEYOND])
def test_a_refused_start_leaves_no_journal_behind(ds, tmp_path, resume):
    """A mount refused at its resume rule leaves no journal it created (nor -wal, -shm,
    -journal), empties again an empty file it was given, and leaves a journal with
    history as it was."""
    j = tmp_path / 'j.sqlite'
    opts = 'global_batch=2,resume=%s,journal=%s' % (resume, j)
    code, err = mount_fails(ds, tmp_path, opts)
    assert code == 2 and 'cannot start at resume=' in err, err
    assert journal_files(tmp_path) == []
    j.write_bytes(b'')
    code, err = mount_fails(ds, tmp_path, opts)
    assert code == 2, err
    assert journal_files(tmp_path) == ['j.sqlite'] and j.stat().st_size == 0
    with Mount(ds, tmp_path / 'mp', 'world_size=1,global_batch=2,journal=%s' % j) as m:
        read_all(m.path('rank', 0, 'next'))
    before = j.read_bytes()
    # (step:S of a journal with history maps through its layouts: not refused)
    code, err = mount_fails(ds, tmp_path, 'global_batch=2,resume=%s,journal=%s' % (BEYOND, j))
    assert code == 2, err
    assert journal_files(tmp_path) == ['j.sqlite'] and j.read_bytes() == before
    assert run('journal', 'resume-point', j).stdout.decode().strip() == 'samples:2@1'


def test_corrupt_or_foreign_journal_is_refused_and_kept(ds, tmp_path):
    bad = tmp_path / 'bad.sqlite'
    bad.write_bytes(os.urandom(8192))
    code, err = mount_fails(ds, tmp_path, 'journal=%s' % bad)
    before = bad.read_bytes()
    assert code == 1 and str(bad) in err, err
    assert bad.read_bytes() == before
    foreign = tmp_path / 'foreign.sqlite'
    con = sqlite3.connect(str(foreign))
    con.execute('CREATE TABLE t (x)')
    con.commit()
    con.close()
    before = foreign.read_bytes()
    code, err = mount_fails(ds, tmp_path, 'journal=%s' % foreign)
    assert code == 1 and 'not a zephon journal' in err.lower(), err
    assert foreign.read_bytes() == before


def test_unwritable_journal_path_is_refused(ds, tmp_path):
    code, err = mount_fails(ds, tmp_path, 'journal=%s' % (tmp_path / 'missing-dir' / 'j.sqlite'))
    assert code == 1 and 'missing-dir' in err and 'directory does not exist' in err, err
    notdir = tmp_path / 'file'
    notdir.write_text('x')
    code, err = mount_fails(ds, tmp_path, 'journal=%s' % (notdir / 'j.sqlite'))
    assert code == 1 and str(notdir) in err, err


def test_control_checkpoint_rewind_and_status(ds, mount, tmp_path):
    opts = 'world_size=2,global_batch=4,micro_batch=2,journal=%s' % (tmp_path / 'j.sqlite')
    m = mount(ds, opts, allow_errors=True)
    for _ in range(5):
        for r in range(2):
            read_all(m.path('rank', r, 'next'))
    with open(m.path('control'), 'w') as f:
        f.write('checkpoint 3\n')
    for bad in ['checkpoint 99\n', 'rewind -1\n', 'bogus 2\n', 'checkpoint\n', 'rewind 2 3\n']:
        with pytest.raises(OSError) as e:
            with open(m.path('control'), 'w') as f:
                f.write(bad)
        assert e.value.errno == errno.EINVAL, bad
    # one command per write, all or nothing: a later bad line must not let an earlier
    # good one through (the caller sees EINVAL and must be able to trust nothing changed)
    for bad in [b'rewind 1\nbogus\n', b'checkpoint 2\ncheckpoint 99\n', b'rewind 1\nrewind 1\n']:
        fd = os.open(m.path('control'), os.O_WRONLY)
        with pytest.raises(OSError) as e:
            os.write(fd, bad)
        os.close(fd)
        assert e.value.errno == errno.EINVAL, bad
    status = json.loads(read_all(m.path('status')))
    assert status['cursors']['0'] == {'step': 5, 'micro': 0}
    assert 'one command per write' in status['last_error']['message']
    with open(m.path('control'), 'w') as f:
        f.write('rewind 2\n')
    assert read_all(m.path('rank', 1, 'next')) == batch(ds, opts, 1, 2)
    status = json.loads(read_all(m.path('status')))
    assert status['cursors']['1'] == {'step': 3, 'micro': 0}
    assert status['cursors']['0'] == {'step': 2, 'micro': 0}
    assert status['consumed_samples'] == 8
    assert status['resume'].startswith('auto')
    m.stop(check=False)
    assert 'control: refused checkpoint 99: no served rank has reached that step' in m.stderr_text
    marks = json.loads(run('journal', 'show', '--json', tmp_path / 'j.sqlite').stdout)['checkpoints']
    assert [c['step'] for c in marks] == [3]   # not 2: that write was refused whole
    # the remount resumes at the latest position statement: the rewind to step 2
    m2 = mount(ds, opts, name='again')
    status = json.loads(read_all(m2.path('status')))
    assert (status['start_step'], status['start_samples']) == (2, 8)
    assert len(status['layouts']) == 2


def test_checkpoint_after_a_job_that_loads_through_step_files(ds, mount, tmp_path):
    """A job that reads /rank/<r>/step/<t> (docs/mounting.md's way to load in parallel) claims
    nothing, yet its checkpoint must be recorded and resumed from: the mount accepts
    steps up to the furthest step/ read + 1, and still refuses one no rank has reached."""
    opts = 'world_size=2,global_batch=8,micro_batch=2,journal=%s' % (tmp_path / 'j.sqlite')
    m = mount(ds, opts, allow_errors=True)
    for t in range(6):
        for r in range(2):
            assert read_all(m.path('rank', r, 'step', t)) == batch(ds, opts, r, t)
    os.stat(m.path('rank', 0, 'step', 9))   # a stat reads nothing: 10 stays refused
    with pytest.raises(OSError) as e:
        with open(m.path('control'), 'w') as f:
            f.write('checkpoint 10\n')
    assert e.value.errno == errno.EINVAL
    for bad in ['checkpoint 7\n', 'rewind 8\n', 'rewind 6\n']:   # rewinds move next's cursors
        with pytest.raises(OSError) as e:
            with open(m.path('control'), 'w') as f:
                f.write(bad)
        assert e.value.errno == errno.EINVAL, bad
    with open(m.path('control'), 'w') as f:
        f.write('checkpoint 6\n')
    m.stop(check=False)
    assert 'refused checkpoint 7: no served rank has reached that step yet (the furthest, ' \
        'by next or step/, is step 6)' in m.stderr_text
    assert run('journal', 'resume-point', tmp_path / 'j.sqlite').stdout.strip() == b'samples:48@6'
    m2 = mount(ds, opts, name='again')
    assert read_all(m2.path('rank', 1, 'next')) == batch(ds, opts, 1, 6, 0)


def test_repack_with_force_keeps_the_default_journal(tmp_path):
    """pack --force replaces the dataset, not the journal beside it: the same data keeps
    resuming; other data is refused at mount, naming both fingerprints."""
    write_jsonl(tmp_path / 'a.jsonl', 40)
    ds = pack(tmp_path / 'ds', [tmp_path / 'a.jsonl'])
    (ds / 'notes.txt').write_text('mine')
    with Mount(ds, tmp_path / 'mp', 'world_size=1,global_batch=4') as m:
        for _ in range(3):
            read_all(m.path('rank', 0, 'next'))
    p = run('pack', tmp_path / 'a.jsonl', '-o', ds, '--force')
    assert 'kept journal.sqlite' in p.stderr and 'kept notes.txt' in p.stderr
    assert (ds / 'notes.txt').read_text() == 'mine'
    with Mount(ds, tmp_path / 'mp', 'world_size=2,global_batch=4') as m:
        status = json.loads(read_all(m.path('status')))
        assert (status['start_step'], status['start_samples']) == (3, 12)
    write_jsonl(tmp_path / 'b.jsonl', 41)
    run('pack', tmp_path / 'b.jsonl', '-o', ds, '--force')
    code, err = mount_fails(ds, tmp_path, 'world_size=1')
    assert code == 1 and status['fingerprint'] in err, err


def test_resume_step_maps_through_the_layout_that_reached_it(ds, tmp_path):
    """resume=step:S takes the gsn of S from the layout that served up to S, not from a
    later layout that started below S (a restart from an older checkpoint) and stopped
    short of it."""
    j = tmp_path / 'j.sqlite'
    def session(opts, claims):
        with Mount(ds, tmp_path / 'mp', opts + ',journal=%s' % j) as m:
            for _ in range(claims):
                read_all(m.path('rank', 0, 'next'))
            return json.loads(read_all(m.path('status')))
    session('global_batch=8', 10)                                  # steps 0-9, gsn 0-79
    st = session('global_batch=4', 6)                              # steps 10-15 from gsn 80
    assert (st['start_step'], st['start_samples']) == (10, 80)
    st = session('global_batch=4,resume=step:5', 0)                # reads nothing
    assert (st['start_step'], st['start_samples']) == (5, 40)
    st = session('global_batch=4,resume=step:12', 0)
    assert (st['start_step'], st['start_samples']) == (12, 88)
    # zephon batch reads no journal: given the mount's resume=step:12 it would print the
    # bytes of a layout that starts at gsn 48 (12 * 4), not 88, so it refuses and names
    # what to pass; the samples:G@S of /status gives the mount's bytes
    for resume in ['step:12', 'auto']:
        p = run('batch', ds, '-o', 'global_batch=4,resume=%s,journal=%s' % (resume, j),
                '--rank', 0, '--step', 12, '--micro', 0, check=False)
        assert p.returncode == 2 and p.stdout == b''
        assert 'resume=%s needs the journal' % resume in p.stderr
        assert 'pass resume=samples:G@S' in p.stderr
    with Mount(ds, tmp_path / 'mp', 'global_batch=4,resume=step:12,journal=%s' % j) as m:
        assert read_all(m.path('rank', 0, 'next')) == batch(
            ds, 'global_batch=4,resume=samples:88@12', 0, 12, 0)


def test_auto_refuses_a_node_of_a_job_once_its_journal_has_history(ds, tmp_path):
    """A mount of some of the ranks (one node of a job) sees only its own journal, so
    resume=auto there would start each node wherever its own journal says (the tester's
    case: a checkpoint mark on node A, none on node B: step 5 against step 0). The first
    mount of a job (empty journals) starts at 0; after that auto is refused with what to
    pass instead, and the journal is left as it was; resume-point over both journals
    gives the point that every node then mounts with."""
    opts = 'world_size=4,global_batch=8,micro_batch=2'
    ja, jb = tmp_path / 'a.sqlite', tmp_path / 'b.sqlite'
    with Mount(ds, tmp_path / 'mpa', opts + ',ranks=0-1,journal=%s' % ja) as a, \
            Mount(ds, tmp_path / 'mpb', opts + ',ranks=2-3,journal=%s' % jb) as b:
        for _ in range(5):
            for m, ranks in ((a, (0, 1)), (b, (2, 3))):
                for r in ranks:
                    read_all(m.path('rank', r, 'next'))
        with open(a.path('control'), 'w') as f:
            f.write('checkpoint 5\n')
    before = ja.read_bytes(), jb.read_bytes()
    for ranks, j in (('0-1', ja), ('2-3', jb)):
        code, err = mount_fails(ds, tmp_path, opts + ',ranks=%s,journal=%s' % (ranks, j))
        assert code == 2, err
        assert 'resume=auto' in err and '2 of the 4 ranks' in err, err
        assert 'journal resume-point' in err and err.rstrip().endswith('or resume=fresh'), err
    assert (ja.read_bytes(), jb.read_bytes()) == before
    point = run('journal', 'resume-point', ja, jb).stdout.decode().split()[-1]
    assert point == 'samples:40@5', point
    with Mount(ds, tmp_path / 'mpb2', opts + ',ranks=2-3,journal=%s,resume=%s' % (jb, point)) as b:
        assert read_all(b.path('rank', 2, 'next')) == batch(ds, opts, 2, 5, 0)


@pytest.fixture
def freezable_fs(tmp_path):
    """An ext4 file system on a loop device, for fsfreeze (root only; skip where a loop
    device cannot be had). The test must thaw it before it unmounts zephon."""
    img, d = tmp_path / 'fs.img', tmp_path / 'freezable'
    d.mkdir()
    with open(img, 'wb') as f:
        f.truncate(32 << 20)
    p = subprocess.run(['mkfs.ext4', '-q', '-F', str(img)], stderr=subprocess.PIPE)
    if p.returncode == 0:
        p = subprocess.run(['mount', '-o', 'loop', str(img), str(d)], stderr=subprocess.PIPE)
    if p.returncode:
        pytest.skip('cannot mount an ext4 image here: %s' % p.stderr.decode().strip())
    yield d
    subprocess.run(['fsfreeze', '-u', str(d)], stderr=subprocess.DEVNULL)
    subprocess.run(['umount', str(d)])


def waiting_on_fuse(behind_lookups=False):
    """Threads of this process in a system call that waits for a FUSE daemon's answer
    (their /proc wchan is the kernel's FUSE request wait): a request the daemon holds, or
    one queued for it. With behind_lookups, also those that wait for another thread's
    lookup of the same name (d_alloc_parallel): in these tests, a lookup on the mount."""
    n = 0
    for task in pathlib.Path('/proc/self/task').iterdir():
        try:
            wchan = (task / 'wchan').read_text()
        except OSError:
            continue  # the thread ended
        n += ('fuse' in wchan or wchan == 'request_wait_answer'
              or (behind_lookups and wchan == 'd_alloc_parallel'))
    return n


def wait_until(cond, what, timeout=20):
    """Poll cond() until it holds; fail with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def journal_wait(m):
    return json.loads(read_all(m.path('status')))['journal_wait_s']


@pytest.mark.parametrize('threads', [1, 2])
def test_a_stalled_journal_holds_up_claims_and_nothing_else(freezable_fs, ds, tmp_path,
                                                             threads):
    """With the journal's file system frozen, a claim waits for its commit for as long as
    the freeze lasts. Two claims stall; with one or two request threads (with two, one
    claim may run on a request thread, no more: fs/ops.c, claim_inline_begin), every other
    file must still answer: the rest of a batch claimed before, README, another rank's
    peek, every rank's state, status and metrics (which tell how long the journal has
    kept the claims waiting), a step/ file, a listing, and the close of a handle of a
    stalled rank. Then 70 readers of a stalled rank's peek, which waits for the claim,
    all wait (one lookup of peek held on the journal queue, the other 69 behind it in
    the kernel's lookup of the same name, so they take no offload thread): step/ and
    samples/ files must still answer (they have a queue of their own). After the thaw everything completes, with
    the right bytes."""
    opts = 'world_size=3,global_batch=12,micro_batch=2'
    m = Mount(ds, tmp_path / 'mp', opts + ',max_threads=%d,journal=%s' %
              (threads, freezable_fs / 'j.sqlite')).start()
    frozen = False
    pool = concurrent.futures.ThreadPoolExecutor(4)
    flood = concurrent.futures.ThreadPoolExecutor(70)
    sample7 = read_all(m.path('samples', 7))
    held0 = open(m.path('rank', 0, 'next'), 'rb')          # step 0 micro 0
    held2 = open(m.path('rank', 2, 'next'), 'rb')          # step 0 micro 0
    try:
        subprocess.run(['fsfreeze', '-f', str(freezable_fs)], check=True)
        frozen = True
        stalled = [pool.submit(read_all, m.path('rank', r, 'next')) for r in (0, 1)]
        # both claims reached the mount and the journal has held one for half a second
        wait_until(lambda: (waiting_on_fuse() >= 2 and journal_wait(m) >= 0.5)
                   or any(f.done() for f in stalled), 'the claims never reached the journal')
        assert not any(f.done() for f in stalled), 'a claim completed on a frozen journal'

        def others():
            held0.close()   # its release waits for rank 0's lock: not on a request thread
            with held2:
                got = {'held2': held2.read()}
            got.update(readme=read_all(m.path('README')),
                       peek2=read_all(m.path('rank', 2, 'peek')),
                       step=read_all(m.path('rank', 2, 'step', 5)),
                       ls=sorted(os.listdir(m.path('rank', 2))),
                       state0=json.loads(read_all(m.path('rank', 0, 'state'))),
                       status=json.loads(read_all(m.path('status'))),
                       metrics=read_all(m.path('metrics')).decode())
            os.stat(m.path('rank', 2, 'state'))
            return got
        got = pool.submit(others).result(timeout=20)
        assert got['held2'] == batch(ds, opts, 2, 0, 0)
        assert b'rank' in got['readme']
        assert got['peek2'] == batch(ds, opts, 2, 0, 1)
        assert got['step'] == batch(ds, opts, 2, 5)
        assert got['ls'] == ['at', 'next', 'peek', 'state', 'step']
        assert (got['state0']['step'], got['state0']['micro']) == (0, 1)  # the stalled claim's
        assert got['status']['cursors']['1'] == {'step': 0, 'micro': 0}
        assert got['status']['journal_wait_s'] >= 0.4
        assert len(got['status']['layouts']) == 1
        wait = re.search(r'^zephon_journal_wait_seconds (\S+)$', got['metrics'], re.M)
        assert float(wait.group(1)) >= 0.4
        assert not any(f.done() for f in stalled), 'a claim completed on a frozen journal'
        peeks = [flood.submit(read_all, m.path('rank', 0, 'peek')) for _ in range(70)]
        # every peek waits on the mount and none answered: the two claims and 70 peeks
        # wait at once. (One peek's lookup reaches the mount, which holds it: a peek's
        # size is its batch's, which waits for the claim; the other 69 wait for that
        # lookup in the kernel, not on offload threads.)
        wait_until(lambda: waiting_on_fuse(behind_lookups=True) >= 72
                   or any(f.done() for f in peeks), 'the peeks never all waited on the mount')
        assert not any(f.done() for f in peeks), "a stalled rank's peek answered"
        builds = pool.submit(lambda: (read_all(m.path('rank', 2, 'step', 6)),
                                      read_all(m.path('samples', 7)),
                                      read_all(m.path('README')))).result(timeout=20)
        assert builds == (batch(ds, opts, 2, 6), sample7, got['readme'])
        subprocess.run(['fsfreeze', '-u', str(freezable_fs)], check=True)
        frozen = False
        assert stalled[0].result(timeout=20) == batch(ds, opts, 0, 0, 1)
        assert stalled[1].result(timeout=20) == batch(ds, opts, 1, 0, 0)
        assert all(f.result(timeout=20) == batch(ds, opts, 0, 1, 0) for f in peeks)
        assert json.loads(read_all(m.path('status')))['journal_wait_s'] == 0
        unmount(m.mp)
        assert m.proc.wait(timeout=20) == 0   # no offload thread left behind
    finally:
        if frozen:
            subprocess.run(['fsfreeze', '-u', str(freezable_fs)])
        pool.shutdown(wait=True)
        flood.shutdown(wait=True)
        held0.close()
        held2.close()
        m.stop()


def test_a_rewind_on_a_stalled_journal_shows_in_status(freezable_fs, ds, tmp_path):
    """A rewind holds every rank while it commits: on a frozen journal every claim then
    waits for it, and status must say so (journal_wait_s), not 0. After the thaw the
    rewind applies and the claims start over at step 0."""
    opts = 'world_size=2,global_batch=4,micro_batch=1'
    m = Mount(ds, tmp_path / 'mp', opts + ',journal=%s' % (freezable_fs / 'j.sqlite')).start()
    pool = concurrent.futures.ThreadPoolExecutor(4)
    frozen = False
    try:
        for _ in range(3):
            read_all(m.path('rank', 0, 'next'))
        subprocess.run(['fsfreeze', '-f', str(freezable_fs)], check=True)
        frozen = True

        def rewind():
            with open(m.path('control'), 'w') as f:
                f.write('rewind 0\n')
        rw = pool.submit(rewind)
        deadline = time.monotonic() + 20
        while json.loads(read_all(m.path('status')))['journal_wait_s'] == 0:
            assert time.monotonic() < deadline and not rw.done(), 'the rewind never waited'
            time.sleep(0.01)
        claims = [pool.submit(read_all, m.path('rank', r, 'next')) for r in (0, 1)]
        # the rewind's write and both claims wait on the mount, the commit for 0.5 s
        wait_until(lambda: (waiting_on_fuse() >= 3 and journal_wait(m) >= 0.5)
                   or any(c.done() for c in claims), 'the claims never reached the mount')
        status = json.loads(read_all(m.path('status')))
        assert not rw.done() and not any(c.done() for c in claims)
        assert status['journal_wait_s'] >= 0.5
        subprocess.run(['fsfreeze', '-u', str(freezable_fs)], check=True)
        frozen = False
        rw.result(timeout=20)
        assert claims[0].result(timeout=20) == batch(ds, opts, 0, 0, 0)
        assert claims[1].result(timeout=20) == batch(ds, opts, 1, 0, 0)
    finally:
        if frozen:
            subprocess.run(['fsfreeze', '-u', str(freezable_fs)])
        pool.shutdown(wait=True)
        m.stop()


def test_refused_journal_of_another_dataset_says_what_works(ds, tmp_path):
    """The refusal names the ways out, and both work: a new journal path (keeping the
    position with resume=samples:G@S), or deleting the journal file; a resume= rule on
    the same file does not, and the refusal does not suggest one."""
    journal = tmp_path / 'j.sqlite'
    with Mount(ds, tmp_path / 'mp', 'world_size=1,global_batch=2,journal=%s' % journal) as m:
        read_all(m.path('rank', 0, 'next'))
    write_jsonl(tmp_path / 'other.jsonl', 50)
    other = pack(tmp_path / 'other', [tmp_path / 'other.jsonl'])
    code, err = mount_fails(other, tmp_path, 'journal=%s' % journal)
    assert code == 1 and 'resume=fresh' not in err, err
    assert 'journal=PATH naming a file that does not exist yet' in err and \
        'resume=samples:G@S' in err and 'delete %s' % journal in err, err
    for rule in ('fresh', 'samples:2@1', 'auto'):
        code, err = mount_fails(other, tmp_path, 'journal=%s,resume=%s' % (journal, rule))
        assert code == 1 and 'belongs to another dataset' in err, (rule, err)
    new = tmp_path / 'new.sqlite'
    opts = 'world_size=1,global_batch=2,resume=samples:2@1,journal=%s' % new
    with Mount(other, tmp_path / 'mp2', opts) as m:
        assert read_all(m.path('rank', 0, 'next')) == batch(other, 'world_size=1,global_batch=2,'
                                                            'resume=samples:2@1', 0, 1)
    journal.unlink()
    for side in ('-wal', '-shm'):
        assert not pathlib.Path(str(journal) + side).exists()
    opts = 'world_size=1,global_batch=2,journal=%s' % journal
    with Mount(other, tmp_path / 'mp3', opts) as m:
        assert read_all(m.path('rank', 0, 'next')) == batch(other, 'world_size=1,global_batch=2',
                                                            0, 0)
