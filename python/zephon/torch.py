"""PyTorch loader over a Zephon mount whose state restores at any data-parallel degree.

:class:`ZephonLoader` yields one data-parallel (DP) rank's micro-batches of a token dataset
as ``int64`` tensors of shape ``[micro_batch, window]``. It reads the mount's pure file
``/rank/<r>/from/<G>`` (rank r's shares of the global steps from gsn G on, back to back;
several steps per read), which claims nothing and is the same bytes whoever reads it:
tensor, pipeline and context parallel peers that share a DP rank get identical batches,
and the position is the loader's own.

Its state (``state_dict()``) is the position of the global stream, the same on every rank:
``consumed_samples`` (the gsn where the current step starts: every gsn below it went into
the model), the step number, and how far into that step each rank is; plus the dataset
fingerprint, seed and shuffle, so that a state of another stream is refused. A state taken
at a step boundary restores at any DP degree and any global batch size: the next step
starts at ``consumed_samples`` in the new layout. A state taken inside a step restores
exactly at the same DP degree and global batch, and is refused elsewhere.

The checkpoint is the source of truth: ``load_state_dict()`` positions the stream wherever
the mount's journal says. The journal still learns the position, so ``resume=auto``,
``zephon journal resume-point`` and ``/status`` of the next mount agree with the
checkpoint: after a ``state_dict()`` (a checkpoint being saved), the next batch taken
writes ``checkpoint samples:G@S`` to ``/control``, as does ``load_state_dict()``. Only the
process of the lowest DP rank the mount serves writes it (one per node).

A mixture mount (a spec file, several datasets by weight) reads the same way; its state
carries the mixture's fingerprint. A finite stream (``epochs=E``) ends where the mount says
(no ``at/`` file past it): for a mixture, when the first source would begin epoch E.
:class:`ZephonValidationLoader` reads the mount's validation split (``validation=F``).

Where the mount's shards are uncompressed token files (``zephon pack --compress none``;
``/status`` lists them under ``shards``), the loader reads ``/rank/<r>/ids/<G>`` instead:
the sample ids of the same shares, from the mount's order (the order stays the mount's),
and gathers each micro-batch from the shard files, which it maps itself (one fancy index
per batch, no copy through FUSE). The batches are the same bytes as ``from/<G>``'s; what
is given up is the daemon's check of every sample against the XXH3 checksum of its index
entry (``zephon verify`` still checks a dataset). Progress in ``/status`` counts reads of
``ids/`` as it counts reads of ``from/``. ``direct=False`` reads ``from/`` always.

Only token datasets are served (``zephon pack --format tokens``); for ``lines`` and ``tar``
datasets read ``/rank/<r>/step/<t>`` files yourself. Such a mount is refused with a
``ValueError``.
"""
from __future__ import annotations

import io
import mmap
import os
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np
import torch

from .agreement import require_accumulation
from .mount import read_status
from .position import Position

if TYPE_CHECKING:
    from .torchft import TorchFTPosition

STATE_VERSION = 1


