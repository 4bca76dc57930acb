"""The trainer and the mount cannot disagree on a step (zephon.agreement), on the TorchTitan
of this venv (0.3.0, or git main under run-titan-main), with and without pipeline
parallelism: TorchTitan's ConfigManager parses the recipe with the trainer's own options
(the command line's overrides included), and the data loader is built with the keyword
arguments that version's trainer passes. A mount of another global batch than the
trainer's is refused at build time, naming both numbers and the fixes; with the fix, the
loader builds and each DP rank takes exactly its share of a step per optimizer step.

0.3.0 forms its global batch in samples (training.global_batch_size, default
local_batch_size x DP degree; pipeline microbatches split the local batch), main in tokens
(training.num_tokens_per_train_step, default num_tokens_per_microbatch_per_dp_rank x
num_pp_microbatches x DP degree): torchtitan/trainer.py of each.
"""
import dataclasses

import pytest
from torchtitan.config import ConfigManager
from torchtitan.trainer import Trainer

from conftest import Mounts
from titan_helpers import FLAT, build_as_trainer, documents, pack_tokens, pp_cli, trainer_cli
from zephon.recipes import llama3_debugmodel_zephon, use_zephon, zephon_config
from zephon.torchtitan import (ZephonDataLoader, ZephonValidationDataLoader, bind_trainer,
                               trainer_loader_kwargs)

SEQ = 16


@pytest.fixture(scope='module')
def ds(tmp_path_factory):
    # ids below the debug model's vocabulary of 2048
    return pack_tokens(tmp_path_factory.mktemp('agree') / 'ds', documents(20000, 300), SEQ)


@pytest.fixture
def mounts(tmp_path):
    ms = Mounts(tmp_path, seed=3)
    yield ms
    ms.close()


def parse(mount, *options):
    """The recipe's config as TorchTitan's trainer gets it: ConfigManager on the command line."""
    return ConfigManager().parse_args([
        '--module', 'zephon.recipes', '--config', 'llama3_debugmodel_zephon',
        '--dataloader.mount', str(mount), *map(str, options)])


def build_all(config, dp):
    """The loader of every DP rank, as the trainer builds it."""
    return [build_as_trainer(config, dp, r, None) for r in range(dp)]


def refused(fn, *parts):
    with pytest.raises(ValueError) as e:
        fn()
    msg = str(e.value)
    assert all(p in msg for p in parts), msg
    return msg


def steps_read(loaders, micro_batches, steps=2):
    """Each rank's next() micro_batches times per optimizer step, as the trainer's
    train_step does; the loaders' positions after it (one step of the mount each time)."""
    its = [iter(dl) for dl in loaders]
    for _ in range(steps):
        for it in its:
            for _ in range(micro_batches):
                next(it)
    return [dl.state_dict() for dl in loaders]


def test_a_smaller_local_batch_than_the_mounts_is_refused_with_both_numbers_and_the_fix(
        ds, mounts):
    """The issue's case: the mount sized for the default micro-batch, the trainer given a
    smaller one on the command line (its global batch follows it)."""
    m = mounts(ds, world_size=2, global_batch=8)
    config = parse(m.path, *trainer_cli(SEQ, 2))         # trainer: 2 x DP 2 = 4 samples
    fix = ('--training.num_tokens_per_train_step %d' % (8 * SEQ) if FLAT else
           '--training.global_batch_size 8')
    msg = refused(lambda: build_as_trainer(config, 2, 0, None),
                  "the trainer's global batch is 4 samples", "the mount's global_batch is 8",
                  'remount with world_size=2,global_batch=4', fix)
    assert ('num_tokens_per_microbatch_per_dp_rank %d x data-parallel degree 2' % (2 * SEQ)
            if FLAT else 'training.local_batch_size 2 x data-parallel degree 2') in msg, msg
    # the fix it names: the trainer's global batch set to the mount's (gradient accumulation 2)
    config = parse(m.path, *trainer_cli(SEQ, 2), *fix.split())
    loaders = build_all(config, 2)
    step = loaders[0].trainer_step
    assert (step.global_batch, step.micro_batch, step.micro_batches) == (8, 2, 2)
    states = steps_read(loaders, step.micro_batches)
    assert all(s['consumed_samples'] == 16 and s['step_offset'] == 0 for s in states), states


def test_a_larger_global_batch_than_the_mounts_is_refused(ds, mounts):
    m = mounts(ds, world_size=2, global_batch=8)
    config = parse(m.path, *trainer_cli(SEQ, 2, global_batch=16))
    refused(lambda: build_as_trainer(config, 2, 1, None), "the trainer's global batch is 16",
            "the mount's global_batch is 8", 'global_batch=16',
            'gradient accumulation 4')
    # the remount it names
    m16 = mounts(ds, world_size=2, global_batch=16, journal=m.path + '.16.sqlite')
    config = parse(m16.path, *trainer_cli(SEQ, 2, global_batch=16))
    assert build_as_trainer(config, 2, 1, None).trainer_step.micro_batches == 4


def test_a_global_batch_torchtitan_refuses_is_refused_at_build(ds, mounts):
    """Not a whole number of gradient accumulation steps: TorchTitan's trainer refuses it
    (an assert on 0.3.0, a ValueError on main) after building the model; the loader first."""
    m = mounts(ds, world_size=2, global_batch=4)
    config = parse(m.path, *trainer_cli(SEQ, 2, global_batch=6))   # 6 % (2 x DP 2)
    refused(lambda: build_as_trainer(config, 2, 0, None), 'is not a multiple of',
            "TorchTitan's trainer refuses it")


