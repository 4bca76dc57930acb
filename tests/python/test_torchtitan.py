"""zephon.torchtitan against the real TorchTitan classes (BaseDataLoader, Configurable,
ConfigManager, IGNORE_INDEX) of the version this venv has (0.3.0, or git main under
run-titan-main): how its trainer builds the loader, the batches it yields, TorchTitan's own
data-checkpoint property for every DP rank, identical bytes for peers sharing a DP rank,
and the refusals (each a clear ValueError that leaves the position as it was).
"""
import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.distributed.checkpoint.stateful import Stateful
from torchtitan.components.loss import IGNORE_INDEX
from torchtitan.config import ConfigManager, Configurable

from conftest import Mounts
from titan_helpers import (EOD, FLAT, ROOT, TitanBaseDataLoader, build_as_trainer, documents,
                           pack_tokens, reference, rows, trainer_cli, trainer_kwargs, zrun)
from zephon.torchtitan import (PretokenizedTokenizer, ZephonDataLoader, positions_of,
                               trainer_batch)

SEQ = 16
SEED = 7
B = 12                   # global batch of the mounts


@pytest.fixture(scope='module')
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp('titan')
    return pack_tokens(d / 'ds', documents(20000, 300), SEQ)


@pytest.fixture
def mounts(tmp_path):
    """conftest's Mounts (unmounted and checked for sanitizer reports), with this file's SEED."""
    ms = Mounts(tmp_path, seed=SEED)
    yield ms
    ms.close()


def build(mp, dp_rank, dp, micro=2, seq=SEQ, extra=None, **config):
    """As this TorchTitan's trainer builds its data loader (extra: more keywords)."""
    return ZephonDataLoader.Config(mount=str(mp), **config).build(
        dp_world_size=dp, dp_rank=dp_rank, tokenizer=None, **trainer_kwargs(seq, micro),
        **(extra or {}))


def take(it, n):
    return [next(it) for _ in range(n)]


def equal_batches(a, b):
    return all(torch.equal(x[0]['input'], y[0]['input']) and
               torch.equal(x[0]['positions'], y[0]['positions']) and
               torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True))


def test_it_is_a_torchtitan_configurable_data_loader():
    assert issubclass(ZephonDataLoader, TitanBaseDataLoader)
    assert issubclass(ZephonDataLoader, Configurable) and issubclass(ZephonDataLoader, Stateful)
    cfg = ZephonDataLoader.Config
    assert issubclass(cfg, TitanBaseDataLoader.Config) and '__slots__' in cfg.__dict__
    assert all(f.kw_only for f in dataclasses.fields(cfg))
    assert cfg._owner is ZephonDataLoader
    # Configurable.build refuses a keyword named like a config field
    with pytest.raises(ValueError, match='overlap with config fields'):
        cfg(mount='/x').build(mount='/y', dp_world_size=1, dp_rank=0)


def test_the_recipe_through_torchtitans_config_manager(ds, mounts):
    m = mounts(ds, world_size=1, global_batch=B)
    config = ConfigManager().parse_args([
        '--module', 'zephon.recipes', '--config', 'llama3_debugmodel_zephon',
        '--dataloader.mount', m.path, '--dataloader.eod_token', str(EOD),
        *trainer_cli(SEQ, 4, global_batch=B)])
    assert isinstance(config.dataloader, ZephonDataLoader.Config)
    assert (config.dataloader.mount, config.dataloader.eod_token) == (m.path, EOD)
    assert not config.validator.enable
    tok = config.tokenizer.build(tokenizer_path=config.hf_assets_path)   # as the trainer does
    assert isinstance(tok, PretokenizedTokenizer) and tok.get_vocab_size() == 2048
    with pytest.raises(RuntimeError, match='already tokenized'):
        tok.encode('text')
    inp, labels = next(iter(build_as_trainer(config, 1, 0, tok)))
    shape = (4 * SEQ,) if FLAT else (4, SEQ)      # the batch type of this TorchTitan
    assert inp['input'].shape == labels.shape == inp['positions'].shape == shape


