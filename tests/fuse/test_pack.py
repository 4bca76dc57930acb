"""zephon pack / info / verify on the shared real data and on made-up bad inputs.

Every packed dataset is read back with an independent Python reader (zds.py) and compared
sample by sample with what a Python reader of the input yields.
"""
import bz2
import gzip
import io
import json
import os
import pathlib
import signal
import sqlite3
import struct
import subprocess
import tarfile
import time

import numpy as np
import pytest
import zstandard

import conftest
import zds
from conftest import ZEPHON, run

MEGATRON = 'megatron/meg-gpt2-openwebtext_text_document'


def pack_ok(tmp_path, name, *args):
    out = tmp_path / name
    p = run('pack', *args, '-o', out)
    assert p.stderr == '' or 'warning' in p.stderr, p.stderr
    return out


def info_json(ds):
    return json.loads(run('info', '--json', ds).stdout)


def leftovers(parent):
    """Everything in parent that a pack may have left (datasets or temp dirs)."""
    return sorted(p.name for p in pathlib.Path(parent).iterdir() if 'zephon-tmp' in p.name
                  or p.name.startswith('out'))


# ---------------------------------------------------------------------------
# The shared real data: every file, compared with an independent reader.

def test_pack_dolma_jsonl(tmp_path, data):
    src = data / 'jsonl/cc_en_head-0091.jsonl'
    ds = pack_ok(tmp_path, 'cc', src)
    want = zds.expect_jsonl(src)
    assert len(want) == 10
    assert zds.read_dataset(ds) == want
    for line in want:
        assert set(json.loads(line)) >= {'added', 'created', 'id', 'metadata', 'source', 'text'}
    info = info_json(ds)
    # the keys zephon info --json promises (docs/packing.md, docs/design.md §4)
    assert set(info) >= {'kind', 'samples', 'fingerprint', 'raw_bytes', 'stored_bytes',
                         'shards', 'dtype', 'seq_len', 'sources'}
    assert info['kind'] == 'records' and info['samples'] == 10
    assert info['raw_bytes'] == sum(map(len, want))
    assert info['dtype'] is None and info['seq_len'] is None
    assert info['sources'][0]['format'] == 'jsonl'
    assert info['sources'][0]['size'] == src.stat().st_size
    assert run('verify', ds).returncode == 0


def test_pack_pile_jsonl_zst_without_content_size(tmp_path, data):
    src = data / 'jsonl/blns.jsonl.zst'
    raw = src.read_bytes()
    # The point of this file: one frame, no content size in its header.
    assert zstandard.get_frame_parameters(raw).content_size == zstandard.CONTENTSIZE_UNKNOWN
    ds = pack_ok(tmp_path, 'blns', src)
    want = zds.expect_jsonl(src)
    assert len(want) == 4
    assert zds.read_dataset(ds) == want
    assert info_json(ds)['sources'][0]['size'] == len(raw)


def test_pack_webdataset_tar(tmp_path, data):
    src = data / 'wds/tendata.tar'
    ds = pack_ok(tmp_path, 'wds', src)
    got = zds.read_dataset(ds)
    assert len(got) == 100
    assert got == zds.expect_tar(src)
    names = [zds.parse_file_group(s)[0][0] for s in got]
    assert names == ['%06d.ten' % i for i in range(100)]
    assert info_json(ds)['kind'] == 'records'


def test_pack_tiny_shakespeare_lines(tmp_path, data):
    src = data / 'text/tinyshakespeare.txt'
    assert src.stat().st_size == 1115394
    ds = pack_ok(tmp_path, 'ts', src)
    want = zds.expect_lines(src)
    assert len(want) == sum(1 for l in src.read_bytes().split(b'\n') if l)
    assert zds.read_dataset(ds) == want
    info = info_json(ds)
    assert info['record_ext'] == 'txt'
    # --format lines reads any file name as lines
    alias = tmp_path / 'shakespeare.data'
    alias.write_bytes(src.read_bytes())
    ds2 = pack_ok(tmp_path, 'ts2', '--format', 'lines', alias)
    assert info_json(ds2)['fingerprint'] == info['fingerprint']


@pytest.mark.parametrize('compress', ['zstd', 'none'])
def test_pack_megatron(tmp_path, data, compress):
    prefix = data / MEGATRON
    ds = pack_ok(tmp_path, 'meg', str(prefix) + '.idx', '--seq-len', '1024',
                 '--compress', compress)
    tokens = zds.megatron_tokens(prefix)
    assert len(tokens) == 1361845
    idx = (data / (MEGATRON + '.idx')).read_bytes()
    assert struct.unpack_from('<QBQQ', idx, 9) == (1, 8, 1000, 1001)  # README's counts
    want = zds.windows(tokens, 1024)
    assert zds.read_dataset(ds) == want
    info = info_json(ds)
    assert (info['kind'], info['dtype'], info['seq_len']) == ('tokens', 'uint16', 1024)
    assert info['samples'] == 1361845 // 1024
    assert info['remainder_tokens'] == 1361845 % 1024
    assert info['compress'] == compress
    if compress == 'none':
        assert info['stored_bytes'] == info['raw_bytes']
        assert all(f.endswith('.raw') or f.endswith('.idx') or f == 'catalog.sqlite'
                   for f in os.listdir(ds))
    assert run('verify', ds).returncode == 0


def test_same_tokens_same_fingerprint_from_megatron_npy_and_bin(tmp_path, data):
    """The fingerprint covers sample bytes and ids, not the input format or compression."""
    prefix = data / MEGATRON
    tokens = zds.megatron_tokens(prefix)
    np.save(tmp_path / 't.npy', tokens)
    tokens.astype('<u2').tofile(tmp_path / 't.bin')
    big = tmp_path / 'tbe.npy'
    np.save(big, tokens.astype('>u2'))
    fps = set()
    for name, args in [('a', [str(prefix) + '.bin']), ('b', [tmp_path / 't.npy']),
                       ('c', [tmp_path / 't.bin', '--dtype', 'uint16', '--format', 'tokens']),
                       ('d', [big, '--compress', 'none']),
                       ('e', [prefix, '--no-dict', '--level', '1'])]:
        ds = pack_ok(tmp_path, name, *args, '--seq-len', '512')
        fps.add(info_json(ds)['fingerprint'])
        if name in 'bd':
            assert zds.read_dataset(ds) == zds.windows(tokens, 512)
    assert len(fps) == 1


def test_tokens_window_across_inputs(tmp_path):
    a = np.arange(0, 10, dtype='<u4')
    b = np.arange(10, 25, dtype='<u4')
    np.save(tmp_path / 'a.npy', a)
    b.tofile(tmp_path / 'b.bin')
    ds = pack_ok(tmp_path, 'w', tmp_path / 'a.npy', tmp_path / 'b.bin', '--dtype', 'uint32',
                 '--seq-len', '4')
    got = zds.read_dataset(ds)
    assert got == zds.windows(np.arange(25, dtype='<u4'), 4)
    src = info_json(ds)['sources']
    # windows 0,1,2 start in a (tokens 0, 4, 8); windows 3..5 start in b
    assert [(s['first_sample'], s['samples']) for s in src] == [(0, 3), (3, 3)]
    assert info_json(ds)['remainder_tokens'] == 1



def write_megatron(prefix, n_seqs=40, seed=3):
    """A small Megatron-LM pair PREFIX.idx/.bin (uint16, version 1) of n_seqs sequences of
    varying length, so that tests of pairs run without the shared data; returns the
    concatenated tokens."""
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, 50000, size=int(rng.integers(1, 50)), dtype='<u2')
            for _ in range(n_seqs)]
    sizes = np.array([len(q) for q in seqs], dtype='<i4')
    ptrs = np.concatenate([[0], np.cumsum(sizes[:-1]) * 2]).astype('<i8')
    docs = np.arange(n_seqs + 1, dtype='<i8')
    pathlib.Path(str(prefix) + '.idx').write_bytes(
        b'MMIDIDX\x00\x00' + struct.pack('<QBQQ', 1, 8, n_seqs, n_seqs + 1) +
        sizes.tobytes() + ptrs.tobytes() + docs.tobytes())
    tokens = np.concatenate(seqs)
    tokens.tofile(str(prefix) + '.bin')
    return tokens


