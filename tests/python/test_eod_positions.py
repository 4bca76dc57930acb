"""Positions restart at the document starts the dataset knows: the shared Megatron file
packed with `zephon pack --eod-token`, read through zephon.torchtitan with no eod_token in
its config (the loader takes the dataset's from the mount's /status)."""
import json
import struct

import numpy as np
import pytest
import torch

from conftest import IDX, zrun
from zephon.torch import ZephonLoader
from zephon.torchtitan import ZephonDataLoader

EOD = 50256              # GPT-2's <|endoftext|>; the shared file holds none
SEQ = 64
B = 32


def idx_stream():
    """The shared file's tokens with EOD after each document, and where each document
    starts in that stream, from its .idx document index (numpy, not zephon)."""
    idx = IDX.read_bytes()
    n, ndoc = struct.unpack_from('<QQ', idx, 18)
    sizes = np.frombuffer(idx, dtype='<i4', count=n, offset=34)
    ptrs = np.frombuffer(idx, dtype='<i8', count=n, offset=34 + 4 * n)
    docs = np.frombuffer(idx, dtype='<i8', count=ndoc, offset=34 + 12 * n)
    binary = np.fromfile(IDX.with_suffix('.bin'), dtype='<u2')
    parts, starts, at = [], [], 0
    for a, b in zip(docs[:-1], docs[1:]):
        doc = np.concatenate([binary[p // 2:p // 2 + s] for s, p in zip(sizes[a:b], ptrs[a:b])])
        starts.append(at)
        parts += [doc, [EOD]]
        at += len(doc) + 1
    stream = np.concatenate(parts).astype(np.int64)
    starts = np.array(starts)
    assert list(np.flatnonzero(stream == EOD)) == list(starts[1:] - 1) + [len(stream) - 1]
    return stream, starts


@pytest.fixture(scope='module')
def eod_ds(tmp_path_factory):
    if not IDX.is_file():
        pytest.skip('shared data file %s is absent' % IDX)
    d = tmp_path_factory.mktemp('eod') / 'owt'
    zrun('pack', '--format', 'tokens', '--seq-len', SEQ, '--overlap', 1, '--eod-token', EOD,
         '--compress', 'none', '-q', IDX, '-o', d)
    return d


def expected_positions(window_start, starts):
    """Position of each input token of the window at window_start: tokens since the
    later of the window's start and the last document start at or before it."""
    t = np.arange(window_start, window_start + SEQ)
    doc = starts[np.searchsorted(starts, t, side='right') - 1]
    return t - np.maximum(doc, window_start)


@pytest.mark.parametrize('flat', [False, True])
def test_positions_restart_exactly_at_the_document_starts(eod_ds, mounts, flat):
    stream, starts = idx_stream()
    m = mounts(eod_ds, world_size=1, global_batch=B, shuffle='none')
    with open(m.path + '/status') as f:
        assert json.load(f)['eod_token'] == EOD
    cfg = ZephonDataLoader.Config(mount=m.path)          # no eod_token in the config
    assert cfg.eod_token is None
    if flat:
        dl = cfg.build(dp_world_size=1, dp_rank=0, tokenizer=None, max_context_length=SEQ,
                       num_tokens_per_batch=8 * SEQ)
    else:
        dl = cfg.build(dp_world_size=1, dp_rank=0, tokenizer=None, seq_len=SEQ,
                       local_batch_size=8)
    assert dl.eod_token == dl.loader.eod_token == EOD
    restarts = 0
    it = iter(dl)
    for b in range(40 * B // 8):                        # 1,280 windows, 81,920 tokens
        inp, labels = next(it)
        ids = inp['input'].reshape(8, SEQ)
        pos = inp['positions'].reshape(8, SEQ)
        for row in range(8):
            g = b * 8 + row                             # shuffle=none: sample id = gsn
            s = g * SEQ                                 # --overlap 1: windows start every SEQ
            assert torch.equal(ids[row], torch.from_numpy(stream[s:s + SEQ]))
            # the label after an EOS is masked, as TorchTitan's datasets never train it
            want_labels = torch.from_numpy(stream[s + 1:s + SEQ + 1].astype(np.int64))
            want_labels[torch.from_numpy(stream[s:s + SEQ]) == EOD] = -100
            assert torch.equal(labels.reshape(8, SEQ)[row], want_labels)
            want = expected_positions(s, starts)
            assert pos[row].tolist() == want.tolist(), (g, s)
            restarts += int((want[1:] == 0).sum())
    # the documents that start inside these windows, each one a restart
    inside = starts[(starts < 1280 * SEQ) & (starts % SEQ != 0)]
    assert restarts == len(inside) > 50


def test_a_config_eod_token_other_than_the_datasets_is_refused(eod_ds, mounts):
    m = mounts(eod_ds, world_size=1, global_batch=B)
    with pytest.raises(ValueError, match="eod_token 0 is not the dataset's end-of-document "
                                         "token 50256"):
        ZephonDataLoader.Config(mount=m.path, eod_token=0).build(
            dp_world_size=1, dp_rank=0, seq_len=SEQ, local_batch_size=8)
    same = ZephonDataLoader.Config(mount=m.path, eod_token=EOD).build(
        dp_world_size=1, dp_rank=0, seq_len=SEQ, local_batch_size=8)
    assert same.eod_token == EOD


def test_a_dataset_without_eod_token_reads_none(tokens, mounts):
    """Packed without --eod-token (the conftest dataset): no EOD, positions per window,
    unless the config names one."""
    m = mounts(tokens, world_size=1, global_batch=B)
    with open(m.path + '/status') as f:
        assert json.load(f)['eod_token'] is None
    assert ZephonLoader(m.path, dp_rank=0, dp_world_size=1).eod_token is None
    dl = ZephonDataLoader.Config(mount=m.path).build(dp_world_size=1, dp_rank=0,
                                                     seq_len=16, local_batch_size=4)
    assert dl.eod_token is None
    inp, _ = next(iter(dl))
    assert torch.equal(inp['positions'], torch.arange(16).expand(4, 16))
    named = ZephonDataLoader.Config(mount=m.path, eod_token=7).build(
        dp_world_size=1, dp_rank=0, seq_len=16, local_batch_size=4)
    assert named.eod_token == 7
