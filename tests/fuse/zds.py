"""Independent Python readers for Zephon's pack tests.

Two halves that share nothing with the C code:
- read_dataset(): reads a packed dataset directory from its documented layout
  (core/dataset/dataset.h, schema/catalog.sql) with sqlite3, struct and python3-zstandard;
- expect_*(): what each input format should yield as samples, read with the standard
  library, numpy and tarfile.
The pack tests compare the two, sample by sample.
"""
import io
import json
import os
import pathlib
import sqlite3
import struct
import tarfile

import zstandard

INDEX_HEADER = struct.Struct('<8sIIQQ')
INDEX_ENTRY = struct.Struct('<QIIII')
INDEX_MAGIC = b'ZPHIDX\x00\x01'


def catalog(path):
    con = sqlite3.connect('file:%s?mode=ro' % (pathlib.Path(path) / 'catalog.sqlite'), uri=True)
    try:
        meta = dict(con.execute('SELECT key, value FROM meta'))
        row = con.execute('SELECT bytes FROM dict WHERE id = 1').fetchone()
        shards = con.execute('SELECT file, index_file, first_sample, samples, bytes '
                             'FROM shards ORDER BY idx').fetchall()
        sources = con.execute('SELECT path, format, size, checksum, first_sample, samples '
                              'FROM sources ORDER BY idx').fetchall()
        version = con.execute('PRAGMA user_version').fetchone()[0]
    finally:
        con.close()
    return {'meta': meta, 'dict': row[0] if row else None, 'shards': shards,
            'sources': sources, 'user_version': version}


def read_dataset(path):
    """All samples of a dataset, as a list of bytes, in id order."""
    path = pathlib.Path(path)
    cat = catalog(path)
    meta = cat['meta']
    zstd = meta['compress'] == 'zstd'
    if zstd:
        d = zstandard.ZstdCompressionDict(cat['dict']) if cat['dict'] else None
        dctx = zstandard.ZstdDecompressor(dict_data=d) if d else zstandard.ZstdDecompressor()
    out = []
    for file, index_file, first, count, nbytes in cat['shards']:
        idx = (path / index_file).read_bytes()
        data = (path / file).read_bytes()
        assert len(data) == nbytes
        magic, version, esize, n, first_sample = INDEX_HEADER.unpack_from(idx, 0)
        assert (magic, version, esize, n, first_sample) == (INDEX_MAGIC, 2, 24, count, first)
        assert len(idx) == 32 + 24 * n
        assert first == len(out)
        for i in range(n):
            off, stored, raw, _xxh32, reserved = INDEX_ENTRY.unpack_from(idx, 32 + 24 * i)
            assert reserved == 0
            payload = data[off:off + stored]
            sample = dctx.decompress(payload, max_output_size=raw) if zstd else payload
            assert len(sample) == raw
            out.append(sample)
    assert len(out) == int(meta['samples'])
    return out


def file_group(files):
    """Encode [(name, bytes)] as dataset.h's file group payload."""
    parts = [struct.pack('<I', len(files))]
    for name, data in files:
        n = name.encode()
        parts += [struct.pack('<I', len(n)), n, struct.pack('<Q', len(data)), data]
    return b''.join(parts)


def parse_file_group(b):
    (n,), pos, files = struct.unpack_from('<I', b, 0), 4, []
    for _ in range(n):
        (ln,) = struct.unpack_from('<I', b, pos)
        name = b[pos + 4:pos + 4 + ln].decode()
        (sz,) = struct.unpack_from('<Q', b, pos + 4 + ln)
        files.append((name, b[pos + 12 + ln:pos + 12 + ln + sz]))
        pos += 12 + ln + sz
    assert pos == len(b)
    return files


def _maybe_zstd(raw):
    if raw[:4] == b'\x28\xb5\x2f\xfd':
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw),
                                                        read_across_frames=True) as r:
            return r.read()
    return raw


def _lines(raw):
    lines = raw.split(b'\n')
    if lines and lines[-1] == b'':
        lines.pop()
    return [l[:-1] if l.endswith(b'\r') else l for l in lines]


def expect_jsonl(path):
    out = []
    for line in _lines(_maybe_zstd(pathlib.Path(path).read_bytes())):
        if not line.strip(b' \t\r'):
            continue
        json.loads(line.decode('utf-8'))  # must be valid
        out.append(line)
    return out


def expect_lines(path):
    return [l for l in _lines(_maybe_zstd(pathlib.Path(path).read_bytes())) if l]


def expect_tar(path):
    """WebDataset grouping, as webdataset's group_by_keys does it."""
    samples, cur_key, cur = [], None, []
    with tarfile.open(path) as tf:
        for m in tf:
            if not m.isfile():
                continue
            name = m.name[2:] if m.name.startswith('./') else m.name
            base = name.rsplit('/', 1)[-1]
            dot = base.find('.')
            if dot <= 0 or dot == len(base) - 1:
                continue  # no key/extension split: webdataset skips such members
            key = name[:len(name) - len(base) + dot]
            if key != cur_key and cur:
                samples.append(file_group(cur))
                cur = []
            cur_key = key
            cur.append((name, tf.extractfile(m).read()))
    if cur:
        samples.append(file_group(cur))
    return samples


def expect_dir(path):
    path = pathlib.Path(path)
    rels = []
    for root, dirs, files in os.walk(path):
        for f in files:
            p = pathlib.Path(root) / f
            if p.is_symlink() or not p.is_file():
                continue
            rels.append(str(p.relative_to(path)))
    return [file_group([(r, (path / r).read_bytes())]) for r in sorted(rels, key=os.fsencode)]


def megatron_tokens(prefix):
    """Concatenated tokens of a Megatron-LM indexed dataset, read with numpy."""
    import numpy as np
    idx = pathlib.Path(str(prefix) + '.idx').read_bytes()
    assert idx[:9] == b'MMIDIDX\x00\x00'
    version, = struct.unpack_from('<Q', idx, 9)
    code = idx[17]
    n, ndoc = struct.unpack_from('<QQ', idx, 18)
    dtype = {1: np.uint8, 4: np.int32, 8: np.uint16}[code]
    sizes = np.frombuffer(idx, dtype=np.int32, count=n, offset=34)
    ptrs = np.frombuffer(idx, dtype=np.int64, count=n, offset=34 + 4 * n)
    binary = np.memmap(str(prefix) + '.bin', dtype=np.uint8, mode='r')
    isz = np.dtype(dtype).itemsize
    parts = [np.frombuffer(binary[p:p + s * isz].tobytes(), dtype=dtype)
             for s, p in zip(sizes, ptrs)]
    return np.concatenate(parts)


def windows(tokens, seq_len):
    tokens = tokens.astype(tokens.dtype.newbyteorder('<'))
    n = len(tokens) // seq_len
    return [tokens[i * seq_len:(i + 1) * seq_len].tobytes() for i in range(n)]
