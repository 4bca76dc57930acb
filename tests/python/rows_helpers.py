"""Helpers of the tests of datasets of rows (`zephon pack --whole-documents`, `--chat`):
real chat data, packing, and reading a dataset's rows back with the documents each holds.

Chat data: question/answer pairs made of WordNet 3.0 (Debian's wordnet-base,
/usr/share/wordnet, installed by mountscripts/deps): "What does the noun 'X' mean?" and
its gloss, from every synset line of data.noun, .verb, .adj and .adv (the licence header
lines, which start with two spaces, skipped), taken every k-th to make n.

Reading back: `zephon batch` (the mount's code) gives every row in id order, and the
row index and document index (rows.idx, documents.idx; formats in
core/dataset/rowindex.h and docindex.h) say which document lies where, so each
document's inputs, labels and positions can be cut out of its row.
"""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import sanitizers
from zexe import ZEPHON, zrun

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(os.environ.get('ZEPHON_DATA') or ROOT.parent / 'shared' / 'data')
TOK = DATA / 'tokenizer' / 'torchtitan-test'   # TorchTitan's test tokenizer: has a template
WORDNET = pathlib.Path('/usr/share/wordnet')
IGNORE = -100


def need_data():
    """Skip the test where the shared tokenizer or WordNet is absent."""
    if not (TOK / 'tokenizer.json').is_file():
        pytest.skip('shared data %s is absent' % TOK)
    if not (WORDNET / 'data.noun').is_file():
        pytest.skip('%s is absent (apt install wordnet-base: mountscripts/deps)' % WORDNET)


def wordnet_qa(n):
    """n question/answer records from WordNet's synsets (see the module)."""
    out = []
    for part in ('noun', 'verb', 'adj', 'adv'):
        with open(WORDNET / ('data.' + part), encoding='utf-8') as f:
            for line in f:
                if line.startswith('  ') or '|' not in line:
                    continue
                word = line.split(' ')[4].replace('_', ' ')
                gloss = line.split('|', 1)[1].strip()
                out.append({'question': "What does the %s '%s' mean?" % (part, word),
                            'answer': gloss})
    step = max(1, len(out) // n)
    return out[::step][:n]


def write_jsonl(path, records):
    with open(path, 'w', encoding='utf-8') as f:
        for r in records:
            f.write(json.dumps(r) + '\n')
    return path


def pack(out, *args, ok=True, env=None):
    """zephon pack ARGS -o out (the front end in this interpreter); the CompletedProcess
    (text). A failed pack must leave nothing behind."""
    e = dict(os.environ, ZEPHON_PYTHON=os.environ.get('ZEPHON_PYTHON') or
             __import__('sys').executable, **(env or {}))
    p = subprocess.run([ZEPHON, 'pack', *map(str, args), '-o', str(out)], text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, env=e)
    sanitizers.scan(p.stderr, 'zephon pack %s' % (args,))
    if ok is not None:
        assert (p.returncode == 0) == ok, (p.returncode, p.stdout, p.stderr)
    if not ok:
        assert not pathlib.Path(out).exists()
        assert not [f for f in pathlib.Path(out).parent.iterdir() if '.zephon-tmp' in f.name]
    return p


def info(ds):
    return json.loads(zrun('info', ds, '--json'))


def rows(ds):
    """Every row of the dataset in id order: [samples, 3, row_len] int32 (inputs, labels,
    positions)."""
    i = info(ds)
    raw = zrun('batch', ds, '-o', 'world_size=1,global_batch=%d,shuffle=none,format=bin'
               % i['samples'], '--rank', 0, '--step', 0)
    return np.frombuffer(raw, dtype='<i4').reshape(i['samples'], 3, i['row_len'])


def row_index(ds):
    """(offsets [rows + 1], entries [document, position, length]) of rows.idx."""
    raw = (pathlib.Path(ds) / 'rows.idx').read_bytes()
    head = np.frombuffer(raw[:48], dtype='<u8')
    assert raw[:8] == b'ZPHROWS\x01'
    n_rows, n_entries = int(head[2]), int(head[3])
    entries = np.frombuffer(raw[48:48 + 16 * n_entries],
                            dtype=[('document', '<u8'), ('position', '<u4'), ('length', '<u4')])
    offsets = np.frombuffer(raw[48 + 16 * n_entries:], dtype='<u8')
    assert len(offsets) == n_rows + 1
    return offsets, entries


def doc_index(ds):
    """documents.idx entries: first_token, tokens, record, source."""
    raw = (pathlib.Path(ds) / 'documents.idx').read_bytes()
    return np.frombuffer(raw[32:], dtype=[('first_token', '<u8'), ('tokens', '<u8'),
                                          ('record', '<u8'), ('source', '<u4'),
                                          ('reserved', '<u4')])


def documents(ds):
    """{(source, record): (inputs, labels, positions, row)} of every document the dataset
    holds, cut out of its row."""
    r = rows(ds)
    offsets, entries = row_index(ds)
    docs = doc_index(ds)
    out = {}
    for row in range(len(offsets) - 1):
        for k in range(int(offsets[row]), int(offsets[row + 1])):
            e = entries[k]
            d = docs[int(e['document'])]
            p, n = int(e['position']), int(e['length'])
            key = (int(d['source']), int(d['record']))
            assert key not in out
            out[key] = (r[row, 0, p:p + n], r[row, 1, p:p + n], r[row, 2, p:p + n], row)
    return out


def row_documents(ds):
    """For each row, the (source, record) of its documents in position order."""
    offsets, entries = row_index(ds)
    docs = doc_index(ds)
    return [[(int(docs[int(e['document'])]['source']), int(docs[int(e['document'])]['record']))
             for e in entries[int(offsets[r]):int(offsets[r + 1])]]
            for r in range(len(offsets) - 1)]


def tokenizer_copy(tmp, template=None, config_template=True):
    """A copy of the test tokenizer in tmp/tok (never in the repository): with `template`
    as its chat_template.jinja when given; without the config's chat_template when
    config_template is False."""
    d = pathlib.Path(tmp) / 'tok'
    d.mkdir(parents=True, exist_ok=True)
    (d / 'tokenizer.json').write_bytes((TOK / 'tokenizer.json').read_bytes())
    cfg = json.loads((TOK / 'tokenizer_config.json').read_text())
    if not config_template:
        cfg.pop('chat_template', None)
    (d / 'tokenizer_config.json').write_text(json.dumps(cfg))
    if template is not None:
        (d / 'chat_template.jinja').write_text(template)
    return d


def trained_tokenizer(tmp, template, texts, vocab=600):
    """A byte-level BPE tokenizer trained on `texts` (tokenizers' BpeTrainer: real merges,
    a space joined to the word after it), with <|begin_of_text|> and <|end_of_text|> as
    BOS and EOS and `template` as its tokenizer_config.json's chat_template, in tmp/bpe."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    d = pathlib.Path(tmp) / 'bpe'
    d.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=['<|begin_of_text|>',
                                                                     '<|end_of_text|>'],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.save(str(d / 'tokenizer.json'))
    (d / 'tokenizer_config.json').write_text(json.dumps({
        'bos_token': '<|begin_of_text|>', 'eos_token': '<|end_of_text|>',
        'chat_template': template}))
    return d
