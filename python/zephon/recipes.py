"""TorchTitan config functions that read their data from a Zephon mount.

Run with TorchTitan's trainer (``--module zephon.recipes --config NAME``)::

    ZEPHON_MOUNT=/mnt/z torchrun --nproc_per_node=8 -m torchtitan.train \\
        --module zephon.recipes --config llama3_debugmodel_zephon

Each function takes TorchTitan's own config and changes only what the data needs: the data
loader (:class:`zephon.torchtitan.ZephonDataLoader`), a tokenizer that needs no files (the
data is tokens already), and no validation set (TorchTitan's validator reads its own
Hugging Face dataset). Every field can still be overridden on the command line
(``--dataloader.mount``, ``--dataloader.eod_token``, and the sizes: 0.3.0's
``--training.seq_len``, ``--training.local_batch_size``; main's
``--training.max_context_length``, ``--training.num_tokens_per_microbatch_per_dp_rank``).
The same functions serve both versions (:data:`zephon.torchtitan.CONTRACT`).

``python -m zephon.recipes TRAINER_OPTIONS`` checks the data of such a job on a CPU
(:func:`dry_run`).

The config they return is of a subclass of its ``Trainer.Config`` (:func:`zephon_config`)
that tells the data loader the trainer's batch sizes each time TorchTitan's command line is
parsed, so that a mount of another global batch than the trainer's is refused when the
loader is built (:mod:`zephon.agreement`); it builds the same ``Trainer``.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from torchtitan.trainer import Trainer

from .data_tokenizer import data_assets_folder
from .torchtitan import PretokenizedTokenizer, ZephonDataLoader, bind_trainer

__all__ = ["use_zephon", "bind", "zephon_config", "use_data_tokenizer", "llama3_debugmodel_zephon",
           "sft_debugmodel_zephon", "dry_run"]

_CONFIG_CLASSES: dict[type, type] = {}


def zephon_config(cls: type) -> type:
    """The subclass of the ``Trainer.Config`` class ``cls`` whose ``__post_init__`` also
    calls :func:`zephon.torchtitan.bind_trainer` and :func:`use_data_tokenizer`:
    TorchTitan's ConfigManager builds the config anew, of the config function's class, with
    the command line's values, so the data loader learns the sizes the trainer will use,
    and the model's assets are the data's tokenizer. No fields of its own; its owner (what
    ``config.build()`` makes) is ``cls``'s."""
    if getattr(cls, "_zephon_binds", False):
        return cls
    if cls not in _CONFIG_CLASSES:
        base_post_init = getattr(cls, "__post_init__", None)

        def __post_init__(self: Any) -> None:
            if base_post_init is not None:
                base_post_init(self)
            bind_trainer(self)
            use_data_tokenizer(self)

        name = "Zephon" + cls.__qualname__.replace(".", "")
        ns = {"__post_init__": __post_init__, "_zephon_binds": True, "__module__": __name__,
              "__qualname__": name, "__doc__": f"{cls.__qualname__}, telling a Zephon data "
              "loader the trainer's batch sizes (zephon.recipes.zephon_config)."}
        _CONFIG_CLASSES[cls] = dataclasses.dataclass(kw_only=True, slots=True)(
            type(name, (cls,), ns))
    return _CONFIG_CLASSES[cls]


def use_data_tokenizer(config: Any) -> Any:
    """Point ``config.hf_assets_path`` at the tokenizer the mount's dataset was packed with
    (``zephon pack --tokenizer`` records its path and sha256; :mod:`zephon.data_tokenizer`),
    where the config's own path is not a folder: TorchTitan's default
    (``./tests/assets/tokenizer``, its repository's) is none outside a TorchTitan checkout.
    A recorded folder that moved or whose files changed since the pack is not used, and a
    ``RuntimeWarning`` says which. Returns ``config``; the mount is the data loader's
    (``mount``, else ``$ZEPHON_MOUNT``); nothing changes without one."""
    dl = getattr(config, "dataloader", None)
    if not isinstance(dl, ZephonDataLoader.Config) or os.path.isdir(config.hf_assets_path):
        return config
    mount = dl.mount or os.environ.get("ZEPHON_MOUNT", "")
    if mount:
        folder = data_assets_folder(mount, f"the model's hf_assets_path stays "
                                    f"{config.hf_assets_path!r}: ")
        if folder:
            config.hf_assets_path = folder
    return config


