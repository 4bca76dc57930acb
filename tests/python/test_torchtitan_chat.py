"""Fine-tuning data against TorchTitan's own code, on the TorchTitan of this venv (0.3.0 in
the python suite, git main under run-titan-main):

- chat samples (`zephon pack --tokenizer --chat`) token for token and mask for mask what
  TorchTitan makes of them, sample for sample, on 3,000 real question/answer pairs made of
  WordNet's glosses, with TorchTitan's test tokenizer and its chat template: main's
  ChatProcessor, 0.3.0's ChatDataset._tokenize_sample (the same rules); the samples it
  drops as too long are the ones the pack drops and counts;
- where a prompt's tokens are not the first tokens of the conversation (a tokenizer with
  real merges and a template whose generation prompt ends in a space), the pack finds
  exactly the samples that TorchTitan would mask wrongly: dropped by default, or kept
  with TorchTitan's mask (--prompt-mismatch keep);
- zephon.torchtitan's batches of such a dataset are, row for row, the batches TorchTitan
  main's SFT pipeline makes of the same rows' documents (its FirstFitPackingConfig over
  them, its TextCollator), 1-D on main; on 0.3.0 [local_batch_size, row_len], each row
  its documents' TorchTitan tokens, padded as main pads (input 0, label -100, position 0);
- the recipe mirroring sft_debugmodel (zephon.recipes.sft_debugmodel_zephon) passes its
  dry run with rows of the context length, and on main with rows of
  num_tokens_per_batch too; 0.3.0 refuses rows longer than its seq_len, saying why.
"""
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

import zephon
from rows_helpers import (IGNORE, TOK, documents, info, need_data, pack, row_documents,
                          rows, trained_tokenizer, wordnet_qa, write_jsonl)
from titan_helpers import CONTRACT, FLAT, ROOT, ZEPHON
from zephon.torchtitan import ZephonDataLoader

N = 3000


def messages_fn(sample):
    """sft_debugmodel's process_sample."""
    return [{'role': 'user', 'content': sample['question']},
            {'role': 'assistant', 'content': sample['answer']}]


def titan_tokenizer(path):
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    return HuggingFaceTokenizer(tokenizer_path=str(path))


def titan_chat(tok, max_context):
    """TorchTitan's own tokenization of one chat record: (input_ids, labels), or None
    where it drops the sample. main: ChatProcessor; 0.3.0: ChatDataset's."""
    if CONTRACT == 'data.loader':
        import grain.python as grain
        from torchtitan.components.data.types import DatasetBuildContext
        from torchtitan.hf_datasets.text_datasets import ChatProcessor
        cp = ChatProcessor(ChatProcessor.Config(messages_fn=messages_fn),
                           context=DatasetBuildContext(tokenizer=tok,
                                                       max_context_length=max_context,
                                                       num_tokens_per_batch=max_context,
                                                       read_options=grain.ReadOptions()))

        def run(rec):
            ts = cp(rec, np.random.default_rng(0))
            return None if ts is None else (np.asarray(ts.input_ids), np.asarray(ts.labels))
        return run
    from torchtitan.hf_datasets.text_datasets import ChatDataset
    # the method as 0.3.0 runs it, on the attributes it reads
    me = types.SimpleNamespace(_sample_processor=messages_fn, _tokenizer=tok,
                               _eos_id=tok.eos_id, _logged_first_sample=True,
                               seq_len=max_context, _sample_idx=0,
                               _validate_messages=ChatDataset._validate_messages)

    def run(rec):
        r = ChatDataset._tokenize_sample(me, rec)
        return None if r is None else (np.asarray(r[0]), np.asarray(r[1]))
    return run


def prompt_is_prefix(tok, rec):
    """Whether TorchTitan's prompt tokens are the first tokens of the whole sample."""
    msgs = messages_fn(rec)
    full = tok.encode(tok.apply_chat_template(msgs).rstrip('\n'), add_bos=True, add_eos=False)
    prompt = tok.encode(tok.apply_chat_template(msgs[:1], add_generation_prompt=True),
                        add_bos=True, add_eos=False)
    return full[:len(prompt)] == prompt


@pytest.fixture(scope='module')
def qa(tmp_path_factory):
    need_data()
    d = tmp_path_factory.mktemp('qa')
    recs = wordnet_qa(N)
    return recs, write_jsonl(d / 'qa.jsonl', recs)


