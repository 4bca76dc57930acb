"""Batch encodings (core/serve/encode.c) as the tools users train with read them.

The bytes come from `zephon batch` (the mount's code path without FUSE) with shuffle=none,
so step 0 of a world_size=1 layout holds sample ids 0..B-1 and every expected value can be
computed from the input alone. Checks: Python's tarfile reads tar batches (text records
and WebDataset file groups, including the real WebDataset shard in the shared data);
numpy.load reads npy batches from a path and from a file object with the packed dtype
and shape (m, L); bin is the raw token array; lines is each record and '\\n'; tar bytes
are deterministic; a corrupt sample fails the batch with its id and shard named.
"""
import io
import json
import pathlib
import subprocess
import tarfile

import numpy as np
import pytest

from conftest import ZEPHON, batch, pack, run, write_jsonl, write_tokens


@pytest.fixture(scope='module', autouse=True)
def batch_built():
    p = subprocess.run([ZEPHON, 'batch'], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if b'not built yet' in p.stderr:
        pytest.skip('zephon batch is not built yet')


def opts(b, fmt, **kw):
    o = dict(world_size=1, global_batch=b, shuffle='none', format=fmt, **kw)
    return ','.join('%s=%s' % kv for kv in o.items())


@pytest.mark.parametrize('compress', ['zstd', 'none'])
def test_text_lines_and_tar(tmp_path, compress):
    lines = write_jsonl(tmp_path / 'r.jsonl', 30, size=100)
    lines[3] = json.dumps({'i': 3, 'u': 'caf\u00e9 \u2603'}, ensure_ascii=False).encode()
    (tmp_path / 'r.jsonl').write_bytes(b''.join(l + b'\n' for l in lines))
    ds = pack(tmp_path / 'ds', [tmp_path / 'r.jsonl'], '--compress', compress)

    got = batch(ds, opts(8, 'lines'), 0, 1)  # step 1: ids 8..15
    assert got == b''.join(l + b'\n' for l in lines[8:16])

    raw = batch(ds, opts(8, 'tar'), 0, 0)
    assert len(raw) % 512 == 0
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        members = tf.getmembers()
        assert [m.name for m in members] == ['%09d.json' % i for i in range(8)]
        for i, m in enumerate(members):
            assert m.isfile() and m.mode == 0o644 and m.mtime == 0
            assert m.uid == 0 and m.gid == 0
            assert tf.extractfile(m).read() == lines[i]
    assert batch(ds, opts(8, 'tar'), 0, 0) == raw  # byte-deterministic


def test_lines_txt_records_are_txt_members(tmp_path):
    (tmp_path / 'a.txt').write_bytes(b'first line\n\nsecond line\nthird\n')
    ds = pack(tmp_path / 'ds', [tmp_path / 'a.txt'])
    with tarfile.open(fileobj=io.BytesIO(batch(ds, opts(3, 'tar'), 0, 0))) as tf:
        assert tf.getnames() == ['000000000.txt', '000000001.txt', '000000002.txt']
        assert tf.extractfile('000000001.txt').read() == b'second line'


def test_webdataset_tar_roundtrip(tmp_path, data):
    src = data / 'wds' / 'tendata.tar'
    with tarfile.open(src) as tf:
        want = [(m.name, tf.extractfile(m).read()) for m in tf.getmembers() if m.isfile()]
    ds = pack(tmp_path / 'ds', [src])
    info = json.loads(run('info', '--json', ds).stdout)
    assert info['samples'] == 100
    got = []
    for step in range(10):  # 10 steps of 10 samples: every sample once, in id order
        with tarfile.open(fileobj=io.BytesIO(batch(ds, opts(10, 'tar'), 0, step))) as tf:
            got += [(m.name, tf.extractfile(m).read()) for m in tf.getmembers()]
    assert got == want


def test_files_dir_tar(tmp_path):
    tree = tmp_path / 'tree'
    (tree / 'img').mkdir(parents=True)
    (tree / 'img' / '001.jpg').write_bytes(b'\xff\xd8fake jpeg')
    (tree / 'img' / '001.json').write_bytes(b'{"label": 1}')
    long = 'n' * 150 + '.txt'
    (tree / long).write_bytes(b'long name')
    (tree / 'caf\u00e9.txt').write_bytes(b'utf-8 name')
    ds = pack(tmp_path / 'ds', [tree])
    with tarfile.open(fileobj=io.BytesIO(batch(ds, opts(4, 'tar'), 0, 0))) as tf:
        names = tf.getnames()
        assert names == sorted(['img/001.jpg', 'img/001.json', long, 'caf\u00e9.txt'],
                               key=lambda s: s.encode())
        assert tf.extractfile(long).read() == b'long name'
        assert tf.extractfile('caf\u00e9.txt').read() == b'utf-8 name'


@pytest.mark.parametrize('dtype', ['uint8', 'uint16', 'uint32', 'int32'])
@pytest.mark.parametrize('compress', ['zstd', 'none'])
def test_tokens_npy_and_bin(tmp_path, dtype, compress):
    L, m = 16, 4
    arr = write_tokens(tmp_path / 't.bin', 20 * L + 5, dtype=dtype)
    ds = pack(tmp_path / 'ds', [tmp_path / 't.bin'], '--dtype', dtype, '--seq-len', L,
              '--compress', compress)
    want = arr[: 20 * L].reshape(20, L)[m:2 * m]  # step 1: samples 4..7

    raw = batch(ds, opts(m, 'npy'), 0, 1)
    assert raw[:6] == b'\x93NUMPY' and raw[6:8] == b'\x01\x00'
    header_len = 10 + int.from_bytes(raw[8:10], 'little')
    assert header_len % 64 == 0  # data aligned as numpy writes it
    got = np.load(io.BytesIO(raw))
    assert got.dtype == np.dtype(dtype) and got.shape == (m, L)
    assert np.array_equal(got, want)
    path = tmp_path / 'b.npy'
    path.write_bytes(raw)
    assert np.array_equal(np.load(path), want)
    with open(path, 'rb') as f:  # from a file object, as the mount's readers do
        assert np.array_equal(np.load(f), want)
    # numpy writes the very same bytes for this array
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(want.astype(np.dtype(dtype).newbyteorder('<'))))
    assert buf.getvalue() == raw

    raw_bin = batch(ds, opts(m, 'bin'), 0, 1)
    assert raw_bin == want.astype(np.dtype(dtype).newbyteorder('<')).tobytes()
    assert np.array_equal(np.frombuffer(raw_bin, dtype=dtype).reshape(m, L), want)