@pytest.mark.parametrize('dp', [1, 3])
def test_batches_are_the_ranks_share_split_into_inputs_and_labels(ds, mounts, dp):
    m = mounts(ds, world_size=dp, global_batch=B)
    ref = reference(ds, 0, 3 * B, SEQ + 1, SEED)
    share = B // dp
    for r in range(dp):
        dl = build(m.path, r, dp, micro=2, extra={'unknown_future_kwarg': 1})
        it = iter(dl)
        for t in range(3):
            for k in range(share // 2):
                batch = next(it)
                x, pos, labels = rows(batch, SEQ)
                want = torch.from_numpy(ref[t * B + r * share + 2 * k:][:2])
                assert batch[0]['input'].dim() == (1 if FLAT else 2)
                assert x.dtype == labels.dtype == pos.dtype == torch.int64
                assert torch.equal(x, want[:, :-1])
                assert torch.equal(labels, want[:, 1:])
                assert torch.equal(pos, positions_of(want[:, :-1]))


def test_main_keywords_give_flat_batches_of_the_samples_of_0_3_0s(ds, mounts):
    """max_context_length and num_tokens_per_batch (main's trainer, no local_batch_size):
    1-D batches of num_tokens_per_batch tokens, samples one after the other, positions 0 at
    each; the samples are those of seq_len and local_batch_size (0.3.0's trainer)."""
    m = mounts(ds, world_size=2, global_batch=B)
    flat = ZephonDataLoader.Config(mount=m.path).build(
        dp_world_size=2, dp_rank=1, tokenizer=None, max_context_length=64,
        num_tokens_per_batch=3 * SEQ, some_other_kwarg='x')
    assert flat.flat and flat.micro_batch == 3
    two_d = ZephonDataLoader.Config(mount=m.path).build(
        dp_world_size=2, dp_rank=1, tokenizer=None, seq_len=SEQ, local_batch_size=3)
    assert not two_d.flat
    for (fi, fl), (ri, rl) in zip(take(iter(flat), 4), take(iter(two_d), 4)):
        assert fi['input'].shape == fi['positions'].shape == fl.shape == (3 * SEQ,)
        assert torch.equal(fi['input'], ri['input'].reshape(-1))
        assert torch.equal(fl, rl.reshape(-1))
        assert torch.equal(fi['positions'], torch.arange(SEQ).repeat(3))


def test_positions_restart_after_each_end_of_document_token(ds, mounts):
    m = mounts(ds, world_size=1, global_batch=B)
    n_eod = 0
    for batch in take(iter(build(m.path, 0, 1, micro=4, eod_token=EOD)), 6):
        x, positions, _ = rows(batch, SEQ)
        for row, pos in zip(x.tolist(), positions.tolist()):
            want, p = [], 0
            for i, tok in enumerate(row):         # Megatron's reset_position_ids
                want.append(p)
                p = 0 if tok == EOD else p + 1
            assert pos == want
            n_eod += row.count(EOD)
    assert n_eod > 0


def test_plain_windows_keep_every_token_as_input_and_ignore_the_last_label(tmp_path, mounts):
    plain = pack_tokens(tmp_path / 'plain', documents(5000, 300), SEQ, overlap=0)
    m = mounts(plain, world_size=1, global_batch=4)
    ref = torch.from_numpy(reference(plain, 0, 4, SEQ, SEED))
    x, _, labels = rows(next(iter(build(m.path, 0, 1, micro=4, seq=SEQ))), SEQ)
    assert torch.equal(x, ref)
    assert torch.equal(labels[:, :-1], ref[:, 1:])
    assert (labels[:, -1] == IGNORE_INDEX).all()
    if not FLAT:
        # 0.3.0 passes seq_len: one shorter than the windows splits them instead (main
        # passes none, the samples are the mount's)
        x, _, labels = rows(next(iter(build(m.path, 0, 1, micro=4, seq=SEQ - 1))), SEQ - 1)
        assert torch.equal(x, ref[:, :-1]) and torch.equal(labels, ref[:, 1:])


@pytest.mark.parametrize('dp', [1, 2, 3])
def test_torchtitans_checkpoint_property_for_every_dp_rank(ds, mounts, dp):
    """tests/unit_tests/test_dataset_checkpointing.py: iterate, state_dict(), a fresh
    loader, load_state_dict(), the next batches equal the uninterrupted ones. Also from a
    state taken inside a step (same layout)."""
    m = mounts(ds, world_size=dp, global_batch=B)
    for r in range(dp):
        for first in (6, 7):
            dl = build(m.path, r, dp, micro=2, eod_token=EOD)
            it = iter(dl)
            take(it, first)
            if first % 2:       # inside a step of the mount: TorchTitan never saves there
                with pytest.warns(RuntimeWarning, match='restores only at the same'):
                    state = dl.state_dict()
            else:
                state = dl.state_dict()
            expected = take(it, 8)
            fresh = build(m.path, r, dp, micro=2, eod_token=EOD)
            fresh.load_state_dict(state)
            assert equal_batches(take(iter(fresh), 8), expected), (r, first)


def test_peers_sharing_a_dp_rank_get_identical_bytes(ds, mounts):
    """Tensor/pipeline/context parallel peers: two loaders of DP rank 1 read the same
    batches (nothing is claimed per reader); DP rank 0 reads others."""
    m = mounts(ds, world_size=2, global_batch=B)
    a, b, other = (take(iter(build(m.path, r, 2)), 9) for r in (1, 1, 0))
    assert equal_batches(a, b)
    assert not torch.equal(a[0][0]['input'], other[0][0]['input'])


def test_trainer_batch_refuses_windows_that_do_not_fit():
    w = torch.arange(2 * 10).reshape(2, 10)
    with pytest.raises(ValueError, match='windows of 10 tokens do not make inputs of seq_len 7'):
        trainer_batch(w, 7)


def refusal(fn, *match):
    with pytest.raises(ValueError) as e:
        fn()
    msg = str(e.value)
    assert all(s in msg for s in match), msg
    assert msg[0].islower(), msg


def test_refusals_of_a_mount_that_does_not_fit_the_trainer(ds, mounts, tmp_path, monkeypatch):
    m = mounts(ds, world_size=2, global_batch=B)
    refusal(lambda: build(m.path, 0, 4), 'world_size=2', 'data-parallel degree is 4')
    if not FLAT:      # 0.3.0's seq_len (main's trainer passes none: refusals below)
        refusal(lambda: build(m.path, 0, 2, seq=32), 'windows of 17 tokens', 'seq_len 32',
                '--seq-len 32 --overlap 1')
    refusal(lambda: build(m.path, 0, 2, micro=4), 'micro_batch 4 does not divide', '6')
    refusal(lambda: ZephonDataLoader.Config(mount=m.path).build(
        dp_world_size=2, dp_rank=0, tokenizer=None, max_context_length=64,
        num_tokens_per_batch=40), 'tokens_per_batch 40', 'samples of 16 tokens')
    refusal(lambda: ZephonDataLoader.Config(mount=m.path).build(
        dp_world_size=2, dp_rank=0, tokenizer=None, max_context_length=8,
        num_tokens_per_batch=32), 'more than max_context_length 8')
    monkeypatch.delenv('ZEPHON_MOUNT', raising=False)
    refusal(lambda: build('', 0, 2), 'no zephon mount', '--dataloader.mount')
    lines = tmp_path / 'l.txt'
    lines.write_text('a\nb\nc\nd\n')
    zrun('pack', '--format', 'lines', lines, '-o', tmp_path / 'lines')
    ml = mounts(tmp_path / 'lines', world_size=1, global_batch=2,
                journal=tmp_path / 'lines.sqlite')
    refusal(lambda: build(ml.path, 0, 1), 'is a records dataset', 'token datasets only')


def test_refusals_of_a_foreign_state_leave_the_position(ds, mounts, tmp_path):
    m = mounts(ds, world_size=1, global_batch=B)
    other_seed = mounts(ds, world_size=1, global_batch=B, seed=SEED + 1,
                        journal=tmp_path / 'j2.sqlite')
    other_ds = pack_tokens(tmp_path / 'other', documents(20000, 300, seed=9), SEQ)
    other = mounts(other_ds, world_size=1, global_batch=B, journal=tmp_path / 'j3.sqlite')
    dl = build(m.path, 0, 1)
    it = iter(dl)
    take(it, 6)             # one step: 6 micro-batches of 2
    before = dl.state_dict()
    expected = take(iter(build(m.path, 0, 1)), 8)[6:]
    for mp, what in ((other_seed.path, 'seed=%d' % SEED), (other.path, 'fingerprint')):
        state = build(mp, 0, 1).state_dict()
        refusal(lambda: dl.load_state_dict(state), what)
    assert dl.state_dict() == before
    assert equal_batches(take(it, 2), expected)
    refusal(lambda: dl.load_state_dict({'bogus': 1}), 'not a ZephonLoader state')
    assert equal_batches(take(it, 1), take(iter(build(m.path, 0, 1)), 9)[8:])


def test_the_extra_allows_the_tested_torchtitan():
    """pyproject.toml's [torchtitan] extra admits the TorchTitan this venv tests (0.3.0,
    or main, which calls itself 0.2.2 after its assets/version.txt)."""
    import importlib.metadata
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']
    reqs = [Requirement(r) for r in project['optional-dependencies']['torchtitan']]
    titan = [r for r in reqs if r.name == 'torchtitan']
    assert len(titan) == 1 and len(titan[0].specifier) > 1, titan   # a range, not a pin
    assert titan[0].specifier.contains(importlib.metadata.version('torchtitan')), titan


def test_a_torchtitan_without_configurable_loaders_is_refused_at_import(tmp_path):
    """PyPI's torchtitan 0.2.2 and older: a BaseDataLoader without a nested Config (a stand-in
    package of that shape here) gives an ImportError that says what is supported."""
    comp = tmp_path / 'torchtitan' / 'components'
    comp.mkdir(parents=True)
    (tmp_path / 'torchtitan' / '__init__.py').write_text("__version__ = '0.2.2'\n")
    (comp / '__init__.py').write_text('')
    (comp / 'dataloader.py').write_text('class BaseDataLoader:\n    pass\n')
    (comp / 'loss.py').write_text('IGNORE_INDEX = -100\n')
    (comp / 'tokenizer.py').write_text('class BaseTokenizer:\n    pass\n')
    p = subprocess.run([sys.executable, '-c', 'import zephon.torchtitan'],
                       env=dict(os.environ, PYTHONPATH=str(tmp_path)), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 1
    assert ('ImportError: zephon.torchtitan supports TorchTitan 0.3.0 and TorchTitan\'s git '
            'main' in p.stderr), p.stderr[-3000:]
    assert 'torchtitan 0.2.2 (%s' % (tmp_path / 'torchtitan') in p.stderr, p.stderr[-3000:]
