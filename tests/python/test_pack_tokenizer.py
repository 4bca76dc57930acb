"""`zephon pack --tokenizer`: raw text to a token dataset (docs/packing.md, "Raw text to
tokens").

Token for token: the windows the dataset serves (zephon batch, the mount's code) are the
documents as TorchTitan 0.3.0's HuggingFaceTokenizer encodes them for pretraining
(encode(text, add_bos=True, add_eos=True)), concatenated and cut into windows, on real
text (../shared/data, WordNet) and on Parquet and datasets folders written from it.
Then each rule the page pins down, and each bad input.
"""
import io
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import DATA, ZEPHON, zrun
import sanitizers
from lint.doc_blocks import doc_block  # tests/lint/doc_blocks.py

TOK = DATA / 'tokenizer' / 'torchtitan-test'
SHAKESPEARE = DATA / 'text' / 'tinyshakespeare.txt'
CC = DATA / 'jsonl' / 'cc_en_head-0091.jsonl'
BLNS = DATA / 'jsonl' / 'blns.jsonl.zst'
WORDNET = pathlib.Path('/usr/share/wordnet/data.adv')
BOS, EOS = 2002, 2003
L = 64

# the front end runs in this interpreter, which has the zephon package and tokenizers
os.environ.setdefault('ZEPHON_PYTHON', sys.executable)

pytestmark = pytest.mark.skipif(not (TOK / 'tokenizer.json').is_file(),
                                reason='shared data %s is absent' % TOK)


def pack(out, *args, ok=True, env=None, cwd=None):
    """zephon pack --tokenizer ... -o out; the CompletedProcess (text)."""
    p = subprocess.run([ZEPHON, 'pack', *map(str, args), '-o', str(out)], text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600,
                       env=dict(os.environ, **(env or {})), cwd=cwd)
    sanitizers.scan(p.stderr, 'zephon pack %s' % (args,))
    if ok is not None:
        assert (p.returncode == 0) == ok, (p.returncode, p.stdout, p.stderr)
    if not ok:
        assert not pathlib.Path(out).exists()
        assert not [f for f in pathlib.Path(out).parent.iterdir() if '.zephon-tmp' in f.name]
    return p


def info(ds):
    return json.loads(zrun('info', ds, '--json'))


def windows(ds):
    """Every window the dataset serves, in id order: [samples, window]."""
    i = info(ds)
    raw = zrun('batch', ds, '-o', 'world_size=1,global_batch=%d,shuffle=none,format=bin'
               % i['samples'], '--rank', 0, '--step', 0)
    return np.frombuffer(raw, dtype=np.dtype(i['dtype']).newbyteorder('<')).reshape(
        i['samples'], i['seq_len'])


def cut(stream, window, overlap=0):
    """stream cut into windows of `window` tokens, each starting `window - overlap` after
    the one before; the incomplete one at the end dropped."""
    stride = window - overlap
    n = (len(stream) - overlap) // stride
    s = np.asarray(stream, dtype=np.int64)
    return np.stack([s[k * stride:k * stride + window] for k in range(n)])


@pytest.fixture(scope='module')
def titan():
    """TorchTitan 0.3.0's own tokenizer wrapper over the test tokenizer folder."""
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    return HuggingFaceTokenizer(tokenizer_path=str(TOK))


@pytest.fixture(scope='module')
def raw_tok():
    """The tokenizers library itself, on tokenizer.json alone."""
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(TOK / 'tokenizer.json'))


def titan_stream(titan, texts):
    out = []
    for t in texts:
        out += titan.encode(t, add_bos=True, add_eos=True)
    return out


def jsonl_texts(path):
    if str(path).endswith('.zst'):
        data = subprocess.run([ZEPHON, 'pack', '--decode-lines', str(path)],
                              stdout=subprocess.PIPE, check=True).stdout
    else:
        data = pathlib.Path(path).read_bytes()
    return [r['text'] for r in map(json.loads, data.splitlines()) if isinstance(r['text'], str)]


def need(*paths):
    for p in paths:
        if not pathlib.Path(p).exists():
            pytest.skip('data file %s is absent' % p)


def check_same(ds, titan, texts, window=L, overlap=0):
    got = windows(ds)
    want = cut(titan_stream(titan, texts), window, overlap)
    assert got.shape == want.shape
    assert np.array_equal(got.astype(np.int64), want)
    return got


# ---------------------------------------------------------------- token for token

def test_real_text_token_for_token_with_torchtitan_and_tokenizers(tmp_path, titan, raw_tok):
    need(CC, BLNS, SHAKESPEARE)
    ds = tmp_path / 'ds'
    p = pack(ds, '--tokenizer', TOK, '--seq-len', L, '--skip-bad', CC, BLNS, SHAKESPEARE)
    # blns.jsonl.zst line 2 holds a list as its text (lm_dataformat's test of it)
    assert "blns.jsonl.zst:2: field 'text' is list, not a string; skipped" in p.stderr
    texts = jsonl_texts(CC) + jsonl_texts(BLNS) + [SHAKESPEARE.read_text()]
    got = check_same(ds, titan, texts)
    # the tokenizers library's own encode, BOS/EOS as documented, gives the same stream
    own = []
    for t in texts:
        own += [BOS] + raw_tok.encode(t).ids + [EOS]
    assert np.array_equal(got.reshape(-1), np.asarray(own[:got.size]))
    i = info(ds)
    assert i['documents'] == len(texts) == 10 + 3 + 1
    assert i['tokens'] == len(own)                # BOS and EOS counted
    assert i['remainder_tokens'] == len(own) % L
    assert i['max_token_id'] == max(own) == EOS
    assert i['eod_token'] == EOS and i['dtype'] == 'uint16' and i['skipped'] == 1
    tk = i['tokenizer']
    assert tk['name'] == 'torchtitan-test' and tk['bos_token'] == BOS and tk['eos_token'] == EOS
    assert tk['vocab_size'] == titan.get_vocab_size()
    import hashlib
    h = hashlib.sha256((TOK / 'tokenizer.json').read_bytes() +
                       (TOK / 'tokenizer_config.json').read_bytes()).hexdigest()
    assert tk['sha256'] == h
    assert [s['format'] for s in i['sources']] == ['jsonl', 'jsonl', 'text']
    zrun('verify', ds)


def test_wordnet_lines_with_overlap(tmp_path, titan):
    need(WORDNET)
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, '--format', 'lines', '--seq-len', L, '--overlap', 1, WORDNET)
    lines = [ln for ln in WORDNET.read_bytes().decode().split('\n') if ln]
    check_same(ds, titan, lines, window=L + 1, overlap=1)
    assert info(ds)['documents'] == len(lines)
    # lineage: the window holding line 40 names it
    doc = json.loads(zrun('info', ds, '--sample', 100, '--json'))['documents']
    assert all(d['path'] == str(WORDNET) and d['format'] == 'lines' for d in doc)
    assert [d['record'] for d in doc] == sorted(d['record'] for d in doc)