def test_pipeline_parallel_microbatches_count_in_the_global_batch_as_each_version_says(
        ds, mounts):
    """main: each DP rank takes num_pp_microbatches micro-batches per accumulation step, so
    the default global batch is micro x num_pp_microbatches x DP (a mount of micro x DP holds
    half a step with 2). 0.3.0: pipeline microbatches split local_batch_size, the loader
    yields micro-batches of pipeline_parallel_microbatch_size, and the default global batch
    stays local_batch_size x DP."""
    dp = 2
    if FLAT:   # micro-batches of 2 samples, 2 pipeline microbatches: 8 samples per step
        opts = [*trainer_cli(SEQ, 2), *pp_cli(2, 2)]
        right, wrong = 8, 4
    else:      # local batch 4 in pipeline microbatches of 2: 8 samples per step
        opts = [*trainer_cli(SEQ, 4), *pp_cli(2, 2)]
        right, wrong = 8, 16
    bad = mounts(ds, world_size=dp, global_batch=wrong)
    refused(lambda: build_as_trainer(parse(bad.path, *opts), dp, 0, None),
            "the trainer's global batch is %d samples" % right,
            "the mount's global_batch is %d" % wrong,
            'parallelism.num_pp_microbatches 2' if FLAT else 'in pipeline microbatches of 2')
    good = mounts(ds, world_size=dp, global_batch=right, journal=bad.path + '.2.sqlite')
    config = parse(good.path, *opts)
    # the keywords the dry run builds with are the trainer's (0.3.0: the PP micro-batch)
    assert trainer_loader_kwargs(config) == (
        dict(max_context_length=SEQ, num_tokens_per_batch=2 * SEQ) if FLAT else
        dict(seq_len=SEQ, local_batch_size=2, snapshot_every_n_steps=10))
    loaders = build_all(config, dp)
    step = loaders[0].trainer_step
    assert (step.global_batch, step.micro_batch, step.micro_batches) == (right, 2, 2)
    assert loaders[0].micro_batch == 2
    states = steps_read(loaders, step.micro_batches, steps=3)
    assert all(s['consumed_samples'] == 3 * right and s['step_offset'] == 0 for s in states)


def test_the_config_is_told_the_sizes_after_every_parse_and_builds_the_same_trainer():
    """use_zephon returns an instance of a subclass of the config's class whose
    __post_init__ binds: ConfigManager builds the config anew, with the command line's
    values, so the loader sees the overrides; config.build() still makes a Trainer."""
    config = llama3_debugmodel_zephon()
    cls = type(config)
    assert issubclass(cls, Trainer.Config) and cls is zephon_config(Trainer.Config)
    assert cls._owner is Trainer and zephon_config(cls) is cls
    assert not [f for f in dataclasses.fields(cls) if f.name not in
                {g.name for g in dataclasses.fields(Trainer.Config)}]
    base = config.dataloader.trainer
    assert base is not None
    parsed = parse('/nowhere', *trainer_cli(SEQ, 3, global_batch=12))
    assert type(parsed) is cls
    told = parsed.dataloader.trainer
    if FLAT:
        assert (told.tokens_per_microbatch, told.tokens_per_train_step) == (3 * SEQ, 12 * SEQ)
    else:
        assert (told.local_batch_size, told.global_batch_size) == (3, 12)
    # the option is not one of the command line's (a field of the config, suppressed)
    with pytest.raises(SystemExit):
        ConfigManager().parse_args(['--module', 'zephon.recipes', '--config',
                                    'llama3_debugmodel_zephon', '--dataloader.trainer', 'x'])
    # a validation loader is not told: it reads its split, not the trainer's steps
    from torchtitan.models.llama3.config_registry import llama3_debugmodel
    plain = llama3_debugmodel()
    plain.dataloader = ZephonDataLoader.Config(mount='/x')
    plain.validator.dataloader = ZephonValidationDataLoader.Config(mount='/x')
    # a plain config is not told until bound (the dry run binds it)
    assert plain.dataloader.trainer is None
    bound = use_zephon(plain, mount='/x')
    assert type(bound) is cls and bound.dataloader.trainer is not None
    assert bound.validator.dataloader.trainer is None
    other = llama3_debugmodel()
    other.dataloader = ZephonDataLoader.Config(mount='/x')
    assert bind_trainer(other).dataloader.trainer is not None


def test_a_config_changed_after_it_was_told_is_refused(ds, mounts):
    m = mounts(ds, world_size=1, global_batch=4)
    config = parse(m.path, *trainer_cli(SEQ, 2, global_batch=4))
    if FLAT:
        config.training.num_tokens_per_microbatch_per_dp_rank = 4 * SEQ
    else:
        config.training.local_batch_size = 4
    refused(lambda: build_as_trainer(config, 1, 0, None),
            'micro-batches of 4 samples, but its config says 2', 'bind_trainer')
    bind_trainer(config)
    assert build_as_trainer(config, 1, 0, None).trainer_step.micro_batches == 1


def test_the_loaders_without_the_trainers_sizes_still_build(ds, mounts):
    """A config not made by use_zephon (a test harness, another trainer): nothing to
    compare, as before; the loader's own checks still hold."""
    m = mounts(ds, world_size=1, global_batch=8)
    dl = ZephonDataLoader.Config(mount=m.path).build(
        dp_world_size=1, dp_rank=0, tokenizer=None,
        **(dict(max_context_length=SEQ, num_tokens_per_batch=2 * SEQ) if FLAT else
           dict(seq_len=SEQ, local_batch_size=2)))
    assert dl.trainer_step is None and dl.loader.global_batch == 8
    assert dl.loader.gradient_accumulation_steps == 4
