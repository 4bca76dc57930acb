"""pack --eod-token: an end-of-document token after every document (Megatron's
preprocess_data.py --append-eod), recorded in the dataset for the loaders."""
import json
import os
import pathlib
import sqlite3
import struct

import numpy as np
import pytest

import conftest
import zds

MEGATRON = 'megatron/meg-gpt2-openwebtext_text_document'
EOD = 50256                   # GPT-2's <|endoftext|>


def run(*args, **kw):
    p = conftest.run(*args, **kw)
    assert not any(m in p.stderr for m in conftest.SANITIZER_MARKS), p.stderr
    return p


def info_json(ds):
    return json.loads(run('info', '--json', ds).stdout)


def read_idx(prefix):
    """(tokens of each sequence, the document index) of a Megatron pair, read with numpy."""
    idx = pathlib.Path(str(prefix) + '.idx').read_bytes()
    n, ndoc = struct.unpack_from('<QQ', idx, 18)
    dtype = {1: np.uint8, 4: np.int32, 8: np.uint16}[idx[17]]
    sizes = np.frombuffer(idx, dtype='<i4', count=n, offset=34)
    ptrs = np.frombuffer(idx, dtype='<i8', count=n, offset=34 + 4 * n)
    docs = np.frombuffer(idx, dtype='<i8', count=ndoc, offset=34 + 12 * n)
    binary = np.fromfile(str(prefix) + '.bin', dtype=np.uint8)
    isz = np.dtype(dtype).itemsize
    seqs = [binary[p:p + s * isz].view(dtype) for s, p in zip(sizes, ptrs)]
    return seqs, docs


def with_eod(seqs, docs, eod):
    """The token stream Megatron's --append-eod makes: each non-empty document's
    sequences, then eod (an empty document, a repeated index entry, gets none)."""
    out = []
    for a, b in zip(docs[:-1], docs[1:]):
        if b > a:
            out.extend(seqs[a:b])
            out.append(np.array([eod], dtype=seqs[0].dtype))
    return np.concatenate(out)


def stream(ds, dtype):
    return np.frombuffer(b''.join(zds.read_dataset(ds)), dtype=dtype)


def write_pair(prefix, seq_lens, docs, seed=3):
    """A Megatron pair (uint16) whose documents span several sequences."""
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, 50000, size=n, dtype='<u2') for n in seq_lens]
    sizes = np.array(seq_lens, dtype='<i4')
    ptrs = np.concatenate([[0], np.cumsum(sizes[:-1]) * 2]).astype('<i8')
    docs = np.array(docs, dtype='<i8')
    pathlib.Path(str(prefix) + '.idx').write_bytes(
        b'MMIDIDX\x00\x00' + struct.pack('<QBQQ', 1, 8, len(seqs), len(docs)) +
        sizes.tobytes() + ptrs.tobytes() + docs.tobytes())
    np.concatenate(seqs).tofile(str(prefix) + '.bin')
    return seqs, docs