def test_megatron_pair_is_one_input_whichever_files_are_named(tmp_path):
    """A glob names both files of a pair; packing them must not pack the corpus twice."""
    prefix = tmp_path / 'src' / 'corpus_text_document'
    prefix.parent.mkdir()
    tokens = write_megatron(prefix)
    idx, bin_ = str(prefix) + '.idx', str(prefix) + '.bin'
    want = zds.windows(tokens, 8)
    ref = info_json(pack_ok(tmp_path, 'one', idx, '--seq-len', '8'))
    assert ref['samples'] == len(want)
    for name, names in [('ib', [idx, bin_]), ('bi', [bin_, idx]), ('pib', [prefix, idx, bin_]),
                        ('glob', sorted(prefix.parent.iterdir()))]:
        out = tmp_path / name
        p = run('pack', *names, '--format', 'tokens', '--seq-len', '8', '-o', out)
        assert p.stderr == '', p.stderr
        assert b'from 1 input into' in p.stdout, p.stdout
        info = info_json(out)
        assert (info['samples'], info['fingerprint']) == (ref['samples'], ref['fingerprint'])
        assert [(s['format'], s['first_sample'], s['samples']) for s in info['sources']] == \
            [('megatron', 0, len(want))], name
        assert zds.read_dataset(out) == want


@pytest.mark.parametrize('idx_ext,bin_ext', [('.IDX', '.BIN'), ('.Idx', '.Bin'),
                                             ('.IDX', '.bin'), ('.idx', '.BIN')])
def test_megatron_pair_in_upper_or_mixed_case(tmp_path, idx_ext, bin_ext):
    """The extensions are taken in any case (X.IDX is Megatron by its name), and so is the
    sibling: X.IDX + X.BIN is one pair, whichever names are given, and so are mixed
    spellings. Before, X.BIN was read as a raw .bin and X.IDX looked for X.IDX.idx. A bare
    PREFIX finds each file in lower or upper case only (X.Idx is not looked for)."""
    src = tmp_path / 'src'
    src.mkdir()
    tokens = write_megatron(src / 'm')
    (src / 'm.idx').rename(src / ('X' + idx_ext))
    (src / 'm.bin').rename(src / ('X' + bin_ext))
    idx, bin_ = src / ('X' + idx_ext), src / ('X' + bin_ext)
    want = zds.windows(tokens, 8)
    cases = [('i', [idx]), ('b', [bin_]), ('ib', [idx, bin_]), ('bi', [bin_, idx])]
    if all(e[1:] in (e[1:].lower(), e[1:].upper()) for e in (idx_ext, bin_ext)):
        cases += [('p', [src / 'X']), ('pib', [src / 'X', idx, bin_])]
    for name, names in cases:
        out = tmp_path / ('out-' + name)
        p = run('pack', *names, '--format', 'tokens', '--seq-len', '8', '-o', out)
        assert p.stderr == '', (name, p.stderr)
        assert b'from 1 input into' in p.stdout, (name, p.stdout)
        info = info_json(out)
        assert [(s['format'], s['samples']) for s in info['sources']] == \
            [('megatron', len(want))], name
        assert zds.read_dataset(out) == want, name


def test_megatron_upper_case_idx_without_its_bin(tmp_path):
    """X.IDX alone: the error names the .bin it looked for, spelled like the .idx."""
    write_megatron(tmp_path / 'm')
    (tmp_path / 'm.idx').rename(tmp_path / 'X.IDX')
    (tmp_path / 'm.bin').unlink()
    err = bad_pack(tmp_path, tmp_path / 'X.IDX', '--seq-len', '8')
    assert err.count('\n') == 1 and str(tmp_path / 'X.BIN') in err, err
    assert 'cannot open' in err and 'needs its .bin beside it' in err, err


def test_megatron_pair_both_files_of_the_shared_data(tmp_path, data):
    """The tester's command: `pack --format tokens $D/megatron/*` gave 42,557 samples."""
    names = sorted((data / 'megatron').iterdir())
    assert [n.suffix for n in names] == ['.bin', '.idx']
    one = info_json(pack_ok(tmp_path, 'one', names[1], '--seq-len', '64'))
    assert one['samples'] == 1361845 // 64
    for name, args in [('glob', names), ('rev', names[::-1])]:
        info = info_json(pack_ok(tmp_path, name, '--format', 'tokens', '--seq-len', '64', *args))
        assert (info['samples'], info['fingerprint']) == (one['samples'], one['fingerprint'])
        assert len(info['sources']) == 1


def test_input_given_twice_is_packed_twice_with_a_warning(tmp_path, monkeypatch):
    """Repeating an input may be deliberate upsampling: packed again, but not silently.
    The same file by another spelling or through a symlink counts as the same input."""
    monkeypatch.chdir(tmp_path)
    conftest.write_jsonl(tmp_path / 'a.jsonl', 3)
    conftest.write_jsonl(tmp_path / 'b.jsonl', 2)
    os.symlink('a.jsonl', tmp_path / 'link.jsonl')
    p = run('pack', 'a.jsonl', 'b.jsonl', 'a.jsonl', '-o', 'twice')
    assert p.stderr == ('zephon: pack: warning: a.jsonl: given twice; packing it again '
                        '(drop one to pack it once)\n'), p.stderr
    assert info_json(tmp_path / 'twice')['samples'] == 8
    p = run('pack', 'a.jsonl', './a.jsonl', 'link.jsonl', '-o', 'spelt')
    lines = p.stderr.splitlines()
    assert len(lines) == 2, p.stderr
    assert lines[0].startswith('zephon: pack: warning: ./a.jsonl: the same file as a.jsonl')
    assert lines[1].startswith('zephon: pack: warning: link.jsonl: the same file as a.jsonl')
    assert [s['samples'] for s in info_json(tmp_path / 'spelt')['sources']] == [3, 3, 3]
    p = run('pack', 'a.jsonl', 'b.jsonl', '-o', 'distinct')
    assert p.stderr == ''
    # a Megatron pair named twice by the same file: upsampled too, with the warning
    tokens = write_megatron(tmp_path / 'm')
    p = run('pack', 'm.idx', 'm.bin', 'm.idx', '--seq-len', '8', '-o', 'meg2')
    assert p.stderr.count('warning') == 1 and 'm.idx: given twice' in p.stderr, p.stderr
    info = info_json(tmp_path / 'meg2')
    assert len(info['sources']) == 2
    assert info['samples'] == 2 * len(tokens) // 8
    # the pair twice, whatever the order of its names: two sources, one warning
    for order in (['m.idx', 'm.bin', 'm.idx', 'm.bin'], ['m.idx', 'm.idx', 'm.bin', 'm.bin'],
                  ['m.bin', 'm.idx', 'm.idx', 'm.bin']):
        out = 'meg-' + ''.join(n[2] for n in order)
        p = run('pack', *order, '--seq-len', '8', '-o', out)
        assert p.stderr.count('warning') == 1, (order, p.stderr)
        info = info_json(tmp_path / out)
        assert (len(info['sources']), info['samples']) == (2, 2 * len(tokens) // 8), order


def test_pack_directory(tmp_path):
    root = tmp_path / 'tree'
    (root / 'b' / 'c').mkdir(parents=True)
    (root / 'a.txt').write_bytes(b'alpha')
    (root / 'b' / 'c' / 'deep.bin').write_bytes(bytes(range(256)) * 10)
    (root / 'b.txt').write_bytes(b'')
    (root / 'b' / 'x.json').write_bytes(b'{"x": 1}')
    (root / 'link').symlink_to('/etc/passwd')
    os.mkfifo(root / 'fifo')
    p = run('pack', root, '-o', tmp_path / 'd')
    assert 'link: is a symlink, not followed; skipped' in p.stderr
    assert 'fifo: is not a regular file; skipped' in p.stderr
    got = zds.read_dataset(tmp_path / 'd')
    assert got == zds.expect_dir(root)
    names = [zds.parse_file_group(s)[0][0] for s in got]
    assert names == ['a.txt', 'b.txt', 'b/c/deep.bin', 'b/x.json']
    assert not any(b'root:' in s for s in got)
    # an output inside the input directory would read itself back: refused
    p = run('pack', root, '-o', root / 'b' / 'ds', check=False)
    assert p.returncode == 1 and 'inside the input directory' in p.stderr
    assert not (root / 'b' / 'ds').exists()
    # a trailing slash on -o is fine
    run('pack', root, '-o', str(tmp_path / 'slash') + '/')
    assert zds.read_dataset(tmp_path / 'slash') == got


def test_several_inputs_are_concatenated_in_order(tmp_path, data):
    a = tmp_path / 'a.jsonl'
    a.write_bytes(b'{"a": 1}\n\n{"a": 2}\r\n   \n')
    b = tmp_path / 'b.jsonl.zst'
    b.write_bytes(zstandard.ZstdCompressor().compress(b'{"b": 1}\n') +
                  zstandard.ZstdCompressor(write_content_size=False).compress(b'{"b": 2}'))
    ds = pack_ok(tmp_path, 'cat', a, b, data / 'jsonl/cc_en_head-0091.jsonl')
    got = zds.read_dataset(ds)
    assert got[:4] == [b'{"a": 1}', b'{"a": 2}', b'{"b": 1}', b'{"b": 2}']
    assert got[4:] == zds.expect_jsonl(data / 'jsonl/cc_en_head-0091.jsonl')
    src = info_json(ds)['sources']
    assert [(s['first_sample'], s['samples']) for s in src] == [(0, 2), (2, 2), (4, 10)]


def test_zstd_is_detected_by_magic_not_name(tmp_path, data):
    raw = (data / 'jsonl/blns.jsonl.zst').read_bytes()
    disguised = tmp_path / 'plain-looking.jsonl'
    disguised.write_bytes(raw)
    honest = tmp_path / 'not-compressed.jsonl.zst'
    honest.write_bytes(zds.expect_jsonl(data / 'jsonl/blns.jsonl.zst')[0] + b'\n')
    text = tmp_path / 'lines.txt'
    text.write_bytes(zstandard.ZstdCompressor().compress(b'one\n\ntwo\n'))
    ds = pack_ok(tmp_path, 'd', disguised, honest)
    want = zds.expect_jsonl(data / 'jsonl/blns.jsonl.zst')
    assert zds.read_dataset(ds) == want + want[:1]
    assert zds.read_dataset(pack_ok(tmp_path, 't', text)) == [b'one', b'two']


def test_tar_grouping_and_compressed_tar(tmp_path):
    members = [('s1.jpg', b'J1'), ('s1.cls', b'3'), ('s1.meta.json', b'{}'),
               ('dir/s2.jpg', b'J2'), ('dir/s2.cls', b'4'), ('./s3.txt', b'x'),
               ('README', b'no extension')]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w:gz', format=tarfile.PAX_FORMAT) as tf:
        long = 'l' * 150 + '/s4.txt'   # needs a pax / GNU long name
        for name, body in members + [(long, b'long')]:
            ti = tarfile.TarInfo(name)
            ti.size = len(body)
            tf.addfile(ti, io.BytesIO(body))
        d = tarfile.TarInfo('emptydir')
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
    (tmp_path / 'x.tgz').write_bytes(buf.getvalue())
    p = run('pack', tmp_path / 'x.tgz', '-o', tmp_path / 'd')
    assert 'README has no extension' in p.stderr
    got = [zds.parse_file_group(s) for s in zds.read_dataset(tmp_path / 'd')]
    assert got == [[('s1.jpg', b'J1'), ('s1.cls', b'3'), ('s1.meta.json', b'{}')],
                   [('dir/s2.jpg', b'J2'), ('dir/s2.cls', b'4')],
                   [('s3.txt', b'x')],
                   [('l' * 150 + '/s4.txt', b'long')]]


def test_tar_gnu_long_names(tmp_path):
    long_dir = 'd' * 120
    members = [(long_dir + '/sample0001.input.txt', b'in'), (long_dir + '/sample0001.label', b'1'),
               ('x' * 200 + '.txt', b'long base name')]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.GNU_FORMAT) as tf:
        for name, body in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(body)
            tf.addfile(ti, io.BytesIO(body))
    (tmp_path / 'gnu.tar').write_bytes(buf.getvalue())
    assert b'././@LongLink' in buf.getvalue()
    run('pack', tmp_path / 'gnu.tar', '-o', tmp_path / 'd')
    got = [zds.parse_file_group(s) for s in zds.read_dataset(tmp_path / 'd')]
    assert got == [members[:2], members[2:]]
    assert zds.read_dataset(tmp_path / 'd') == zds.expect_tar(tmp_path / 'gnu.tar')


