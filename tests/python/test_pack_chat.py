"""Fine-tuning data (docs/fine-tuning.md): `zephon pack --tokenizer --chat` and
`--whole-documents`, on real text (WordNet's glosses as question/answer pairs, Common
Crawl documents of ../shared/data), what the dataset holds and shows; TorchTitan's own
code is compared in test_torchtitan_chat.py.

- every input kind --tokenizer reads gives the same rows: JSONL, zstd and gzip JSONL,
  Parquet (a list<struct<role, content>> column, or two string columns), a datasets
  save_to_disk folder, a DatasetDict folder, a Hub folder of Parquet shards;
- multi-turn conversations with a system turn: every assistant turn trained (its content
  and its end-of-turn marker, and the last one's EOS), everything else masked;
- plain documents as whole rows: TorchTitan's pretraining tokens (BOS + ids + EOS), every
  label kept, none across a document; the ones longer than the context dropped, counted;
- the same bytes for any --threads; the row plan packs densely;
- what `zephon info --sample`, /rank/<r>/state, `cat rank/0/next`, numpy, format=bin and a
  DataLoader over step/<t> files get; `zephon verify` checks the rows and their index;
- each bad input refused naming its file and line or row, nothing left behind, or skipped
  and counted with --skip-bad; a tokenizer without a chat template; bad options.
"""
import gzip
import io
import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
import torch

import zephon
from conftest import DATA, zrun
from rows_helpers import (IGNORE, TOK, documents, info, need_data, pack, row_index, rows,
                          tokenizer_copy, wordnet_qa, write_jsonl)

CC = DATA / 'jsonl' / 'cc_en_head-0091.jsonl'
QA = ['--chat', '--prompt-field', 'question', '--response-field', 'answer']


@pytest.fixture(scope='module')
def qa(tmp_path_factory):
    need_data()
    d = tmp_path_factory.mktemp('qa')
    recs = wordnet_qa(400)
    return recs, write_jsonl(d / 'qa.jsonl', recs)


@pytest.fixture(scope='module')
def titan():
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    return HuggingFaceTokenizer(tokenizer_path=str(TOK))