def test_eod_lands_after_each_document_of_the_shared_idx(tmp_path, data):
    prefix = data / MEGATRON
    seqs, docs = read_idx(prefix)
    assert len(docs) == 1001 and not any((q == EOD).any() for q in seqs)
    ds = tmp_path / 'meg'
    run('pack', '--format', 'tokens', str(prefix) + '.idx', '--seq-len', 1024,
        '--eod-token', EOD, '--compress', 'none', '-q', '-o', ds)
    want = with_eod(seqs, docs, EOD)
    assert len(want) == 1361845 + 1000
    got = stream(ds, '<u2')
    n = len(want) // 1024 * 1024
    assert len(got) == n and np.array_equal(got, want[:n])
    # every EOD where a document ends, by the .idx's own document index
    ends = np.cumsum([sum(len(q) for q in seqs[a:b]) + 1
                      for a, b in zip(docs[:-1], docs[1:])]) - 1
    assert np.array_equal(np.flatnonzero(got == EOD), ends[ends < n])
    info = info_json(ds)
    assert (info['eod_token'], info['samples'], info['remainder_tokens']) == \
        (EOD, len(want) // 1024, len(want) % 1024)
    assert 'eod_token     50256, after every document' in run('info', ds).stdout.decode()
    assert run('verify', ds).returncode == 0


def test_documents_of_several_sequences_and_an_empty_one(tmp_path):
    """EOD after a document's last sequence, not after each sequence; an empty document
    (an index entry repeated) adds none, as --append-eod adds none to it."""
    seqs, docs = write_pair(tmp_path / 'm', [5, 3, 4, 2, 6, 1, 3], [0, 3, 3, 4, 7])
    ds = tmp_path / 'ds'
    run('pack', '--format', 'tokens', tmp_path / 'm.idx', '--seq-len', 1, '--eod-token', 65535,
        '--compress', 'none', '-q', '-o', ds)
    got = stream(ds, '<u2')
    want = with_eod(seqs, docs, 65535)
    assert np.array_equal(got, want)
    assert list(np.flatnonzero(got == 65535)) == [12, 15, 26]


def test_a_bin_or_npy_input_is_one_document(tmp_path):
    a = np.arange(1, 11, dtype='<u4')
    b = np.arange(11, 26, dtype='<u4')
    np.save(tmp_path / 'a.npy', a)
    b.tofile(tmp_path / 'b.bin')
    ds = tmp_path / 'ds'
    run('pack', '--format', 'tokens', tmp_path / 'a.npy', tmp_path / 'b.bin', '--dtype',
        'uint32', '--seq-len', 3, '--overlap', 1, '--eod-token', 4294967295, '-q', '-o', ds)
    want = np.concatenate([a, [4294967295], b, [4294967295]]).astype('<u4')
    got = [np.frombuffer(w, dtype='<u4') for w in zds.read_dataset(ds)]
    assert [list(w) for w in got] == [list(want[3 * i:3 * i + 4])
                                      for i in range((len(want) - 1) // 3)]
    assert info_json(ds)['eod_token'] == 4294967295


def bad_pack(tmp_path, *args, code=1):
    parent = tmp_path / 'outdir'
    parent.mkdir(exist_ok=True)
    p = run('pack', *args, '-o', parent / 'out', check=False)
    assert p.returncode == code, p.stderr
    assert list(parent.iterdir()) == [], 'pack left %s' % list(parent.iterdir())
    return p.stderr


@pytest.mark.parametrize('dtype,eod', [('uint16', 65536), ('uint8', 256),
                                       ('int32', 2147483648)])
def test_an_id_that_does_not_fit_the_dtype_is_refused(tmp_path, data, dtype, eod):
    if dtype == 'uint16':
        src = [str(data / MEGATRON) + '.idx']
    else:
        np.zeros(100, dtype={'uint8': '<u1', 'int32': '<i4'}[dtype]).tofile(tmp_path / 't.bin')
        src = [tmp_path / 't.bin', '--dtype', dtype]
    err = bad_pack(tmp_path, '--format', 'tokens', *src, '--seq-len', 8, '--eod-token', eod)
    assert ': --eod-token %d does not fit its %s tokens' % (eod, dtype) in err, err


@pytest.mark.parametrize('arg', ['-1', 'x', '12x', '4294967296', ''])
def test_an_eod_token_that_is_no_id_is_a_usage_error(tmp_path, data, arg):
    err = bad_pack(tmp_path, str(data / MEGATRON) + '.idx', '--seq-len', 8, '--eod-token', arg,
                   code=2)
    assert "--eod-token '%s' is not a token id" % arg in err


def test_eod_token_on_records_is_refused(tmp_path):
    (tmp_path / 'a.txt').write_text('one\ntwo\n')
    err = bad_pack(tmp_path, tmp_path / 'a.txt', '--eod-token', 0)
    assert '--eod-token applies to token inputs only' in err


def test_a_corrupt_document_index_is_refused_only_with_eod_token(tmp_path):
    write_pair(tmp_path / 'm', [5, 3, 4], [0, 2, 1, 3])    # starts go backwards
    err = bad_pack(tmp_path, tmp_path / 'm.idx', '--seq-len', 2, '--eod-token', 7)
    assert 'document 2 of the .idx starts at sequence 1' in err, err
    run('pack', tmp_path / 'm.idx', '--seq-len', 2, '-q', '-o', tmp_path / 'plain')


def test_datasets_without_the_key_read_as_none(tmp_path, data):
    ds = tmp_path / 'old'
    run('pack', str(data / MEGATRON) + '.idx', '--seq-len', 1024, '-q', '-o', ds)
    con = sqlite3.connect(ds / 'catalog.sqlite')
    assert con.execute("SELECT count(*) FROM meta WHERE key = 'eod_token'").fetchone() == (0,)
    con.close()
    assert info_json(ds)['eod_token'] is None
    assert 'eod_token     none' in run('info', ds).stdout.decode()
    records = tmp_path / 'rec'
    (tmp_path / 'a.txt').write_text('one\ntwo\n')
    run('pack', tmp_path / 'a.txt', '-q', '-o', records)
    assert info_json(records)['eod_token'] is None


def test_a_catalog_eod_token_outside_the_dtype_is_refused(tmp_path, data):
    ds = tmp_path / 'ds'
    run('pack', str(data / MEGATRON) + '.idx', '--seq-len', 1024, '--eod-token', 5, '-q',
        '-o', ds)
    cat = ds / 'catalog.sqlite'
    os.chmod(ds, 0o755)
    os.chmod(cat, 0o644)
    con = sqlite3.connect(cat)
    con.execute("UPDATE meta SET value = '65536' WHERE key = 'eod_token'")
    con.commit()
    con.close()
    p = run('info', ds, check=False)
    assert p.returncode == 1 and "catalog meta 'eod_token' is not a token id of dtype uint16" \
        in p.stderr, p.stderr


def test_pack_help_describes_it():
    out = run('pack', '--help').stdout.decode()
    assert '--eod-token ID' in out and 'one document per file' in out