def test_parquet_and_datasets_folders_written_from_real_text(tmp_path, titan):
    need(CC, SHAKESPEARE)
    import pyarrow as pa
    import pyarrow.parquet as pq
    import datasets

    texts = jsonl_texts(CC) + SHAKESPEARE.read_text().split('\n\n')[:300]
    pq.write_table(pa.table({'id': list(range(len(texts))), 'text': texts}),
                   tmp_path / 'one.parquet', row_group_size=7)
    ds = tmp_path / 'ds_parquet'
    pack(ds, '--tokenizer', TOK, '--seq-len', L, tmp_path / 'one.parquet')
    check_same(ds, titan, texts)
    src = info(ds)['sources']
    assert [s['format'] for s in src] == ['parquet']

    # a Hub folder: data/train-*.parquet in name order, test-* and README.md left out
    hub = tmp_path / 'hub'
    (hub / 'data').mkdir(parents=True)
    (hub / 'README.md').write_text('---\nlicense: mit\n---\n')
    pq.write_table(pa.table({'text': texts[:100]}), hub / 'data' / 'train-00000-of-00002.parquet')
    pq.write_table(pa.table({'text': texts[100:]}), hub / 'data' / 'train-00001-of-00002.parquet')
    pq.write_table(pa.table({'text': ['held out']}), hub / 'data' / 'test-00000-of-00001.parquet')
    ds = tmp_path / 'ds_hub'
    pack(ds, '--tokenizer', TOK, '--seq-len', L, hub)
    check_same(ds, titan, texts)
    assert [pathlib.Path(s['path']).name for s in info(ds)['sources']] == [
        'train-00000-of-00002.parquet', 'train-00001-of-00002.parquet']
    ds = tmp_path / 'ds_hub_test'
    pack(ds, '--tokenizer', TOK, '--seq-len', 2, '--split', 'test', hub)
    assert info(ds)['documents'] == 1

    # save_to_disk: a Dataset of 3 Arrow shards, and a DatasetDict
    d = datasets.Dataset.from_dict({'text': texts, 'n': list(range(len(texts)))})
    d.save_to_disk(str(tmp_path / 'saved'), num_shards=3)
    ds = tmp_path / 'ds_saved'
    pack(ds, '--tokenizer', TOK, '--seq-len', L, tmp_path / 'saved')
    check_same(ds, titan, texts)
    assert [s['format'] for s in info(ds)['sources']] == ['arrow'] * 3
    datasets.DatasetDict({'train': d, 'validation': d.select(range(3))}).save_to_disk(
        str(tmp_path / 'dict'))
    ds = tmp_path / 'ds_dict'
    pack(ds, '--tokenizer', TOK, '--seq-len', L, '--split', 'validation', tmp_path / 'dict')
    assert info(ds)['documents'] == 3
    # rows are named from 0 in each file
    doc = json.loads(zrun('info', ds, '--sample', 0, '--json'))['documents'][0]
    assert doc['record'] == 0 and doc['format'] == 'arrow' and doc['document'] == 0


def test_document_index_names_every_document_of_a_window(tmp_path, titan):
    need(CC)
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, '--seq-len', L, CC)
    docs = [titan.encode(t, add_bos=True, add_eos=True) for t in jsonl_texts(CC)]
    starts = np.cumsum([0] + [len(d) for d in docs])
    for sample in (0, 1, 29, 30, 31, info(ds)['samples'] - 1):
        got = json.loads(zrun('info', ds, '--sample', sample, '--json'))
        first, last = sample * L, sample * L + L - 1
        want = [k for k in range(len(docs)) if starts[k] <= last and starts[k + 1] > first]
        assert [d['document'] for d in got['documents']] == want
        assert [d['record'] for d in got['documents']] == [k + 1 for k in want]  # lines
        assert sum(d['window_tokens'] for d in got['documents']) == L
        assert all(d['path'] == str(CC) for d in got['documents'])
    text = zrun('info', ds, '--sample', 30).decode()
    assert '%s line' % CC in text


def test_same_bytes_whatever_the_number_of_cores(tmp_path):
    need(CC, SHAKESPEARE)
    fps = []
    for n in ('1', '2'):
        ds = tmp_path / ('ds' + n)
        pack(ds, '--tokenizer', TOK, '--seq-len', L, '--threads', n, CC, SHAKESPEARE,
             env={'RAYON_NUM_THREADS': n})
        fps.append(info(ds)['fingerprint'])
    assert fps[0] == fps[1]
    for f in (tmp_path / 'ds1').iterdir():
        if f.name.startswith(('shard', 'documents')):
            assert f.read_bytes() == (tmp_path / 'ds2' / f.name).read_bytes()


# ---------------------------------------------------------------- the rules pinned down

def test_special_token_text_is_the_special_id_and_empty_documents_are_bos_eos(tmp_path, titan):
    src = tmp_path / 'a.jsonl'
    texts = ['one <|end_of_text|> two', '', 'three']
    src.write_text(''.join(json.dumps({'text': t}) + '\n' for t in texts))
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, '--seq-len', 2, src)
    stream = windows(ds).reshape(-1).tolist()
    want = titan_stream(titan, texts)
    assert stream == want[:len(stream)]
    first = titan.encode(texts[0], add_bos=True, add_eos=True)
    assert first[0] == BOS and first[-1] == EOS and EOS in first[1:-1]  # the literal: EOS
    # document 1 (the empty text) is [BOS, EOS]
    d = json.loads(zrun('info', ds, '--sample', 0, '--json'))
    assert info(ds)['documents'] == 3
    i1 = len(titan.encode(texts[0], add_bos=True, add_eos=True))
    assert want[i1:i1 + 2] == [BOS, EOS]
    assert d['documents'][0]['record'] == 1


def test_a_tokenizer_file_alone_has_no_eos_and_needs_eod_token(tmp_path, raw_tok):
    src = tmp_path / 'a.jsonl'
    src.write_text('{"text": "hello world"}\n{"text": "<|end_of_text|>"}\n')
    p = pack(tmp_path / 'ds', '--tokenizer', TOK / 'tokenizer.json', '--seq-len', 2, src,
             ok=False)
    assert 'no end-of-document token' in p.stderr and '--eod-token' in p.stderr
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK / 'tokenizer.json', '--eod-token', EOS, '--seq-len', 1, src)
    # no config: no BOS, the special string is plain text, ID appended after each document
    want = raw_tok.encode('hello world').ids + [EOS] + raw_tok.encode('<|end_of_text|>').ids + [EOS]
    assert windows(ds).reshape(-1).tolist() == want
    assert len(raw_tok.encode('<|end_of_text|>').ids) > 1
    i = info(ds)
    import hashlib
    assert i['tokenizer']['sha256'] == hashlib.sha256((TOK / 'tokenizer.json').read_bytes()).hexdigest()
    assert i['tokenizer']['bos_token'] is None and i['eod_token'] == EOS
    # a folder's EOS is the EOD; another --eod-token is refused
    p = pack(tmp_path / 'ds2', '--tokenizer', TOK, '--eod-token', 7, '--seq-len', 2, src, ok=False)
    assert 'drop --eod-token' in p.stderr


