"""TorchTitan config functions that read their data from a Zephon mount.

Run with TorchTitan's trainer (``--module zephon.recipes --config NAME``)::

    ZEPHON_MOUNT=/mnt/z torchrun --nproc_per_node=8 -m torchtitan.train \\
        --module zephon.recipes --config llama3_debugmodel_zephon

Each function takes TorchTitan's own config and changes only what the data needs: the data
loader (:class:`zephon.torchtitan.ZephonDataLoader`), a tokenizer that needs no files (the
data is tokens already), and no validation set (TorchTitan's validator reads its own
Hugging Face dataset). Every field can still be overridden on the command line
(``--dataloader.mount``, ``--dataloader.eod_token``, ``--training.seq_len`` ...).
"""
from __future__ import annotations

import os

from torchtitan.trainer import Trainer

from .torchtitan import PretokenizedTokenizer, ZephonDataLoader

__all__ = ["use_zephon", "llama3_debugmodel_zephon"]


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
    ``global_batch`` = ``local_batch_size`` (8) x that degree. A dataset with ids of 2048
    or more is refused."""
    from torchtitan.models.common.config_utils import decoder_vocab_size
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    config = llama3_debugmodel()
    return use_zephon(config, vocab_size=decoder_vocab_size(config.model_spec))
