"""TorchTitan data loader over a Zephon mount: resume at any data-parallel degree.

:class:`ZephonDataLoader` is a subclass of TorchTitan's ``BaseDataLoader``, of TorchTitan
0.3.0 (PyPI) or of its git main (since Aug 2026): this module finds which one is installed
(:data:`CONTRACT`) and serves it, one code for both. A user enables it by replacing
``config.dataloader`` in a TorchTitan config function::

    from zephon.torchtitan import ZephonDataLoader
    config.dataloader = ZephonDataLoader.Config(mount="/mnt/z")

(:func:`zephon.recipes.llama3_debugmodel_zephon` is that recipe for the Llama 3 debug
model.) The trainer builds it with the keyword arguments it passes every data loader; the
loader reads the DP rank's share of each global step from the mount
(:class:`zephon.torch.ZephonLoader`) and yields TorchTitan's batch::

    ({"input": ids, "positions": positions}, labels)        # all int64

- TorchTitan 0.3.0 (``seq_len``, ``local_batch_size`` passed): each of shape
  ``[local_batch_size, seq_len]``, one sample per row.
- TorchTitan's main (``max_context_length``, ``num_tokens_per_batch`` passed, no
  ``local_batch_size``): each 1-D of ``num_tokens_per_batch`` tokens, the samples one after
  the other (its ``TrainerBatch``); ``positions`` return to 0 at each sample so no sample
  attends to another.

A dataset of rows of whole documents (``zephon pack --whole-documents`` or ``--chat``:
fine-tuning data, docs/fine-tuning.md) gives each row's stored inputs, labels (the prompt
and the padding masked with ``IGNORE_INDEX``) and positions (:mod:`zephon.sft`): on
0.3.0 ``[local_batch_size, row_len]`` (``seq_len`` must be ``row_len``), on main 1-D of
``num_tokens_per_batch``, a whole number of rows (its documents no longer than
``max_context_length``). The rest of this text is about windows of the token stream.

``labels`` are the inputs shifted by one. A dataset packed with windows of ``seq_len + 1``
tokens (``zephon pack --format tokens --seq-len L --overlap 1``, the Megatron convention;
or plain windows of L + 1) gives ``input = w[:-1]``, ``labels = w[1:]``: every token has its
label. With plain windows of ``seq_len`` tokens the last token of a window has no next token
in the same sample (the next window in the stream is another, shuffled sample), so its label
is TorchTitan's ``IGNORE_INDEX`` (-100) and the loss skips it.

``positions`` count from 0 at the start of each window, and from 0 again after every
end-of-document token (the Megatron ``reset_position_ids`` rule: the token after an EOD
starts a document; the EOD belongs to the document it ends), as TorchTitan's own packing
restarts them at every document. The EOD token is the dataset's own: ``zephon pack
--eod-token ID`` puts ID after every document (of a Megatron ``.idx``; a ``.bin`` or
``.npy`` input is one document) and records it, and the mount's ``/status`` tells the
loader. ``Config.eod_token`` names one for a dataset that recorded none (its tokens carry
EOD ids already); one that differs from the dataset's is refused. Block-causal attention
masks (FlexAttention, varlen) are built from these positions by the trainer.

Processes that share a DP rank (tensor, pipeline and context parallel peers) read the same
pure files and get identical bytes. The state (``state_dict()``) is the loader's
(:meth:`zephon.torch.ZephonLoader.state_dict`): the position of the global stream plus the
dataset fingerprint and seed, the same keys and values on every rank, so
``torch.distributed.checkpoint``, which stores a value that every rank holds under one key
once, keeps exactly it, and a checkpoint taken at DP degree 4 restores at 2, 3 or 8, and with
another global batch. The mount must be mounted with ``world_size`` = the DP degree and
``global_batch`` = the trainer's global batch (:mod:`zephon.agreement` says how each version
forms it): one optimizer step of the trainer is one step of the mount. A config made by
:func:`zephon.recipes.use_zephon` tells the loader the trainer's sizes after the command
line's overrides (:func:`bind_trainer`), and the loader refuses a mount of another global
batch when it is built.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Annotated, Any, Iterator

import torch
import tyro
from torchtitan.components.loss import IGNORE_INDEX
from torchtitan.components.tokenizer import BaseTokenizer

from .agreement import TitanBatching, TrainerStep, require_same_step
from .sft import check_rows, check_rows_length, rows_trainer_batch
from .torch import TokenMount, ZephonLoader, ZephonValidationLoader

# The contract this process runs against, found once, by where TorchTitan keeps it:
# - "data.loader": TorchTitan's git main since Aug 2026 (its assets/version.txt says 0.2.2):
#   BaseDataLoader in torchtitan/components/data/loader.py, TrainerBatch in
#   components/data/collators.py, the trainer passes max_context_length and
#   num_tokens_per_batch (1-D batches), the validator sets the loader config's ``repeat``.
# - "dataloader": the released 0.3.0 (PyPI): BaseDataLoader in
#   torchtitan/components/dataloader.py, the trainer passes seq_len and local_batch_size
#   ([local_batch_size, seq_len] batches), the validator sets ``infinite``.
try:
    from torchtitan.components.data.collators import TrainerBatch
    from torchtitan.components.data.loader import BaseDataLoader
    CONTRACT = "data.loader"
except ModuleNotFoundError as e:
    if not (e.name or "").startswith("torchtitan.components.data"):
        raise                # TorchTitan's own module failed to import: not a version question
    from torchtitan.components.dataloader import BaseDataLoader
    TrainerBatch = tuple[dict[str, torch.Tensor], torch.Tensor]
    CONTRACT = "dataloader"
if not hasattr(BaseDataLoader, "Config"):
    # TorchTitan before its Configurable components (PyPI 0.2.2 and older: JobConfig)
    import torchtitan as _titan
    raise ImportError(
        f"zephon.torchtitan supports TorchTitan 0.3.0 and TorchTitan's git main (Configurable "
        f"data loaders with a nested Config); this torchtitan "
        f"{getattr(_titan, '__version__', '?')} ({_titan.__file__}) has a BaseDataLoader "
        f"without Config: install torchtitan 0.3.0 (pip install 'zephon[torchtitan]') or a "
        f"checkout of its main")

# the field of a loader config that TorchTitan's Validator sets (dataclasses.replace) when
# validator.steps is not -1: read the split again from its start when it runs out
REPEAT_FIELD = "repeat" if CONTRACT == "data.loader" else "infinite"

__all__ = ["ZephonDataLoader", "ZephonValidationDataLoader", "PretokenizedTokenizer",
           "trainer_batch", "trainer_loader_kwargs", "bind_trainer", "CONTRACT",
           "REPEAT_FIELD"]


def positions_of(inputs: torch.Tensor, eod_token: int | None = None) -> torch.Tensor:
    """Per-token positions of ``inputs`` ``[batch, length]`` (int64, same shape): 0 at the
    start of each row and, when ``eod_token`` is given, 0 at every token that follows an
    ``eod_token``; +1 elsewhere."""
    n = inputs.shape[-1]
    idx = torch.arange(n, dtype=torch.int64).expand(inputs.shape)
    if eod_token is None:
        return idx.clone()
    starts = torch.zeros(inputs.shape, dtype=torch.bool)
    starts[..., 0] = True
    starts[..., 1:] = inputs[..., :-1] == eod_token
    last_start = torch.where(starts, idx, torch.zeros_like(idx)).cummax(dim=-1).values
    return idx - last_start


def trainer_batch(windows: torch.Tensor, seq_len: int, *, eod_token: int | None = None,
                  flat: bool = False) -> TrainerBatch:
    """TorchTitan's batch from ``windows`` ``[m, w]`` (int64) for inputs of ``seq_len``
    tokens: ``w == seq_len + 1`` splits each window into ``w[:-1]`` and ``w[1:]``;
    ``w == seq_len`` keeps the window as input and gives its last label ``IGNORE_INDEX``.
    ``flat`` joins the ``m`` samples into 1-D tensors of ``m * seq_len`` tokens. With
    ``eod_token``, the label of every input that is ``eod_token`` is ``IGNORE_INDEX``:
    across a document boundary TorchTitan's own datasets never train "the next document's
    first token after an EOS" (they shift inputs and labels within each document), nor
    does Megatron with ``--eod-mask-loss``. Raises ``ValueError`` for any other ``w``."""
    m, w = windows.shape
    if w == seq_len + 1:
        inputs, labels = windows[:, :-1], windows[:, 1:]
    elif w == seq_len:
        inputs = windows
        labels = torch.empty_like(windows)
        labels[:, :-1] = windows[:, 1:]
        labels[:, -1] = IGNORE_INDEX
    else:
        raise ValueError(f"windows of {w} tokens do not make inputs of seq_len {seq_len}; "
                         f"pack with --seq-len {seq_len} --overlap 1 or set the trainer's "
                         f"seq_len to {w - 1}")
    positions = positions_of(inputs, eod_token)
    if eod_token is not None:
        labels = torch.where(inputs == eod_token, IGNORE_INDEX, labels)
    if flat:
        return ({"input": inputs.reshape(-1), "positions": positions.reshape(-1)},
                labels.reshape(-1))
    return {"input": inputs.contiguous(), "positions": positions}, labels.contiguous()


def trainer_loader_kwargs(config: Any) -> dict[str, Any]:
    """The keyword arguments, besides ``dp_world_size``, ``dp_rank`` and ``tokenizer``, that
    the running TorchTitan's trainer builds ``config.dataloader`` with, from its
    ``Trainer.Config``: main's ``max_context_length`` and ``num_tokens_per_batch``
    (``training.num_tokens_per_microbatch_per_dp_rank``), or 0.3.0's ``seq_len``,
    ``local_batch_size`` (``parallelism.pipeline_parallel_microbatch_size`` with pipeline
    parallelism) and ``snapshot_every_n_steps`` (torchtitan/trainer.py of each)."""
    t = config.training
    if CONTRACT == "data.loader":
        return dict(max_context_length=t.max_context_length,
                    num_tokens_per_batch=t.num_tokens_per_microbatch_per_dp_rank)
    p = config.parallelism
    micro = p.pipeline_parallel_microbatch_size if p.pipeline_parallel_degree > 1 else \
        t.local_batch_size
    return dict(seq_len=t.seq_len, local_batch_size=micro,
                snapshot_every_n_steps=config.checkpoint.interval)


def bind_trainer(config: Any) -> Any:
    """Tell ``config.dataloader``, a :class:`ZephonDataLoader` config, the batch sizes of
    ``config`` (a ``Trainer.Config``, as the command line left it), so that the loader
    refuses a mount of another global batch when it is built (:mod:`zephon.agreement`).
    Returns ``config``; other data loaders are left alone. The config classes of
    :func:`zephon.recipes.use_zephon` call it after every parse of the command line."""
    dl = getattr(config, "dataloader", None)
    if isinstance(dl, ZephonDataLoader.Config) and \
            not isinstance(dl, ZephonValidationDataLoader.Config):
        dl.trainer = TitanBatching.of(config, CONTRACT)
    return config


class ZephonDataLoader(BaseDataLoader):
    """One DP rank's TorchTitan batches from a Zephon mount of a token dataset.

    Built by TorchTitan's trainer through ``Config.build(dp_world_size=, dp_rank=,
    tokenizer=, seq_len=, local_batch_size=, ...)`` (0.3.0) or ``Config.build(dp_world_size=,
    dp_rank=, tokenizer=, max_context_length=, num_tokens_per_batch=, ...)`` (main);
    other keyword arguments are ignored. The tokenizer is not used: the
    dataset is already tokenized.

    Raises ``ValueError`` (nothing read from the stream) when the mount does not fit the
    trainer: no mount configured, not a token dataset, ``world_size`` other than the DP
    degree, a rank the mount does not serve, windows that do not make inputs of the
    trainer's sequence length, a micro-batch that does not divide the rank's share of a
    step, ``num_tokens_per_batch`` that is not a whole number of samples, an
    ``eod_token`` other than the dataset's, or a dataset holding token ids the model's
    ``vocab_size`` does not.
    """

    _loader_cls: type[ZephonLoader] | type[ZephonValidationLoader] = ZephonLoader

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        mount: str = ""
        """Mountpoint of the Zephon mount (``zephon mount DATASET MOUNTPOINT -o
        world_size=DP,global_batch=B``); empty: the ``ZEPHON_MOUNT`` environment variable."""

        eod_token: int | None = None
        """End-of-document token id: positions restart after each one. None (default):
        the dataset's own (``zephon pack --eod-token``), or, for a dataset without one,
        positions count per window. A value other than the dataset's is refused
        (``ValueError``): positions would not restart where its documents start."""

        vocab_size: int | None = None
        """The model's vocabulary size: a dataset holding a token id at or above it
        (``max_token_id`` in ``zephon info``) is refused with a ``ValueError`` at build
        time. ``zephon.recipes.use_zephon`` sets it from the model's config."""

        torchft: bool = False
        """torchft loader mode (docs/torchft.md): each step serves the next samples of
        the global stream to the quorum's participating replica groups, and the position
        travels with the model to a group that heals. Needs the trainer's
        ``fault_tolerance`` to be ``zephon.torchtitan_ft.ZephonTorchFTManager.Config``
        (``zephon.torchtitan_ft.use_torchft`` sets both)."""

        trainer: Annotated[TitanBatching | None, tyro.conf.Suppress] = None
        """The trainer's batch sizes (:func:`bind_trainer`, not an option): the loader
        refuses a mount whose ``global_batch`` is not the trainer's global batch. None: not
        told (a config that ``use_zephon`` did not make), nothing to compare."""

    #: whether one optimizer step of the trainer reads one step of the mount (validation
    #: reads its own split, whole, at each evaluation)
    _one_step_per_trainer_step = True

    def __init__(self, config: Config, *, dp_world_size: int, dp_rank: int,
                 tokenizer: BaseTokenizer | None = None, seq_len: int | None = None,
                 local_batch_size: int | None = None, max_context_length: int | None = None,
                 num_tokens_per_batch: int | None = None, **kwargs: Any) -> None:
        mount = config.mount or os.environ.get("ZEPHON_MOUNT", "")
        if not mount:
            raise ValueError("no zephon mount to read: set the data loader config's mount "
                             "(--dataloader.mount PATH) or ZEPHON_MOUNT")
        self.config = config
        self.dp_rank, self.dp_world_size = int(dp_rank), int(dp_world_size)
        ft: dict[str, Any] = {}
        if config.torchft and self._loader_cls is ZephonLoader:
            from .torchtitan_ft import replica_group  # zephon.torchft's mode
            self.dp_rank, self.dp_world_size, ft["torchft"] = replica_group(
                self.dp_rank, self.dp_world_size)
        if local_batch_size is not None or num_tokens_per_batch is None:
            if seq_len is None or local_batch_size is None:
                raise ValueError("the trainer passed neither seq_len and local_batch_size "
                                 "nor num_tokens_per_batch; cannot size the batches")
            self.flat = False
            self.seq_len, micro = int(seq_len), int(local_batch_size)
            # rows of another length: say so before any refusal of the micro-batch
            check_rows_length(mount, self.seq_len)
            if num_tokens_per_batch is not None and \
                    int(num_tokens_per_batch) != micro * self.seq_len:
                raise ValueError(f"num_tokens_per_batch {num_tokens_per_batch} is not "
                                 f"local_batch_size {micro} x seq_len {self.seq_len}")
            self._loader = self._loader_cls(mount, dp_rank=self.dp_rank,
                                            dp_world_size=self.dp_world_size, micro_batch=micro,
                                            vocab_size=config.vocab_size, **ft)
        else:
            # 1-D batches of num_tokens_per_batch tokens: a whole number of samples of the
            # pack's --seq-len (the mount's sample_tokens; the loader refuses another)
            self.flat = True
            self._loader = self._loader_cls(mount, dp_rank=self.dp_rank,
                                            dp_world_size=self.dp_world_size,
                                            tokens_per_batch=int(num_tokens_per_batch),
                                            vocab_size=config.vocab_size, **ft)
            self.seq_len = self._loader.seq_len
            if self._loader.row_len:
                pass           # rows: check_rows below bounds their documents instead
            elif max_context_length is not None and self.seq_len > int(max_context_length):
                raise ValueError(f"the mount's samples have {self.seq_len} input tokens, more "
                                 f"than max_context_length {max_context_length}; pack with "
                                 "a shorter --seq-len or raise max_context_length")
        self.trainer_step: TrainerStep | None = None
        """The trainer's step as the loader was told it (None where it was not, and in
        torchft mode, whose steps are the quorum's)."""
        if config.trainer is not None and self._one_step_per_trainer_step and not ft:
            self.trainer_step = _same_step(config.trainer, self._loader)
        if self._loader.row_len:
            # a dataset of rows (zephon.sft): inputs, labels and positions as stored
            check_rows(self._loader, seq_len=None if self.flat else self.seq_len,
                       max_context_length=max_context_length, eod_token=config.eod_token)
            self.eod_token: int | None = None
            self.micro_batch = self._loader.micro_batch
            self._warned_offset = False
            return
        w = self._loader.window
        if w not in (self.seq_len, self.seq_len + 1):
            raise ValueError(f"the mount at {mount} serves windows of {w} tokens, which do not "
                             f"make inputs of the trainer's seq_len {self.seq_len}: pack with "
                             f"--seq-len {self.seq_len} --overlap 1, or set training.seq_len "
                             f"to {self._loader.seq_len}")
        if self._loader.overlap and w != self.seq_len + 1:
            raise ValueError(f"the mount's windows overlap by one token ({w} tokens), so they "
                             f"make inputs of {w - 1} tokens, not seq_len {self.seq_len}; set "
                             f"training.seq_len to {w - 1}")
        self.eod_token = self._eod_token(config.eod_token, self._loader.eod_token)
        self.micro_batch = self._loader.micro_batch
        self._warned_offset = False

    @staticmethod
    def _eod_token(configured: int | None, dataset: int | None) -> int | None:
        """The EOD token positions restart after: the dataset's, else the config's."""
        if configured is None:
            return dataset
        if dataset is not None and int(configured) != dataset:
            raise ValueError(f"the data loader's eod_token {configured} is not the dataset's "
                             f"end-of-document token {dataset} (zephon pack --eod-token), so "
                             "positions would not restart where its documents start; drop "
                             f"--dataloader.eod_token (and ZEPHON_EOD_TOKEN) or set it to "
                             f"{dataset}")
        return int(configured)

    @property
    def loader(self) -> ZephonLoader:
        """The underlying :class:`zephon.torch.ZephonLoader` (raw windows, the position)."""
        ld = self._loader
        assert isinstance(ld, ZephonLoader)     # _loader_cls of this class
        return ld

    def __iter__(self) -> Iterator[TrainerBatch]:
        if self._loader.row_len:
            for rows in self._loader:
                yield rows_trainer_batch(rows, flat=self.flat)
            return
        for windows in self._loader:
            yield trainer_batch(windows, self.seq_len, eod_token=self.eod_token, flat=self.flat)

    def state_dict(self) -> dict[str, Any]:
        """The loader's position (see :meth:`zephon.torch.ZephonLoader.state_dict`), the
        same on every rank.

        TorchTitan saves after an optimizer step; a state taken inside a step of the mount
        means the trainer's global batch is not the mount's ``global_batch``: it restores
        only at the same layout, so this warns once."""
        state = self.loader.state_dict()
        if state.get("step_offset") and not self._warned_offset:
            self._warned_offset = True
            warnings.warn(
                f"the data loader state was taken {state['step_offset']} samples into a step "
                f"of the mount (global_batch {self.loader.global_batch}): the trainer's global "
                "batch differs from the mount's, so this checkpoint restores only at the same "
                "data-parallel degree and global batch; mount with global_batch = the "
                "trainer's global batch", RuntimeWarning, stacklevel=2)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Position the stream where ``state_dict`` says (saved at any DP degree). An empty
        state (a checkpoint without data loader state) leaves the position as mounted.
        Raises ``ValueError`` for a state of another dataset, seed or window."""
        if not state_dict:
            return
        self.loader.load_state_dict(state_dict)


def _same_step(batching: TitanBatching, loader: TokenMount) -> TrainerStep:
    """The trainer's step, after refusing (``ValueError``) a mount of another global batch,
    or a loader built for another micro-batch than the config says (the config changed
    after it was bound)."""
    step = batching.step(loader.dp_world_size, loader.seq_len)
    require_same_step(loader.global_batch, loader.dp_world_size, step)
    if step.micro_batch != loader.micro_batch:
        raise ValueError(f"the trainer built the data loader for micro-batches of "
                         f"{loader.micro_batch} samples, but its config says {step.micro_batch} "
                         f"({step.formed}); the config changed after zephon.torchtitan."
                         "bind_trainer: call it again (use_zephon's config classes do at "
                         "every parse)")
    return step


class ZephonValidationDataLoader(ZephonDataLoader):
    """One DP rank's TorchTitan batches of the mount's validation stream (``zephon mount -o
    validation=F``), for TorchTitan's ``Validator``::

        config.validator = Validator.Config(
            enable=True, freq=100, steps=-1,
            dataloader=ZephonValidationDataLoader.Config(mount="/mnt/z"))

    The validator builds it anew at every evaluation, with the keyword arguments the
    trainer's loader gets; batches are :class:`ZephonDataLoader`'s, read from
    ``/rank/<r>/validation/<t>`` (:class:`zephon.torch.ZephonValidationLoader`), which
    claim nothing and leave the training position where it is. ``steps=-1`` reads the
    whole split once (every DP rank gets the same number of batches, so no rank waits on
    another); with ``steps=N`` the validator sets the config's ``infinite`` (0.3.0) or
    ``repeat`` (main; :data:`REPEAT_FIELD`) and the split is read again
    from its start when it runs out. Nothing to checkpoint: the state is empty.

    Raises ``ValueError`` as :class:`ZephonDataLoader` does, and when the mount has no
    validation split.
    """

    _loader_cls = ZephonValidationLoader
    _one_step_per_trainer_step = False

    @dataclass(kw_only=True, slots=True)
    class Config(ZephonDataLoader.Config):
        # named as the running TorchTitan's validator names it (REPEAT_FIELD)
        if REPEAT_FIELD == "repeat":
            repeat: bool = False
            """Read the validation split again from its start when it runs out (TorchTitan's
            validator sets it when ``validator.steps`` is not -1)."""
        else:
            infinite: bool = False
            """Read the validation split again from its start when it runs out (TorchTitan's
            validator sets it when ``validator.steps`` is not -1)."""

    @property
    def loader(self) -> ZephonValidationLoader:  # type: ignore[override]
        """The underlying :class:`zephon.torch.ZephonValidationLoader` (not a
        ``ZephonLoader``: it has no position to keep)."""
        ld = self._loader
        assert isinstance(ld, ZephonValidationLoader)     # _loader_cls of this class
        return ld

    def __iter__(self) -> Iterator[TrainerBatch]:
        while True:
            for windows in self._loader:
                if self._loader.row_len:
                    yield rows_trainer_batch(windows, flat=self.flat)
                    continue
                yield trainer_batch(windows, self.seq_len, eod_token=self.eod_token,
                                    flat=self.flat)
            if not getattr(self.config, REPEAT_FIELD):
                return

    def state_dict(self) -> dict[str, Any]:
        """Empty: every evaluation reads the split from its start."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to restore (see :meth:`state_dict`)."""


class PretokenizedTokenizer(BaseTokenizer):
    """The tokenizer of a job whose data is already tokens: TorchTitan's trainer builds a
    tokenizer for every job, from files under ``hf_assets_path``; a Zephon token dataset
    needs none. ``encode``/``decode`` raise; ``get_vocab_size`` is the config's."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        vocab_size: int = 0
        """Vocabulary size of the packed tokens (0: unknown)."""

        eos_token: int | None = None
        """End-of-sequence token id, if the data has one."""

    def __init__(self, config: Config | None = None, **kwargs: Any) -> None:
        super().__init__()
        config = config or PretokenizedTokenizer.Config()
        self.eos_id = config.eos_token
        self._vocab_size = config.vocab_size

    def encode(self, *args: Any, **kwargs: Any) -> list[int]:
        raise RuntimeError("the dataset is already tokenized (a zephon token dataset): "
                           "there is no tokenizer to encode text; configure a real "
                           "tokenizer for components that need one")

    def decode(self, *args: Any, **kwargs: Any) -> str:
        raise RuntimeError("the dataset is already tokenized (a zephon token dataset): "
                           "there is no tokenizer to decode tokens")

    def get_vocab_size(self) -> int:
        return self._vocab_size
