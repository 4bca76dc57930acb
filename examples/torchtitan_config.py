"""TorchTitan (0.3.0) with its data from a Zephon mount: a config function to start from.

examples/torchtitan_demo.sh runs it; by hand, with this directory on PYTHONPATH:

    zephon mount DS MNT -o world_size=DP,global_batch=G,seed=1,validation=0.05,journal=J
    ZEPHON_MOUNT=MNT torchrun --nproc_per_node=DP -m torchtitan.train \\
        --module torchtitan_config --config llama3_debug_zephon \\
        --training.local_batch_size G/DP --training.seq_len L

The mount's world_size is the data-parallel degree (not the process count when tensor,
pipeline or context parallelism is on) and its global_batch the trainer's global batch;
the dataset's windows are seq_len + 1 tokens (zephon pack --seq-len L --overlap 1).
"""
from __future__ import annotations

import os

from torchtitan.components.validate import Validator
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.llama3.config_registry import llama3_debugmodel
from torchtitan.trainer import Trainer

from zephon.recipes import bind
from zephon.torchtitan import (PretokenizedTokenizer, ZephonDataLoader,
                               ZephonValidationDataLoader)


def llama3_debug_zephon() -> Trainer.Config:
    """TorchTitan's Llama 3 debug model (token ids below 2048) trained on $ZEPHON_MOUNT,
    evaluated every 5 steps on the mount's whole held-out split (``validation=``)."""
    config = llama3_debugmodel()                    # any Trainer.Config function of yours
    mount = os.environ.get("ZEPHON_MOUNT", "")      # or --dataloader.mount
    config.dataloader = ZephonDataLoader.Config(mount=mount)
    # the data is token ids already: a tokenizer that needs no files
    config.tokenizer = PretokenizedTokenizer.Config(
        vocab_size=decoder_vocab_size(config.model_spec))
    config.validator = Validator.Config(
        enable=True, freq=5, steps=-1, dataloader=ZephonValidationDataLoader.Config(mount=mount))
    # the loader told the trainer's batch sizes as the command line sets them: a mount of
    # another global batch is refused when the trainer builds it (zephon.agreement)
    return bind(config)
