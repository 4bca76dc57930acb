"""Files a user changes under a live mount: a shard or a shard index truncated while the
daemon has them mapped. Every read of such a mapping, on whatever thread (request,
offload or decode thread), fails its request with EIO and the daemon keeps serving."""
import errno
import json
import os

import pytest

from conftest import open_errno, pack, read_all, tsan_sigbus, write_jsonl, write_tokens


@pytest.fixture
def records(tmp_path):
    """5,000 JSONL records in 3 shards (so that one can be cut while the others still
    serve)."""
    write_jsonl(tmp_path / 'in.jsonl', 5000, size=400)
    return pack(tmp_path / 'ds', [tmp_path / 'in.jsonl'], '--shard-size', '64K')


@pytest.fixture
def tokens(tmp_path):
    """5,000 uncompressed windows of 128 uint16 tokens in 5 shards."""
    write_tokens(tmp_path / 'tok.bin', 5000 * 128)
    return pack(tmp_path / 'tds', [tmp_path / 'tok.bin'], '--format', 'tokens',
                '--dtype', 'uint16', '--seq-len', '128', '--compress', 'none',
                '--shard-size', '256K')


def dataset_of(kind, records, tokens):
    return records if kind == 'zstd' else tokens


def shards(ds, ext):
    return sorted(ds.glob('shard-*.' + ext))


def cut(path, size):
    os.chmod(path, 0o644)
    os.truncate(path, size)


def errnos(path, n):
    return [open_errno(path) for _ in range(n)]


def assert_failed_after_ring(got):
    """Opens of next after a cut: the batches decoded before it (the prefetch ring) may
    still come, then EIO, and the cursor stays."""
    assert set(got) <= {0, errno.EIO} and got[-1] == errno.EIO, got
    assert got == sorted(got, key=lambda e: e == errno.EIO), got


def assert_serving(m):
    """The daemon lives and answers."""
    assert m.proc.poll() is None
    st = json.loads(read_all(m.path('status')))
    assert st['counters']['decode_errors'] >= 1
    return st


@tsan_sigbus
@pytest.mark.parametrize('kind', ['zstd', 'raw'])
def test_shard_truncated_under_default_prefetch_is_eio(records, tokens, mount, kind):
    """With the default prefetch the samples are read on the decode threads."""
    ds = dataset_of(kind, records, tokens)
    fmt = ',format=bin' if kind == 'raw' else ''
    m = mount(ds, 'world_size=1,global_batch=4,shuffle=none' + fmt, allow_errors=True)
    assert len(read_all(m.path('rank', 0, 'next'))) > 0
    cut(shards(ds, 'zst' if kind == 'zstd' else 'raw')[0], 64)
    assert_failed_after_ring(errnos(m.path('rank', 0, 'next'), 5))
    assert_serving(m)
    # a sample of another shard still reads; one past the cut fails alone
    assert len(read_all(m.path('samples', 4999))) > 0
    assert open_errno(m.path('samples', 300)) == errno.EIO
    assert m.proc.poll() is None


@tsan_sigbus
@pytest.mark.parametrize('kind', ['zstd', 'raw'])
@pytest.mark.parametrize('prefetch', [0, 2])
def test_index_truncated_under_a_live_mount_is_eio(records, tokens, mount, kind, prefetch):
    """The index is read through a mapping too: each lookup of an entry past the cut
    fails with EIO (samples/, step/, next, peek, and a stat of a step), and entries of
    the other shards still serve."""
    ds = dataset_of(kind, records, tokens)
    fmt = ',format=bin' if kind == 'raw' else ''
    m = mount(ds, 'world_size=1,global_batch=4,shuffle=none,prefetch=%d%s' % (prefetch, fmt),
              allow_errors=True)
    last = len(read_all(m.path('samples', 4999)))
    idx = shards(ds, 'idx')
    assert len(idx) >= 3
    for f in idx[:-1]:
        cut(f, 64)
    assert open_errno(m.path('samples', 2500)) == errno.EIO
    assert open_errno(m.path('rank', 0, 'step', 1)) == errno.EIO
    os.stat(m.path('rank', 0, 'step', 2))     # answers (size unknown: 0), does not crash
    assert_failed_after_ring(errnos(m.path('rank', 0, 'next'), 5))
    assert open_errno(m.path('rank', 0, 'peek')) == errno.EIO
    assert len(read_all(m.path('samples', 4999))) == last
    assert_serving(m)