def test_info_human_table(tmp_path, data):
    ds = pack_ok(tmp_path, 'cc', data / 'jsonl/cc_en_head-0091.jsonl')
    out = run('info', ds).stdout.decode()
    for word in ('kind', 'samples', 'raw bytes', 'stored bytes', 'ratio', 'shards',
                 'fingerprint', 'sources', 'cc_en_head-0091.jsonl'):
        assert word in out
    assert '10\n' in out


def test_many_shards_and_force(tmp_path, data):
    src = data / 'text/tinyshakespeare.txt'
    ds = pack_ok(tmp_path, 'ts', src, '--shard-size', '64K')
    info = info_json(ds)
    assert info['shards'] > 5
    assert zds.read_dataset(ds) == zds.expect_lines(src)
    assert run('verify', ds).returncode == 0
    p = run('pack', src, '-o', ds, check=False)
    assert p.returncode != 0 and 'already exists' in p.stderr
    run('pack', data / 'jsonl/cc_en_head-0091.jsonl', '-o', ds, '--force')
    assert info_json(ds)['samples'] == 10
    stranger = tmp_path / 'stranger'
    stranger.mkdir()
    (stranger / 'keep').write_text('mine')
    p = run('pack', src, '-o', stranger, '--force', check=False)
    assert p.returncode != 0 and 'not a zephon dataset' in p.stderr
    assert (stranger / 'keep').read_text() == 'mine'


def test_dataset_files_are_read_only(tmp_path, data):
    ds = pack_ok(tmp_path, 'cc', data / 'jsonl/cc_en_head-0091.jsonl')
    for f in ds.iterdir():
        assert f.stat().st_mode & 0o222 == 0, f


# ---------------------------------------------------------------------------
# Bad inputs: non-zero exit, a message naming the input and position, nothing left.

def bad_pack(tmp_path, *args):
    parent = tmp_path / 'outdir'
    parent.mkdir(exist_ok=True)
    p = run('pack', *args, '-o', parent / 'out', check=False)
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith('zephon: pack: ')
    assert list(parent.iterdir()) == [], 'pack left %s' % list(parent.iterdir())
    return p.stderr


def test_bad_json_line(tmp_path):
    f = tmp_path / 'bad.jsonl'
    f.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": \n{"a": 4}\n')
    err = bad_pack(tmp_path, f)
    assert '%s:3: invalid JSON' % f in err
    assert '--skip-bad' in err


def test_invalid_utf8_in_json_string(tmp_path):
    f = tmp_path / 'bad.jsonl'
    f.write_bytes(b'{"a": "ok"}\n{"a": "\xff\xfe"}\n')
    err = bad_pack(tmp_path, f)
    assert '%s:2: invalid JSON' % f in err
    assert 'UTF-8' in err