def test_another_tokenizer_is_another_dataset(tmp_path):
    src = tmp_path / 'a.jsonl'
    src.write_text('{"text": "hello"}\n')
    tok2 = tmp_path / 'tok2'
    shutil.copytree(TOK, tok2)
    cfg = json.loads((tok2 / 'tokenizer_config.json').read_text())
    cfg['model_max_length'] = 4096                    # same ids, other files
    (tok2 / 'tokenizer_config.json').write_text(json.dumps(cfg))
    pack(tmp_path / 'a', '--tokenizer', TOK, '--seq-len', 2, src)
    pack(tmp_path / 'b', '--tokenizer', tok2, '--seq-len', 2, src)
    assert np.array_equal(windows(tmp_path / 'a'), windows(tmp_path / 'b'))
    assert info(tmp_path / 'a')['fingerprint'] != info(tmp_path / 'b')['fingerprint']


def test_text_files_one_document_each_bom_dropped_crlf_and_final_newline_kept(tmp_path, titan):
    d = tmp_path / 'texts'
    d.mkdir()
    (d / 'b.txt').write_bytes(b'\xef\xbb\xbfsecond\r\nline two\r\n')
    (d / 'a.txt').write_bytes(b'first\n')
    (d / '.hidden').write_bytes(b'not packed')
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, '--seq-len', 1, d)
    assert windows(ds).reshape(-1).tolist() == titan_stream(
        titan, ['first\n', 'second\r\nline two\r\n'])
    assert [pathlib.Path(s['path']).name for s in info(ds)['sources']] == ['a.txt', 'b.txt']
    # --format lines: one document per non-empty line, CRLF and BOM dropped
    ds = tmp_path / 'ds2'
    pack(ds, '--tokenizer', TOK, '--format', 'lines', '--seq-len', 1, d / 'b.txt')
    assert windows(ds).reshape(-1).tolist() == titan_stream(titan, ['second', 'line two'])


def test_dtype_defaults_to_uint16_and_a_too_small_one_is_refused(tmp_path):
    src = tmp_path / 'a.jsonl'
    src.write_text('{"text": "hello"}\n')
    assert info(pack(tmp_path / 'x', '--tokenizer', TOK, '--seq-len', 2, src) and
                tmp_path / 'x')['dtype'] == 'uint16'
    pack(tmp_path / 'y', '--tokenizer', TOK, '--seq-len', 2, '--dtype', 'uint32', src)
    assert info(tmp_path / 'y')['dtype'] == 'uint32'
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, '--dtype', 'uint8', src,
             ok=False)
    assert '--dtype uint8 holds ids up to 255' in p.stderr and '2020 ids' in p.stderr


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize('line,why', [
    (b'{"title": "x"}', "a.jsonl:2: record without a 'text' field"),
    (b'{"text": 5}', "a.jsonl:2: field 'text' is int, not a string"),
    (b'{"text": null}', "a.jsonl:2: field 'text' is null, not a string"),
    (b'[1, 2]', "a.jsonl:2: JSON list without a 'text' field"),
    (b'{"text": "caf\xe9"}', 'a.jsonl:2: invalid UTF-8 at byte 13'),
    (b'{"text": "lone \\ud800 half"}', "a.jsonl:2: field 'text' holds a lone surrogate (\\ud800"),
    (b'{"text": "unterminated', 'a.jsonl:2: invalid JSON'),
])
def test_bad_jsonl_records_name_file_and_line_and_skip_bad_skips_them(tmp_path, line, why):
    src = tmp_path / 'a.jsonl'
    src.write_bytes(b'{"text": "good"}\n' + line + b'\n{"text": "also good"}\n')
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, src, ok=False)
    assert why in p.stderr, p.stderr
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, '--skip-bad', src)
    assert why in p.stderr and 'skipped 1 record' in p.stdout
    i = info(tmp_path / 'ds')
    assert i['documents'] == 2 and i['skipped'] == 1


def test_text_field_option(tmp_path, titan):
    src = tmp_path / 'a.jsonl'
    src.write_text('{"content": "abc", "text": 1}\n')
    pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 1, '--text-field', 'content', src)
    assert windows(tmp_path / 'ds').reshape(-1).tolist() == titan_stream(titan, ['abc'])


def test_bad_utf8_in_text_and_lines_files(tmp_path):
    src = tmp_path / 'bad.txt'
    src.write_bytes(b'ok line\nbad \xff line\n')
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, src, ok=False)
    assert 'bad.txt: invalid UTF-8 at byte 12' in p.stderr
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, '--format', 'lines', src,
             ok=False)
    assert 'bad.txt:2: invalid UTF-8 at byte 4 of the line' in p.stderr


def test_corrupt_compressed_jsonl_is_refused_naming_the_file(tmp_path):
    need(BLNS)
    data = BLNS.read_bytes()
    bad = tmp_path / 'cut.jsonl.zst'
    bad.write_bytes(data[:len(data) // 2])
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, '--skip-bad', bad, ok=False)
    assert 'cut.jsonl.zst' in p.stderr and 'truncated' in p.stderr


def test_parquet_without_the_column_or_corrupt(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    f = tmp_path / 'a.parquet'
    pq.write_table(pa.table({'body': ['x']}), f)
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, f, ok=False)
    assert "a.parquet: no column 'text' (columns: body); pass --column NAME" in p.stderr
    pq.write_table(pa.table({'text': [1, 2]}), f)
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, f, ok=False)
    assert "a.parquet: column 'text' is int64, not a string column" in p.stderr
    pq.write_table(pa.table({'text': ['a', None, 'b']}), f)
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, f, ok=False)
    assert "a.parquet: row 1: column 'text' is null" in p.stderr
    pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, '--skip-bad', f)
    assert info(tmp_path / 'ds')['documents'] == 2
    pq.write_table(pa.table({'text': ['some text %d' % i for i in range(1000)]}), f)
    data = bytearray(f.read_bytes())
    f.write_bytes(bytes(data[:len(data) // 2]))
    p = pack(tmp_path / 'ds2', '--tokenizer', TOK, '--seq-len', 2, f, ok=False)
    assert 'a.parquet: not a Parquet file, or a corrupt one' in p.stderr
    data[100:400] = b'\x00' * 300                     # the pages, the footer intact
    f.write_bytes(bytes(data))
    p = pack(tmp_path / 'ds2', '--tokenizer', TOK, '--seq-len', 2, f, ok=False)
    assert 'a.parquet' in p.stderr and 'corrupt' in p.stderr


def test_an_arrow_folder_that_is_not_a_dataset(tmp_path):
    import pyarrow as pa
    d = tmp_path / 'arrows'
    d.mkdir()
    with pa.OSFile(str(d / 'data.arrow'), 'wb') as f:
        with pa.ipc.new_stream(f, pa.schema([('text', pa.string())])) as w:
            w.write_table(pa.table({'text': ['x']}))
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, d, ok=False)
    assert 'arrows: holds .arrow files but is not a Hugging Face datasets folder' in p.stderr
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, d / 'data.arrow', ok=False)
    assert 'a lone .arrow file' in p.stderr


def test_a_tokenizer_that_does_not_parse(tmp_path):
    src = tmp_path / 'a.jsonl'
    src.write_text('{"text": "x"}\n')
    bad = tmp_path / 'tok'
    bad.mkdir()
    (bad / 'tokenizer.json').write_text('{"version": "1.0", "model": {"type": "Nope"}}')
    p = pack(tmp_path / 'ds', '--tokenizer', bad, '--seq-len', 2, src, ok=False)
    assert "tokenizer.json: not a Hugging Face tokenizer.json that tokenizers can load" in p.stderr
    p = pack(tmp_path / 'ds', '--tokenizer', tmp_path / 'none', '--seq-len', 2, src, ok=False)
    assert 'none: no such file or folder' in p.stderr
    (bad / 'tokenizer.json').unlink()
    p = pack(tmp_path / 'ds', '--tokenizer', bad, '--seq-len', 2, src, ok=False)
    assert 'no tokenizer.json in this folder' in p.stderr


def test_missing_python_or_package_says_what_to_install(tmp_path):
    src = tmp_path / 'a.jsonl'
    src.write_text('{"text": "x"}\n')
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, src, ok=False,
             env={'ZEPHON_PYTHON': str(tmp_path / 'no-python')})
    assert "pip install 'zephon[tokenize]'" in p.stderr and 'ZEPHON_PYTHON' in p.stderr
    # an interpreter without the zephon package (-I: no site-packages, no PYTHONPATH)
    wrapper = tmp_path / 'bare-python'
    wrapper.write_text('#!/bin/sh\nexec /usr/bin/python3 -I "$@"\n')
    wrapper.chmod(0o755)
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, src, ok=False,
             env={'ZEPHON_PYTHON': str(wrapper)})
    assert "No module named 'zephon'" in p.stderr
    assert "pip install 'zephon[tokenize]'" in p.stderr
    # the package without tokenizers (a tokenizers that cannot be imported shadows it)
    fake = tmp_path / 'fake' / 'tokenizers'
    fake.mkdir(parents=True)
    (fake / '__init__.py').write_text('raise ImportError("not installed")\n')
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, src, ok=False,
             env={'PYTHONPATH': str(fake.parent)})
    assert ("--tokenizer needs the Python package 'tokenizers' in %s: pip install "
            "'zephon[tokenize]'" % sys.executable) in p.stderr


