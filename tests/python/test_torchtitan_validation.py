"""zephon.torchtitan.ZephonValidationDataLoader as TorchTitan's Validator uses it (0.3.0, or
git main under run-titan-main): the Validator copies the config with ``infinite`` (0.3.0)
or ``repeat`` (main) set and builds it at every evaluation with the trainer's keywords; the
batches are the validation split's, the same at each build, and the training loader's
position does not move."""
import dataclasses

import pytest
import torch
from torchtitan.components.validate import Validator

from conftest import Mounts
from titan_helpers import FLAT, REPEAT_FIELD, documents, pack_tokens, trainer_kwargs
from zephon.torch import ZephonValidationLoader
from zephon.torchtitan import ZephonDataLoader, ZephonValidationDataLoader, trainer_batch

SEQ = 16
B = 8


@pytest.fixture(scope='module')
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp('titanval')
    return pack_tokens(d / 'ds', documents(20000, 300), SEQ)


@pytest.fixture
def mounts(tmp_path):
    """conftest's Mounts (unmounted and checked for sanitizer reports), seed 3."""
    ms = Mounts(tmp_path, seed=3)
    yield ms
    ms.close()


def validator_loader(mp, dp_rank, dp, steps=-1, micro=2):
    """The loader Validator.validate() builds: its dl_config (the config with infinite set
    by Validator.__init__), built with the trainer's keywords."""
    cfg = Validator.Config(enable=True, steps=steps,
                           dataloader=ZephonValidationDataLoader.Config(mount=str(mp)))
    # the sizes as each version's trainer passes them to its Validator
    sizes = (dict(seq_len=SEQ, num_tokens_per_batch=micro * SEQ) if FLAT
             else dict(seq_len=SEQ, local_batch_size=micro))
    v = Validator(cfg, parallelism=None, dp_world_size=dp, dp_rank=dp_rank, tokenizer=None,
                  parallel_dims=None, loss_fn=None, validation_context=None,
                  metrics_processor=None, **sizes)
    assert getattr(v.dl_config, REPEAT_FIELD) == (steps != -1)
    kw = trainer_kwargs(SEQ, micro)
    kw.pop('snapshot_every_n_steps', None)
    return v.dl_config.build(dp_world_size=dp, dp_rank=dp_rank, tokenizer=None, **kw)


def same(a, b):
    return all(torch.equal(x[0]['input'], y[0]['input']) and
               torch.equal(x[0]['positions'], y[0]['positions']) and
               torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True))


def test_the_validator_reads_the_whole_split_each_evaluation(ds, mounts):
    m = mounts(ds, world_size=2, global_batch=B, validation=0.05)
    steps = m.status()['validation']['steps']
    assert steps >= 2
    train = ZephonDataLoader.Config(mount=m.path).build(
        dp_world_size=2, dp_rank=0, tokenizer=None, seq_len=SEQ, local_batch_size=2)
    it = iter(train)
    next(it), next(it)                           # one step: a state at a step boundary
    state = train.state_dict()
    want = {}
    for rank in range(2):
        raw = ZephonValidationLoader(m.path, dp_rank=rank, dp_world_size=2, micro_batch=2)
        want[rank] = [trainer_batch(w, SEQ, flat=FLAT) for w in raw]   # the dataset records no EOD
        assert len(want[rank]) == steps * 2
        first = list(validator_loader(m.path, rank, 2))
        again = list(validator_loader(m.path, rank, 2))
        assert same(first, want[rank]) and same(again, want[rank])
        assert first[0][0]['input'].shape == ((2 * SEQ,) if FLAT else (2, SEQ))
    assert train.state_dict() == state
    # infinite (validator.steps=N): the split again from its start when it runs out
    loop = iter(validator_loader(m.path, 0, 2, steps=3))
    got = [next(loop) for _ in range(2 * len(want[0]))]
    assert same(got, want[0] + want[0])
    assert validator_loader(m.path, 0, 2).state_dict() == {}


def test_the_config_is_torchtitans():
    cfg = ZephonValidationDataLoader.Config
    assert cfg._owner is ZephonValidationDataLoader and '__slots__' in cfg.__dict__
    assert {f.name for f in dataclasses.fields(cfg)} >= {'mount', 'eod_token', REPEAT_FIELD}


def test_a_mount_without_a_split_is_refused(ds, mounts):
    m = mounts(ds, world_size=1, global_batch=B)
    with pytest.raises(ValueError, match='has no validation split'):
        validator_loader(m.path, 0, 1)