@pytest.mark.parametrize('row_len,max_context', [(256, None), (1024, 96)])
def test_chat_samples_are_torchtitans_token_for_token(qa, tmp_path, row_len, max_context):
    recs, src = qa
    args = ['--tokenizer', TOK, '--chat', '--prompt-field', 'question', '--response-field',
            'answer', '--seq-len', row_len]
    if max_context:
        args += ['--max-context-length', max_context]
    pack(tmp_path / 'ds', *args, src)
    ours = documents(tmp_path / 'ds')
    tok = titan_tokenizer(TOK)
    titan = titan_chat(tok, max_context or row_len)
    dropped = 0
    for line, rec in enumerate(recs, 1):
        want = titan(rec)
        if want is None:
            dropped += 1
            assert (0, line) not in ours, line
            continue
        inputs, labels, positions, _ = ours[(0, line)]
        assert np.array_equal(inputs, want[0]), line
        assert np.array_equal(labels, want[1]), line
        assert np.array_equal(positions, np.arange(len(want[0]))), line
        assert prompt_is_prefix(tok, rec)
    i = info(tmp_path / 'ds')
    assert 0 < dropped < N
    assert i['documents_dropped'] == dropped and i['documents'] == N - dropped
    assert i['chat'] == {'form': 'prompt-response', 'prompt_mismatch': 0,
                         'prompt_mismatch_policy': 'drop'}
    assert len(ours) == N - dropped
    # each sample has its prompt masked and its answer trained
    assert all((d[1] == IGNORE).any() and (d[1] != IGNORE).any() for d in ours.values())


# a template whose generation prompt ends in a space: the space is a token of its own in
# the prompt, but the first token of the answer in the whole conversation
SPACE_TEMPLATE = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                  "{% if add_generation_prompt %}assistant: {% endif %}")


@pytest.mark.parametrize('policy', ['drop', 'keep'])
def test_a_prompt_that_is_not_a_prefix_is_found(qa, tmp_path, policy):
    recs, src = qa
    recs = recs[:600]
    src = write_jsonl(tmp_path / 'qa.jsonl', recs)
    bpe = trained_tokenizer(tmp_path, SPACE_TEMPLATE,
                            [r['question'] + '\n' + r['answer'] for r in wordnet_qa(N)])
    p = pack(tmp_path / 'ds', '--tokenizer', bpe, '--chat', '--prompt-field', 'question',
             '--response-field', 'answer', '--seq-len', 512, '--prompt-mismatch', policy, src)
    tok = titan_tokenizer(bpe)
    titan = titan_chat(tok, 512)
    bad = [line for line, rec in enumerate(recs, 1) if not prompt_is_prefix(tok, rec)]
    assert 0 < len(bad) < len(recs)          # most answers start with a word, some not
    i = info(tmp_path / 'ds')
    assert i['chat']['prompt_mismatch'] == len(bad)
    assert i['chat']['prompt_mismatch_policy'] == policy
    assert '%s:%d: the prompt' % (src, bad[0]) in p.stderr
    ours = documents(tmp_path / 'ds')
    for line, rec in enumerate(recs, 1):
        want = titan(rec)
        if want is None or (policy == 'drop' and line in bad):
            assert (0, line) not in ours
            continue
        inputs, labels, _, _ = ours[(0, line)]
        assert np.array_equal(inputs, want[0]) and np.array_equal(labels, want[1]), line


def titan_rows(ds, recs, max_context):
    """Each row of ds as TorchTitan makes it of the row's documents, in order: main, its
    FirstFitPackingConfig over their ChatProcessor samples (one bin: they fill one row);
    0.3.0, its ChatDataset tokens back to back, padded as main pads. [rows, 3, row_len]."""
    tok = titan_tokenizer(TOK)
    titan = titan_chat(tok, max_context)
    L = info(ds)['row_len']
    out = []
    for docs in row_documents(ds):
        seqs = [titan(recs[line - 1]) for _, line in docs]
        if CONTRACT == 'data.loader':
            import grain.python as grain
            from torchtitan.components.data.dataset import TextSequence
            from torchtitan.components.data.packing import FirstFitPackingConfig
            from torchtitan.components.data.types import (DatasetBuildContext,
                                                          DatasetIterationPolicy)

            class Docs:
                def build(self, *, context, dataset_iteration_policy):
                    return grain.MapDataset.source([TextSequence(input_ids=a, labels=b)
                                                    for a, b in seqs])
            ctx = DatasetBuildContext(tokenizer=tok, max_context_length=max_context,
                                      num_tokens_per_batch=L, read_options=grain.ReadOptions())
            policy = DatasetIterationPolicy(seed=0, shuffle=False, repeat=False, dp_rank=0,
                                            dp_world_size=1, streaming_shuffle_buffer_size=1)
            (row,) = list(FirstFitPackingConfig(dataset=Docs(), num_packing_bins=1).build(
                context=ctx, dataset_iteration_policy=policy))
            out.append(np.stack([row.input_ids, row.labels, row.positions]))
        else:
            inputs = np.zeros(L, np.int64)
            labels = np.full(L, IGNORE, np.int64)
            positions = np.zeros(L, np.int64)
            at = 0
            for a, b in seqs:
                inputs[at:at + len(a)], labels[at:at + len(a)] = a, b
                positions[at:at + len(a)] = np.arange(len(a))
                at += len(a)
            out.append(np.stack([inputs, labels, positions]))
    return np.stack(out)