def bind(config: Any) -> Any:
    """``config`` (a ``Trainer.Config`` whose data loader is a Zephon one) as an instance of
    :func:`zephon_config` of its class, bound: a copy of its fields (``config`` itself when
    it is one already). Return it from a config function, as :func:`use_zephon` does, so
    that the loader is told the trainer's sizes after the command line's overrides."""
    cls = zephon_config(type(config))
    if type(config) is not cls:
        fields = dataclasses.fields(config)
        new = cls(**{f.name: getattr(config, f.name) for f in fields if f.init})
        for f in fields:
            if not f.init:
                setattr(new, f.name, getattr(config, f.name))
        config = new
    return use_data_tokenizer(bind_trainer(config))


def use_zephon(config: Trainer.Config, *, mount: str | None = None,
               eod_token: int | None = None, vocab_size: int | None = None) -> Trainer.Config:
    """``config`` with its data from a Zephon mount, as an instance of
    :func:`zephon_config` of its class (a copy: use the returned config).

    ``mount`` defaults to ``$ZEPHON_MOUNT`` (read again when the loader is built, if still
    empty); ``eod_token`` to ``$ZEPHON_EOD_TOKEN`` when set, else None: the dataset's own
    (``zephon pack --eod-token``); ``vocab_size`` defaults to the model's (its
    ``model_spec``): the placeholder tokenizer reports it, and the loader refuses a dataset
    holding a token id at or above it."""
    if vocab_size is None:
        try:
            from torchtitan.models.common.config_utils import decoder_vocab_size
            vocab_size = decoder_vocab_size(config.model_spec)
        except (ImportError, AttributeError, TypeError, ValueError):
            vocab_size = None  # a model without one: nothing to check against
    if mount is None:
        mount = os.environ.get("ZEPHON_MOUNT", "")
    if eod_token is None and os.environ.get("ZEPHON_EOD_TOKEN"):
        eod_token = int(os.environ["ZEPHON_EOD_TOKEN"])
    config.dataloader = ZephonDataLoader.Config(mount=mount, eod_token=eod_token,
                                                vocab_size=vocab_size)
    config.tokenizer = PretokenizedTokenizer.Config(vocab_size=vocab_size or 0)
    config.validator.enable = False
    return bind(config)


def llama3_debugmodel_zephon() -> Trainer.Config:
    """TorchTitan's ``llama3_debugmodel`` (vocabulary 2048: token ids below 2048) with its
    data from ``$ZEPHON_MOUNT``. Pack for it with its tokenizer, ``zephon pack --tokenizer
    tests/assets/tokenizer --seq-len 2048 --overlap 1`` (TorchTitan's test tokenizer; or set
    ``--training.seq_len``) and mount with ``world_size`` = the data-parallel degree and
    ``global_batch`` = 8 x that degree (the config's micro-batch: 0.3.0's
    ``local_batch_size`` 8, main's 8 x 2048 tokens). A dataset with ids of 2048 or more is
    refused."""
    from torchtitan.models.common.config_utils import decoder_vocab_size
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    config = llama3_debugmodel()
    return use_zephon(config, vocab_size=decoder_vocab_size(config.model_spec))


def sft_debugmodel_zephon() -> Trainer.Config:
    """TorchTitan's ``sft_debugmodel`` (the Llama 3 debug model with flex attention,
    fine-tuned on chat samples) with its data from ``$ZEPHON_MOUNT``: a dataset of rows
    packed with ``zephon pack --tokenizer tests/assets/tokenizer --chat --seq-len 2048``
    (docs/fine-tuning.md), mounted with ``world_size`` = the data-parallel degree and
    ``global_batch`` = 8 x that degree. Rows of 2048 positions serve both versions (0.3.0's
    ``local_batch_size`` 8 x ``seq_len`` 2048; main's ``num_tokens_per_microbatch_per_dp_rank``
    8 x 2048, 8 rows one after the other); rows of 16384 (``--seq-len 16384
    --max-context-length 2048``) serve main, one row per micro-batch (``global_batch`` =
    the degree). Everything else is the config's own."""
    from torchtitan.models.common.config_utils import decoder_vocab_size
    from torchtitan.models.llama3.config_registry import sft_debugmodel

    config = sft_debugmodel()
    return use_zephon(config, vocab_size=decoder_vocab_size(config.model_spec))