def test_progress_bar_on_a_terminal_and_an_interrupted_pack_leaves_nothing(tmp_path):
    need(SHAKESPEARE)
    import pty
    import select
    big = tmp_path / 'big.jsonl'
    text = SHAKESPEARE.read_text()
    with open(big, 'w') as f:
        for i in range(40):
            f.write(json.dumps({'text': text}) + '\n')
    out = tmp_path / 'ds'
    master, slave = pty.openpty()
    p = subprocess.Popen([ZEPHON, 'pack', '--tokenizer', str(TOK), '--seq-len', '2', str(big),
                          '-o', str(out)], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    drawn, deadline = b'', time.monotonic() + 300
    while b'tokens/s' not in drawn and time.monotonic() < deadline and p.poll() is None:
        if select.select([master], [], [], 1)[0]:
            drawn += os.read(master, 65536)
    assert p.poll() is None, drawn
    # the bar: percent, input MB, documents, tokens, tokens/s, MB/s, ETA
    assert b' documents ' in drawn and b' tokens ' in drawn and b'/s' in drawn, drawn
    assert b'ETA' in drawn and b'MiB' in drawn, drawn
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    try:
        while select.select([master], [], [], 0.5)[0]:
            drawn += os.read(master, 65536)
    except OSError:
        pass
    os.close(master)
    assert p.returncode == 1 and b'pack interrupted; nothing was written' in drawn, drawn
    assert sorted(f.name for f in tmp_path.iterdir()) == ['big.jsonl']


# ---------------------------------------------------------------- the pages' blocks, loaders

def joined(block):
    """A block's commands, continuation lines joined."""
    return block.replace('\\\n', ' ').strip().split('\n')


def test_the_packing_page_lineage_example_as_written(tmp_path):
    need(CC, BLNS)
    lines = joined(doc_block('docs/packing.md', 'lineage'))
    for name, target in (('torchtitan-test', TOK), (CC.name, CC), (BLNS.name, BLNS)):
        (tmp_path / name).symlink_to(target)
    env = dict(os.environ, PATH='%s:%s' % (pathlib.Path(ZEPHON).parent, os.environ['PATH']))
    i, out = 0, []
    while i < len(lines):
        cmd = lines[i][2:]
        p = subprocess.run(cmd, shell=True, cwd=tmp_path, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        assert p.returncode == 0, (cmd, p.stderr)
        i += 1
        want = []
        while i < len(lines) and not lines[i].startswith('$ '):
            want.append(lines[i])
            i += 1
        assert p.stdout.splitlines() == want, (cmd, p.stdout)


def test_readme_torchtitan_walkthrough_from_raw_text(tmp_path):
    need(SHAKESPEARE)
    from torchtitan.components.loss import IGNORE_INDEX
    from torchtitan.config import ConfigManager

    block = joined(doc_block('README.md', 'torchtitan-walk-through'))
    # the pack, the mount, the GPU job and the unmount (test_torchtitan_readme.py runs the
    # block whole, with its dry run, at 8 DP ranks): here at 1 DP rank, batches checked;
    # the clone's tokenizer is ../shared/data's, linked where the clone puts it
    lines = [block[1], next(c for c in block if c.startswith('zephon mount')),
             next(c for c in block if 'torchtitan.train' in c), block[-1]]
    assert lines[0].startswith('zephon pack --tokenizer /tmp/torchtitan/tests/assets/tokenizer')
    assert lines[3].startswith('fusermount3 -u'), block
    (tmp_path / 'torchtitan' / 'tests' / 'assets').mkdir(parents=True)
    (tmp_path / 'torchtitan' / 'tests' / 'assets' / 'tokenizer').symlink_to(TOK)
    subst = [('/tmp/', '%s/' % tmp_path),  # first: tmp_path itself may lie in /tmp/
             ('tinyshakespeare.txt', str(SHAKESPEARE)),
             ('world_size=8,global_batch=64', 'world_size=1,global_batch=8')]

    def as_here(cmd):
        for a, b in subst:
            cmd = cmd.replace(a, b)
        return cmd

    env = dict(os.environ, PATH='%s:%s' % (pathlib.Path(ZEPHON).parent, os.environ['PATH']))
    (tmp_path / 'z').mkdir()
    for cmd in lines[:2]:
        p = subprocess.run(as_here(cmd), shell=True, env=env, text=True, timeout=600,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.returncode == 0, (cmd, p.stderr)
    try:
        # the torchrun line: the trainer's config from the same arguments, its loader built
        # as the trainer builds it (training needs a GPU)
        run = as_here(lines[2]).split()
        assert run[0] == 'ZEPHON_MOUNT=%s' % (tmp_path / 'z')
        args = run[run.index('torchtitan.train') + 1:run.index('#')]
        os.environ['ZEPHON_MOUNT'] = str(tmp_path / 'z')
        try:
            c = ConfigManager().parse_args(args)
            tok = c.tokenizer.build(tokenizer_path=c.hf_assets_path)
            dl = c.dataloader.build(dp_world_size=1, dp_rank=0, tokenizer=tok,
                                    seq_len=c.training.seq_len,
                                    local_batch_size=c.training.local_batch_size)
        finally:
            del os.environ['ZEPHON_MOUNT']
        assert c.dataloader.vocab_size == 2048 and dl.eod_token == EOS
        inp, labels = next(iter(dl))
        ids = inp['input']
        assert ids.shape == (8, 2048) and int(ids.max()) < 2048
        want = windows(tmp_path / 'ds')
        raw = np.frombuffer(zrun('batch', tmp_path / 'ds', '-o',
                                 'world_size=1,global_batch=8,seed=1,format=bin', '--rank', 0,
                                 '--step', 0), dtype='<u2').reshape(8, 2049).astype(np.int64)
        assert np.array_equal(ids.numpy(), raw[:, :-1])
        lab = raw[:, 1:].copy()
        lab[raw[:, :-1] == EOS] = IGNORE_INDEX
        assert np.array_equal(labels.numpy(), lab)
        assert want.shape[1] == 2049
    finally:
        p = subprocess.run(as_here(lines[3]), shell=True, env=env, timeout=60)
        if p.returncode:
            subprocess.run(['fusermount3', '-uz', str(tmp_path / 'z')])
    assert p.returncode == 0


def test_loaders_refuse_ids_the_model_has_no_embedding_for(tmp_path, mounts):
    from conftest import IDX
    from zephon.recipes import llama3_debugmodel_zephon
    from zephon.torch import ZephonLoader
    need(IDX)
    ds = tmp_path / 'gpt2'
    zrun('pack', '--format', 'tokens', '--seq-len', 2048, '--overlap', 1, '--eod-token', 50256,
         IDX, '-o', ds)
    assert info(ds)['max_token_id'] == 50256
    m = mounts(ds, world_size=1, global_batch=8)
    with pytest.raises(ValueError, match=r'holds token id 50256, but the model\'s vocabulary '
                       r'has 2048 ids'):
        ZephonLoader(m.path, dp_rank=0, dp_world_size=1, vocab_size=2048)
    assert ZephonLoader(m.path, dp_rank=0, dp_world_size=1, vocab_size=50257).max_token_id == 50256
    os.environ['ZEPHON_MOUNT'] = str(m.path)
    try:
        c = llama3_debugmodel_zephon()
    finally:
        del os.environ['ZEPHON_MOUNT']
    assert c.dataloader.vocab_size == 2048
    with pytest.raises(ValueError, match='50256'):
        c.dataloader.build(dp_world_size=1, dp_rank=0, tokenizer=None, seq_len=2048,
                           local_batch_size=8)


def test_verify_checks_the_document_index(tmp_path):
    need(CC)
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, '--seq-len', L, CC)
    zrun('verify', ds)
    idx = ds / 'documents.idx'
    data = bytearray(idx.read_bytes())
    assert len(data) == 32 + 32 * 10 and data[:8] == b'ZPHDOC\x00\x01'
    data[32 + 3 * 32] ^= 1                            # document 3's first token
    idx.chmod(0o644)
    idx.write_bytes(bytes(data))
    p = subprocess.run([ZEPHON, 'verify', str(ds)], stderr=subprocess.PIPE, text=True)
    assert p.returncode == 1 and 'documents.idx: document 3: first token' in p.stderr
    idx.write_bytes(bytes(data[:-7]))
    p = subprocess.run([ZEPHON, 'info', str(ds), '--sample', '0'], stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 1 and 'not a document index of this version, or truncated' in p.stderr


def test_state_names_the_documents_of_the_last_claim(tmp_path, mounts):
    need(CC)
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, '--seq-len', L, CC)
    m = mounts(ds, world_size=1, global_batch=4, shuffle='none')
    with open(m.path + '/rank/0/next', 'rb') as f:
        f.read()
    with open(m.path + '/rank/0/state') as f:
        last = json.load(f)['last']
    assert last['samples'] == [0, 1, 2, 3]
    want = []
    for s in last['samples']:
        docs = json.loads(zrun('info', ds, '--sample', s, '--json'))['documents']
        want.append([{'path': d['path'], 'record': d['record'], 'line': d['line']}
                     for d in docs])
    # JSONL: the record is a line, from 1, and says so; "record" stays for older readers
    assert last['documents'] == want and want[0] == [{'path': str(CC), 'record': 1, 'line': 1}]


def test_missing_input_and_a_format_of_tokens(tmp_path):
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, tmp_path / 'nope.jsonl',
             ok=False)
    assert 'nope.jsonl: no such file or folder' in p.stderr
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, '--format', 'tokens',
             tmp_path / 'nope.jsonl', ok=False)
    assert p.returncode == 2 and "--format 'tokens' with --tokenizer: use auto, jsonl" in p.stderr
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, tmp_path / 'nope.jsonl', ok=False)
    assert p.returncode == 2 and 'needs a window length; pass --seq-len L' in p.stderr
    p = pack(tmp_path / 'ds', '--text-field', 'x', '--seq-len', 2, tmp_path / 'nope.jsonl',
             ok=False)
    assert p.returncode == 2 and 'pass --tokenizer PATH' in p.stderr


