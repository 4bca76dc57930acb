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
"""
from __future__ import annotations

import os
import sys

from torchtitan.trainer import Trainer

from .torchtitan import PretokenizedTokenizer, ZephonDataLoader

__all__ = ["use_zephon", "llama3_debugmodel_zephon", "sft_debugmodel_zephon", "dry_run"]


def use_zephon(config: Trainer.Config, *, mount: str | None = None,
               eod_token: int | None = None, vocab_size: int | None = None) -> Trainer.Config:
    """``config`` with its data from a Zephon mount (changed in place and returned).

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
    return config


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
    print(f"TorchTitan contract {CONTRACT}; mount {mount}; DP {dp}; model vocabulary {vocab}")
    for r in range(dp):
        try:
            dl = config.dataloader.build(dp_world_size=dp, dp_rank=r, tokenizer=tokenizer,
                                         **trainer_loader_kwargs(config))
            it = iter(dl)
            batches = [next(it) for _ in range(a.batches)]
        except (ValueError, StopIteration) as e:
            print(f"dp_rank {r} of {dp}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
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