def test_megatron_tokens_npy(tmp_path, data):
    prefix = data / 'megatron' / 'meg-gpt2-openwebtext_text_document'
    ds = pack(tmp_path / 'ds', [str(prefix) + '.idx'], '--seq-len', 128)
    tokens = np.fromfile(str(prefix) + '.bin', dtype='<u2')  # every sequence, in order
    got = np.load(io.BytesIO(batch(ds, opts(8, 'npy'), 0, 2)))
    assert got.dtype == np.uint16 and got.shape == (8, 128)
    assert np.array_equal(got, tokens[16 * 128:24 * 128].reshape(8, 128))


def test_formats_refused_per_content(tmp_path):
    write_jsonl(tmp_path / 'r.jsonl', 4)
    ds = pack(tmp_path / 'ds', [tmp_path / 'r.jsonl'])
    p = run('batch', ds, '-o', opts(2, 'npy'), '--rank', 0, '--step', 0, check=False)
    assert p.returncode == 2 and p.stdout == b''
    assert 'format=npy' in p.stderr and 'lines or tar' in p.stderr


@pytest.mark.parametrize('compress', ['zstd', 'none'])
def test_corrupt_sample_fails_the_batch(tmp_path, compress):
    lines = write_jsonl(tmp_path / 'r.jsonl', 12, size=200)
    ds = pack(tmp_path / 'ds', [tmp_path / 'r.jsonl'], '--compress', compress)
    shard = next(p for p in ds.iterdir() if p.suffix in ('.zst', '.raw'))
    index = np.frombuffer(shard.with_suffix('.idx').read_bytes()[32:], dtype=np.dtype(
        [('offset', '<u8'), ('stored', '<u4'), ('raw', '<u4'), ('sum', '<u4'), ('r', '<u4')]))
    blob = bytearray(shard.read_bytes())
    at = int(index[5]['offset'] + index[5]['stored'] // 2)
    blob[at] ^= 0x20
    shard.write_bytes(bytes(blob))
    for fmt in ('lines', 'tar'):
        p = run('batch', ds, '-o', opts(4, fmt), '--rank', 0, '--step', 1, check=False)
        assert p.returncode == 1 and p.stdout == b''
        assert 'sample 5' in p.stderr and shard.name in p.stderr
        # the steps around it are whole
        assert batch(ds, opts(4, 'lines'), 0, 0) == b''.join(l + b'\n' for l in lines[:4])