def split_inputs_labels(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, labels)`` of a batch of windows ``[..., window]``: ``inputs`` are the
    first ``window - 1`` tokens, ``labels`` the last ``window - 1`` (the inputs shifted by
    one). With overlapping windows (``pack --overlap 1``, windows of L + 1 tokens) that is
    L inputs and L labels per sample and no token of the stream is lost as a label.
    Both are views of ``batch``."""
    if batch.shape[-1] < 2:
        raise ValueError(f"windows of {batch.shape[-1]} tokens cannot be split into inputs "
                         "and labels; pack with --seq-len 2 or more")
    return batch[..., :-1], batch[..., 1:]


class TokenMount:
    """What both loaders read from ``/status`` and check against the trainer's layout;
    see :class:`ZephonLoader` for the arguments, attributes and errors. The layout's
    arithmetic is the mount's: ``share`` (``share_samples``: samples of one rank per
    step), ``share_bytes`` (bytes of one share as ``at/<G>`` and each share of
    ``from/<G>`` hold it), the served ``ranks`` (``rank_list``), ``window``,
    ``seq_len`` (``sample_tokens``) and ``dtype`` (``npy_descr``) are read from
    ``/status``, never computed here."""

    def __init__(self, mount: str | os.PathLike[str], *, dp_rank: int, dp_world_size: int,
                 micro_batch: int | None = None, tokens_per_batch: int | None = None,
                 global_batch: int | None = None, vocab_size: int | None = None) -> None:
        self.mount = os.path.abspath(os.fspath(mount))
        st = read_status(self.mount)
        self.status: dict[str, Any] = st
        """The mount's ``/status`` as this loader read it when it was made."""
        if st.get("kind") != "tokens":
            raise ValueError(f"the dataset {st.get('dataset')} is a {st.get('kind')} dataset; "
                             f"{type(self).__name__} reads token datasets only (zephon pack "
                             "--format tokens --seq-len L); read rank/R/step/T files for other "
                             "kinds")
        if "share_samples" not in st or "window" not in st:
            raise ValueError(f"the mount at {self.mount} does not publish its layout for "
                             "loaders (/status has no share_samples or window): its zephon "
                             "is older than this package")
        self.fingerprint: str = st["fingerprint"]
        val = st.get("validation")
        self.split: str = val["split"] if val else ""   # "1/100", or "" without a split
        self.seed: int = int(st["seed"])
        self.shuffle: str = st["shuffle"]
        self.overlap: int = int(st.get("overlap", 0))
        self.window: int = int(st["window"])           # tokens per sample as stored
        self.seq_len: int = int(st["sample_tokens"])    # the pack's --seq-len
        # a dataset of rows (pack --whole-documents, --chat): each sample [3, row_len],
        # inputs, labels and positions (zephon.sft); 0 for windows
        self.row_len: int = int(st.get("row_len") or 0) if st.get("layout") == "rows" else 0
        self.max_context_length: int | None = int(st["max_context_length"]) \
            if self.row_len else None
        self.sample_shape: tuple[int, ...] = (3, self.row_len) if self.row_len else \
            (self.window,)
        self.dtype: np.dtype[Any] = np.dtype(st["npy_descr"])
        eod = st.get("eod_token")
        self.eod_token: int | None = None if eod is None else int(eod)
        mx = st.get("max_token_id")
        self.max_token_id: int | None = None if mx is None else int(mx)
        if vocab_size is not None and mx is not None and int(mx) >= int(vocab_size):
            raise ValueError(f"the dataset {st.get('dataset')} holds token id {mx}, but the "
                             f"model's vocabulary has {vocab_size} ids (0-{int(vocab_size) - 1}):"
                             " its embedding cannot look it up; pack with the model's "
                             "tokenizer (zephon pack --tokenizer) or use a model whose "
                             "vocab_size is above the dataset's max_token_id")
        self.format: str = st["format"]
        self.global_batch: int = int(st["global_batch"])
        self.dp_rank = int(dp_rank)
        self.dp_world_size = int(dp_world_size)
        world = int(st["world_size"])
        served = [int(r) for r in st["rank_list"]]
        if self.dp_world_size != world:
            raise ValueError(f"the mount at {self.mount} serves world_size={world} but the "
                             f"trainer's data-parallel degree is {self.dp_world_size}; mount "
                             f"with world_size={self.dp_world_size} (the DP degree, not the "
                             "process count; with torchrun-zephon.sh set ZEPHON_DP_DEGREE)")
        if not 0 <= self.dp_rank < world or self.dp_rank not in served:
            raise ValueError(f"dp_rank {self.dp_rank} is not served by the mount at "
                             f"{self.mount} (ranks={st['ranks']}); mount this node's DP ranks")
        if global_batch is not None and int(global_batch) != self.global_batch:
            raise ValueError(f"the mount's global_batch is {self.global_batch} samples but the "
                             f"trainer's is {global_batch}; mount with global_batch={global_batch}")
        if self.format not in ("npy", "bin"):
            raise ValueError(f"the mount serves format={self.format}; mount a token dataset "
                             "with format=npy (the default) or format=bin")
        share = int(st["share_samples"])
        if micro_batch is None:
            if tokens_per_batch is not None:
                if int(tokens_per_batch) % self.seq_len:
                    raise ValueError(f"tokens_per_batch {tokens_per_batch} is not a multiple of "
                                     f"the dataset's seq_len {self.seq_len} (not a whole number "
                                     f"of samples of {self.seq_len} tokens); make it a multiple "
                                     f"of {self.seq_len} or pack with a --seq-len that divides it")
                micro_batch = int(tokens_per_batch) // self.seq_len
            else:
                micro_batch = int(st["micro_batch"])
        self.micro_batch = int(micro_batch)
        if tokens_per_batch is not None and \
                int(tokens_per_batch) != self.micro_batch * self.seq_len:
            raise ValueError(f"tokens_per_batch {tokens_per_batch} is not micro_batch "
                             f"{self.micro_batch} x seq_len {self.seq_len}; make them agree")
        self.position = Position(st, self.micro_batch)
        """Where this loader is in the stream (:class:`zephon.position.Position`: the
        layout's walk, from the mount's values)."""
        self.share: int = share
        """Samples of this rank's share of a step (the mount's ``share_samples``)."""
        self.share_bytes: int = int(st["share_bytes"])
        """Bytes of one share in ``at/<G>``, and of each share in ``from/<G>``."""
        self.ranks: list[int] = served
        """The DP ranks the mount serves (``rank_list``)."""

    def _read(self, path: str) -> np.ndarray:
        """This rank's share of a step from the pure file ``path``, ``[share, window]``."""
        with open(path, "rb", buffering=0) as f:
            data = f.read()
        return self._decode(data, path)

    def npy_header_len(self, data: bytes, path: str) -> int:
        """The length of the npy header that ``data`` (a share, or its first bytes up to
        the header's end) starts with, after checking its shape ``[share, window]`` and
        dtype; ``path`` names it in errors. Raises OSError."""
        fp = io.BytesIO(data)
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise OSError(f"{path}: npy version {version} is not read")
        if tuple(shape) != (self.share, *self.sample_shape) or np.dtype(dtype) != self.dtype:
            raise OSError(f"{path}: expected {(self.share, *self.sample_shape)} {self.dtype}, "
                          f"got {shape} {dtype}")
        return fp.tell()

    def _decode(self, data: bytes, path: str) -> np.ndarray:
        off = self.npy_header_len(data, path) if self.format == "npy" else 0
        arr = np.frombuffer(data, dtype=self.dtype, offset=off)
        if arr.size != self.share * self.window:
            raise OSError(f"{path}: {arr.size} tokens, expected {self.share} x {self.window}")
        return arr.reshape(self.share, self.window)