# ---------------------------------------------------------------- issue 33: first hour

def test_records_are_named_lines_or_rows_in_info_and_state(tmp_path, mounts):
    """JSONL and text lines count lines from 1 (key "line"), Parquet and Arrow rows from 0
    (key "row"), a text file is one document (neither); in `zephon info --sample` (text
    and JSON) and in a mount's /rank/<r>/state, beside "record" for older readers."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({'text': ['first row', 'second row']}), tmp_path / 'a.parquet')
    (tmp_path / 'b.jsonl').write_text('{"text": "first line"}\n\n{"text": "third line"}\n')
    (tmp_path / 'c.txt').write_text('a text file')
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, '--seq-len', 2, tmp_path / 'a.parquet', tmp_path / 'b.jsonl',
         tmp_path / 'c.txt')
    named = {}
    for sample in range(info(ds)['samples']):
        for d in json.loads(zrun('info', ds, '--sample', sample, '--json'))['documents']:
            named[(pathlib.Path(d['path']).name, d['record'])] = \
                {k: d[k] for k in ('line', 'row') if k in d}
    assert named == {('a.parquet', 0): {'row': 0}, ('a.parquet', 1): {'row': 1},
                     ('b.jsonl', 1): {'line': 1}, ('b.jsonl', 3): {'line': 3},
                     ('c.txt', 0): {}}
    text = zrun('info', ds, '--sample', 0).decode()
    assert 'a.parquet row 0' in text, text
    m = mounts(ds, world_size=1, global_batch=info(ds)['samples'], shuffle='none')
    with open(m.path + '/rank/0/next', 'rb') as f:
        f.read()
    with open(m.path + '/rank/0/state') as f:
        docs = [d for w in json.load(f)['last']['documents'] for d in w]
    seen = {(pathlib.Path(d['path']).name, d['record']): {k: d[k] for k in ('line', 'row')
                                                           if k in d} for d in docs}
    assert seen == named


def test_a_split_other_than_a_save_to_disk_folders_own_is_refused(tmp_path):
    """A folder save_to_disk wrote for one split holds that split only: --split naming
    another is refused, naming the folder's split (state.json's _split); its own, or no
    --split, packs it."""
    import datasets
    (tmp_path / 'v.jsonl').write_text('{"text": "held out"}\n{"text": "also held out"}\n')
    d = datasets.load_dataset('json', data_files={'validation': str(tmp_path / 'v.jsonl')},
                              split='validation', cache_dir=str(tmp_path / 'cache'))
    d.save_to_disk(str(tmp_path / 'val'))
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, '--split', 'train',
             tmp_path / 'val', ok=False)
    assert ("a datasets save_to_disk folder of split 'validation' only (state.json), not of "
            "split 'train'") in p.stderr, p.stderr
    for args in (['--split', 'validation'], []):
        pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, *args, tmp_path / 'val',
             '--force')
        assert info(tmp_path / 'ds')['documents'] == 2
    # a Dataset saved without a split name: any --split is refused
    datasets.Dataset.from_dict({'text': ['x', 'y']}).save_to_disk(str(tmp_path / 'plain'))
    p = pack(tmp_path / 'ds2', '--tokenizer', TOK, '--seq-len', 2, '--split', 'validation',
             tmp_path / 'plain', ok=False)
    assert 'of one dataset without a split name (state.json)' in p.stderr, p.stderr


def test_the_pack_records_the_tokenizers_path(tmp_path):
    """Beside its name and sha256 (the fingerprint's), the path given to --tokenizer,
    absolute: zephon.recipes sets the model's hf_assets_path from it. Not part of the
    fingerprint: the same tokenizer elsewhere makes the same dataset."""
    need(CC)
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, '--seq-len', L, CC)
    tk = info(ds)['tokenizer']
    assert tk['path'] == str(TOK.resolve()) and tk['name'] == 'torchtitan-test'
    assert 'tokenizer at  %s (when packed)' % TOK.resolve() in zrun('info', ds).decode()
    moved = tmp_path / 'elsewhere'
    shutil.copytree(TOK, moved)
    pack(tmp_path / 'ds2', '--tokenizer', 'elsewhere', '--seq-len', L, CC, cwd=tmp_path)
    again = info(tmp_path / 'ds2')
    assert again['tokenizer']['path'] == str(moved)
    assert again['fingerprint'] == info(ds)['fingerprint']


def test_a_long_document_encoded_in_pieces_gives_the_whole_documents_ids(raw_tok):
    """Documents longer than PIECE_CHARS are encoded in pieces, cut where the tokenizer's
    ids do not change: after a line break, before a space; a cut that a special token's
    text or anything else would change is not taken. Here with pieces of 2,000 characters,
    on real text, one line of it (spaces only), special tokens' text near the cuts, CRLF
    and non-ASCII text: the ids are the whole document's, token for token."""
    need(SHAKESPEARE, CC)
    from zephon import pack_text
    spec = pack_text.load_tokenizer(str(TOK))
    assert spec.prefix == [] and spec.suffix == []    # BOS and EOS are the front end's
    shakespeare = SHAKESPEARE.read_text()[:200000]
    cc = '\n'.join(jsonl_texts(CC))[:200000]
    texts = {
        'lines': shakespeare,
        'one line': shakespeare.replace('\n', ' '),
        'specials': ''.join(shakespeare[i:i + 997] + '<|end_of_text|>'
                            for i in range(0, 100000, 997)),
        'crlf': shakespeare.replace('\n', '\r\n'),
        'cc': cc,
        'no cut at all': 'x' * 9000,
    }
    for name, text in texts.items():
        cuts = pack_text.piece_cuts(spec, text, size=2000)
        if name == 'no cut at all':
            assert cuts == []
        else:
            assert len(cuts) > len(text) // 4000, name
        bounds = [0, *cuts, len(text)]
        n = len(bounds) - 1
        _, ids = pack_text.encode_batch(spec, [text[a:b] for a, b in zip(bounds, bounds[1:])],
                                        [i == 0 for i in range(n)],
                                        [i == n - 1 for i in range(n)])
        _, whole = pack_text.encode_batch(spec, [text])
        assert np.array_equal(ids, whole), name
    # a cut inside a special token's text is refused by the check
    t = 'one\n<|end_of_text|>\ntwo'
    assert pack_text.cut_agrees(spec, t, 4) and not pack_text.cut_agrees(spec, t, 8)


def test_a_tokenizer_without_a_pre_tokenizer_is_never_cut(tmp_path):
    """Without a pre-tokenizer a document is one "word" to the model, whose ids no cut
    keeps for certain: such documents are encoded whole."""
    from tokenizers import Tokenizer, models
    from zephon import pack_text
    tok = Tokenizer(models.WordLevel({'a': 0, 'b': 1, '<eos>': 2, '[UNK]': 3},
                                     unk_token='[UNK]'))
    tok.add_special_tokens(['<eos>'])
    tok.save(str(tmp_path / 'tokenizer.json'))
    (tmp_path / 'tokenizer_config.json').write_text('{"eos_token": "<eos>"}')
    spec = pack_text.load_tokenizer(str(tmp_path))
    assert spec.prefix is None
    assert pack_text.piece_cuts(spec, 'a\nb ' * 100000, size=1000) == []


def test_the_front_ends_memory_does_not_grow_with_the_document(tmp_path):
    """One JSONL document of 8 MB (tinyshakespeare's text, repeated) with TorchTitan's
    test tokenizer: `tokenizers` needs ~200 bytes per character to encode a text at once
    (1.6 GB here); in pieces, the front end's peak resident memory (its ru_maxrss, as the
    kernel counts it) stays under 400 MiB, the document's text included."""
    need(SHAKESPEARE)
    text = SHAKESPEARE.read_text()
    doc = (text * (8_000_000 // len(text) + 1))[:8_000_000]
    src = tmp_path / 'big.jsonl'
    src.write_text(json.dumps({'text': doc}) + '\n' + json.dumps({'text': 'small'}) + '\n')
    wrapper = tmp_path / 'python'
    report = tmp_path / 'maxrss'
    wrapper.write_text('#!%s\nimport resource, subprocess, sys\n'
                       'rc = subprocess.call([sys.executable] + sys.argv[1:])\n'
                       'open(%r, "w").write(str(resource.getrusage('
                       'resource.RUSAGE_CHILDREN).ru_maxrss))\n'
                       'sys.exit(rc)\n' % (sys.executable, str(report)))
    wrapper.chmod(0o755)
    pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2048, src,
         env={'ZEPHON_PYTHON': str(wrapper)})
    peak_mib = int(report.read_text()) / 1024
    assert peak_mib < 400, '%.0f MiB' % peak_mib
    assert info(tmp_path / 'ds')['documents'] == 2


def fake_front_end(tmp_path, records):
    """An interpreter for ZEPHON_PYTHON that ignores its arguments and writes the stream
    of `records` (calls on pack_text.Writer after its header) to stdout."""
    script = tmp_path / 'fake-python'
    script.write_text(
        '#!%s\nimport sys\nsys.path[:0] = %r\nimport numpy as np\n'
        'from zephon.pack_text import Writer, Unit\n'
        'w = Writer(sys.stdout.buffer)\n'
        'w.header({"dtype": "uint16", "eod": 3, "vocab_size": 10, "tokenizer": "t", '
        '"tokenizer_sha256": "0" * 64})\n'
        'u = lambda a: np.asarray(a, dtype="<u4")\n'
        '%s\nsys.stdout.buffer.flush()\n' % (sys.executable, sys.path, records))
    script.chmod(0o755)
    return {'ZEPHON_PYTHON': str(script)}


def test_a_document_streamed_in_parts_is_one_document_and_an_unfinished_one_is_refused(
        tmp_path):
    """The front end's 'C' records (the first tokens of a long document) and the 'B' that
    ends it make one document of the index; a stream that ends, or starts another input,
    inside a document is refused and leaves nothing."""
    (tmp_path / 'x.txt').write_text('x')
    start = 'w.input(Unit("text", "x.txt", 1))\n'
    ok = fake_front_end(tmp_path, start + 'w.cont(u([1, 2, 4]))\nw.cont(u([5]))\n'
                        'w.batch(u([0, 7]).astype("<u8"), u([2, 3]), u([6, 3, 7, 8, 3]))\n'
                        'w.end()')
    pack(tmp_path / 'ds', '--tokenizer', 'unused', '--seq-len', 2, tmp_path / 'x.txt', env=ok)
    i = info(tmp_path / 'ds')
    assert (i['documents'], i['tokens']) == (2, 9)
    assert windows(tmp_path / 'ds').reshape(-1).tolist() == [1, 2, 4, 5, 6, 3, 7, 8]
    docs = json.loads(zrun('info', tmp_path / 'ds', '--sample', 2, '--json'))['documents']
    assert [(d['document'], d['tokens'], d['record']) for d in docs] == [(0, 6, 0)]
    for tail in ('w.end()', 'w.input(Unit("text", "x.txt", 1))\nw.end()'):
        bad = fake_front_end(tmp_path, start + 'w.cont(u([1, 2]))\n' + tail)
        p = pack(tmp_path / 'bad', '--tokenizer', 'unused', '--seq-len', 2,
                 tmp_path / 'x.txt', env=bad, ok=False)
        assert 'left a document of x.txt unfinished (broken stream)' in p.stderr, p.stderr


def test_the_packing_page_block_makes_a_venv_installs_and_packs(tmp_path):
    """docs/packing.md's "Raw text to tokens" block as written, in one shell, from a fresh venv:
    Debian's pip installs nothing outside one (PEP 668), so the block makes one and
    activates it, `pip install '.[tokenize]'` (the wheel tests/python/run built from this
    tree, ZEPHON_WHEEL, for `.`: pip would build the same one) and `zephon pack` with the
    venv's python3. HOME is the test's directory (the block's ~/venv-zephon); TOKENIZER, INPUT...
    and DATASET are ../shared/data's tokenizer and Common Crawl JSONL and a dataset there."""
    need(CC)
    lines = doc_block('docs/packing.md', 'venv-pack').rstrip('\n').split('\n')
    assert lines[0].startswith('python3 -m venv ~/venv-zephon && . ~/venv-zephon/bin/activate')
    assert lines[1].startswith("pip install '.[tokenize]'")
    wheel = os.environ.get('ZEPHON_WHEEL')
    if not wheel:
        pytest.skip('ZEPHON_WHEEL is not set: tests/python/run sets it to the wheel it built')
    lines[1] = lines[1].replace("'.[tokenize]'", "'%s[tokenize]'" % wheel)
    assert lines[2] == 'zephon pack --tokenizer TOKENIZER --seq-len 2048 --overlap 1 INPUT... -o DATASET'
    lines[2] = (lines[2].replace('TOKENIZER', str(TOK)).replace('INPUT...', str(CC))
                .replace('DATASET', str(tmp_path / 'ds')))
    env = {k: v for k, v in os.environ.items()
           if k not in ('VIRTUAL_ENV', 'PYTHONPATH', 'ZEPHON_PYTHON', 'PYTHONHOME')}
    env.update(HOME=str(tmp_path), PIP_CACHE_DIR=os.path.expanduser('~/.cache/pip'),
               PATH=os.pathsep.join([os.path.dirname(ZEPHON), '/usr/local/bin', '/usr/bin',
                                     '/bin']))
    p = subprocess.run(['bash', '-ec', '\n'.join(lines)], cwd=tmp_path, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    assert p.returncode == 0, p.stdout[-4000:]
    assert (tmp_path / 'venv-zephon' / 'bin' / 'activate').is_file()
    assert info(tmp_path / 'ds')['documents'] == len(jsonl_texts(CC))


def test_a_document_in_parts_goes_into_rows_whole_or_is_dropped(tmp_path):
    """With --whole-documents the parts of a long document ('C' records) are kept until its
    end and the document goes into a row whole, or, once longer than a row takes, is
    dropped and counted, as any such document (its ids count nowhere)."""
    (tmp_path / 'x.txt').write_text('x')
    start = 'w.input(Unit("text", "x.txt", 1))\n'
    end = 'w.batch(u([0, 7]).astype("<u8"), u([2, 3]), u([6, 3, 7, 8, 3]))\nw.end()'
    for name, part, docs, dropped in (('fits', 'w.cont(u([1, 2, 4]))\n', 2, 0),
                                      ('too long', 'w.cont(u([9] * 5))\nw.cont(u([9] * 5))\n',
                                       1, 1)):
        ds = tmp_path / name.replace(' ', '-')
        p = pack(ds, '--tokenizer', 'unused', '--whole-documents', '--seq-len', 8,
                 tmp_path / 'x.txt', env=fake_front_end(tmp_path, start + part + end))
        i = info(ds)
        assert (i['documents'], i.get('documents_dropped', 0), i['max_token_id']) == \
            (docs, dropped, 8), (name, i, p.stderr)
        if dropped:
            assert 'x.txt: a document of 12 tokens makes 11 inputs' in p.stderr, p.stderr


# ---------------------------------------------------------------- long JSONL lines, in parts

PIECES_ALPHABET = ['a', 'b', 'word', ' ', ' ', '  ', '\n', '\n\n', '\r\n', '\t', 'é', 'ü', '中',
                   '😀', '"', '\\', '/', '\x01', '<|end_of_text|>', 'x' * 40]


def random_text(rng, n):
    """n draws of PIECES_ALPHABET: spaces, line breaks, non-ASCII and astral characters,
    characters JSON escapes, a special token's text, runs with nowhere to cut."""
    return ''.join(rng.choice(PIECES_ALPHABET) for _ in range(n))


def test_a_text_cut_as_it_comes_is_cut_where_the_whole_text_is():
    """stream_pieces, fed a text in chunks of any size, gives the pieces that piece_cuts
    gives for the whole text, so the ids are the whole document's: random texts, piece
    sizes and chunkings."""
    import random
    from zephon import pack_text
    spec = pack_text.load_tokenizer(str(TOK))
    rng = random.Random(33)
    cut_some = 0
    for _ in range(200):
        text = random_text(rng, rng.randrange(0, 2500))
        size = rng.choice([64, 100, 300, 1000])
        bounds = [0, *pack_text.piece_cuts(spec, text, size), len(text)]
        want = [text[a:b] for a, b in zip(bounds, bounds[1:])]
        cut_some += len(want) > 2
        chunks, i = [], 0
        while i < len(text):
            k = rng.choice([1, 7, 64, 300, 5000])
            chunks.append(text[i:i + k])
            i += k
        got = list(pack_text.stream_pieces(spec, chunks, size))
        assert got == want
        n = len(got)
        _, ids = pack_text.encode_batch(spec, got, [i == 0 for i in range(n)],
                                        [i == n - 1 for i in range(n)])
        _, whole = pack_text.encode_batch(spec, [text])
        assert np.array_equal(ids, whole)
    assert cut_some > 100


def test_a_long_lines_text_decoded_in_parts_is_what_json_loads_gives(monkeypatch):
    """_long_record finds the text of a line's last top-level 'text' key and decodes it in
    parts of DECODE_BYTES cut at every offset of escapes (\\n, \\", \\\\, \\u00e9), surrogate
    pairs (\\ud83d\\ude00) and UTF-8 sequences of 2, 3 and 4 bytes, quotes searched for in
    windows of a few bytes, other strings taken out of the record checked or not: the
    parts join to json.loads' text. Anything else (no such key, a value that is not a
    string, bad JSON anywhere) is left to json.loads (None)."""
    import random
    from zephon import pack_text
    rng = random.Random(34)
    for size in range(32, 48):
        monkeypatch.setattr(pack_text, 'DECODE_BYTES', size)
        monkeypatch.setattr(pack_text, 'QUOTE_WINDOW', size - 29)   # quotes found 3-18 a go
        monkeypatch.setattr(pack_text, 'LONG_STRING_BYTES', (0, 4, 4096)[size % 3])
        for _ in range(40):
            text = random_text(rng, rng.randrange(0, 120))
            rec = {'id': 1, 'meta': {'text': 'nested'}, 'text': 'first', 'tags': ['a', '"'],
                   'text ': 1}
            rec['text'] = text              # the last 'text' key, after the others
            for ascii_ in (True, False):
                line = json.dumps(rec, ensure_ascii=ascii_).encode() + b'\n'
                got = pack_text._long_record(line, 'text', 'w')
                assert isinstance(got, pack_text.TextChunks), (got, line)
                parts = list(got)
                assert ''.join(parts) == text and got.chars == len(text)
                assert len(parts) >= len(line) // size // 2
    monkeypatch.setattr(pack_text, 'DECODE_BYTES', 32)
    dup = b'{"text": "' + b'a' * 100 + b'", "text": "last"}'
    assert ''.join(pack_text._long_record(dup, 'text', 'w')) == 'last'
    for long_string in (4, 4096):
        monkeypatch.setattr(pack_text, 'LONG_STRING_BYTES', long_string)
        for line in (b'{"text": 5, "x": "' + b'a' * 100 + b'"}',
                     b'{"text": "' + b'a' * 100 + b'", "text": null}',
                     b'{"other": "' + b'a' * 100 + b'"}',
                     b'{"o": {"text": "' + b'a' * 100 + b'"}}',
                     b'["text", "' + b'a' * 100 + b'"]',
                     b'{"text": "' + b'a' * 100 + b'", "x": }',
                     b'{"text": "' + b'a' * 100 + b'\\q"}',
                     b'{"text": "' + b'a' * 100,
                     b'{"text": "ok", "x": "' + b'a' * 100 + b'\xff"}',
                     b'{"text": "' + b'a' * 100 + b'", \\"x": 1}'):
            assert pack_text._long_record(line, 'text', 'w') is None, line


def parts_python(tmp_path, stream_bytes, decode_bytes=32, piece_chars=None):
    """An interpreter for ZEPHON_PYTHON: the front end with STREAM_BYTES, DECODE_BYTES (and
    PIECE_CHARS) set, so that short lines take the path of long ones."""
    script = tmp_path / ('python-%d' % stream_bytes)
    sets = 'p.STREAM_BYTES = %d\np.DECODE_BYTES = %d\n' % (stream_bytes, decode_bytes)
    if piece_chars:
        sets += 'p.PIECE_CHARS = %d\n' % piece_chars
    script.write_text('#!%s\nimport sys\nsys.path[:0] = %r\nfrom zephon import pack_text as p\n'
                      '%ssys.exit(p.main(sys.argv[3:]))\n' % (sys.executable, sys.path, sets))
    script.chmod(0o755)
    return {'ZEPHON_PYTHON': str(script)}


def test_long_lines_in_parts_pack_the_same_dataset_as_lines_parsed_whole(tmp_path, titan):
    """The same JSONL packed with every line taken as a long one (its text decoded in parts
    of 32 bytes, cut into pieces as it comes) and with every line parsed whole: the same
    shards and document index, byte for byte, the same fingerprint, TorchTitan's ids; pieces
    of 1,000 characters, so that documents run over several pieces and batches."""
    need(CC, SHAKESPEARE)
    import random
    rng = random.Random(35)
    texts = jsonl_texts(CC)[:20] + [SHAKESPEARE.read_text()[:30000]]
    texts += [random_text(rng, rng.randrange(0, 3000)) for _ in range(20)]
    src = tmp_path / 'a.jsonl'
    with open(src, 'w') as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({'id': i, 'text': t}, ensure_ascii=i % 2 == 0) + '\n')
    dss = []
    for stream in (1 << 40, 16):
        ds = tmp_path / ('ds-%d' % stream)
        pack(ds, '--tokenizer', TOK, '--seq-len', L, src,
             env=parts_python(tmp_path, stream, piece_chars=1000))
        dss.append(ds)
    assert info(dss[0])['fingerprint'] == info(dss[1])['fingerprint']
    names = sorted(f.name for f in dss[0].iterdir() if f.name.startswith(('shard', 'documents')))
    assert names
    for name in names:
        assert (dss[0] / name).read_bytes() == (dss[1] / name).read_bytes(), name
    check_same(dss[1], titan, texts)


@pytest.mark.parametrize('line,why', [
    (b'{"text": "%s", "n": }', "a.jsonl:2: invalid JSON: Expecting value: line 1 column "),
    (b'{"text": "%s\\ud800 late"}', "a.jsonl:2: field 'text' holds a lone surrogate (\\ud800 "
                                    "at character 3000)"),
    (b'{"text": "%s\\ud83d\\ude00 \\udc00"}', "a.jsonl:2: field 'text' holds a lone "
                                              "surrogate (\\udc00 at character 3002)"),
    (b'{"text": "%s\xe9t\xc3\xa9"}', 'a.jsonl:2: invalid UTF-8 at byte 3010 of the line (0xe9)'),
    (b'{"text": "%s \\q"}', "a.jsonl:2: invalid JSON: Invalid \\escape: line 1 column 3012"),
    (b'{"text": "%s", "text": 7}', "a.jsonl:2: field 'text' is int, not a string"),
])
def test_a_bad_long_record_is_refused_as_any_and_skipped_whole(tmp_path, titan, line,
                                                               why):
    """A long record whose fault lies after the first parts of its text (bad JSON after
    it, a lone surrogate or invalid UTF-8 near its end, a bad escape, a later 'text' that
    is not a string): the message of a record parsed whole, and --skip-bad skips all of
    it (no part of its text reaches the dataset)."""
    src = tmp_path / 'a.jsonl'
    src.write_bytes(b'{"text": "good"}\n' + line.replace(b'%s', b'ab ' * 1000) +
                    b'\n{"text": "also good"}\n')
    errs = []
    for stream in (1 << 40, 64):
        env = parts_python(tmp_path, stream, piece_chars=200)
        p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, src, ok=False, env=env)
        assert why in p.stderr, p.stderr
        errs.append(p.stderr)
        p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--seq-len', 2, '--skip-bad', src, env=env)
        assert why in p.stderr and 'skipped 1 record' in p.stdout
        i = info(tmp_path / 'ds')
        assert (i['documents'], i['skipped']) == (2, 1)
        assert i['tokens'] == len(titan_stream(titan, ['good', 'also good']))
        shutil.rmtree(tmp_path / 'ds')
    assert errs[0] == errs[1]
