"""The mount: /rank/<r>/next and the rest of the tree, readable by every
common tool, with the bytes of `zephon batch` for the same claim."""
import concurrent.futures
import errno
import io
import json
import os
import pathlib
import re
import shutil
import stat
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

import numpy as np
import pytest

from conftest import (ZEPHON, Mount, batch, built_with, mounted, open_errno, pack, read_all,
                      run, sanitizers, tsan_sigbus, tsan_thread, unmount, write_jsonl,
                      write_tokens)


@pytest.fixture
def records(tmp_path):
    """A text dataset of 100 JSONL records; returns (dataset, lines)."""
    lines = write_jsonl(tmp_path / 'in.jsonl', 100, size=40)
    return pack(tmp_path / 'ds', [tmp_path / 'in.jsonl']), lines


@pytest.fixture
def tokens(tmp_path):
    """A token dataset: 64 windows of 256 uint16 tokens; returns (dataset, windows)."""
    arr = write_tokens(tmp_path / 'tok.bin', 64 * 256 + 10)
    ds = pack(tmp_path / 'tds', [tmp_path / 'tok.bin'], '--format', 'tokens',
              '--dtype', 'uint16', '--seq-len', '256', '--compress', 'none')
    return ds, arr[:64 * 256].reshape(64, 256)