class ZephonLoader(TokenMount):
    """One DP rank's token micro-batches from a Zephon mount, as ``int64`` tensors.

    Args:
        mount: the mountpoint (``zephon mount`` of a token dataset, or of a mixture spec of
            token datasets).
        dp_rank: this process's data-parallel rank (peers in tensor, pipeline or context
            parallelism share it and get identical batches).
        dp_world_size: the data-parallel degree; must be the mount's ``world_size``.
        micro_batch: samples per yielded tensor; must divide the per-rank step share
            (the mount's ``share_samples``, ``global_batch / world_size``). Default:
            ``tokens_per_batch / seq_len`` when that is given, else the mount's
            ``micro_batch``.
        tokens_per_batch: the trainer's tokens per micro-batch and rank; must be
            ``micro_batch * seq_len`` (``seq_len``: the pack's ``--seq-len``).
        global_batch: the trainer's samples per optimizer step; must be the mount's
            ``global_batch``.
        gradient_accumulation_steps: the micro-batches the trainer takes per optimizer
            step; ``micro_batch`` x it must be the rank's share of a step (the mount's
            ``global_batch / world_size``). Default: not checked; the attribute of that
            name is the number the mount implies (a loop that takes it cannot disagree).
        vocab_size: the model's vocabulary size; a dataset holding a token id at or above
            it (``max_token_id``, recorded by every token pack) is refused.
        write_marks: let this process write position marks to the mount's ``control``
            (default True; only the lowest DP rank of the mount does).
        direct: gather the samples from the shard files by their ids (``ids/<G>``)
            rather than read ``from/<G>``: ``None`` (the default) where the mount serves
            ids (uncompressed token shards that this process can map), ``True`` requires
            it (``ValueError`` where the mount does not serve ids, ``OSError`` where a
            shard cannot be mapped), ``False`` never. The attribute ``direct`` says which.
        torchft: a ``torchft.Manager``: torchft mode (:mod:`zephon.torchft`, docs/torchft.md).
            ``dp_rank`` and ``dp_world_size`` are then the DP rank and degree within this
            replica group, and the mount's ``world_size`` is the job's at full strength
            (the DP degree x the most groups); each step serves this rank its part of
            the next samples of the global stream for the step's participants, the
            position moves when the step commits and travels to healing groups.

    Attributes: ``window`` (tokens per sample as stored; ``seq_len + overlap``), ``seq_len``
    (the pack's ``--seq-len``), ``overlap`` (0, or 1 for windows overlapping the next by
    one token), ``micro_batch``, ``global_batch``, ``gradient_accumulation_steps`` (the
    micro-batches of one rank per optimizer step: ``global_batch / (dp_world_size x
    micro_batch)``), ``dp_rank``, ``dp_world_size``,
    ``fingerprint``, ``seed``, ``shuffle``, ``dtype`` (numpy dtype as stored),
    ``eod_token`` (the end-of-document token id that ``zephon pack --eod-token`` put after
    every document, or ``None``: datasets packed without it, or before it existed),
    ``max_token_id`` (the largest id in the dataset, or ``None`` for packs before it was
    recorded). Windows are raw: across a document boundary the label after an EOS is the
    next document's first token; TorchTitan's loader (:mod:`zephon.torchtitan`) masks it,
    mask it yourself (``labels[inputs == eod_token] = -100``) to train as TorchTitan does.

    A dataset of rows (``zephon pack --whole-documents`` or ``--chat``: ``row_len`` is
    not 0) yields ``[micro_batch, 3, row_len]``: each row's inputs, labels (-100 where
    no loss is taken) and positions, as stored (:func:`zephon.sft.split_rows`); its
    ``seq_len`` is ``row_len``, the tokens a micro-batch trains per row.

    Raises ``ValueError`` (nothing read, nothing written) when the mount's layout does not
    fit the trainer's configuration, the dataset is not a token dataset or holds ids the
    model's ``vocab_size`` does not, and ``OSError``
    when the mount does not answer.
    """

    # the reader of ids/ runs, None: _IdsRun (a benchmark's variant reads larger blocks)
    _ids_run: type[_IdsRun] | None = None

    def __init__(self, mount: str | os.PathLike[str], *, dp_rank: int, dp_world_size: int,
                 micro_batch: int | None = None, tokens_per_batch: int | None = None,
                 global_batch: int | None = None, vocab_size: int | None = None,
                 write_marks: bool = True, direct: bool | None = None,
                 torchft: Any = None, gradient_accumulation_steps: int | None = None) -> None:
        group = (int(dp_rank), int(dp_world_size))
        if torchft is not None:
            # torchft mode (zephon.torchft): dp_rank and dp_world_size are the replica
            # group's; the mount's layout is the whole job's
            dp_world_size = int(read_status(mount)["world_size"])
        super().__init__(mount, dp_rank=dp_rank, dp_world_size=dp_world_size,
                         micro_batch=micro_batch, tokens_per_batch=tokens_per_batch,
                         global_batch=global_batch, vocab_size=vocab_size)
        if gradient_accumulation_steps is not None:
            require_accumulation(self.position, int(gradient_accumulation_steps),
                                 self.dp_world_size)
        self.gradient_accumulation_steps: int = self.position.micro_batches
        """Micro-batches of this rank per optimizer step (one step of the mount)."""
        st = self.status
        self._shards: _Shards | None = None
        if direct is not False:
            if st.get("shards") is None:
                if direct:
                    raise ValueError(f"the mount at {self.mount} serves no sample ids (its "
                                     "shards are compressed, not tokens, or its zephon is "
                                     "older); pack with --compress none, or use direct=False")
            else:
                try:
                    self._shards = _Shards(st["shards"], self.window, self.dtype)
                except OSError as e:
                    if direct:
                        raise
                    warnings.warn(f"reading {self.mount}'s from/ files: the shards cannot be "
                                  f"mapped here ({e})", RuntimeWarning, stacklevel=2)
        self.direct: bool = self._shards is not None
        """True when batches are gathered from the shard files by ``ids/<G>``."""
        # a finite stream's end is the mount's to say (a mixture ends when its first
        # source would begin epoch E, a split shortens each epoch): no at/ file past it
        self._finite = int(st.get("epochs", 0)) > 0
        self._marker = bool(write_marks) and self.dp_rank == min(self.ranks)
        # the micro-batches from the position on (Position.walk over the blocks of a
        # from/ or ids/ run); None: start one at the position's next step
        self._batches: Iterator[np.ndarray] | None = None
        self._gather = self._shards.gatherer() if self._shards is not None else None
        self._rows = (-1, *self.sample_shape) if self.row_len else None
        self._pending_mark: tuple[int, int] | None = None
        self.torchft: TorchFTPosition | None = None
        """The shared position of torchft mode (``torchft=`` given), else None."""
        if torchft is not None:
            from .torchft import TorchFTPosition
            self.dp_rank, self.dp_world_size = group
            self.torchft = TorchFTPosition(torchft, self, group_rank=group[0],
                                           group_degree=group[1])

    # ---- iteration ----

    def __iter__(self) -> Iterator[torch.Tensor]:
        """The loader itself: each ``next()`` yields the next micro-batch, an ``int64``
        tensor ``[micro_batch, window]`` (rows: ``[micro_batch, 3, row_len]``), and moves
        the position. Ends (StopIteration) at the end of a finite stream (``epochs=E``)."""
        return self

    def __next__(self) -> torch.Tensor:
        if self._pending_mark is not None:
            self._write_mark(*self._pending_mark)
            self._pending_mark = None
        if self.torchft is not None:
            return self.torchft.batch()
        batches = self._batches
        if batches is None:
            batches = self._batches = self.position.walk(self._blocks(self.position.gsn))
        try:
            rows = next(batches)
        except FileNotFoundError:
            self._batches = None        # a later call reads from the position again
            if self._finite and self.position.offset == 0:
                raise StopIteration from None
            raise
        if self._gather is not None:    # ids: gather the windows from the shards
            rows = self._gather(rows)
        if self._rows is not None:      # a dataset of rows: [m, 3, row_len] (zephon.sft)
            return torch.from_numpy(rows.astype(np.int64).reshape(self._rows))
        return torch.from_numpy(rows.astype(np.int64))

    def _blocks(self, gsn: int) -> Iterator[np.ndarray]:
        """The shares of the steps from ``gsn`` on, in blocks (``[steps, share, window]``,
        or with ``direct`` the ids ``[steps, share]``): of ``ids/<gsn>`` or ``from/<gsn>``.
        Raises FileNotFoundError past the end of a finite stream."""
        return ((self._ids_run or _IdsRun)(self.ids_path(gsn), self) if self.direct else
                _Run(self.run_path(gsn), self)).blocks()

    def share_path(self, gsn: int) -> str:
        """The pure file with this rank's share of the step that starts at ``gsn``."""
        return os.path.join(self.mount, "rank", str(self.dp_rank), "at", str(gsn))

    def run_path(self, gsn: int) -> str:
        """The pure file with this rank's shares of every step from ``gsn`` on, back to
        back (``/rank/<r>/from/<G>``)."""
        return os.path.join(self.mount, "rank", str(self.dp_rank), "from", str(gsn))

    def ids_path(self, gsn: int) -> str:
        """The pure file with the sample ids of ``from/<gsn>``'s shares, little-endian
        uint64, ``share`` per step (``/rank/<r>/ids/<G>``)."""
        return os.path.join(self.mount, "rank", str(self.dp_rank), "ids", str(gsn))

    # ---- state ----

    def state_dict(self) -> dict[str, Any]:
        """The position of the global stream, the same keys and values on every DP rank:

        ``consumed_samples`` (gsn where the current step starts), ``step``,
        ``step_offset`` (samples of the current step's share each rank has taken; 0 at a
        step boundary), ``dp_world_size``, ``global_batch``, ``fingerprint``, ``seed``,
        ``shuffle``, ``split`` (the validation split, ``"1/100"``, or ``""``), ``window``,
        ``overlap``, ``version``.

        Reads and writes nothing (torch.distributed.checkpoint calls it to plan a load);
        it notes the position, and the next batch taken writes it as a mark to the
        mount's journal. In torchft mode it is the committed position (``step``:
        torchft's step count), whose mark each committed step writes already."""
        if self.torchft is not None:
            (gsn, step), offset = self.torchft.committed(), 0
            self.position.move(gsn, step, 0)
        else:
            gsn, step, offset = self.position.state()
            self._pending_mark = (gsn, step)
        return {
            "version": STATE_VERSION,
            "consumed_samples": gsn,
            "step": step,
            "step_offset": offset,
            "dp_world_size": self.dp_world_size,
            "global_batch": self.global_batch,
            "fingerprint": self.fingerprint,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "split": self.split,
            "window": self.window,
            "overlap": self.overlap,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Position the stream where ``state`` (from :meth:`state_dict`, at any DP degree)
        says, and record that position as a mark in the mount's journal.

        Raises ``ValueError``, changing nothing, for a state of another dataset, seed,
        shuffle or window, an unknown version, or a state taken inside a step when the DP
        degree or global batch differ."""
        try:
            version = int(state["version"])
            gsn, step, offset = (int(state[k]) for k in ("consumed_samples", "step", "step_offset"))
            fp, seed, shuffle = state["fingerprint"], int(state["seed"]), state["shuffle"]
            window = int(state["window"])
            w, b = int(state["dp_world_size"]), int(state["global_batch"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a ZephonLoader state ({e!r} is missing or malformed)") from None
        if version != STATE_VERSION:
            raise ValueError(f"loader state version {version} is not supported (this zephon "
                             f"reads version {STATE_VERSION})")
        if fp != self.fingerprint:
            raise ValueError(f"the state belongs to the dataset with fingerprint {fp}, but the "
                             f"mount serves {self.fingerprint}; load it with its own dataset")
        if (seed, shuffle) != (self.seed, self.shuffle):
            raise ValueError(f"the state was saved with seed={seed}, shuffle={shuffle}, but the "
                             f"mount has seed={self.seed}, shuffle={self.shuffle}; mount with "
                             "the state's seed and shuffle")
        if window != self.window:
            raise ValueError(f"the state's windows are {window} tokens, the mount's {self.window}")
        split = str(state.get("split", ""))    # states from before splits have none
        if split != self.split:
            fix = f"validation={split}" if split else "no validation= option"
            raise ValueError(f"the state was saved with validation split {split or 'none'}, "
                             f"but the mount has {self.split or 'none'}: their training "
                             f"streams differ; mount with {fix}")
        if offset:
            if (w, b) != (self.dp_world_size, self.global_batch):
                raise ValueError(
                    f"the state was saved inside step {step} ({offset} samples into each "
                    f"rank's share, at data-parallel degree {w}, global batch {b}); it restores "
                    f"only at degree {w} and global batch {b}, not {self.dp_world_size} and "
                    f"{self.global_batch}: resume from a checkpoint taken at a step boundary")
        if self.torchft is not None:
            if offset:
                raise ValueError(f"the state was saved inside step {step} ({offset} samples "
                                 "into each rank's share); torchft mode resumes at a step "
                                 "boundary: resume from a checkpoint taken at one")
            self.torchft.load(gsn)      # provisional: a peer's position replaces it
            return
        self.position.move(gsn, step, offset)
        self._batches = None
        self._pending_mark = None
        self._write_mark(gsn, step)

    def _write_mark(self, gsn: int, step: int) -> None:
        if not self._marker:
            return
        try:
            with open(os.path.join(self.mount, "control"), "w") as f:
                f.write(f"checkpoint samples:{gsn}@{step}\n")
        except OSError as e:
            warnings.warn(f"could not record the position samples:{gsn}@{step} in the mount's "
                          f"journal ({e}); resume=auto may not agree with the checkpoint, "
                          "which still positions the loader", RuntimeWarning, stacklevel=3)


class _Run:
    """Reads of ``from/<G>``, in blocks of consecutive shares (:meth:`blocks`): share k is
    at offset k * ``share_bytes`` (the mount's); 1 share for the first block (a resumed
    trainer's first batch waits for one share, not 32), then 4 times more each block up
    to 32 (at most 2 MiB); each block with its own open and close, so the loader holds no
    file of the mount between reads and never keeps it from unmounting (the name's
    lookup is cached by the kernel: one open, one read and one release per block). Uses
    only the loader's public attributes."""

    MAX_BYTES = 2 << 20
    MAX_SHARES = 32

    def __init__(self, path: str, loader: TokenMount) -> None:
        self.path, self.loader = path, loader
        self.header = b""
        self.size = loader.share_bytes
        self.readahead = 1
        self.limit = max(1, min(self.MAX_SHARES, self.MAX_BYTES // self.size))
        self._headed = loader.format != "npy"

    def _read(self, k: int) -> bytes:
        fd = os.open(self.path, os.O_RDONLY)   # FileNotFoundError: no full step at G
        try:
            if not self._headed:
                # the header's own length first, then the header: reads that stop inside
                # share 0, so the mount counts no share as read (/status' progress counts
                # shares read to their end)
                head = os.pread(fd, 12, 0)
                v1 = head[6:7] == b"\x01"
                hlen = (10 + int.from_bytes(head[8:10], "little") if v1 else
                        12 + int.from_bytes(head[8:12], "little"))
                head = os.pread(fd, hlen, 0)
                self.header = head[:self.loader.npy_header_len(head, self.path)]
                self._headed = True
            data = os.pread(fd, self.size * self.readahead, k * self.size)
            self.readahead = min(self.readahead * 4, self.limit)
            return data
        finally:
            os.close(fd)

    def blocks(self) -> Iterator[np.ndarray]:
        """The shares from the first, a block at a time, ``[shares, share, window]``.
        Raises FileNotFoundError at the end of the stream, OSError for a share whose npy
        header is not the first one's."""
        k = 0
        while True:
            buf = self._read(k)
            count = len(buf) // self.size
            if not count:
                raise FileNotFoundError(f"{self.path}: the stream ends before its step {k}")
            yield self._decode(buf, count, k)
            k += count

    def _decode(self, buf: bytes, count: int, k: int) -> np.ndarray:
        ld, h = self.loader, len(self.header)
        rows = np.frombuffer(buf, dtype=np.uint8, count=count * self.size).reshape(
            count, self.size)
        if h and not (rows[:, :h] == np.frombuffer(self.header, dtype=np.uint8)).all():
            raise OSError(f"{self.path}: a share of steps {k}-{k + count - 1} does not "
                          "start with the npy header of the first one")
        return rows[:, h:].view(ld.dtype).reshape(count, ld.share, ld.window)


class _IdsRun(_Run):
    """Reads of ``ids/<G>``, as :class:`_Run` reads ``from/<G>`` (the same blocks of
    shares, 1 then 4 times more each block): share k's ids are at offset k *
    ``position.ids_bytes``. Its shares are small, so a block holds up to 256 of them (64
    KiB at most), and the mount counts as read the shares a block reaches, as it does for
    ``from/``."""

    MAX_BYTES = 64 << 10
    MAX_SHARES = 256

    def __init__(self, path: str, loader: TokenMount) -> None:
        super().__init__(path, loader)
        self.size = loader.position.ids_bytes
        self.limit = max(1, min(self.MAX_SHARES, self.MAX_BYTES // self.size))
        self._headed = True

    def _decode(self, buf: bytes, count: int, k: int) -> np.ndarray:
        # once per block: int64 (an index numpy takes without a cast), a row per share
        # (ids are below 2^62)
        return np.frombuffer(buf, dtype="<u8", count=count * self.loader.share
                             ).astype(np.int64).reshape(count, self.loader.share)


class _Shards:
    """The shard files of ``/status`` ``shards`` mapped read-only, each as ``[samples,
    window]`` tokens, and the gather of windows by sample id. Raises OSError (naming the
    file) for a shard that cannot be opened, is shorter than its samples, or is not the
    file the mount holds open (``dev``/``ino`` differ: replaced since the mount)."""

    def __init__(self, shards: list[dict[str, Any]], window: int, dtype: np.dtype[Any]) -> None:
        self.first = np.array([int(s["first"]) for s in shards], dtype=np.int64)
        self.maps: list[np.ndarray] = []
        for s in shards:
            path, n = s["path"], int(s["samples"])
            need = n * window * dtype.itemsize
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if "ino" in s and (st.st_dev, st.st_ino) != (int(s["dev"]), int(s["ino"])):
                    raise OSError(f"{path} is not the file the mount serves (packed again in "
                                  "place since it was mounted?); remount to read it")
                size = st.st_size
                if size < need:
                    raise OSError(f"{path}: {size} bytes, shorter than its {n} samples of "
                                  f"{window} tokens ({need} bytes)")
                # a plain array over the mapping, not np.memmap: its __getitem__ is Python
                # code that every gather would pay
                arr = np.empty(0, dtype)
                if n:
                    m = mmap.mmap(f.fileno(), need, access=mmap.ACCESS_READ)
                    # samples are read in the mount's order, whose pages the mount asks of
                    # the kernel ahead (readahead=): a page not there yet is read alone,
                    # not with the 128 KiB or more around it that a fault reads by default
                    m.madvise(mmap.MADV_RANDOM)
                    arr = np.frombuffer(m, dtype=dtype)
            self.maps.append(arr.reshape(n, window))
        self.one = len(self.maps) == 1 and int(self.first[0]) == 0

    def gatherer(self) -> Callable[[np.ndarray], np.ndarray]:
        """:meth:`gather`, or where one shard holds every sample from id 0 its array's own
        fancy index (a call less each batch)."""
        return self.maps[0].__getitem__ if self.one else self.gather

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """The windows of sample ``ids`` (int64), ``[len(ids), window]``, a copy."""
        if self.one:
            return self.maps[0][ids]
        which = np.searchsorted(self.first, ids, side="right") - 1
        local = ids - self.first[which]
        if (which == which[0]).all():
            return self.maps[int(which[0])][local]
        out = np.empty((len(ids), self.maps[0].shape[1]), self.maps[0].dtype)
        for i, (w, j) in enumerate(zip(which, local, strict=True)):
            out[i] = self.maps[int(w)][int(j)]
        return out


class ZephonValidationLoader(TokenMount):
    """One DP rank's share of the mount's validation stream (``zephon mount -o
    validation=F``), as ``int64`` micro-batches ``[micro_batch, window]``.

    Each iteration (``for batch in loader``) reads every validation step from the first:
    ``/rank/<dp_rank>/validation/0`` .. ``steps - 1``, each split into micro-batches. The
    files are pure: reading them claims nothing, and no training position (the mount's
    cursors, a :class:`ZephonLoader`'s state) moves, so read it all at every evaluation.
    The rank-order concatenation of each step is the same for every DP degree at the same
    ``global_batch``; the samples are held out of training for every seed and layout.

    Arguments and attributes as :class:`ZephonLoader` (no ``write_marks``); also ``steps``
    (validation steps, ``/status`` ``validation.steps``: the held-out samples in whole
    global batches), ``samples`` (held-out samples of the whole mount) and ``split`` (the
    held-out fraction as the mount read it, e.g. ``"1/100"``). ``len(loader)`` is the
    micro-batches one iteration yields.

    Raises ``ValueError`` as :class:`ZephonLoader` does, and when the mount has no
    validation split or its held-out samples make no whole step.
    """

    def __init__(self, mount: str | os.PathLike[str], *, dp_rank: int, dp_world_size: int,
                 micro_batch: int | None = None, tokens_per_batch: int | None = None,
                 global_batch: int | None = None, vocab_size: int | None = None) -> None:
        super().__init__(mount, dp_rank=dp_rank, dp_world_size=dp_world_size,
                         micro_batch=micro_batch, tokens_per_batch=tokens_per_batch,
                         global_batch=global_batch, vocab_size=vocab_size)
        val = self.status.get("validation")
        if not val:
            raise ValueError(f"the mount at {self.mount} has no validation split; mount with "
                             "validation=F (the fraction of every source held out, e.g. "
                             "validation=0.01) to read one")
        self.split: str = str(val["split"])
        self.samples: int = int(val["samples"])
        self.steps: int = int(val["steps"])
        if self.steps < 1:
            raise ValueError(f"the mount's validation split holds {self.samples} samples, less "
                             f"than one global batch of {self.global_batch}: no validation "
                             "step; mount with a larger validation= or a smaller global_batch")

    def path(self, t: int) -> str:
        """The pure file with this rank's share of validation step ``t``."""
        return os.path.join(self.mount, "rank", str(self.dp_rank), "validation", str(t))

    def __len__(self) -> int:
        return self.steps * self.position.micro_batches

    def __iter__(self) -> Iterator[torch.Tensor]:
        for t in range(self.steps):
            share = self._read(self.path(t))
            for rows in self.position.split(share):
                yield torch.from_numpy(rows.astype(np.int64).reshape(-1, *self.sample_shape))