def test_truncated_zstd_frame(tmp_path, data):
    raw = (data / 'jsonl/blns.jsonl.zst').read_bytes()
    f = tmp_path / 'cut.jsonl.zst'
    f.write_bytes(raw[:len(raw) // 2])
    err = bad_pack(tmp_path, f)
    assert str(f) in err and 'truncated zstd frame' in err
    assert 'byte %d' % (len(raw) // 2) in err


def test_corrupt_zstd_data(tmp_path, data):
    raw = bytearray((data / 'jsonl/blns.jsonl.zst').read_bytes())
    raw[len(raw) // 2] ^= 0xff
    f = tmp_path / 'flip.jsonl.zst'
    f.write_bytes(bytes(raw))
    err = bad_pack(tmp_path, f)
    assert str(f) in err and ('zstd' in err or 'invalid JSON' in err)


def test_truncated_tar(tmp_path, data):
    raw = (data / 'wds/tendata.tar').read_bytes()
    f = tmp_path / 'cut.tar'
    f.write_bytes(raw[:len(raw) // 2 + 100])
    err = bad_pack(tmp_path, f)
    assert str(f) in err and 'truncated' in err.lower()


@pytest.mark.parametrize('size_field', [b'\xff' * 12, b'\x80\x7f' + b'\xff' * 10],
                         ids=['negative', 'overflow'])
@pytest.mark.parametrize('wrap', ['tar', 'tar.gz'])
def test_tar_member_with_a_huge_size_names_its_header(tmp_path, size_field, wrap):
    """A member whose size field (base-256) is negative or overflows: the message gives
    the byte of its header in the (decoded) tar stream, after a member whose data needs
    padding and one with a long (GNU) name."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.GNU_FORMAT) as tf:
        for n, body in [('a.txt', b'x' * 600), ('b' * 120 + '.txt', b'y' * 10),
                        ('c.txt', b'z'), ('d.txt', b'w')]:
            ti = tarfile.TarInfo(n)
            ti.size = len(body)
            tf.addfile(ti, io.BytesIO(body))
    raw = bytearray(buf.getvalue())
    bad = tarfile.open(fileobj=io.BytesIO(bytes(raw))).getmembers()[2]
    h = bad.offset_data - 512
    raw[h + 124:h + 136] = size_field
    raw[h + 148:h + 156] = b' ' * 8
    raw[h + 148:h + 156] = b'%06o\0 ' % sum(raw[h:h + 512])
    f = tmp_path / ('huge.' + wrap)
    f.write_bytes(gzip.compress(bytes(raw)) if wrap == 'tar.gz' else bytes(raw))
    err = bad_pack(tmp_path, f)
    assert 'bad tar header at byte %d, after member %s' % (bad.offset, 'b' * 120) in err, err


@pytest.mark.parametrize('name', ['../evil.txt', 'a/../../evil.txt', '/etc/evil.txt'])
def test_tar_with_escaping_member(tmp_path, name):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.GNU_FORMAT) as tf:
        for n, body in [('ok.txt', b'fine'), (name, b'evil')]:
            ti = tarfile.TarInfo(n)
            ti.size = len(body)
            tf.addfile(ti, io.BytesIO(body))
    f = tmp_path / 'evil.tar'
    f.write_bytes(buf.getvalue())
    err = bad_pack(tmp_path, f)
    assert str(f) in err and 'member' in err
    assert "'..'" in err or 'absolute' in err


def test_npy_object_dtype(tmp_path):
    f = tmp_path / 'obj.npy'
    np.save(f, np.array([1, 'two', None], dtype=object), allow_pickle=True)
    err = bad_pack(tmp_path, f, '--seq-len', '2')
    assert str(f) in err and 'object dtype' in err


def test_npy_float_and_2d_refused(tmp_path):
    f = tmp_path / 'f.npy'
    np.save(f, np.zeros(10, dtype=np.float32))
    assert 'floating-point' in bad_pack(tmp_path, f, '--seq-len', '2')
    g = tmp_path / 'g.npy'
    np.save(g, np.zeros((4, 4), dtype=np.uint16))
    assert '2 dimensions' in bad_pack(tmp_path, g, '--seq-len', '2')


def test_npy_truncated(tmp_path):
    f = tmp_path / 't.npy'
    np.save(f, np.arange(100, dtype=np.uint16))
    f.write_bytes(f.read_bytes()[:-3])
    assert 'truncated' in bad_pack(tmp_path, f, '--seq-len', '2')


def _copy_megatron(data, tmp_path, patch):
    idx = bytearray((data / (MEGATRON + '.idx')).read_bytes())
    patch(idx)
    (tmp_path / 'm.idx').write_bytes(bytes(idx))
    os.symlink(data / (MEGATRON + '.bin'), tmp_path / 'm.bin')
    return tmp_path / 'm.idx'


def test_idx_bad_magic(tmp_path, data):
    f = _copy_megatron(data, tmp_path, lambda b: b.__setitem__(0, ord('X')))
    err = bad_pack(tmp_path, f, '--seq-len', '16')
    assert str(f) in err and 'bad magic' in err


def test_idx_bad_version(tmp_path, data):
    f = _copy_megatron(data, tmp_path, lambda b: b.__setitem__(9, 2))
    err = bad_pack(tmp_path, f, '--seq-len', '16')
    assert str(f) in err and 'version 2' in err


def test_idx_sequence_outside_bin(tmp_path, data):
    def patch(b):
        n, = struct.unpack_from('<Q', b, 18)
        struct.pack_into('<q', b, 34 + 4 * n + 8 * (n - 1), 10 ** 9)
    f = _copy_megatron(data, tmp_path, patch)
    err = bad_pack(tmp_path, f, '--seq-len', '16')
    assert 'sequence 999' in err and 'outside' in err


def test_empty_inputs(tmp_path):
    for name in ('empty.jsonl', 'empty.txt', 'empty.tar'):
        f = tmp_path / name
        f.write_bytes(b'' if name != 'empty.tar' else b'\0' * 1024)
        err = bad_pack(tmp_path, f)
        assert str(f) in err and ('no samples' in err or 'empty' in err), err
    blank = tmp_path / 'blank.jsonl'
    blank.write_bytes(b'\n  \n\n')
    assert 'no samples' in bad_pack(tmp_path, blank)
    (tmp_path / 'emptydir').mkdir()
    assert 'no samples' in bad_pack(tmp_path, tmp_path / 'emptydir')
    np.save(tmp_path / 'few.npy', np.arange(3, dtype=np.uint16))
    assert 'less than one window' in bad_pack(tmp_path, tmp_path / 'few.npy',
                                              '--seq-len', '4')


def test_missing_and_unreadable_inputs(tmp_path):
    err = bad_pack(tmp_path, tmp_path / 'nope.jsonl')
    assert 'nope.jsonl: cannot open: No such file or directory' in err
    d = tmp_path / 'dir.jsonl'
    d.mkdir()
    assert 'dir.jsonl' in bad_pack(tmp_path, d, '--format', 'jsonl')
    if os.geteuid() != 0:
        f = tmp_path / 'secret.jsonl'
        f.write_bytes(b'{"a": 1}\n')
        f.chmod(0)
        assert 'Permission denied' in bad_pack(tmp_path, f)
        return
    # root reads anything: run this one as nobody, in a directory nobody can reach
    import shutil
    import tempfile
    top = pathlib.Path(tempfile.mkdtemp(prefix='zephon-unreadable-'))
    try:
        top.chmod(0o777)
        f = top / 'secret.jsonl'
        f.write_bytes(b'{"a": 1}\n')
        f.chmod(0)
        parent = top / 'outdir'
        parent.mkdir()
        parent.chmod(0o777)
        p = subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',
                            ZEPHON, 'pack', str(f), '-o', str(parent / 'out')],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.returncode == 1, p.stderr
        assert 'secret.jsonl: cannot open: Permission denied' in p.stderr
        assert list(parent.iterdir()) == []
    finally:
        shutil.rmtree(top)


def test_usage_errors(tmp_path, data):
    src = data / 'jsonl/cc_en_head-0091.jsonl'
    for args in (['pack'], ['pack', src], ['pack', src, '-o', tmp_path / 'x', '--level', 'z'],
                 ['pack', src, '-o', tmp_path / 'x', '--dtype', 'float32'],
                 ['pack', src, '-o', tmp_path / 'x', '--bogus']):
        p = run(*args, check=False)
        assert p.returncode == 2, args
        assert p.stderr.startswith('zephon: pack: ')
    f = tmp_path / 'x.weird'
    f.write_text('hi\n')
    assert '--format' in bad_pack(tmp_path, f)
    assert '--seq-len' in bad_pack(tmp_path, data / (MEGATRON + '.idx'))
    assert '--dtype' in bad_pack(tmp_path, data / (MEGATRON + '.bin'), '--format', 'bin',
                                 '--seq-len', '8')
    assert 'one kind of sample' in bad_pack(tmp_path, src, data / 'wds/tendata.tar')


def test_skip_bad_skips_and_counts(tmp_path):
    f = tmp_path / 'mixed.jsonl'
    f.write_bytes(b'{"a": 1}\nnot json\n{"a": 3}\n{"a": "\xff"}\n')
    p = run('pack', '--skip-bad', f, '-o', tmp_path / 'd')
    assert '%s:2: invalid JSON' % f in p.stderr and 'skipped' in p.stderr
    assert '%s:4: invalid JSON' % f in p.stderr
    assert zds.read_dataset(tmp_path / 'd') == [b'{"a": 1}', b'{"a": 3}']
    assert info_json(tmp_path / 'd')['skipped'] == 2


def test_progress_bar_only_on_a_terminal(tmp_path, data):
    import pty
    src = data / 'text/tinyshakespeare.txt'
    p = run('pack', src, '-o', tmp_path / 'a')
    assert '\r' not in p.stderr and 'ETA' not in p.stderr
    # On a terminal the bar is drawn (it is throttled to 5 Hz: make the pack take a while).
    big = tmp_path / 'big.txt'
    big.write_bytes(src.read_bytes() * 8)
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(ZEPHON, [ZEPHON, 'pack', str(big), '-o', str(tmp_path / 'b'), '--level',
                          '19', '--no-dict'])
    out = b''
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, out
    assert b'samples/s' in out and b'%' in out and b'ETA' in out
    assert b'packed ' in out


def test_interrupted_pack_leaves_nothing(tmp_path, data):
    src = data / 'text/tinyshakespeare.txt'
    big = tmp_path / 'big.txt'
    big.write_bytes(src.read_bytes() * 16)
    parent = tmp_path / 'outdir'
    parent.mkdir()
    proc = subprocess.Popen([ZEPHON, 'pack', str(big), '-o', str(parent / 'out'), '--level',
                             '19', '--no-dict'], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while not any(parent.iterdir()) and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert 'interrupted' in err
    assert list(parent.iterdir()) == []


def test_killed_pack_leftover_is_removed_by_the_next(tmp_path, data):
    """kill -9 cannot clean up: the next pack to the same output removes the temporary
    directory the dead one left (its lock is free) and says so; a running pack's is kept."""
    src = data / 'text/tinyshakespeare.txt'
    big = tmp_path / 'big.txt'
    big.write_bytes(src.read_bytes() * 16)
    parent = tmp_path / 'outdir'
    parent.mkdir()
    slow = [ZEPHON, 'pack', str(big), '-o', str(parent / 'out'), '--level', '19', '--no-dict']
    deadline = time.time() + 30

    def tmpdirs():
        return sorted(f for f in parent.iterdir() if '.zephon-tmp-' in f.name)

    def start_and_wait_for_its_tmpdir():
        before = tmpdirs()
        proc = subprocess.Popen(slow, stderr=subprocess.PIPE, text=True)
        while time.time() < deadline:
            new = [f for f in tmpdirs() if f not in before]
            if new:
                return proc, new[0]
            time.sleep(0.01)
        raise AssertionError('no temporary directory appeared')

    a, left_a = start_and_wait_for_its_tmpdir()
    a.kill()
    a.wait()
    b, left_b = start_and_wait_for_its_tmpdir()      # removes a's leftover at its start
    assert not left_a.exists()
    small = tmp_path / 'small.txt'
    small.write_text('a\nb\n')
    p = run('pack', small, '-o', parent / 'other')
    assert 'interrupted' not in p.stderr             # another output's are not its own
    p = run('pack', small, '-o', parent / 'out')
    assert 'interrupted' not in p.stderr and left_b.exists()   # b is alive: kept
    b.kill()
    _, err_b = b.communicate()
    assert 'removed %s, left by an interrupted pack' % left_a in err_b, err_b
    p = run('pack', small, '-o', parent / 'out', '--force')
    assert 'removed %s, left by an interrupted pack' % left_b in p.stderr, p.stderr
    assert tmpdirs() == []
    assert zds.read_dataset(parent / 'out') == [b'a', b'b']
    # the name says whose it is: another host's is only noted (that pack may be alive),
    # and one of this host whose pid lives is kept even with its lock free (the moment
    # between its creation and its lock, or a pack of another pid namespace)
    other = parent / '.out.zephon-tmp-elsewhere-1-abcdef'
    mine = parent / ('.out.zephon-tmp-%s-%d-ghijkl' % (os.uname().nodename, os.getpid()))
    other.mkdir()
    mine.mkdir()
    p = run('pack', small, '-o', parent / 'out', '--force')
    assert '%s: left by a pack on host elsewhere' % other in p.stderr, p.stderr
    assert other.exists() and mine.exists()


def test_existing_empty_directory_as_output(tmp_path):
    """mkdir then pack into it: an empty directory is taken without --force; one with
    anything in it is not."""
    f = tmp_path / 'in.jsonl'
    f.write_text('{"a": 1}\n')
    (tmp_path / 'empty').mkdir()
    run('pack', f, '-o', tmp_path / 'empty')
    assert zds.read_dataset(tmp_path / 'empty') == [b'{"a": 1}']
    (tmp_path / 'full').mkdir()
    (tmp_path / 'full' / 'notes').write_text('mine')
    p = run('pack', f, '-o', tmp_path / 'full', check=False)
    assert p.returncode == 1 and 'already exists' in p.stderr, p.stderr
    assert (tmp_path / 'full' / 'notes').read_text() == 'mine'


def test_utf8_byte_order_mark_is_not_part_of_the_first_record(tmp_path):
    bom = b'\xef\xbb\xbf'
    (tmp_path / 'bom.jsonl').write_bytes(bom + b'{"a": 1}\n{"a": 2}\n')
    (tmp_path / 'bom.txt').write_bytes(bom + b'first\nsecond\n')
    (tmp_path / 'plain.jsonl').write_bytes(b'{"a": 1}\n{"a": 2}\n')
    for name, want in (('bom.jsonl', [b'{"a": 1}', b'{"a": 2}']),
                       ('bom.txt', [b'first', b'second']),
                       ('plain.jsonl', [b'{"a": 1}', b'{"a": 2}'])):
        run('pack', tmp_path / name, '-o', tmp_path / (name + '.ds'))
        assert zds.read_dataset(tmp_path / (name + '.ds')) == want, name
    assert info_json(tmp_path / 'bom.jsonl.ds')['fingerprint'] == \
        info_json(tmp_path / 'plain.jsonl.ds')['fingerprint']
    # only at the start of a file: elsewhere it is a character of the line
    (tmp_path / 'mid.jsonl').write_bytes(b'{"a": 1}\n' + bom + b'{"a": 2}\n')
    assert '%s:2: invalid JSON' % (tmp_path / 'mid.jsonl') in bad_pack(tmp_path, tmp_path / 'mid.jsonl')


def test_json_error_names_the_end_of_the_line(tmp_path):
    f = tmp_path / 'cut.jsonl'
    f.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": "x"\n{"a": 4}\n')
    err = bad_pack(tmp_path, f)
    assert '%s:3: invalid JSON' % f in err and 'end of line' in err, err
    assert 'end of file' not in err


# ---------------------------------------------------------------------------
# Corruption of a packed dataset: verify names it, reads refuse it.

@pytest.fixture
def packed(tmp_path, data):
    ds = tmp_path / 'ds'
    run('pack', data / 'text/tinyshakespeare.txt', '-o', ds, '--shard-size', '256K')
    for f in ds.iterdir():
        f.chmod(0o644)
    return ds


def shard_entries(ds, shard):
    idx = (ds / shard.replace('.zst', '.idx')).read_bytes()
    _, _, _, n, first = zds.INDEX_HEADER.unpack_from(idx)
    return first, [zds.INDEX_ENTRY.unpack_from(idx, 32 + 24 * i) for i in range(n)]


def verify_fails(ds):
    p = run('verify', ds, check=False)
    assert p.returncode == 1, p.stderr
    return p.stderr


@pytest.mark.parametrize('where', [0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 97])
def test_flipped_byte_in_shard(packed, where):
    shard = 'shard-00001.zst'
    data = bytearray((packed / shard).read_bytes())
    pos = len(data) * where // 100
    data[pos] ^= 0x5a
    (packed / shard).write_bytes(bytes(data))
    first, entries = shard_entries(packed, shard)
    hit = next(i for i, e in enumerate(entries) if e[0] <= pos < e[0] + e[1])
    err = verify_fails(packed)
    assert 'sample %d (%s)' % (first + hit, shard) in err
    assert 'corrupt' in err


def test_truncated_shard(packed):
    f = packed / 'shard-00002.zst'
    f.write_bytes(f.read_bytes()[:-10])
    err = verify_fails(packed)
    assert 'shard-00002.zst' in err and 'truncated' in err
    assert run('info', packed, check=False).returncode == 1


def test_truncated_index(packed):
    f = packed / 'shard-00000.idx'
    f.write_bytes(f.read_bytes()[:-24])
    err = verify_fails(packed)
    assert 'shard-00000.idx' in err and 'truncated' in err


def test_missing_shard(packed):
    (packed / 'shard-00001.zst').unlink()
    assert 'shard-00001.zst' in verify_fails(packed)


def test_flipped_byte_in_index(packed):
    f = packed / 'shard-00000.idx'
    b = bytearray(f.read_bytes())
    b[32 + 24 * 7 + 16] ^= 1   # checksum of entry 7
    f.write_bytes(bytes(b))
    err = verify_fails(packed)
    assert 'sample 7 (shard-00000.zst): checksum mismatch' in err


def test_swapped_shards(packed):
    a, b = packed / 'shard-00000.zst', packed / 'shard-00001.zst'
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    verify_fails(packed)


@pytest.mark.parametrize('sql', [
    "UPDATE meta SET value = '12345' WHERE key = 'samples'",
    "UPDATE meta SET value = '0123456789abcdef0123456789abcdef' WHERE key = 'fingerprint'",
    "UPDATE meta SET value = '1' WHERE key = 'raw_bytes'",
    "UPDATE shards SET samples = samples + 1 WHERE idx = 0",
    "UPDATE shards SET bytes = bytes - 1 WHERE idx = 1",
    "UPDATE shards SET file = '../ds/shard-00000.zst' WHERE idx = 1",
    "DELETE FROM shards WHERE idx = 2",
    "UPDATE meta SET value = '2' WHERE key = 'format_version'",
    "DELETE FROM dict",
])
def test_catalog_that_does_not_match_its_shards(packed, sql):
    con = sqlite3.connect(packed / 'catalog.sqlite')
    con.execute(sql)
    con.commit()
    con.close()
    verify_fails(packed)


def test_catalog_not_sqlite(packed):
    (packed / 'catalog.sqlite').write_bytes(b'garbage' * 100)
    err = verify_fails(packed)
    assert 'catalog.sqlite' in err


def test_not_a_dataset(tmp_path):
    p = run('info', tmp_path, check=False)
    assert p.returncode == 1 and 'not a zephon dataset' in p.stderr
    assert 'zephon pack' in p.stderr


# ---------------------------------------------------------------------------
# Large inputs: many batches, the dictionary trained mid-stream, several threads.

def _big_jsonl(path, n, bad_at=()):
    lines = []
    for i in range(n):
        if i + 1 in bad_at:
            lines.append(b'{"i": %d, "broken": ' % i)
        else:
            lines.append(json.dumps({'i': i, 'text': 'w%d ' % (i * 7919 % 10007) * (i % 50),
                                     'u': '\u00e9\u4e2d' * (i % 3)}).encode())
    path.write_bytes(b'\n'.join(lines) + b'\n')
    return lines


def test_large_jsonl_same_dataset_for_any_thread_count(tmp_path):
    src = tmp_path / 'big.jsonl'
    lines = _big_jsonl(src, 60000)
    assert src.stat().st_size > 10 * 2 ** 20  # past the dictionary's training window
    fps = set()
    for threads in ('1', '2', '3'):
        ds = pack_ok(tmp_path, 't' + threads, src, '--threads', threads, '--shard-size', '256K')
        info = info_json(ds)
        assert info['dict_bytes'] > 0 and info['shards'] > 1
        fps.add(info['fingerprint'])
        if threads == '2':
            assert zds.read_dataset(ds) == lines
            assert run('verify', ds).returncode == 0
    assert len(fps) == 1


def test_large_jsonl_bad_line_deep_inside(tmp_path):
    src = tmp_path / 'big.jsonl'
    lines = _big_jsonl(src, 60000, bad_at=(7, 41234, 59999))
    err = bad_pack(tmp_path, src)
    assert '%s:7: invalid JSON' % src in err
    p = run('pack', src, '-o', tmp_path / 'd', '--skip-bad')
    for n in (7, 41234, 59999):
        assert '%s:%d: invalid JSON' % (src, n) in p.stderr
    want = [l for k, l in enumerate(lines) if k + 1 not in (7, 41234, 59999)]
    assert zds.read_dataset(tmp_path / 'd') == want
    assert info_json(tmp_path / 'd')['skipped'] == 3


def test_reads_refuse_a_corrupt_sample(packed, data):
    """The read path (zephon batch: the mount's code without FUSE) never returns wrong bytes."""
    shard = 'shard-00001.zst'
    first, entries = shard_entries(packed, shard)
    off, stored = entries[5][0], entries[5][1]
    b = bytearray((packed / shard).read_bytes())
    b[off + stored // 2] ^= 0x01
    (packed / shard).write_bytes(bytes(b))
    bad = first + 5
    opts = 'world_size=1,global_batch=1,shuffle=none'
    p = run('batch', packed, '-o', opts, '--rank', '0', '--step', bad, check=False)
    assert p.returncode != 0 and p.stdout == b''
    assert 'sample %d' % bad in p.stderr and shard in p.stderr
    want = zds.expect_lines(data / 'text/tinyshakespeare.txt')
    for good in (0, bad - 1, bad + 1):
        p = run('batch', packed, '-o', opts, '--rank', '0', '--step', good)
        assert p.stdout == want[good] + b'\n'


def test_many_shards_and_the_open_file_limit(tmp_path):
    """One open file per shard: zephon lifts the soft limit to the hard one, and where
    even that is too low it says so; it never calls such a dataset corrupt."""
    import resource
    with open(tmp_path / 'u.jsonl', 'w') as f:
        for i in range(2000):
            f.write(json.dumps({'i': i, 'pad': 'x' * (i % 50)}) + '\n')
    ds = tmp_path / 'sh'
    run('pack', tmp_path / 'u.jsonl', '-o', ds, '-q', '--shard-size', '400')
    nshards = len(list(ds.glob('shard-*.idx')))
    assert nshards > 100

    def limit(soft, hard):
        return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    p = subprocess.run([ZEPHON, 'verify', str(ds)], preexec_fn=limit(50, 4096),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([ZEPHON, 'verify', str(ds)], preexec_fn=limit(50, 50),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = p.stderr.decode()
    assert p.returncode == 1 and 'open-file limit' in err and 'corrupt' not in err, err


@pytest.mark.parametrize('suffix,tool', [('.jsonl.gz', 'gzip'), ('.json.gz', 'gzip'),
                                         ('.jsonl.xz', 'xz'), ('.jsonl.bz2', 'bzip2')])
def test_gzip_xz_bzip2_jsonl(tmp_path, data, suffix, tool):
    """Dolma ships *.json.gz: compressed JSONL is detected by magic and packs to the same
    samples (and fingerprint) as the plain file; a truncated one is refused."""
    src = data / 'jsonl' / 'cc_en_head-0091.jsonl'
    comp = subprocess.run([tool, '-c', str(src)], check=True, stdout=subprocess.PIPE).stdout
    (tmp_path / ('in' + suffix)).write_bytes(comp)
    plain = json.loads(run('info', '--json', run_pack(tmp_path, src, 'plain')).stdout)
    packed = json.loads(run('info', '--json', run_pack(tmp_path, tmp_path / ('in' + suffix), 'c')).stdout)
    assert packed['samples'] == plain['samples'] == 10
    assert packed['fingerprint'] == plain['fingerprint']
    (tmp_path / ('cut' + suffix)).write_bytes(comp[:len(comp) // 2])
    p = run('pack', tmp_path / ('cut' + suffix), '-o', tmp_path / 'cut', check=False)
    assert p.returncode == 1 and 'cut' + suffix in p.stderr and tool in p.stderr.lower(), p.stderr
    assert not (tmp_path / 'cut').exists()


# gzip's trailer (RFC 1952, section 2.3.1) is the last 8 bytes of a member: CRC32 of the
# decoded data, then ISIZE (its length mod 2^32), both little-endian. libarchive's gzip
# filter never checked them, and its tar reader stops at the end-of-archive blocks, before
# the trailer; pack must refuse such files like a corrupt .zst, .xz or .bz2.

def numbered_jsonl(n, tag):
    return b''.join(b'{"i": %d, "part": "%s", "pad": "%s"}\n' % (i, tag, b'x' * (i % 37))
                    for i in range(n))


def small_tar(n):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.USTAR_FORMAT) as tf:
        for i in range(n):
            for ext, body in (('txt', b'text %d' % i), ('cls', b'%d' % (i % 7))):
                ti = tarfile.TarInfo('s%04d.%s' % (i, ext))
                ti.size = len(body)
                tf.addfile(ti, io.BytesIO(body))
    return buf.getvalue()


def damage_gzip(gz, how):
    b = bytearray(gz)
    if how == 'crc':
        b[-6] ^= 0x01            # inside CRC32
    elif how == 'isize':
        b[-2] ^= 0x01            # inside ISIZE
    elif how == 'cut_trailer':
        del b[-4:]               # ISIZE missing: the data decodes, the member never ends
    elif how == 'cut_half':
        del b[len(b) // 2:]
    elif how == 'garbage':
        b += b'not gzip\n'
    return bytes(b)


GZIP_DAMAGE = {'crc': 'gzip CRC mismatch', 'isize': 'gzip length (ISIZE) mismatch',
               'cut_trailer': 'truncated gzip data', 'cut_half': 'truncated gzip data',
               'garbage': 'trailing garbage after the gzip data'}


@pytest.mark.parametrize('how', GZIP_DAMAGE)
def test_corrupt_gzip_jsonl(tmp_path, how):
    f = tmp_path / ('%s.jsonl.gz' % how)
    f.write_bytes(damage_gzip(gzip.compress(numbered_jsonl(500, b'a'), mtime=0), how))
    err = bad_pack(tmp_path, f)
    assert err.count('\n') == 1 and str(f) in err and GZIP_DAMAGE[how] in err, err


@pytest.mark.parametrize('how', GZIP_DAMAGE)
def test_corrupt_tar_gz(tmp_path, how):
    """The tar end-of-archive blocks come before the gzip trailer: it is checked anyway."""
    f = tmp_path / ('%s.tar.gz' % how)
    f.write_bytes(damage_gzip(gzip.compress(small_tar(50), mtime=0), how))
    err = bad_pack(tmp_path, f)
    assert err.count('\n') == 1 and str(f) in err and GZIP_DAMAGE[how] in err, err


def test_gzip_crc_mismatch_in_a_later_member(tmp_path):
    a, b = numbered_jsonl(300, b'a'), numbered_jsonl(300, b'b')
    first = gzip.compress(a, mtime=0)
    f = tmp_path / 'two.jsonl.gz'
    f.write_bytes(first + damage_gzip(gzip.compress(b, mtime=0), 'crc'))
    err = bad_pack(tmp_path, f)
    assert 'gzip CRC mismatch in the member at byte %d' % len(first) in err, err


def test_multi_member_gzip_jsonl(tmp_path):
    """`cat a.gz b.gz` (and pigz, bgzip) is one gzip file of several members (RFC 1952,
    section 2.2): every record of every member is packed, and zero padding after the last
    member is ignored, as gzip -t and Python's gzip module do."""
    parts = [numbered_jsonl(n, t) for n, t in ((300, b'a'), (1, b'b'), (250, b'c'))]
    f = tmp_path / 'cat.jsonl.gz'
    f.write_bytes(b''.join(gzip.compress(p, mtime=0) for p in parts) + b'\0' * 1024)
    want = b''.join(parts).splitlines()
    assert zds.read_dataset(pack_ok(tmp_path, 'd', f)) == want
    assert info_json(tmp_path / 'd')['samples'] == 551


def test_multi_member_tar_gz(tmp_path):
    raw = small_tar(40)
    f = tmp_path / 'cat.tar.gz'
    f.write_bytes(gzip.compress(raw[:3333], mtime=0) + gzip.compress(raw[3333:], mtime=0))
    got = [zds.parse_file_group(s) for s in zds.read_dataset(pack_ok(tmp_path, 'd', f))]
    assert got == [[('s%04d.txt' % i, b'text %d' % i), ('s%04d.cls' % i, b'%d' % (i % 7))]
                   for i in range(40)]


# The tar reader stops at the end-of-archive blocks, so libarchive's zstd, xz and bzip2
# filters never decoded what follows them when there is more than their read-ahead: the
# record padding of `tar -b 2048` (zeros to a 1 MiB multiple), the last frame's XXH64
# content checksum (RFC 8878, section 3.1.1), an xz index and footer, trailing bytes.

def padded_tar(n):
    """small_tar(n) padded to a 1 MiB record, as GNU tar -b 2048 writes it."""
    raw = small_tar(n)
    return raw + bytes(-len(raw) % (1 << 20))


def tar_samples(n):
    return [[('s%04d.txt' % i, b'text %d' % i), ('s%04d.cls' % i, b'%d' % (i % 7))]
            for i in range(n)]


def zstd_frame(data):
    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


def skippable_frame(payload):
    """RFC 8878, section 3.1.2: magic 0x184D2A50..5F, a 4-byte size, then user data."""
    return struct.pack('<II', 0x184D2A5B, len(payload)) + payload


def damage_zstd(zst, how):
    b = bytearray(zst)
    if how == 'checksum':
        b[-2] ^= 0x01            # inside the last frame's XXH64 content checksum
    elif how == 'cut_checksum':
        del b[-2:]
    elif how == 'cut_half':
        del b[len(b) // 2:]
    elif how == 'garbage':
        b += b'not zstd\n'
    elif how == 'zeros':
        b += bytes(8)            # zstd -t refuses zero padding too
    return bytes(b)


ZSTD_DAMAGE = {'checksum': 'zstd checksum mismatch in the frame at byte 0',
               'cut_checksum': 'truncated zstd frame', 'cut_half': 'truncated zstd frame',
               'garbage': 'trailing garbage after the zstd data',
               'zeros': 'trailing garbage after the zstd data'}


@pytest.mark.parametrize('how', ZSTD_DAMAGE)
def test_corrupt_tar_zst(tmp_path, how):
    """The tar end-of-archive blocks come 1 MiB before the end of the zstd frame: the rest
    is decoded and checked anyway."""
    f = tmp_path / ('%s.tar.zst' % how)
    f.write_bytes(damage_zstd(zstd_frame(padded_tar(50)), how))
    err = bad_pack(tmp_path, f)
    assert err.count('\n') == 1 and str(f) in err and ZSTD_DAMAGE[how] in err, err


def test_zstd_checksum_mismatch_in_the_last_frame_of_a_tar(tmp_path):
    """The last frame holds only the record padding after the end-of-archive blocks."""
    raw = padded_tar(40)
    eoa = len(small_tar(40))
    first = zstd_frame(raw[:eoa])
    f = tmp_path / 'two.tar.zst'
    f.write_bytes(first + damage_zstd(zstd_frame(raw[eoa:]), 'checksum'))
    err = bad_pack(tmp_path, f)
    assert 'zstd checksum mismatch in the frame at byte %d' % len(first) in err, err


def test_tar_zst_truncated_in_a_frame_header(tmp_path):
    """Two bytes of a next frame's magic: as likely stray bytes as a cut frame."""
    f = tmp_path / 'stray.tar.zst'
    zst = zstd_frame(padded_tar(10))
    f.write_bytes(zst + b'\x28\xb5')
    err = bad_pack(tmp_path, f)
    assert 'trailing garbage or a truncated zstd frame at byte %d' % len(zst) in err, err


def test_multi_frame_tar_zst_with_skippable_frames(tmp_path):
    """Valid input stays accepted: frames split at odd offsets, one without a checksum,
    and skippable frames (RFC 8878, section 3.1.2) between and after them; every member
    is packed."""
    raw = padded_tar(40)
    cuts = [0, 1000, 3333, len(small_tar(40)) - 700, len(raw)]
    frames = [zstd_frame(raw[a:b]) for a, b in zip(cuts, cuts[1:])]
    frames[1] = zstandard.ZstdCompressor(write_checksum=False).compress(raw[1000:3333])
    f = tmp_path / 'frames.tar.zst'
    f.write_bytes(frames[0] + skippable_frame(b'seekable index, say') + frames[1] +
                  skippable_frame(b'') + b''.join(frames[2:]) + skippable_frame(b'end'))
    got = [zds.parse_file_group(s) for s in zds.read_dataset(pack_ok(tmp_path, 'd', f))]
    assert got == tar_samples(40)


# xz (the check field, the index and the stream footer end the stream) and bzip2 (the
# combined stream CRC) have the same problem; their damage is found by liblzma and libbz2
# through libarchive, so the message carries their words.
XZ_BZ2_DAMAGE = {
    ('xz', 'footer'): lambda b: b[:-8] + bytes([b[-8] ^ 1]) + b[-7:],   # backward size
    ('xz', 'garbage'): lambda b: b + b'not xz\n',
    ('xz', 'cut'): lambda b: b[:-20],
    ('bzip2', 'stream_crc'): lambda b: b[:-3] + bytes([b[-3] ^ 1]) + b[-2:],
    ('bzip2', 'cut'): lambda b: b[:-4],
}


TAR_SUFFIX = {'zstd': '.tar.zst', 'xz': '.tar.xz', 'bzip2': '.tar.bz2'}


@pytest.mark.parametrize('tool,how', XZ_BZ2_DAMAGE)
def test_corrupt_tar_xz_bz2(tmp_path, tool, how):
    comp = subprocess.run([tool, '-c'], input=padded_tar(50), check=True,
                          stdout=subprocess.PIPE).stdout
    f = tmp_path / (how + TAR_SUFFIX[tool])
    f.write_bytes(XZ_BZ2_DAMAGE[tool, how](comp))
    err = bad_pack(tmp_path, f)
    assert err.count('\n') == 1 and str(f) in err, err
    assert 'corrupt or truncated %s data' % tool in err, err


@pytest.mark.parametrize('tool', ['zstd', 'xz', 'bzip2'])
def test_padded_compressed_tar(tmp_path, tool):
    """Valid input stays accepted: an undamaged padded tar packs, whatever the compressor."""
    comp = subprocess.run([tool, '-c'], input=padded_tar(30), check=True,
                          stdout=subprocess.PIPE).stdout
    f = tmp_path / ('ok' + TAR_SUFFIX[tool])
    f.write_bytes(comp)
    got = [zds.parse_file_group(s) for s in zds.read_dataset(pack_ok(tmp_path, 'd', f))]
    assert got == tar_samples(30)


# lzma ("alone", xz --format=lzma) and lz4 tars were decoded by libarchive's filters
# above the tar reader, so nothing after the end-of-archive blocks was decoded: a cut
# stream, a damaged lz4 content checksum or trailing garbage packed with rc 0. They go
# through the raw reader below the tar reader now, like xz and bzip2. Neither name is
# recognised by itself: --format files. lz4 -B4 makes 64 KiB blocks, so that the end
# blocks are in the first of many.
LZ = {'lzma': ['xz', '--format=lzma', '-c'], 'lz4': ['lz4', '-q', '-B4', '-c']}
LZ_DAMAGE = {
    ('lzma', 'cut'): (lambda b: b[:-10], 'corrupt or truncated lzma data'),
    ('lzma', 'garbage'): (lambda b: b + b'not lzma\n', 'trailing garbage after the lzma data'),
    ('lz4', 'checksum'): (lambda b: b[:-1] + bytes([b[-1] ^ 1]),   # content checksum
                          'corrupt or truncated lz4 data'),
    ('lz4', 'cut'): (lambda b: b[:-2], 'corrupt or truncated lz4 data'),
    ('lz4', 'garbage'): (lambda b: b + b'not lz4\n', 'trailing garbage after the lz4 data'),
}


def lz_compress(tool, data):
    return subprocess.run(LZ[tool], input=data, check=True, stdout=subprocess.PIPE).stdout


@pytest.mark.parametrize('tool,how', LZ_DAMAGE)
def test_corrupt_tar_lzma_lz4(tmp_path, tool, how):
    damage, want = LZ_DAMAGE[tool, how]
    comp = lz_compress(tool, padded_tar(50))
    f = tmp_path / ('%s.tar.%s' % (how, tool))
    f.write_bytes(damage(comp))
    err = bad_pack(tmp_path, '--format', 'files', f)
    assert err.count('\n') == 1 and str(f) in err and want in err, err
    if how == 'garbage' and tool == 'lzma':
        assert 'at byte %d' % len(comp) in err, err


@pytest.mark.parametrize('tool', LZ)
def test_padded_tar_lzma_lz4(tmp_path, tool):
    """Valid input stays accepted: an undamaged padded .tar.lzma and .tar.lz4 pack."""
    f = tmp_path / ('ok.tar.' + tool)
    f.write_bytes(lz_compress(tool, padded_tar(30)))
    got = [zds.parse_file_group(s) for s in
           zds.read_dataset(pack_ok(tmp_path, 'd', '--format', 'files', f))]
    assert got == tar_samples(30)
    # the name alone says tar, as .tar.xz does
    got = [zds.parse_file_group(s) for s in zds.read_dataset(pack_ok(tmp_path, 'byname', f))]
    assert got == tar_samples(30)


@pytest.mark.parametrize('tool', LZ)
def test_jsonl_lzma_lz4(tmp_path, tool):
    """The JSONL and text reader sniffs them the same way, and checks them to the end."""
    raw = numbered_jsonl(400, b'a')
    f = tmp_path / ('x.jsonl.' + tool)
    f.write_bytes(lz_compress(tool, raw))
    assert zds.read_dataset(pack_ok(tmp_path, 'd', '--format', 'jsonl', f)) == raw.splitlines()
    assert zds.read_dataset(pack_ok(tmp_path, 'byname', f)) == raw.splitlines()
    t = tmp_path / ('x.txt.' + tool)
    t.write_bytes(lz_compress(tool, b'one line\n\nanother\n'))
    assert zds.read_dataset(pack_ok(tmp_path, 'text', t)) == [b'one line', b'another']
    f.write_bytes(f.read_bytes() + b'not %s\n' % tool.encode())
    err = bad_pack(tmp_path, '--format', 'jsonl', f)
    assert str(f) in err and 'trailing garbage after the %s data' % tool in err, err


def test_damaged_bzip2_stream_header_is_refused(tmp_path):
    """A file that starts like bzip2 but whose first block magic is damaged was read by
    libarchive's raw format as it is: packed as text of compressed bytes."""
    text = b''.join(b'line %d of some text\n' % i for i in range(400))
    comp = bytearray(subprocess.run(['bzip2', '-c'], input=text, check=True,
                                    stdout=subprocess.PIPE).stdout)
    comp[4] ^= 0xFF                         # the block magic after "BZh9"
    f = tmp_path / 'bad.txt.bz2'
    f.write_bytes(bytes(comp))
    err = bad_pack(tmp_path, f)
    assert str(f) in err and 'bzip2' in err and 'damaged' in err, err
    # a plain text file that merely starts with "BZh" is text
    g = tmp_path / 'plain.txt'
    g.write_bytes(b'BZh is not a block size\nsecond\n')
    assert zds.read_dataset(pack_ok(tmp_path, 'plain', g)) == [b'BZh is not a block size',
                                                               b'second']


# libarchive's bzip2 filter ends the data at the first bytes after a stream that do not
# start another stream, without a word; bzip2 -d only warns ("trailing garbage after EOF
# ignored"). pack refuses them, as it does after gzip, zstd and xz data.
BZIP2_INPUTS = {'x.jsonl.bz2': lambda: numbered_jsonl(300, b'a'),
                'x.txt.bz2': lambda: b''.join(b'line %d\n' % i for i in range(300)),
                'x.tar.bz2': lambda: padded_tar(20)}


@pytest.mark.parametrize('tail', [b'not bzip2\n', b'BZ', bytes(16)], ids=['text', 'two', 'zeros'])
@pytest.mark.parametrize('name', BZIP2_INPUTS)
def test_bzip2_trailing_garbage_is_refused(tmp_path, name, tail):
    comp = bz2.compress(BZIP2_INPUTS[name]())
    f = tmp_path / name
    f.write_bytes(comp + tail)
    err = bad_pack(tmp_path, f)
    assert err.count('\n') == 1 and str(f) in err, err
    assert 'trailing garbage after the bzip2 data at byte %d' % len(comp) in err, err


@pytest.mark.parametrize('name', BZIP2_INPUTS)
def test_concatenated_bzip2_streams(tmp_path, name):
    """Valid input stays accepted: `cat a.bz2 b.bz2` is read whole, as bzip2 -d reads it."""
    raw = BZIP2_INPUTS[name]()
    cut = len(raw) // 3 if name.endswith('.tar.bz2') else raw.index(b'\n', len(raw) // 3) + 1
    f = tmp_path / name
    f.write_bytes(bz2.compress(raw[:cut]) + bz2.compress(raw[cut:]))
    got = zds.read_dataset(pack_ok(tmp_path, 'd', f))
    if name.endswith('.tar.bz2'):
        assert [zds.parse_file_group(s) for s in got] == tar_samples(20)
    else:
        assert got == raw.splitlines()


def test_zstd_long_window_is_named(tmp_path):
    """zstd --long=31 over a stream of unknown size asks for a 2 GiB window, past the
    decoder's default limit (as for zstd -d): say so, not just 'corrupt'."""
    comp = subprocess.run(['zstd', '-q', '--long=31', '-c'], input=b'{"a": 1}\n' * 100,
                          check=True, stdout=subprocess.PIPE).stdout
    f = tmp_path / 'long.jsonl.zst'
    f.write_bytes(comp)
    err = bad_pack(tmp_path, f)
    assert 'larger than 128 MiB' in err and '--long' in err, err


def run_pack(tmp_path, src, name):
    out = tmp_path / name
    run('pack', src, '-o', out, '-q')
    return out


# ---------------------------------------------------------------- the summary's words

def test_pack_and_info_print_sizes_in_one_unit(tmp_path):
    conftest.write_jsonl(tmp_path / 'in.jsonl', 3000, size=400)
    out = conftest.run('pack', tmp_path / 'in.jsonl', '-o', tmp_path / 'ds').stdout.decode()
    info = conftest.run('info', tmp_path / 'ds').stdout.decode()
    for text in (out, info):
        assert ' MB' not in text and ' kB' not in text, text
    raw = out.split('\n')[1].split(' raw,')[0].strip()        # "  1.2 MiB raw, ..."
    assert raw.endswith(' MiB') and '(%s)' % raw in info, (out, info)
    assert out.split('\n')[2].split('(')[1].endswith(' MiB/s)'), out
    # zstd stores these records in a fraction of their size: no hint
    assert '--compress none' not in out, out


def test_pack_says_when_compression_saves_little(tmp_path):
    """Random bytes: zstd stores about what it reads, so the summary suggests a raw pack,
    which then stores them without the hint."""
    src = tmp_path / 'files'
    src.mkdir()
    for k in range(64):
        (src / ('f%02d.bin' % k)).write_bytes(os.urandom(16384))
    out = conftest.run('pack', src, '-o', tmp_path / 'ds').stdout.decode()
    assert 'compression saves little here' in out and \
        'a pack with --compress none would serve faster' in out, out
    out = conftest.run('pack', src, '-o', tmp_path / 'raw', '--compress', 'none').stdout.decode()
    assert '--compress none' not in out, out