def test_loader_batches_are_torchtitans_sft_batches_of_the_same_rows(qa, tmp_path):
    recs, src = qa
    recs = recs[:400]
    src = write_jsonl(tmp_path / 'qa.jsonl', recs)
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, '--chat', '--prompt-field', 'question', '--response-field',
         'answer', '--seq-len', 512, src)
    want = titan_rows(ds, recs, 512)
    assert np.array_equal(rows(ds), want)     # the stored rows are TorchTitan's
    n = len(want)
    if CONTRACT == 'data.loader':
        from torchtitan.components.data.collators import TextCollator
        from torchtitan.components.data.dataset import TextSequence
        from torchtitan.components.data.types import DatasetBuildContext
    with zephon.mount(ds, tmp_path / 'z', world_size=2, global_batch=4, shuffle='none',
                      journal=tmp_path / 'j.sqlite'):
        for rank in (0, 1):
            kw = (dict(max_context_length=512, num_tokens_per_batch=2 * 512) if FLAT else
                  dict(seq_len=512, local_batch_size=2))
            dl = ZephonDataLoader.Config(mount=str(tmp_path / 'z')).build(
                dp_world_size=2, dp_rank=rank, tokenizer=None, **kw)
            for step, (x, y) in zip(range(n // 4), dl):
                ids = [4 * step + 2 * rank, 4 * step + 2 * rank + 1]     # shuffle=none
                if FLAT:    # main's TextCollator over the two rows, as its trainer gets them
                    import grain.python as grain
                    ctx = DatasetBuildContext(tokenizer=None, max_context_length=512,
                                              num_tokens_per_batch=1024,
                                              read_options=grain.ReadOptions())
                    (tx, ty) = TextCollator(TextCollator.Config(), context=ctx)(
                        [TextSequence(input_ids=want[i, 0], labels=want[i, 1],
                                      positions=want[i, 2]) for i in ids])
                    assert x['input'].shape == (1024,)
                else:
                    tx = {'input': torch.from_numpy(want[ids, 0]),
                          'positions': torch.from_numpy(want[ids, 2])}
                    ty = torch.from_numpy(want[ids, 1])
                    assert x['input'].shape == (2, 512)
                assert x['input'].dtype == torch.int64 and y.dtype == torch.int64
                assert torch.equal(x['input'], tx['input']), (rank, step)
                assert torch.equal(x['positions'], tx['positions']), (rank, step)
                assert torch.equal(y, ty), (rank, step)


def dry_run(mount, *extra, tmp_path):
    env = dict(os.environ, ZEPHON_MOUNT=str(mount))
    env.pop('ZEPHON_EOD_TOKEN', None)
    return subprocess.run([sys.executable, '-m', 'zephon.recipes', '--module', 'zephon.recipes',
                           '--config', 'sft_debugmodel_zephon', *extra], env=env, cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)


@pytest.mark.parametrize('row_len', [2048, 16384])
def test_the_sft_recipe_dry_run(qa, tmp_path, row_len):
    recs, src = qa
    args = ['--seq-len', row_len] + (['--max-context-length', 2048] if row_len > 2048 else [])
    ds = tmp_path / 'ds'
    pack(ds, '--tokenizer', TOK, '--chat', '--prompt-field', 'question', '--response-field',
         'answer', *args, src)
    # sft_debugmodel: micro-batch 8 x 2048 tokens a rank; DP 2
    per_micro = 8 * 2048 // row_len
    with zephon.mount(ds, tmp_path / 'z', world_size=2, global_batch=2 * per_micro, seed=1,
                      journal=tmp_path / 'j.sqlite'):
        p = dry_run(tmp_path / 'z', tmp_path=tmp_path)
    if row_len > 2048 and not FLAT:
        # 0.3.0's batches are [local_batch_size, seq_len]: rows longer than seq_len refused
        assert p.returncode == 1, p.stdout
        assert 'rows of 16384 positions, but the trainer\'s seq_len is 2048' in p.stdout
        return
    assert p.returncode == 0, p.stdout
    shape = '(16384,)' if FLAT else '(8, 2048)'
    assert 'dp_rank 1 of 2: 2 batches of %s int64' % shape in p.stdout, p.stdout
    assert 'dry run passed' in p.stdout