def test_every_input_kind_gives_the_same_rows(qa, tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    recs, src = qa
    ref = pack(tmp_path / 'ref', '--tokenizer', TOK, *QA, '--seq-len', 256, src)
    fp = info(tmp_path / 'ref')['fingerprint']
    i = info(tmp_path / 'ref')
    assert i['documents'] + i['documents_dropped'] == 400 and i['documents_dropped'] < 10
    msgs = [[{'role': 'user', 'content': r['question']},
             {'role': 'assistant', 'content': r['answer']}] for r in recs]
    # the same conversations as a messages field, zstd- and gzip-compressed
    plain = write_jsonl(tmp_path / 'm.jsonl', [{'messages': m} for m in msgs])
    subprocess.run(['zstd', '-q', str(plain), '-o', str(tmp_path / 'm.jsonl.zst')], check=True)
    (tmp_path / 'm.json.gz').write_bytes(gzip.compress(plain.read_bytes()))
    inputs = {'jsonl': ([plain], ['--chat']),
              'zst': ([tmp_path / 'm.jsonl.zst'], ['--chat']),
              'gz': ([tmp_path / 'm.json.gz'], ['--chat'])}
    pq.write_table(pa.table({'messages': msgs}), tmp_path / 'm.parquet', row_group_size=64)
    pq.write_table(pa.table({'q': [r['question'] for r in recs],
                             'a': [r['answer'] for r in recs]}), tmp_path / 'qa.parquet')
    inputs['parquet messages'] = ([tmp_path / 'm.parquet'], ['--chat'])
    inputs['parquet pairs'] = ([tmp_path / 'qa.parquet'],
                               ['--chat', '--prompt-field', 'q', '--response-field', 'a'])
    d = datasets.Dataset.from_dict({'conversation': msgs})
    d.save_to_disk(str(tmp_path / 'saved'), num_shards=3)
    datasets.DatasetDict({'train': d, 'test': d.select(range(3))}).save_to_disk(
        str(tmp_path / 'dict'))
    hub = tmp_path / 'hub' / 'data'
    hub.mkdir(parents=True)
    pq.write_table(pa.table({'messages': msgs[:150]}), hub / 'train-00000-of-00002.parquet')
    pq.write_table(pa.table({'messages': msgs[150:]}), hub / 'train-00001-of-00002.parquet')
    pq.write_table(pa.table({'messages': msgs[:5]}), hub / 'test-00000-of-00001.parquet')
    field = ['--chat', '--messages-field', 'conversation']
    inputs['save_to_disk'] = ([tmp_path / 'saved'], field)
    inputs['DatasetDict'] = ([tmp_path / 'dict'], field)
    inputs['hub folder'] = ([tmp_path / 'hub'], ['--chat'])
    for name, (paths, args) in inputs.items():
        out = tmp_path / name.replace(' ', '_')
        pack(out, '--tokenizer', TOK, *args, '--seq-len', 256, *paths)
        assert info(out)['fingerprint'] == fp, name
    # lineage: rows of the Parquet name its rows (from 0), of JSONL its lines (from 1)
    assert (0, 0) in documents(tmp_path / 'parquet_messages')
    assert (0, 1) in documents(tmp_path / 'jsonl')


# a template with special tokens around each turn: the tokens of a turn's content are the
# same inside the conversation as alone (the test tokenizer has no merges)
TURNS = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_multi_turn_conversations_train_every_assistant_turn(tmp_path, titan):
    need_data()
    glosses = [r['answer'] for r in wordnet_qa(60)]
    convs = []
    for k in range(20):
        g = glosses[3 * k:3 * k + 3]
        c = [{'role': 'system', 'content': 'You explain words.'}] if k % 2 else []
        for j, x in enumerate(g[:1 + k % 3]):
            c += [{'role': 'user', 'content': 'Define word %d.' % j},
                  {'role': 'assistant', 'content': x}]
        convs.append({'messages': c})
    src = write_jsonl(tmp_path / 'c.jsonl', convs)
    tok = tokenizer_copy(tmp_path, TURNS)
    pack(tmp_path / 'ds', '--tokenizer', tok, '--chat', '--seq-len', 512, src)
    ours = documents(tmp_path / 'ds')
    end, eos = titan.encode('<|im_end|>', add_bos=False, add_eos=False), titan.eos_id
    for line, conv in enumerate(convs, 1):
        inputs, labels, positions, _ = ours[(0, line)]
        tokens = np.append(inputs, labels[-1])          # the document: inputs, then its last
        trained = labels != IGNORE
        # the spans of trained labels, each the tokens of one assistant turn
        spans, k = [], 0
        while k < len(trained):
            if trained[k]:
                j = k
                while j < len(trained) and trained[j]:
                    j += 1
                spans.append(labels[k:j].tolist())
                k = j
            else:
                k += 1
        answers = [m['content'] for m in conv['messages'] if m['role'] == 'assistant']
        want = [titan.encode(a, add_bos=False, add_eos=False) + end for a in answers]
        want[-1] = want[-1] + [eos]
        assert spans == want, line
        # everything else (system, user turns, markers) is masked, and it is all there
        whole = tokenizer_render(titan, conv['messages'])
        assert tokens.tolist() == whole, line
        assert np.array_equal(positions, np.arange(len(inputs)))


def tokenizer_render(titan, msgs):
    """The document TorchTitan's rules make of msgs with TURNS: BOS, the rendered text's
    tokens, EOS."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    text = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
        TURNS).render(messages=msgs).rstrip('\n')
    return titan.encode(text, add_bos=True, add_eos=False) + [titan.eos_id]


def test_plain_documents_as_whole_rows(tmp_path, titan):
    need_data()
    if not CC.is_file():
        pytest.skip('shared data %s is absent' % CC)
    lines = tmp_path / 'glosses.txt'
    lines.write_text(''.join(r['answer'] + '\n' for r in wordnet_qa(300)))
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--whole-documents', '--seq-len', 1024,
             '--format', 'lines', lines)
    p2 = pack(tmp_path / 'cc', '--tokenizer', TOK, '--whole-documents', '--seq-len', 4096,
              '--max-context-length', 3000, CC)
    texts = lines.read_text().splitlines()
    ours = documents(tmp_path / 'ds')
    assert len(ours) == len(texts) and 'dropped' in p.stdout
    for line, text in enumerate(texts, 1):
        doc = titan.encode(text, add_bos=True, add_eos=True)   # TorchTitan's pretraining call
        inputs, labels, positions, _ = ours[(0, line)]
        assert inputs.tolist() == doc[:-1] and labels.tolist() == doc[1:], line
        assert np.array_equal(positions, np.arange(len(doc) - 1))
    # Common Crawl: the documents longer than 3000 inputs are dropped, named and counted
    cc = [json.loads(x)['text'] for x in CC.read_text().splitlines()]
    long = [n for n, t in enumerate(cc, 1) if len(titan.encode(t, add_bos=True,
                                                               add_eos=True)) - 1 > 3000]
    assert long and len(long) < len(cc)
    i = info(tmp_path / 'cc')
    assert i['documents_dropped'] == len(long) and i['documents'] == len(cc) - len(long)
    assert '%s:%d: a document of' % (CC, long[0]) in p2.stderr
    assert i['chat'] is None and i['layout'] == 'rows' and i['max_context_length'] == 3000
    assert set(documents(tmp_path / 'cc')) == {(0, n) for n in range(1, len(cc) + 1)
                                               if n not in long}
    assert zrun('verify', tmp_path / 'cc')


def test_the_same_bytes_for_any_threads_and_a_dense_plan(qa, tmp_path):
    recs, src = qa
    for t in (1, 2, 3):
        pack(tmp_path / ('t%d' % t), '--tokenizer', TOK, *QA, '--seq-len', 256, '--threads',
             t, src)
    files = sorted(f.name for f in (tmp_path / 't1').iterdir() if f.name != 'catalog.sqlite')
    assert 'rows.idx' in files and 'documents.idx' in files
    for t in (2, 3):
        assert info(tmp_path / ('t%d' % t))['fingerprint'] == info(tmp_path / 't1')['fingerprint']
        for f in files:
            assert (tmp_path / ('t%d' % t) / f).read_bytes() == (tmp_path / 't1' / f).read_bytes()
    # the plan: every document once, rows hold whole documents, padding only at the ends
    i = info(tmp_path / 't1')
    r = rows(tmp_path / 't1')
    offsets, entries = row_index(tmp_path / 't1')
    assert sorted(entries['document'].tolist()) == list(range(i['documents']))
    used = sum(int(e['length']) for e in entries)
    assert i['padding'] == i['samples'] * 256 - used
    assert i['padding_fraction'] < 0.05
    assert (r[:, 0][r[:, 1] == IGNORE] >= 0).all()
    assert zrun('verify', tmp_path / 't1')


def test_info_state_cat_numpy_and_a_legacy_reader(qa, tmp_path):
    recs, src = qa
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, *QA, '--seq-len', 256, src)
    r = rows(ds)
    s = json.loads(zrun('info', ds, '--sample', 3, '--json'))
    offsets, entries = row_index(ds)
    assert len(s['documents']) == offsets[4] - offsets[3]
    for d in s['documents']:
        lab = r[3, 1, d['position']:d['position'] + d['length']]
        assert d['labels'] == int((lab != IGNORE).sum())
        # one span: the answer, from the end of the prompt to the document's end
        assert d['trained'] == [[d['position'] + d['length'] - d['labels'],
                                 d['position'] + d['length']]]
        assert d['path'] == str(src) and d['format'] == 'jsonl' and d['record'] >= 1
    text = zrun('info', ds, '--sample', 3).decode()
    assert 'sample 3: a row of 256 positions' in text and 'labels trained' in text
    table = zrun('info', ds).decode()
    assert 'layout        rows of 256 positions' in table and 'chat          prompt-response' in table
    with zephon.mount(ds, tmp_path / 'z', world_size=2, global_batch=4, seed=3,
                      journal=tmp_path / 'j.sqlite'):
        st = json.loads((tmp_path / 'z' / 'status').read_text())
        assert (st['layout'], st['row_len'], st['window'], st['sample_tokens']) == \
            ('rows', 256, 768, 256)
        with open(tmp_path / 'z' / 'rank' / '0' / 'next', 'rb') as f:
            raw = f.read()                           # what `cat rank/0/next` gets: an npy
        a = np.load(io.BytesIO(raw))
        assert a.shape == (2, 3, 256) and a.dtype == np.dtype('<i4')
        state = json.loads((tmp_path / 'z' / 'rank' / '0' / 'state').read_text())
        ids = state['last']['samples']
        assert np.array_equal(a, r[ids])
        for row, docs in zip(ids, state['last']['documents']):
            for d in docs:
                lab = r[row, 1, d['position']:d['position'] + d['length']]
                assert d['labels'] == int((lab != IGNORE).sum()) and len(d['trained']) == 1
        # a legacy reader: a DataLoader over the pure step files, and format=bin via numpy
        loader = torch.utils.data.DataLoader(
            [str(tmp_path / 'z' / 'rank' / '1' / 'step' / str(t)) for t in range(3)],
            batch_size=None, collate_fn=lambda p: torch.from_numpy(np.load(p)))
        steps = list(loader)
        assert steps[0].shape == (2, 3, 256)
    ref = zrun('batch', ds, '-o', 'world_size=2,global_batch=4,seed=3,format=bin', '--rank', 1,
               '--step', 2)
    assert np.array_equal(np.frombuffer(ref, '<i4').reshape(2, 3, 256), steps[2].numpy())


def test_verify_finds_a_row_index_that_does_not_match(qa, tmp_path):
    recs, src = qa
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, *QA, '--seq-len', 256, src)
    idx = ds / 'rows.idx'
    raw = bytearray(idx.read_bytes())
    # the first row's first entry claims one position more than it holds
    e = np.frombuffer(raw, dtype='<u4', count=2, offset=48 + 8)
    raw[48 + 12:48 + 16] = int(e[1] + 1).to_bytes(4, 'little')
    os.chmod(idx, 0o644)
    idx.write_bytes(bytes(raw))
    p = subprocess.run([os.environ['ZEPHON'], 'verify', str(ds)], capture_output=True, text=True)
    assert p.returncode == 1
    assert 'rows.idx: row 0' in p.stderr or 'row 0 (sample 0)' in p.stderr, p.stderr


BAD_RECORDS = [
    ({'text': 'no messages here'}, "no messages: record without a 'messages' field"),
    ({'messages': None}, 'no messages (null'),
    ({'messages': []}, 'no messages (an empty list'),
    ({'messages': ['hi']}, 'message 0 is not an object with a role and a content'),
    ({'messages': [{'role': 'assistant', 'content': 'a'}, {'role': 'user', 'content': 'q'}]},
     "message 0 is assistant's, but system or user comes here"),
    ({'messages': [{'role': 'user', 'content': 'q'}, {'role': 'user', 'content': 'q'},
                   {'role': 'assistant', 'content': 'a'}]},
     "message 1 is user's, but assistant comes here"),
    ({'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': 'a'},
                   {'role': 'system', 'content': 's'}, {'role': 'user', 'content': 'q'},
                   {'role': 'assistant', 'content': 'a'}]},
     "message 2 is system's, but user comes here"),
    ({'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': 'a'},
                   {'role': 'user', 'content': 'q'}]},
     'the conversation ends with a user message'),
    ({'messages': [{'role': 'tool', 'content': 'q'}]}, "message 0 has role 'tool'"),
    ({'messages': [{'role': 'user', 'content': None}, {'role': 'assistant', 'content': 'a'}]},
     'message 0 (user) has content that is null, not a string'),
    ({'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': 7}]},
     'message 1 (assistant) has content that is int, not a string'),
    ({'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'q'}]},
                   {'role': 'assistant', 'content': 'a'}]},
     'message 0 (user) has content that is list, not a string'),
    ({'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': ''}]},
     'message 1 is an empty response'),
    ({'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': ' \n'}]},
     'message 1 is an empty response'),
]


@pytest.mark.parametrize('record,message', BAD_RECORDS, ids=[m for _, m in BAD_RECORDS])
def test_a_bad_record_is_refused_naming_its_line(qa, tmp_path, record, message):
    recs, _ = qa
    good = [{'messages': [{'role': 'user', 'content': r['question']},
                          {'role': 'assistant', 'content': r['answer']}]} for r in recs[:5]]
    src = write_jsonl(tmp_path / 'c.jsonl', good[:3] + [record] + good[3:])
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--chat', '--seq-len', 256, src, ok=False)
    assert '%s:4: %s' % (src, message) in p.stderr, p.stderr
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--chat', '--seq-len', 256, '--skip-bad', src)
    assert 'skipped 1 record' in p.stdout
    assert set(documents(tmp_path / 'ds')) == {(0, 1), (0, 2), (0, 3), (0, 5), (0, 6)}


def test_bad_pairs_and_columns_are_refused(qa, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    recs, _ = qa
    src = write_jsonl(tmp_path / 'p.jsonl', [recs[0], {'question': 'q', 'answer': None}])
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, *QA, '--seq-len', 256, src, ok=False)
    assert "%s:2: field 'answer' is null, not a string" % src in p.stderr
    src = write_jsonl(tmp_path / 'q.jsonl', [recs[0], {'question': 'q'}])
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, *QA, '--seq-len', 256, src, ok=False)
    assert "%s:2: record without a 'answer' field" % src in p.stderr
    pq.write_table(pa.table({'question': ['q', 'q2'], 'answer': ['a', '']}), tmp_path / 'e.parquet')
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, *QA, '--seq-len', 256, tmp_path / 'e.parquet',
             ok=False)
    assert 'e.parquet: row 1: message 1 is an empty response' in p.stderr
    pq.write_table(pa.table({'messages': ['not a list']}), tmp_path / 'm.parquet')
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--chat', '--seq-len', 256,
             tmp_path / 'm.parquet', ok=False)
    assert "m.parquet: column 'messages' is string, not a list of {role, content} column" \
        in p.stderr
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--chat', '--messages-field', 'conv',
             '--seq-len', 256, tmp_path / 'm.parquet', ok=False)
    assert "m.parquet: no column 'conv' (columns: messages); pass --messages-field" in p.stderr
    (tmp_path / 'a.txt').write_text('plain text\n')
    p = pack(tmp_path / 'ds', '--tokenizer', TOK, '--chat', '--seq-len', 256,
             tmp_path / 'a.txt', ok=False)
    assert '--chat reads records (JSONL, Parquet, datasets folders); a text file holds no ' \
        'conversations' in p.stderr


def test_a_tokenizer_without_a_chat_template_is_refused(qa, tmp_path):
    recs, src = qa
    tok = tokenizer_copy(tmp_path / 'a', config_template=False)
    p = pack(tmp_path / 'ds', '--tokenizer', tok, *QA, '--seq-len', 256, src, ok=False)
    assert '--chat needs the tokenizer\'s chat template: %s has no chat_template.jinja, and ' \
        'its tokenizer_config.json no chat_template' % tok in p.stderr, p.stderr
    p = pack(tmp_path / 'ds', '--tokenizer', tok / 'tokenizer.json', *QA, '--seq-len', 256,
             src, ok=False)
    assert 'a tokenizer.json alone has no chat template' in p.stderr
    # a chat_template.jinja without tokenizer_config.json: TorchTitan loads no template
    (tok / 'chat_template.jinja').write_text(TURNS)
    (tok / 'tokenizer_config.json').unlink()
    p = pack(tmp_path / 'ds', '--tokenizer', tok, *QA, '--seq-len', 256, src, ok=False)
    assert 'has no tokenizer_config.json, without which TorchTitan loads no chat template' \
        in p.stderr
    # a template that does not compile, and one that refuses a conversation
    tok = tokenizer_copy(tmp_path / 'b', '{% for m in messages %}{{ m.role }')
    p = pack(tmp_path / 'ds', '--tokenizer', tok, *QA, '--seq-len', 256, src, ok=False)
    assert '%s: the chat template does not compile' % (tok / 'chat_template.jinja') in p.stderr
    tok = tokenizer_copy(tmp_path / 'c', "{% if messages|length > 1 and "
                         "messages[1].content.startswith('a') %}"
                         "{{ raise_exception('no answers in a') }}{% endif %}" + TURNS)
    (tmp_path / 'a.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in recs[:40]))
    line = next(n for n, r in enumerate(recs[:40], 1) if r['answer'].startswith('a'))
    p = pack(tmp_path / 'ds', '--tokenizer', tok, *QA, '--seq-len', 256, tmp_path / 'a.jsonl',
             ok=False)
    assert '%s:%d: the chat template (%s) refuses the conversation: no answers in a' % (
        tmp_path / 'a.jsonl', line, tok / 'chat_template.jinja') in p.stderr, p.stderr


@pytest.mark.parametrize('args,message', [
    (['--chat', '--seq-len', 64], "pass --tokenizer PATH"),
    (['--tokenizer', TOK, '--messages-field', 'm', '--seq-len', 64], 'pass --chat'),
    (['--tokenizer', TOK, '--chat', '--prompt-field', 'q', '--seq-len', 64],
     'either --messages-field or both --prompt-field and --response-field'),
    (['--tokenizer', TOK, '--chat', '--text-field', 't', '--seq-len', 64],
     '--text-field reads plain documents'),
    (['--tokenizer', TOK, '--max-context-length', 8, '--seq-len', 64],
     'pass --whole-documents or --chat'),
    (['--tokenizer', TOK, '--chat', '--prompt-mismatch', 'fix', '--seq-len', 64],
     '--prompt-mismatch takes drop or keep'),
    (['--tokenizer', TOK, '--chat', '--max-context-length', 65, '--seq-len', 64],
     'is longer than the rows (--seq-len 64)'),
    (['--tokenizer', TOK, '--chat', '--dtype', 'uint16', '--seq-len', 64],
     'rows are int32'),
    (['--tokenizer', TOK, '--whole-documents', '--overlap', 1, '--seq-len', 64],
     'rows of whole documents take none'),
    (['--tokenizer', TOK, '--chat', '--prompt-field', 'question', '--response-field',
      'answer', '--seq-len', 16],
     'no document fits a row: all 400 were longer than --max-context-length 16 inputs'),
])
def test_bad_options_are_refused(qa, tmp_path, args, message):
    recs, src = qa
    p = pack(tmp_path / 'ds', *args, src, ok=False)
    assert message in p.stderr, p.stderr