def dry_run(argv: list[str] | None = None) -> int:
    """``python -m zephon.recipes [--dp N] [--batches K] TRAINER_OPTIONS``: what the trainer
    would read, without a GPU. TRAINER_OPTIONS are those given to ``-m torchtitan.train``
    (``--module zephon.recipes --config llama3_debugmodel_zephon ...``): TorchTitan's
    ConfigManager parses them, the tokenizer and the data loader of every DP rank (``--dp``,
    default the mount's ``world_size``) are built as the installed TorchTitan's trainer
    builds them, and K batches (2) of each are read and described. Exit status 1, with the
    reason, when the loader refuses the layout or a token id is not below the model's
    vocabulary (the embedding would fail on the GPU)."""
    import argparse
    import json

    from torchtitan.config import ConfigManager

    from .torchtitan import CONTRACT, ZephonDataLoader, trainer_loader_kwargs

    ap = argparse.ArgumentParser(prog="python -m zephon.recipes", description=(
        "Check a TorchTitan job's data on a CPU: build its Zephon data loader for every DP "
        "rank as the trainer would and read a few batches. The other options are the "
        "trainer's own (those after -m torchtitan.train)."))
    ap.add_argument("--dp", type=int, help="data-parallel degree (default: the mount's world_size)")
    ap.add_argument("--batches", type=int, default=2, help="batches read per DP rank (2)")
    a, trainer_args = ap.parse_known_args(argv)
    config = ConfigManager().parse_args(trainer_args)
    if not isinstance(config.dataloader, ZephonDataLoader.Config):
        print(f"the config's data loader is {type(config.dataloader).__qualname__}, not "
              "zephon's: use a config function that sets ZephonDataLoader.Config "
              "(--module zephon.recipes --config llama3_debugmodel_zephon)", file=sys.stderr)
        return 1
    # a config function that did not go through use_zephon: the trainer's loader would
    # not be told the trainer's sizes, the dry run is (it checks what the trainer reads)
    bind_trainer(config)
    mount = config.dataloader.mount or os.environ.get("ZEPHON_MOUNT", "")
    dp = a.dp
    if dp is None:
        try:
            with open(os.path.join(mount, "status")) as f:
                dp = int(json.load(f)["world_size"])
        except (OSError, ValueError, KeyError) as e:
            print(f"cannot read the world_size of the mount {mount!r} ({e}): is it mounted? "
                  "(--dataloader.mount or ZEPHON_MOUNT; or give --dp)", file=sys.stderr)
            return 1
    tokenizer = config.tokenizer.build(tokenizer_path=config.hf_assets_path)
    vocab = _model_vocab(config) or tokenizer.get_vocab_size()
    print(f"TorchTitan contract {CONTRACT}; mount {mount}; DP {dp}; model vocabulary {vocab}; "
          f"hf_assets_path {config.hf_assets_path}")
    for r in range(dp):
        try:
            dl = config.dataloader.build(dp_world_size=dp, dp_rank=r, tokenizer=tokenizer,
                                         **trainer_loader_kwargs(config))
            it = iter(dl)
            batches = [next(it) for _ in range(a.batches)]
        except (ValueError, StopIteration) as e:
            print(f"dp_rank {r} of {dp}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        step = dl.trainer_step
        if r == 0 and step is not None:
            print(f"trainer step: global batch {step.global_batch} samples ({step.formed}), "
                  f"micro-batches of {step.micro_batch} samples, {step.micro_batches} per DP rank: "
                  f"the mount's global_batch {dl.loader.global_batch}")
        top = max(int(b[0]["input"].max()) for b in batches)
        inp, labels = batches[-1]
        print(f"dp_rank {r} of {dp}: {a.batches} batches of {tuple(labels.shape)} "
              f"{str(labels.dtype).replace('torch.', '')}, token ids up to {top}, "
              f"consumed_samples {dl.state_dict()['consumed_samples']}")
        if vocab and top >= vocab:
            print(f"dp_rank {r}: token id {top} is not below the model's vocabulary {vocab}: "
                  "the dataset was tokenized for another model", file=sys.stderr)
            return 1
    print("dry run passed: the trainer can read this data (no GPU used)")
    return 0


def _model_vocab(config: Trainer.Config) -> int:
    """The model's vocabulary size, 0 when the config does not say."""
    try:
        from torchtitan.models.common.config_utils import decoder_vocab_size
        return int(decoder_vocab_size(config.model_spec))
    except Exception:          # another model family: the tokenizer's size instead
        return 0


if __name__ == "__main__":
    sys.exit(dry_run())