def claims(opts_w, rank, n):
    """(step, micro) of the first n claims of a rank: micro-batches in order."""
    w, b, m = opts_w
    a = b // w // m
    return [(k // a, k % a) for k in range(n)]


# ---------------------------------------------------------------- reader matrix

READERS = {
    'cat': lambda p: subprocess.run(['cat', str(p)], check=True, stdout=subprocess.PIPE).stdout,
    'dd4k': lambda p: subprocess.run(['dd', 'if=%s' % p, 'bs=4k', 'status=none'], check=True,
                                     stdout=subprocess.PIPE).stdout,
    'dd1M': lambda p: subprocess.run(['dd', 'if=%s' % p, 'bs=1M', 'status=none'], check=True,
                                     stdout=subprocess.PIPE).stdout,
    'python_read': read_all,
}


def readinto_loop(p):
    out = bytearray()
    buf = bytearray(7)  # an awkward size: many short reads at odd offsets
    with open(p, 'rb', buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            out += buf[:n]
    return bytes(out)


READERS['readinto'] = readinto_loop


def copy_with(tool, tmp_path):
    def reader(p):
        dst = tmp_path / ('copy-%s' % tool)
        if tool == 'cp':
            subprocess.run(['cp', str(p), str(dst)], check=True)
        else:
            shutil.copyfile(p, dst)
        data = dst.read_bytes()
        dst.unlink()
        return data
    return reader


@pytest.mark.parametrize('reader', ['cat', 'dd4k', 'dd1M', 'python_read', 'readinto',
                                    'cp', 'copyfile'])
def test_reader_matrix_lines(records, mount, tmp_path, reader):
    ds, lines = records
    opts = 'world_size=2,global_batch=8,micro_batch=2'
    fn = READERS.get(reader) or copy_with(reader, tmp_path)
    m = mount(ds, opts)
    for step, micro in claims((2, 8, 2), 1, 5):
        got = fn(m.path('rank', 1, 'next'))
        assert got == batch(ds, opts, 1, step, micro)
        assert got.count(b'\n') == 2


def test_head_consumes_one_claim(records, mount):
    ds, _ = records
    opts = 'world_size=1,global_batch=4,micro_batch=2'
    m = mount(ds, opts)
    part = subprocess.run(['head', '-c', '5', str(m.path('rank', 0, 'next'))],
                          check=True, stdout=subprocess.PIPE).stdout
    assert part == batch(ds, opts, 0, 0, 0)[:5]
    # the partial read still consumed (0, 0): the next open gets (0, 1)
    assert read_all(m.path('rank', 0, 'next')) == batch(ds, opts, 0, 0, 1)


def test_numpy_fromfile_bin(tokens, mount):
    ds, windows = tokens
    opts = 'world_size=2,global_batch=8,micro_batch=2,format=bin,shuffle=none'
    m = mount(ds, opts)
    for step, micro in claims((2, 8, 2), 0, 4):
        arr = np.fromfile(str(m.path('rank', 0, 'next')), dtype='<u2', count=-1)
        assert arr.tobytes() == batch(ds, opts, 0, step, micro)
        first = step * 8 + micro * 2  # shuffle=none: sample id = gsn
        assert np.array_equal(arr.reshape(2, 256), windows[first:first + 2])


def test_numpy_load_npy_path_and_file_object(tokens, mount):
    ds, windows = tokens
    opts = 'world_size=1,global_batch=4,micro_batch=4,seed=7'
    m = mount(ds, opts)
    a = np.load(str(m.path('rank', 0, 'next')))
    with open(m.path('rank', 0, 'next'), 'rb') as f:
        b = np.load(f)
    assert a.shape == (4, 256) and a.dtype == np.dtype('<u2')
    assert a.tobytes() == np.load(io.BytesIO(batch(ds, opts, 0, 0))).tobytes()
    assert b.tobytes() == np.load(io.BytesIO(batch(ds, opts, 0, 1))).tobytes()
    state = json.loads(read_all(m.path('rank', 0, 'state')))
    assert np.array_equal(b, windows[state['last']['samples']])


def test_tarfile_reads_tar_batches(records, mount):
    ds, lines = records
    opts = 'world_size=1,global_batch=6,format=tar,shuffle=none'
    m = mount(ds, opts)
    # 'r:' (plain tar) opens the path once. A bare tarfile.open(path) would first try
    # gzip, bz2 and xz, opening the path - and claiming - each time (docs/mounting.md says so).
    with tarfile.open(m.path('rank', 0, 'next'), 'r:') as t:
        members = [(x.name, t.extractfile(x).read()) for x in t.getmembers()]
    assert [n for n, _ in members] == ['%09d.json' % i for i in range(6)]
    assert [d for _, d in members] == lines[:6]
    with open(m.path('rank', 0, 'next'), 'rb') as f, tarfile.open(fileobj=f) as t:
        assert t.getnames() == ['%09d.json' % i for i in range(6, 12)]
    with tarfile.open(fileobj=io.BytesIO(read_all(m.path('rank', 0, 'next')))) as t:
        assert t.getnames() == ['%09d.json' % i for i in range(12, 18)]


# ---------------------------------------------------------------- bytes and layouts

LAYOUTS = [(1, 8, 8), (2, 8, 2), (4, 8, 1), (8, 8, 1), (4, 16, 2)]


@pytest.mark.parametrize('w,b,m', LAYOUTS)
def test_next_equals_batch_and_steps_concatenate(records, mount, w, b, m):
    ds, _ = records
    opts = 'world_size=%d,global_batch=%d,micro_batch=%d,seed=3' % (w, b, m)
    mnt = mount(ds, opts)
    a = b // w // m
    steps = 3
    got = {r: [read_all(mnt.path('rank', r, 'next')) for _ in range(steps * a)] for r in range(w)}
    for r in range(w):
        for k, data in enumerate(got[r]):
            assert data == batch(ds, opts, r, k // a, k % a)
    one = 'world_size=1,global_batch=%d,seed=3' % b
    for t in range(steps):
        step_bytes = b''.join(got[r][t * a + i] for r in range(w) for i in range(a))
        assert step_bytes == batch(ds, one, 0, t)


@pytest.mark.parametrize('fmt', ['npy', 'bin'])
def test_token_encodings_concatenate(tokens, mount, fmt):
    ds, _ = tokens
    ref = 'world_size=1,global_batch=8,format=%s' % fmt
    opts = 'world_size=4,global_batch=8,micro_batch=1,format=%s' % fmt
    m = mount(ds, opts)
    def arr(data):
        return np.load(io.BytesIO(data)) if fmt == 'npy' else np.frombuffer(data, '<u2').reshape(-1, 256)
    for t in range(2):
        parts = []
        for r in range(4):
            for i in range(2):
                data = read_all(m.path('rank', r, 'next'))
                assert data == batch(ds, opts, r, t, i)
                parts.append(arr(data))
        assert np.array_equal(np.concatenate(parts), arr(batch(ds, ref, 0, t)))


def test_peek_then_next_and_stat_claims_nothing(records, mount):
    ds, _ = records
    opts = 'world_size=2,global_batch=4'
    m = mount(ds, opts)
    nxt = m.path('rank', 0, 'next')
    for _ in range(3):
        os.stat(nxt)
        subprocess.run(['ls', '-l', str(m.path('rank', 0))], check=True, stdout=subprocess.DEVNULL)
    peek = read_all(m.path('rank', 0, 'peek'))
    assert peek == read_all(m.path('rank', 0, 'peek'))
    assert read_all(nxt) == peek == batch(ds, opts, 0, 0)
    state = json.loads(read_all(m.path('rank', 0, 'state')))
    assert (state['rank'], state['step'], state['micro']) == (0, 1, 0)
    assert state['last']['step'] == 0 and state['last']['count'] == 2


def test_step_and_samples_files_are_pure(records, mount):
    ds, lines = records
    opts = 'world_size=2,global_batch=8,micro_batch=2,shuffle=none'
    m = mount(ds, opts)
    assert read_all(m.path('rank', 1, 'step', 3)) == batch(ds, opts, 1, 3)
    assert read_all(m.path('samples', 42)) == lines[42] + b'\n'
    assert os.listdir(m.path('rank', 1, 'step')) == []
    assert os.listdir(m.path('samples')) == []
    assert read_all(m.path('rank', 1, 'next')) == batch(ds, opts, 1, 0, 0)  # nothing claimed
    assert open_errno(m.path('samples', 100)) == errno.ENOENT
    assert open_errno(m.path('samples', '007')) == errno.ENOENT


def test_samples_files_can_be_mapped(tokens, records, tmp_path, mount):
    """samples/<id> is the same bytes for the life of the mount, so it goes through the
    page cache and can be mapped: np.load(mmap_mode='r'), np.memmap, mmap. next (each
    open is new bytes) and step/ (large, read once: faster with direct I/O) refuse a
    mapping and read whole. Also with samples of 4 KiB, served as views of the shard."""
    import mmap
    ds, windows = tokens
    opts = 'world_size=2,global_batch=8,micro_batch=2,format=npy'
    m = mount(ds, opts)
    got = np.load(m.path('samples', 5), mmap_mode='r')
    assert isinstance(got, np.memmap) and np.array_equal(got[0], windows[5])
    del got
    for path in (m.path('rank', 0, 'next'), m.path('rank', 1, 'step', 3)):
        with open(path, 'rb') as f, pytest.raises(OSError) as e:
            mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        assert e.value.errno == errno.ENODEV
    assert np.array_equal(np.load(m.path('rank', 1, 'step', 3)),
                          np.load(io.BytesIO(batch(ds, opts, 1, 3))))

    big = write_tokens(tmp_path / 'big.bin', 32 * 2048, seed=3).reshape(32, 2048)
    bds = pack(tmp_path / 'bds', [tmp_path / 'big.bin'], '--format', 'tokens',
               '--dtype', 'uint16', '--seq-len', '2048', '--compress', 'none')
    bm = mount(bds, 'world_size=1,global_batch=4,format=bin', name='views')
    mapped = np.memmap(bm.path('samples', 30), dtype='<u2', mode='r')
    assert np.array_equal(mapped, big[30])
    del mapped
    with open(bm.path('samples', 31), 'rb') as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            assert mm[:] == big[31].astype('<u2').tobytes()

    ds, lines = records   # text: the page cache path for copied (not view) batches
    m2 = mount(ds, 'world_size=1,global_batch=4', name='text')
    with open(m2.path('samples', 7), 'rb') as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            assert mm[:] == lines[7] + b'\n'


def test_tree_and_modes(records, mount):
    ds, _ = records
    m = mount(ds, 'world_size=4,global_batch=8,ranks=1-2')
    assert sorted(os.listdir(m.mp)) == ['README', 'control', 'metrics', 'rank', 'samples', 'status']
    assert sorted(os.listdir(m.path('rank'))) == ['1', '2']
    assert sorted(os.listdir(m.path('rank', 1))) == ['at', 'next', 'peek', 'state', 'step']
    assert stat.S_IMODE(os.stat(m.path('control')).st_mode) == 0o200
    assert stat.S_IMODE(os.stat(m.path('rank', 1, 'next')).st_mode) == 0o400
    assert stat.S_IMODE(os.stat(m.path('rank', 1, 'peek')).st_mode) == 0o400
    assert stat.S_IMODE(os.stat(m.path('rank', 1, 'state')).st_mode) == 0o444
    assert os.stat(m.path('rank', 1, 'next')).st_blksize == 1 << 20
    st = os.stat(m.path('README'))
    assert st.st_uid == os.getuid()
    assert b'/rank/<r>/next' in read_all(m.path('README'))
    status = json.loads(read_all(m.path('status')))
    for key in ('fingerprint', 'samples', 'world_size', 'global_batch', 'micro_batch', 'ranks',
                'start_step', 'start_samples', 'consumed_samples', 'epoch', 'resume', 'layouts',
                'cursors'):
        assert key in status
    assert status['ranks'] == '1-2' and status['samples'] == 100
    assert set(status['cursors']) == {'1', '2'}
    metrics = read_all(m.path('metrics')).decode()
    assert '# TYPE zephon_claims_total counter' in metrics
    assert 'zephon_claim_latency_seconds_bucket{le="+Inf"}' in metrics
    # find / du / ls -R stay instant: step/, at/ and samples/ list nothing
    out = subprocess.run(['find', str(m.mp)], check=True, stdout=subprocess.PIPE, timeout=10).stdout
    assert len(out.splitlines()) == 1 + 6 + 2 + 2 * 5


def check_json(ds, mp, opts):
    """`zephon mount --check --json`'s configuration (mounts nothing)."""
    return json.loads(run('mount', ds, mp, '-o', opts, '--check', '--json').stdout)


@pytest.mark.parametrize('opts', [
    'world_size=4,global_batch=16,ranks=1-2,seed=3,format=bin',
    'world_size=2,global_batch=8,micro_batch=2,epochs=1,resume=samples:24@5',
    'shuffle=none'])
def test_check_json_is_the_status_a_mount_serves(tokens, records, mount, tmp_path, opts):
    """`--check --json` resolves the options as the mount does, defaults and derived
    values included (the C code's, which no launcher or loader restates): each of its
    keys that is not null has the value the live mount's /status shows, and start_step and
    start_samples are null only where the journal decides them."""
    for ds in (tokens[0], records[0]):
        if ds == records[0]:
            opts = opts.replace(',format=bin', '')     # lines: npy and bin are refused
        # the defaults' case leaves the journal to the mount: DATASET/journal.sqlite
        opts_j = opts if opts == 'shuffle=none' else \
            '%s,journal=%s' % (opts, tmp_path / ('j-%s.sqlite' % ds.name))
        asked = check_json(ds, tmp_path / 'nowhere', opts_j)
        m = mount(ds, opts_j)
        st = json.loads(read_all(m.path('status')))
        m.stop()
        assert not (tmp_path / 'nowhere').exists()
        for key, value in asked.items():
            if value is not None:
                assert st[key] == value, (ds, opts, key)
        assert set(asked) <= set(st)
        assert (asked['start_step'] is None) == (asked['start_samples'] is None) == \
            ('samples:24@5' not in opts)
        if ds == records[0]:
            assert asked['share_bytes'] is None and 'window' not in asked
        if opts == 'shuffle=none':      # the defaults: one rank, one sample per step
            assert (asked['world_size'], asked['global_batch'], asked['rank_list'],
                    asked['share_samples'], asked['micro_batches']) == (1, 1, [0], 1, 1)
            assert asked['journal'] == str(ds / 'journal.sqlite')


def test_check_json_refuses_bad_options_and_json_alone(tokens, tmp_path):
    """--json without --check is a usage error; options the mount refuses fail the check
    with the mount's message (the ranks rules among them: one implementation)."""
    ds, _ = tokens
    p = run('mount', ds, tmp_path / 'mp', '--json', check=False)
    assert p.returncode == 2 and '--json goes with --check' in p.stderr
    for ranks, why in (('3-1', 'reversed'), ('0,0', 'listed twice'), ('4', 'not below')):
        p = run('mount', ds, tmp_path / 'mp', '-o', 'world_size=4,ranks=' + ranks, '--check',
                '--json', check=False)
        assert p.returncode == 2 and why in p.stderr and not p.stdout, (ranks, p.stderr)


def metric(m, name):
    for line in read_all(m.path('metrics')).decode().splitlines():
        if line.startswith(name + ' '):
            return float(line.split()[1])
    raise KeyError(name)


def wait_for_metric(m, name, at_least, timeout=30):
    """Poll /metrics until name reaches at_least; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while metric(m, name) < at_least:
        assert time.monotonic() < deadline, '%s stayed below %s' % (name, at_least)
        time.sleep(0.005)


@pytest.mark.parametrize('keep_open', [False, True])
def test_paced_reader_is_served_from_the_prefetch_ring(records, mount, keep_open):
    """A reader that pauses between claims has its ring refilled when it closes its
    batch; one that keeps every handle open has it refilled at its next claim. Either way
    no claim waits for a decode it did not ask for, and the bytes are the stream's."""
    ds, _ = records
    opts = 'world_size=1,global_batch=4,prefetch=2'
    m = mount(ds, opts)
    held = []
    for step in range(8):
        time.sleep(0.03)  # a training step: the pace the mount sees
        # the ring was filled at mount (steps 0 and 1) and refilled after each claim
        wait_for_metric(m, 'zephon_prefetch_decoded_total', max(2, step + 1))
        f = open(m.path('rank', 0, 'next'), 'rb', buffering=0)
        assert f.read() == batch(ds, opts, 0, step)
        if keep_open:
            held.append(f)
        else:
            f.close()
    for f in held:
        f.close()
    assert metric(m, 'zephon_claims_total') == 8
    assert metric(m, 'zephon_prefetch_hits_total') == 8


def test_a_mount_of_many_ranks_prefetches_a_rank_from_its_first_claim(records, mount):
    """A node that forgot ranks= at world_size=100 must not decode a ring for each of
    the 100 ranks at mount (core/serve/serve.c, PRIME_AT_START_MAX): rank 42's first claim is
    decoded on demand, and its ring is filled from then on."""
    ds, _ = records
    opts = 'world_size=100,global_batch=200,prefetch=2'
    # One decode thread: decodes run in the order queued (core/util/jobq.h), so a ring primed
    # at mount would be decoded before rank 42's, which its first claim queues: then the
    # two decodes waited for below would be the mount's, and rank 42's second claim
    # would miss. No time window to wait out.
    m = mount(ds, opts + ',workers=1')
    assert metric(m, 'zephon_prefetch_decoded_total') == 0
    assert read_all(m.path('rank', 42, 'next')) == batch(ds, opts, 42, 0)
    assert metric(m, 'zephon_prefetch_misses_total') == 1
    wait_for_metric(m, 'zephon_prefetch_decoded_total', 2)    # rank 42's ring: steps 1, 2
    assert read_all(m.path('rank', 42, 'next')) == batch(ds, opts, 42, 1)
    assert metric(m, 'zephon_prefetch_hits_total') == 1
    assert metric(m, 'zephon_prefetch_decoded_total') <= 3     # no other rank's ring


def test_read_ahead_skips_a_dataset_in_the_page_cache(tokens, mount):
    """A dataset just packed is in the page cache: the read-ahead a claim wakes finds it
    there (readahead_resident_total) and computes no sample's ids (readahead_samples_total),
    which would cost the order's work once more for nothing."""
    ds, windows = tokens
    m = mount(ds, 'world_size=1,global_batch=4')
    assert len(read_all(m.path('rank', 0, 'next'))) > 0
    wait_for_metric(m, 'zephon_readahead_resident_total', 1)
    assert metric(m, 'zephon_readahead_samples_total') == 0


def resident_pages(path):
    """Pages of path in the page cache (util-linux fincore)."""
    out = subprocess.run(['fincore', '--bytes', '--noheadings', '--output', 'RES', str(path)],
                         stdout=subprocess.PIPE, text=True, check=True, timeout=30).stdout
    return int(out) // os.sysconf('SC_PAGESIZE')


def test_ids_and_from_reads_hint_their_coming_pages(tmp_path, mount):
    """On a dataset that left the page cache, a read of ids/<G> makes the mount ask for the
    payload pages of the rank's coming samples and not their index pages (the loader
    gathers without them); a read of from/<G> asks for both (the mount checks each sample
    against its index entry). 65,536 samples of 16 bytes: 256 payload and ~390 index
    pages, which a window of 4,096 random samples covers nearly all of."""
    if not shutil.which('fincore'):
        pytest.skip('no fincore (util-linux) to count cached pages')
    write_tokens(tmp_path / 'tok.bin', 65536 * 8, seed=5)
    ds = pack(tmp_path / 'wide', [tmp_path / 'tok.bin'], '--format', 'tokens', '--dtype',
              'uint16', '--seq-len', '8', '--compress', 'none')
    raw, = ds.glob('*.raw')
    idx, = ds.glob('*.idx')
    for f in (raw, idx):
        with open(f, 'rb') as fh:
            os.fdatasync(fh.fileno())
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    if resident_pages(raw) > 8:
        pytest.skip('the scratch file system keeps evicted pages (tmpfs?)')
    # B = 64 samples (1 KiB of payload) a step; 64K ahead: 64 steps, 4,096 samples
    # prefetch=0: no batch is built (its warming would read pages around its samples)
    m = mount(ds, 'world_size=1,global_batch=64,readahead=64K,prefetch=0')
    idx_at_mount = resident_pages(idx)          # the header and the flat check's pages
    with open(m.path('rank', 0, 'ids', 0), 'rb') as f:
        assert len(f.read(4096)) == 4096
    deadline = time.monotonic() + 20
    while resident_pages(raw) < 200:
        assert time.monotonic() < deadline, 'the payload pages did not arrive'
        time.sleep(0.01)
    assert resident_pages(idx) <= idx_at_mount + 4
    # one step, past the hinted window (a buffered read would build many: their own index
    # pages would hide the hints'; one step's reach some 60 of the ~390)
    fd = os.open(m.path('rank', 0, 'from', 64 * 64), os.O_RDONLY)
    try:
        assert len(os.pread(fd, 1024, 0)) == 1024
    finally:
        os.close(fd)
    deadline = time.monotonic() + 20
    while resident_pages(idx) < 300:
        assert time.monotonic() < deadline, 'the index pages did not arrive'
        time.sleep(0.01)


@pytest.mark.parametrize('threads', ['', ',max_threads=1'])
def test_concurrent_openers_get_every_micro_batch_once(records, mount, threads):
    """Eight readers of four ranks at once, also through a single request thread (their
    requests then wait in the kernel's queue: no claim may be lost or doubled)."""
    ds, _ = records
    opts = 'world_size=4,global_batch=32,micro_batch=2'  # A = 4 per step
    m = mount(ds, opts + threads)
    per_rank = 24  # 6 steps
    got = {r: [] for r in range(4)}
    lock = threading.Lock()

    def worker(r):
        for _ in range(per_rank // 2):
            data = read_all(m.path('rank', r, 'next'))
            with lock:
                got[r].append(data)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(worker, [r for r in range(4) for _ in range(2)]))
    for r in range(4):
        want = [batch(ds, opts, r, k // 4, k % 4) for k in range(per_rank)]
        assert sorted(got[r]) == sorted(want)


def fuse_threads(m):
    """The daemon's threads that serve FUSE requests: all but the decode workers
    ("zephon-decode"), the stopper ("zephon-stop") and the main thread, which waits for
    the request loop."""
    comms = [(t / 'comm').read_text().strip()
             for t in pathlib.Path('/proc/%d/task' % m.proc.pid).iterdir()]
    return comms.count('zephon') - 1


@tsan_thread
@pytest.mark.parametrize('opt,limit', [('', max(2, os.cpu_count())), (',max_threads=3', 3)])
def test_requests_are_served_by_at_most_max_threads(records, mount, opt, limit):
    """Readers that keep every CPU busy get a shorter tail with one request thread per
    CPU (tests/bench/RESULTS.md, "B4: request threads"): the default, and max_threads=N
    caps them. Claims run on offload threads ("zephon-offload"), not counted here."""
    ds, _ = records
    m = mount(ds, 'world_size=4,global_batch=64,micro_batch=2' + opt)

    def worker(r):
        for _ in range(8):
            read_all(m.path('rank', r, 'next'))
    with concurrent.futures.ThreadPoolExecutor(12) as ex:
        list(ex.map(worker, [r for r in range(4) for _ in range(3)]))
    assert 1 <= fuse_threads(m) <= limit


# ---------------------------------------------------------------- errors

def test_end_of_stream_is_enodata(records, mount):
    ds, _ = records
    m = mount(ds, 'world_size=2,global_batch=32,epochs=1')  # 3 full steps in 100 samples
    for _ in range(3):
        read_all(m.path('rank', 0, 'next'))
    assert open_errno(m.path('rank', 0, 'next')) == errno.ENODATA
    assert open_errno(m.path('rank', 0, 'peek')) == errno.ENODATA
    assert open_errno(m.path('rank', 0, 'step', 3)) == errno.ENOENT
    assert len(read_all(m.path('rank', 1, 'next'))) > 0


def test_unserved_rank_is_enoent(records, mount):
    ds, _ = records
    m = mount(ds, 'world_size=4,global_batch=8,ranks=0,2')
    assert open_errno(m.path('rank', 1, 'next')) == errno.ENOENT
    assert open_errno(m.path('rank', 4, 'next')) == errno.ENOENT
    assert not os.path.exists(m.path('rank', 3))


def test_writes_are_refused(records, mount):
    ds, _ = records
    m = mount(ds, 'world_size=1,global_batch=2')
    for path in [m.path('rank', 0, 'next'), m.path('status'), m.path('README')]:
        with pytest.raises(OSError) as e:
            open(path, 'wb')
        assert e.value.errno in (errno.EACCES, errno.EROFS)
    with pytest.raises(OSError) as e:
        open(m.path('newfile'), 'wb')
    assert e.value.errno == errno.EROFS
    with pytest.raises(OSError) as e:
        os.mkdir(m.path('rank', 'x'))
    assert e.value.errno == errno.EROFS
    with pytest.raises(OSError) as e:
        os.unlink(m.path('status'))
    assert e.value.errno == errno.EROFS
    with pytest.raises(OSError) as e:
        open(m.path('control'), 'rb')
    assert e.value.errno == errno.EACCES


def corrupt_sample(ds, sample_id):
    """Flip a byte in the middle of a sample's payload, found through the shard index
    (core/dataset/dataset.h: 32-byte header, 24-byte entries {u64 offset, u32 stored_len, ...})."""
    import struct
    idx = sorted(ds.glob('shard-*.idx'))[0].read_bytes()
    first = struct.unpack_from('<Q', idx, 24)[0]
    offset, stored = struct.unpack_from('<QI', idx, 32 + 24 * (sample_id - first))
    shard = sorted(ds.glob('shard-*.zst'))[0]
    data = bytearray(shard.read_bytes())
    data[offset + stored // 2] ^= 0xFF
    shard.write_bytes(bytes(data))


@pytest.mark.parametrize('data,fmt', [('records', 'lines'), ('records', 'tar'),
                                      ('tokens', 'npy'), ('tokens', 'bin')])
def test_step_file_sizes_match_their_bytes(records, tokens, mount, data, fmt):
    """A lookup or stat of step/<t> takes its size from the order and the index (lines,
    npy, bin) or builds the step (tar): either way it is the length of the bytes read."""
    ds, _ = records if data == 'records' else tokens
    opts = 'world_size=2,global_batch=8,micro_batch=2,seed=5,format=%s' % fmt
    m = mount(ds, opts)
    for r in range(2):
        for t in (0, 1, 7, 13):  # 13: past the end of the first epoch of either dataset
            p = m.path('rank', r, 'step', t)
            size = os.stat(p).st_size
            body = read_all(p)
            assert size == len(body) and body == batch(ds, opts, r, t), (r, t, fmt)


def test_step_file_size_of_a_long_lines_step(records, mount):
    """A lines step of 2,500 samples (the size is summed over the index a thousand ids
    at a time, here across 25 epochs of the 100 records)."""
    ds, _ = records
    m = mount(ds, 'world_size=1,global_batch=2500,seed=2')
    for t in (0, 3):
        p = m.path('rank', 0, 'step', t)
        assert os.stat(p).st_size == len(read_all(p)) > 2500


def test_stat_of_a_step_decodes_nothing(records, mount):
    """A sample whose bytes are damaged (its index entry intact) makes the open of its
    step fail with EIO, but a stat still tells the step's size: it reads the index only."""
    ds, _ = records
    opts = 'world_size=1,global_batch=4,shuffle=none'
    size = len(batch(ds, opts, 0, 2))  # samples 8-11
    corrupt_sample(ds, 9)
    m = mount(ds, opts, allow_errors=True)
    p = m.path('rank', 0, 'step', 2)
    assert os.stat(p).st_size == size
    assert open_errno(p) == errno.EIO


def test_stat_of_a_step_with_a_bad_index_entry_is_empty(tmp_path, mount):
    """A step whose size cannot be had (a damaged index entry past its first 1,024
    samples) and that cannot be built stats as 0 bytes, not as a part of its size."""
    import struct
    write_jsonl(tmp_path / 'many.jsonl', 2000, size=20)
    ds = pack(tmp_path / 'many', [tmp_path / 'many.jsonl'], '--compress', 'none')
    idx = sorted(ds.glob('shard-*.idx'))[0]
    data = bytearray(idx.read_bytes())
    first = struct.unpack_from('<Q', data, 24)[0]
    struct.pack_into('<I', data, 32 + 24 * (1500 - first) + 20, 1)  # 'reserved' must be 0
    idx.write_bytes(bytes(data))
    m = mount(ds, 'world_size=1,global_batch=2048,shuffle=none', allow_errors=True)
    p = m.path('rank', 0, 'step', 0)
    assert os.stat(p).st_size == 0
    assert open_errno(p) == errno.EIO


def test_corrupt_sample_is_eio_and_cursor_stays(records, mount):
    ds, _ = records
    opts = 'world_size=1,global_batch=4,shuffle=none,prefetch=0'
    good = batch(ds, opts, 0, 1)
    corrupt_sample(ds, 2)  # inside the first claim (samples 0-3)
    m = mount(ds, opts, allow_errors=True)
    assert open_errno(m.path('rank', 0, 'next')) == errno.EIO
    assert open_errno(m.path('rank', 0, 'next')) == errno.EIO
    state = json.loads(read_all(m.path('rank', 0, 'state')))
    assert (state['step'], state['micro'], state['last']) == (0, 0, None)
    assert read_all(m.path('rank', 0, 'step', 1)) == good  # intact samples still serve
    assert open_errno(m.path('samples', 2)) == errno.EIO
    assert open_errno(m.path('rank', 0, 'step', 0)) == errno.EIO
    m.stop(check=False)
    # each read named in the log as what it was: a claim of next, a sample, a step
    for what in ('rank 0 next', 'samples/2', 'rank 0 step 0'):
        assert ('%s: sample 2 in shard-' % what) in m.stderr_text, m.stderr_text
    assert 'failed its checksum; nothing was served' in m.stderr_text
    assert str(2**64 - 1) not in m.stderr_text


def test_a_reader_retrying_a_failing_open_does_not_flood_the_log(records, mount):
    """100 opens of next failing in a row log at most a burst of 20 lines (one a second
    after it), and how many were held back is logged when the mount stops."""
    ds, _ = records
    corrupt_sample(ds, 2)
    m = mount(ds, 'world_size=1,global_batch=4,shuffle=none,prefetch=0', allow_errors=True)
    t0 = time.monotonic()
    for _ in range(100):
        assert open_errno(m.path('rank', 0, 'next')) == errno.EIO
    secs = time.monotonic() - t0
    m.stop(check=False)
    logged = m.stderr_text.count('failed its checksum')
    assert 20 <= logged <= 20 + int(secs) + 1, (logged, secs)
    held = re.findall(r'(\d+) more messages? of this mount were not logged', m.stderr_text)
    assert held and sum(map(int, held)) + logged == 100, m.stderr_text[-2000:]


@pytest.mark.parametrize('opts,msg', [
    ('world_size=3,global_batch=8', 'global_batch (8) must be a multiple of world_size (3)'),
    ('world_size=2,global_batch=8,micro_batch=3', 'micro_batch (3) must divide global_batch/world_size (4 = 8/2)'),
    ('world_size=2,ranks=2', 'ranks: rank 2 is not below world_size (2)'),
    ('world_size=x', 'world_size=x is not a non-negative whole number'),
    ('world_size=0', 'world_size must be at least 1'),
    ('shuffle=random', 'shuffle=random: expected global or none'),
    ('format=npy', 'npy'),
    ('resume=yesterday', 'resume=yesterday: expected auto, fresh, samples:G, samples:G@S or step:S'),
    ('sync=sometimes', 'sync=sometimes: expected normal or full'),
    ('prefetch=1000', 'prefetch=1000 is above the limit of 64'),
    ('readahead=lots', 'readahead=lots is not a size in bytes (e.g. 64M, 1G, 0)'),
    ('readahead=5Q', 'readahead=5Q is not a size in bytes'),
    ('readahead=64i', 'readahead=64i is not a size in bytes'),
    ('readahead=64iB', 'readahead=64iB is not a size in bytes'),
    ('max_threads=0', 'max_threads=0 must be between 1 and 256'),
    ('max_threads=many', 'max_threads=many is not a non-negative whole number'),
    ('world_size=4 ', 'world_size=4  is not a non-negative whole number: it ends with a '
     'space; remove it'),
    ('world_size=4,seed=\t7', 'seed=\t7 is not a non-negative whole number: it starts with '
     'a tab; remove it'),
    ('world_size=-4', 'world_size=-4 is not a non-negative whole number: it is negative'),
    ('seed=1 2', "seed=1 2 is not a non-negative whole number: it holds a space"),
    ('seed=12x', "seed=12x is not a non-negative whole number: 'x' is not a digit"),
    ('seed=18446744073709551616', 'it is above 18446744073709551615'),
    ('world_size=2, global_batch=4', "unknown mount option ' global_batch=4': it holds a "
     "space; write NAME=VALUE options separated by commas alone"),
    ('bogus_option=1', "unknown mount option 'bogus_option=1'"),
    ('max_read=4096', "unknown mount option 'max_read=4096'"),
    ('world_size=2,ranks=', 'ranks= needs a list'),
    ('watch_fd=999', 'watch_fd=999 is not an open file descriptor of this process'),
    ('watch_fd=x', 'watch_fd=x is not a non-negative whole number'),
    # micro-batches that cannot fit in memory: refused here, not by ENOMEM at every open
    ('global_batch=100000000000', 'micro-batches of 100000000000 samples need about'),
    ('world_size=4,global_batch=400000000000,ranks=1-2,prefetch=6',
     'for the 2 served ranks (prefetch=6'),
])
def test_invalid_options_exit_2_before_mounting(records, tmp_path, opts, msg):
    ds, _ = records
    mp = tmp_path / 'mp'
    mp.mkdir()
    p = subprocess.run([ZEPHON, 'mount', str(ds), str(mp), '-o', opts], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert msg in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not mounted(mp)


# ---------------------------------------------------------------- operation

def test_watch_fd_ends_a_daemonized_mount_with_its_launcher(records, tmp_path):
    """-o watch_fd=N, daemonized: the mount serves while a write end of the pipe is open
    anywhere, and stops cleanly (journal closed, -wal gone) once the last one closes, as a
    launcher's death closes it."""
    ds, _ = records
    mp, j = tmp_path / 'mp', tmp_path / 'j.sqlite'
    mp.mkdir()
    r, w = os.pipe()
    try:
        p = subprocess.run([ZEPHON, 'mount', str(ds), str(mp), '-o',
                            'world_size=1,journal=%s,watch_fd=%d' % (j, r)], pass_fds=(r,),
                           stderr=subprocess.PIPE, timeout=30)
        assert p.returncode == 0, p.stderr
        os.close(r)
        assert read_all(mp / 'rank' / '0' / 'next') and mounted(mp)
        os.close(w)
        w = None
        deadline = time.monotonic() + 20
        while mounted(mp) or os.path.exists(str(j) + '-wal'):
            assert time.monotonic() < deadline, 'the mount outlived its watch pipe'
            time.sleep(0.05)
    finally:
        if w is not None:
            os.close(w)
        if mounted(mp):
            unmount(mp)
    assert run('journal', 'resume-point', j).stdout.decode().strip() == 'samples:1@1'


def test_daemonizes_and_fstab_form(records, tmp_path):
    ds, _ = records
    mp = tmp_path / 'mp'
    mp.mkdir()
    # the bare form mount.fuse3 calls, with fstab-only keys it must ignore
    p = subprocess.run([ZEPHON, str(ds), str(mp), '-o',
                        'world_size=2,global_batch=4,noauto,nofail,_netdev,x-systemd.automount,rw,nosuid,nodev'],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    try:
        assert p.returncode == 0, p.stderr
        assert mounted(mp)
        assert len(read_all(mp / 'rank' / '1' / 'next')) > 0
    finally:
        unmount(mp)
    assert not mounted(mp)


def test_sigterm_unmounts_cleanly(records, tmp_path):
    """SIGTERM ends the daemon whichever of its threads the kernel delivers it to (with
    8 decode workers idle, most threads are workers)."""
    ds, _ = records
    for i in range(8):
        m = Mount(ds, tmp_path / ('mp%d' % i), 'world_size=1,global_batch=2,workers=8').start()
        read_all(m.path('rank', 0, 'next'))
        m.proc.terminate()
        rc = m.proc.wait(timeout=30)
        assert rc == 0, (rc, m.stderr_path.read_text(errors='replace'))
        assert not mounted(m.mp)
        m.stop()


def mount_over_stale(ds, mp):
    """Mount ds at mp, a stale mount: the daemon says it cleared it and serves."""
    m = Mount(ds, mp, 'world_size=1,global_batch=2').start()
    try:
        assert 'cleared a stale mount' in m.stderr_path.read_text()
        assert len(read_all(m.path('rank', 0, 'next'))) > 0
    finally:
        m.stop()


def test_refuses_live_mount_and_clears_stale(records, tmp_path):
    ds, _ = records
    m = Mount(ds, tmp_path / 'mp', 'world_size=1,global_batch=2').start()
    p = run('mount', ds, m.mp, '-o', 'world_size=1,global_batch=2', check=False)
    assert p.returncode == 1 and 'already mounted' in p.stderr
    m.kill9()
    try:
        assert mounted(m.mp)  # stale: "Transport endpoint is not connected"
        mount_over_stale(ds, m.mp)
    finally:
        m.stop(check=False)
        if mounted(m.mp):   # the stale mount, when the second mount did not clear it
            unmount(m.mp)


def test_clears_a_stale_mount_whose_root_was_never_stat(records, tmp_path):
    """A daemon killed before anything stat'ed the mount's root leaves a mountpoint whose
    stat fails (ENOTCONN, no cached attributes): the next mount still clears it."""
    ds, _ = records
    mp = tmp_path / 'mp'
    mp.mkdir()
    proc = subprocess.Popen([ZEPHON, 'mount', str(ds), str(mp), '-f', '-o',
                             'world_size=1,global_batch=2'], stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        # mountinfo, not mounted(): its realpath() would stat the root and cache it
        while str(mp) not in pathlib.Path('/proc/self/mountinfo').read_text():
            assert time.time() < deadline and proc.poll() is None, 'the mount did not appear'
            time.sleep(0.01)
        proc.kill()
        proc.wait(timeout=30)
        try:
            os.stat(mp)
            pytest.skip("the kernel had the root's attributes cached: not the case tested")
        except OSError as e:
            assert e.errno == errno.ENOTCONN, e
        mount_over_stale(ds, mp)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if mounted(mp):
            unmount(mp)


def test_allow_other_implies_default_permissions(records, mount):
    ds, _ = records
    m = mount(ds, 'world_size=1,global_batch=2,allow_other')
    with open('/proc/self/mountinfo') as f:
        line = next(l for l in f if l.split()[4] == str(m.mp))
    assert 'default_permissions' in line and 'allow_other' in line


def as_nobody(*argv):
    """Run argv as user nobody; (exit status, stderr)."""
    p = subprocess.run(['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups',
                        *map(str, argv)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=60)
    return p.returncode, p.stderr.decode(errors='replace')


def test_allow_other_leaves_next_and_peek_to_the_owner(records, tmp_path):
    """Another user may read status, metrics, state, samples/ and step/ of an allow_other
    mount, but neither claim from next nor read peek nor write control: the owner's
    first claim is still step 0."""
    ds, _ = records
    opts = 'world_size=1,global_batch=2,allow_other,journal=%s' % (tmp_path / 'j.sqlite')
    top = pathlib.Path(tempfile.mkdtemp(prefix='zephon-allow-other-'))
    top.chmod(0o755)      # the pytest temp dir is the owner's alone
    m = Mount(ds, top / 'mnt', opts)
    try:
        m.start()
        for p in ('status', 'metrics', 'README', 'rank/0/state', 'samples/3', 'rank/0/step/4'):
            assert as_nobody('cat', m.path(p)) == (0, ''), p
        for p in ('rank/0/next', 'rank/0/peek'):
            rc, err = as_nobody('cat', m.path(p))
            assert rc != 0 and 'Permission denied' in err, (p, rc, err)
        rc, err = as_nobody('sh', '-c', 'echo checkpoint 1 > "$0"', m.path('control'))
        assert rc != 0 and 'Permission denied' in err, err
        assert read_all(m.path('rank', 0, 'next')) == batch(ds, opts, 0, 0, 0)
    finally:
        m.stop()
        shutil.rmtree(top, ignore_errors=True)


def test_help_and_version():
    p = run('mount', '--help')
    out = p.stdout.decode()
    assert 'world_size=W' in out and 'resume=auto|fresh|samples:G[@S]|step:S' in out
    assert run('mount', '--version').stdout.decode().startswith('zephon ')
    assert 'usage: zephon batch' in run('batch', '--help').stdout.decode()


def test_open_read_close_cycles_stay_flat(records, mount, monkeypatch):
    ds, _ = records
    # In the sanitizer build, freed blocks wait in ASan's quarantine (up to 256 MiB), which
    # grows the RSS with every claim freed: turn it off here. ASan's per-thread caches still
    # grow as more request threads take a turn, so its bound is looser (a leak of 200 bytes
    # per claim still fails it; LSan reports unreachable blocks at exit).
    asan = os.environ.get('ASAN_OPTIONS', '')
    monkeypatch.setenv('ASAN_OPTIONS', (asan + ':' if asan else '') + 'quarantine_size_mb=0')
    # ThreadSanitizer's allocator and its shadow of each new block grow the RSS by a few
    # MiB over 80,000 claims with no leak (5,000 KiB seen), so it takes ASan's bound too;
    # the plain build keeps the tight one.
    bound_kib = 16384 if built_with(b'__asan_init') or built_with(b'__tsan_init') else 4096
    m = mount(ds, 'world_size=1,global_batch=4,micro_batch=1,journal=%s' % (ds.parent / 'j.sqlite'))
    nxt = str(m.path('rank', 0, 'next'))
    pid = m.proc.pid

    def rss_fds():
        with open('/proc/%d/status' % pid) as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith('VmRSS:'))
        return rss, len(os.listdir('/proc/%d/fd' % pid))
    def cycles(n):
        for _ in range(n):
            fd = os.open(nxt, os.O_RDONLY)
            os.read(fd, 1 << 16)
            os.close(fd)
    cycles(20000)
    rss0, fds0 = rss_fds()
    cycles(80000)
    rss1, fds1 = rss_fds()
    assert fds1 == fds0
    # flat: no growth proportional to the 80,000 claims (a leak of even 64 bytes per
    # claim would add 5 MiB); allow for allocator noise and the journal's page cache
    assert rss1 - rss0 < bound_kib, (rss0, rss1, bound_kib)


# (the zstd shard is smaller than a page: the bytes past its cut read as zeros, no SIGBUS)
@pytest.mark.parametrize('kind', [pytest.param('raw', marks=tsan_sigbus), 'zstd'])
def test_truncated_shard_under_a_live_mount_is_eio(tokens, records, mount, kind):
    """Shards are read through a file mapping; a shard truncated under a live mount
    faults (SIGBUS), which must become EIO for that claim, not a dead daemon."""
    ds = tokens[0] if kind == 'raw' else records[0]
    opts = 'world_size=1,global_batch=4,prefetch=0' + (',format=bin' if kind == 'raw' else '')
    m = mount(ds, opts, allow_errors=True)
    assert len(read_all(m.path('rank', 0, 'next'))) > 0
    shard = sorted(ds.glob('shard-*.' + kind.replace('zstd', 'zst')))[0]
    os.chmod(shard, 0o644)
    os.truncate(shard, 64)   # inside the first page: later samples lie past the end
    errs = [open_errno(m.path('rank', 0, 'next')) for _ in range(3)]
    assert errno.EIO in errs
    assert m.proc.poll() is None   # the daemon lives
    assert json.loads(read_all(m.path('status')))['counters']['decode_errors'] >= 1


def test_many_openers_of_one_rank_at_the_end_of_a_finite_stream(records, mount):
    """16 threads race on one rank of a finite stream with a 1-deep prefetch ring and one
    decode worker (openers wait on in-flight decodes): every micro-batch is handed out
    exactly once, nothing past the end of the stream, then ENODATA for everyone."""
    ds, _ = records
    opts = 'world_size=1,global_batch=6,micro_batch=2,epochs=2,prefetch=1,workers=1'
    m = mount(ds, opts)
    got, ends, lock = [], [0], threading.Lock()

    def worker(_):
        while True:
            try:
                data = read_all(m.path('rank', 0, 'next'))
            except OSError as e:
                assert e.errno == errno.ENODATA
                with lock:
                    ends[0] += 1
                return
            with lock:
                got.append(data)
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        list(ex.map(worker, range(16)))
    steps = 200 // 6            # full steps within epochs * N = 200 samples
    want = [batch(ds, opts, 0, t, k) for t in range(steps) for k in range(3)]
    assert sorted(got) == sorted(want)
    assert ends[0] == 16


@pytest.fixture
def big_tokens(tmp_path):
    """48 windows of 4,096 uint16 tokens (8 KiB samples), uncompressed: batches of npy and
    bin are served as views of the shard mapping, without a copy in the daemon."""
    arr = write_tokens(tmp_path / 'big.bin', 48 * 4096, seed=3)
    ds = pack(tmp_path / 'bds', [tmp_path / 'big.bin'], '--format', 'tokens',
              '--dtype', 'uint16', '--seq-len', '4096', '--compress', 'none')
    return ds, arr.reshape(48, 4096)


def odd_reads(p, sizes=(1, 4095, 4097, 8192, 12345, 1 << 20)):
    """Read p in a cycle of awkward read sizes (slices start and end inside samples)."""
    out = bytearray()
    with open(p, 'rb', buffering=0) as f:
        k = 0
        while True:
            chunk = f.read(sizes[k % len(sizes)])
            if not chunk:
                return bytes(out)
            out += chunk
            k += 1


@pytest.mark.parametrize('fmt', ['bin', 'npy'])
def test_views_serve_the_same_bytes(big_tokens, mount, fmt):
    ds, windows = big_tokens
    opts = 'world_size=2,global_batch=8,micro_batch=2,seed=4,format=%s' % fmt
    m = mount(ds, opts)
    readers = [read_all, odd_reads, READERS['cat'], READERS['dd4k'], READERS['dd1M']]
    for k, (step, micro) in enumerate(claims((2, 8, 2), 1, 10)):
        want = batch(ds, opts, 1, step, micro)          # zephon batch copies: the reference
        peek = read_all(m.path('rank', 1, 'peek'))
        got = readers[k % len(readers)](m.path('rank', 1, 'next'))
        assert got == want == peek, (step, micro)
        ids = json.loads(read_all(m.path('rank', 1, 'state')))['last']['samples']
        arr = np.load(io.BytesIO(got)) if fmt == 'npy' else np.frombuffer(got, '<u2').reshape(2, 4096)
        assert np.array_equal(arr, windows[ids])
    # seeks and reads anywhere in an open batch
    with open(m.path('rank', 0, 'next'), 'rb') as f:
        whole = f.read()
        for off in (0, 1, 8191, 8192, 8193, len(whole) - 3, len(whole), len(whole) + 10):
            f.seek(off)
            assert f.read(5000) == whole[off:off + 5000]
        assert os.fstat(f.fileno()).st_size == len(whole)


@pytest.mark.parametrize('bad', [0, 63, 64, 79])
def test_corrupt_token_sample_served_as_a_view_is_eio(tmp_path, mount, bad):
    """Views are verified 64 samples at a time (located, then hashed with a prefetch of
    the next): a flipped byte in any sample of a claim, first or last of a round, fails
    that open with EIO naming the sample, and the cursor stays."""
    import struct
    arr = write_tokens(tmp_path / 't.bin', 160 * 2048, seed=5)
    ds = pack(tmp_path / 'tds', [tmp_path / 't.bin'], '--format', 'tokens',
              '--dtype', 'uint16', '--seq-len', '2048', '--compress', 'none')
    opts = 'world_size=1,global_batch=80,format=bin,shuffle=none,prefetch=0'
    idx = sorted(ds.glob('shard-*.idx'))[0].read_bytes()
    offset = struct.unpack_from('<Q', idx, 32 + 24 * bad)[0]
    shard = sorted(ds.glob('shard-*.raw'))[0]
    data = bytearray(shard.read_bytes())
    data[offset + 1000] ^= 0x01
    os.chmod(shard, 0o644)
    shard.write_bytes(bytes(data))
    m = mount(ds, opts, allow_errors=True)
    assert open_errno(m.path('rank', 0, 'next')) == errno.EIO
    state = json.loads(read_all(m.path('rank', 0, 'state')))
    assert (state['step'], state['micro'], state['last']) == (0, 0, None)
    assert read_all(m.path('rank', 0, 'step', 1)) == arr.reshape(160, 2048)[80:].tobytes()
    m.stop(check=False)
    assert 'sample %d in shard-' % bad in m.stderr_text
    assert 'failed its checksum' in m.stderr_text


@tsan_sigbus
def test_views_of_a_shard_truncated_under_a_live_mount(big_tokens, mount):
    """A batch claimed and checksummed, whose shard is then truncated before it is read:
    the kernel's copy from the mapping faults, and the read fails with EIO; the daemon
    lives and the next claim fails its checksum with EIO too."""
    ds, _ = big_tokens
    m = mount(ds, 'world_size=1,global_batch=4,format=bin,prefetch=0', allow_errors=True)
    shard = sorted(ds.glob('shard-*.raw'))[0]
    with open(m.path('rank', 0, 'next'), 'rb', buffering=0) as f:
        os.chmod(shard, 0o644)
        os.truncate(shard, 64)
        with pytest.raises(OSError) as e:
            f.read(1 << 20)
        assert e.value.errno == errno.EIO
    assert open_errno(m.path('rank', 0, 'next')) == errno.EIO
    assert m.proc.poll() is None


# ---------------------------------------------------------------- what a new user trips on

def last_error(m):
    st = json.loads(read_all(m.path('status')))
    return (st['last_error'] or {}).get('message', '')


def test_unserved_rank_says_which_ranks_are_served(records, mount):
    """ENOENT for a rank of another node, or past world_size, with the served ranks in
    /status' last_error and the log; a reader retrying in a loop does not flood the log."""
    ds, _ = records
    m = mount(ds, 'world_size=4,global_batch=8,ranks=0-1')
    assert last_error(m) == ''
    start = time.monotonic()
    assert open_errno(m.path('rank', 3, 'next')) == errno.ENOENT
    msg = last_error(m)
    assert msg.startswith('rank 3 is not served here') and \
        'this mount serves ranks 0-1 of world_size 4' in msg and 'ranks=' in msg, msg
    assert open_errno(m.path('rank', 7, 'next')) == errno.ENOENT
    msg = last_error(m)
    assert msg.startswith('no rank 7') and 'this mount serves ranks 0-1 of world_size 4' in msg \
        and 'from 0 to 3' in msg, msg
    for _ in range(300):
        assert open_errno(m.path('rank', 3, 'next')) == errno.ENOENT
    elapsed = time.monotonic() - start
    assert open_errno(m.path('rank', 0, 'next')) == 0
    m.stop()
    lines = [l for l in m.stderr_text.splitlines() if 'of world_size 4' in l]
    assert lines and lines[0].startswith('zephon: warning: rank 3 is not served here'), \
        m.stderr_text
    # one line per 10 s at most
    assert len(lines) <= 1 + int(elapsed / 10) + 1, (elapsed, lines)


HOLD = '''
import sys
f = open(sys.argv[1], 'rb')
print('open', flush=True)
sys.stdin.readline()
sys.stdout.buffer.write(f.read())
'''


def status_and_metrics(m):
    st = json.loads(read_all(m.path('status')))
    return st, read_all(m.path('metrics')).decode()


def test_processes_holding_one_ranks_next_are_counted_and_named(records, mount):
    """Another process holding rank 0's next while this one opens it: counted in /status
    and /metrics, logged with both pids; both still get consecutive, distinct batches.
    One process holding two handles (from one thread or two), and processes opening one
    after the other, are not counted."""
    ds, _ = records
    opts = 'world_size=2,global_batch=8,micro_batch=2'
    m = mount(ds, opts)
    nxt = m.path('rank', 0, 'next')
    with open(nxt, 'rb') as a, open(nxt, 'rb') as b:
        assert a.read() == batch(ds, opts, 0, 0, 0) and b.read() == batch(ds, opts, 0, 0, 1)
    held, opened = threading.Event(), threading.Event()

    def holder():
        with open(nxt, 'rb') as f:
            held.set()
            opened.wait(timeout=30)
            f.read()
    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(timeout=30)
    read_all(nxt)                                   # (1, 1), while the thread holds (1, 0)
    opened.set()
    t.join(timeout=30)
    for _ in range(2):                              # two processes, one after the other
        subprocess.run(['cat', str(m.path('rank', 1, 'next'))], check=True,
                       stdout=subprocess.DEVNULL)
    st, metrics = status_and_metrics(m)
    assert st['counters']['overlapping_opens'] == 0 and st['overlapping_opens'] == {}, st
    assert 'zephon_overlapping_opens_total 0\n' in metrics

    child = subprocess.Popen([sys.executable, '-c', HOLD, str(nxt)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b'open\n'
        mine = read_all(nxt)
        out, _ = child.communicate(b'go\n', timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert out == batch(ds, opts, 0, 2, 0) and mine == batch(ds, opts, 0, 2, 1)
    st, metrics = status_and_metrics(m)
    assert st['counters']['overlapping_opens'] == 1 and st['overlapping_opens'] == {'0': 1}, st
    assert 'zephon_overlapping_opens_total 1\n' in metrics, metrics
    assert 'zephon_rank_overlapping_opens_total{rank="0"} 1\n' in metrics, metrics
    msg = last_error(m)
    assert msg.startswith('rank 0: processes %d and %d hold rank/0/next open at once' % (
        child.pid, os.getpid())), msg
    m.stop()
    warn = [l for l in m.stderr_text.splitlines() if 'hold rank/0/next open at once' in l]
    assert len(warn) == 1 and str(child.pid) in warn[0] and str(os.getpid()) in warn[0], \
        m.stderr_text


@pytest.mark.parametrize('sig', ['INT', 'TERM'])
def test_foreground_mount_started_in_background_stops_on_signal(records, tmp_path, sig):
    """`zephon mount -f ... &` in a script: the shell starts it with SIGINT ignored (and
    with SIGTERM ignored under `trap '' TERM`); the signal still unmounts it cleanly."""
    ds, _ = records
    mp, pidf, rcf, errf = (tmp_path / n for n in ('mp', 'pid', 'rc', 'stderr'))
    mp.mkdir()
    script = ('%s"$0" mount -f "$1" "$2" -o world_size=1 2>"$3" & echo $! >"$4"; '
              'wait $!; echo $? >"$5"') % ("trap '' TERM; " if sig == 'TERM' else '')
    shell = subprocess.Popen(['bash', '-c', script, ZEPHON, ds, mp, errf, pidf, rcf])
    try:
        deadline = time.time() + 30
        while not (mounted(mp) and os.path.exists(mp / 'status')):
            assert time.time() < deadline and shell.poll() is None, errf.read_text()
            time.sleep(0.02)
        pid = int(pidf.read_text())
        signum = getattr(signal, 'SIG' + sig)
        os.kill(pid, signum)
        shell.wait(timeout=30)
    finally:
        if shell.poll() is None:
            unmount(mp)
            shell.wait(timeout=30)
    assert rcf.read_text().strip() == '0', errf.read_text()
    assert not mounted(mp)
    assert 'error' not in errf.read_text()
    sanitizers.scan(errf.read_text())
