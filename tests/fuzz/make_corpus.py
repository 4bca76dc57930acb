#!/usr/bin/python3
"""Regenerate the small seed corpora in corpus/<target>/ (committed; run by hand).

usage: tests/fuzz/make_corpus.py [ZEPHON_EXECUTABLE]
Seeds are small on purpose: replay mutates each one a few hundred times per run.
"""
import gzip
import io
import lzma
import os
import pathlib
import struct
import subprocess
import sys
import tarfile
import tempfile

import numpy as np
import zstandard

HERE = pathlib.Path(__file__).resolve().parent / 'corpus'


def put(target, name, data):
    d = HERE / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def tar_bytes(members, fmt=tarfile.USTAR_FORMAT, mode='w'):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=fmt) as tf:
        for name, body in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(body)
            ti.mtime = 0
            tf.addfile(ti, io.BytesIO(body))
    return buf.getvalue()


def npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def main():
    # JSONL
    put('jsonl', 'plain.jsonl', b'{"a": 1, "t": "x"}\n[1, 2.5e3, null, true]\n\n"\\u00e9\\u0000"\n')
    put('jsonl', 'crlf.jsonl', b'{"k": "v"}\r\n{"k": "w"}')
    put('jsonl', 'bad.jsonl', b'{"a": \n{"b": "\xff"}\n{}\n')
    put('jsonl', 'frames.jsonl.zst',
        zstandard.ZstdCompressor(write_content_size=False).compress(b'{"z": 1}\n') +
        zstandard.ZstdCompressor().compress(b'{"z": 2}\n'))
    put('jsonl', 'members.jsonl.gz',
        gzip.compress(b'{"g": 1}\n', mtime=0) + gzip.compress(b'{"g": 2}\n', mtime=0))
    # tar
    put('tar', 'wds.tar', tar_bytes([('000.jpg', b'J0'), ('000.cls', b'1'),
                                     ('001.jpg', b'J1'), ('001.cls', b'2')]))
    put('tar', 'pax.tar', tar_bytes([('d/' + 'n' * 120 + '.txt', b'long'), ('a.b.c', b'x')],
                                    fmt=tarfile.PAX_FORMAT))
    put('tar', 'gnu.tar', tar_bytes([('x' * 110 + '.bin', b'gnu'), ('../up.txt', b'evil')],
                                    fmt=tarfile.GNU_FORMAT))
    put('tar', 'small.tgz', tar_bytes([('k.txt', b'hello')], mode='w:gz'))
    # two zstd frames with a skippable frame (RFC 8878, section 3.1.2) between them
    small = tar_bytes([('k.txt', b'hello'), ('k.cls', b'1')])
    put('tar', 'frames.tar.zst',
        zstandard.ZstdCompressor(write_checksum=True).compress(small[:700]) +
        struct.pack('<II', 0x184D2A50, 3) + b'skp' +
        zstandard.ZstdCompressor(write_checksum=True).compress(small[700:]))
    # lzma ("alone") and lz4, decoded by libarchive's raw reader below the tar reader
    put('tar', 'small.tar.lzma', lzma.compress(small, format=lzma.FORMAT_ALONE))
    put('tar', 'small.tar.lz4', subprocess.run(['lz4', '-q', '-c'], input=small, check=True,
                                               stdout=subprocess.PIPE).stdout)
    # npy
    put('npy', 'u2.npy', npy_bytes(np.arange(12, dtype='<u2')))
    put('npy', 'i4be.npy', npy_bytes(np.arange(5, dtype='>i4')))
    put('npy', 'u1.npy', npy_bytes(np.arange(7, dtype='u1')))
    put('npy', 'f4.npy', npy_bytes(np.zeros(3, dtype='<f4')))
    put('npy', '2d.npy', npy_bytes(np.zeros((2, 3), dtype='<u4')))
    # Megatron .idx: 3 sequences of uint16 in a 40-byte .bin
    sizes = np.array([4, 0, 6], dtype='<i4')
    ptrs = np.array([0, 8, 8], dtype='<i8')
    docs = np.array([0, 1, 3], dtype='<i8')
    idx = (b'MMIDIDX\x00\x00' + struct.pack('<QBQQ', 1, 8, 3, 3) + sizes.tobytes() +
           ptrs.tobytes() + docs.tobytes())
    put('idx', 'small.idx', idx)
    put('idx', 'int32.idx', idx[:17] + b'\x04' + idx[18:])
    # shard index: from a real pack when the executable is given
    if len(sys.argv) > 1:
        with tempfile.TemporaryDirectory() as t:
            src = pathlib.Path(t) / 'in.jsonl'
            src.write_bytes(b''.join(b'{"i": %d}\n' % i for i in range(5)))
            for comp in ('zstd', 'none'):
                out = pathlib.Path(t) / comp
                subprocess.run([sys.argv[1], 'pack', '-q', str(src), '-o', str(out),
                                '--compress', comp], check=True)
                put('shard_index', comp + '.idx', (out / 'shard-00000.idx').read_bytes())


if __name__ == '__main__':
    main()
