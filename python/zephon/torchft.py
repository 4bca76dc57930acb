"""The torchft loader mode: replica groups that fail and rejoin lose no sample and repeat none.

torchft (``pip install torchft==0.2.0``) keeps a job training while whole replica groups
fail and rejoin, step by step: before each step its ``Manager`` forms a quorum of the
groups alive, a group that is behind heals (takes the model from a peer), and after the
backward pass ``should_commit`` decides whether the step is applied. A static data path
(group k reads shard k of every step) loses the share of a missing group, trains again the
data of a step that did not commit, and starts a rejoining group from its own old
checkpoint. This mode reads the one global stream at a position that all groups share:

- **Each step takes its quorum's participants.** P = the groups whose gradients the step
  averages (``Manager.num_participants()``), and this group's index i among them
  (``Manager.participating_rank()``). The step consumes the next ``P x group share``
  samples of the stream; participant i's DP rank d (of D in its group) reads the share
  of mount rank ``j = i*D + d``: ``/rank/<j>/at/<G>``, a pure read (no claim), G the
  shared position. **Batch semantics:** every participant's share per step stays the
  trainer's (its micro-batches and gradient accumulation are unchanged); a step with
  fewer groups consumes fewer samples (P of the layout's ``world_size / D`` groups' worth
  of its ``global_batch``). The global order is exact: the committed steps, in order,
  concatenate to the stream's prefix.
- **Only the groups that train count.** A group that heals in a step (it is behind) is
  not a participant: torchft zeroes its gradient; it is served the step's first share
  (so that its shapes hold) and that counts for nothing. At step 0 with torchft's
  ``init_sync`` (the default) every group but one heals per DP rank, yet torchft reports
  them all as participants with a rank: that step is one part, served to every group
  alike (whichever group's gradient torchft keeps, it is of those samples).
- **The position advances when the step commits.** The step counter of torchft
  (``Manager.current_step()``) grows exactly when ``should_commit()`` returns True; at
  the next step (or when the state is taken) the loader compares it with the step it
  served: committed, the position moves past the step's ``P x group share`` samples; not
  committed, the same samples are served again to the next quorum. ``should_commit`` is
  voted per group, so groups may disagree: the one that did not commit is behind at the
  next quorum and heals, position included.
- **The position travels with the model.** The loader registers its state with torchft's
  state transfer (``Manager.register_state_dict_fn("zephon", ...)``): a group that heals
  receives its peer's committed position together with the model, and torchft applies it
  inside the healing step's ``should_commit`` (after that step's batches were served:
  the healing step itself counts once committed). The sending function runs on the
  sender's quorum thread while its main loop runs: it takes the loader's lock and
  returns the committed position, never a step in flight. A position loaded from a
  checkpoint (TorchTitan loads each group's own, possibly stale one) is provisional:
  a position received from a peer replaces it; it is used only by a group that trains
  without having healed (the job's first group, or a whole job restarted).
- **The journal.** The group's DP rank 0 writes each committed step's end to its mount's
  journal as a mark ``checkpoint samples:G@S`` (S: torchft's step count, G: the gsn where
  step S starts), so ``zephon journal show`` lists every committed step; the difference
  of two marks is a step's samples, and ``zephon batch -o
  world_size=W,global_batch=B,resume=samples:G@S --rank j --step S`` gives the share that
  participant rank j read in it.

The mount's layout is the job at full strength: ``world_size`` = D x the most replica
groups, ``global_batch`` = ``world_size`` x the share of one DP rank per step, every rank
served (no ``ranks=``: a group may read any participant rank's files). A quorum of more
groups than ``world_size / D`` is refused (``RuntimeError`` at that step), as are a peer
whose mount serves another dataset, seed, shuffle, split or layout (``ValueError`` when
the state arrives) and a torchft that is absent or not of a supported version
(``ImportError``). docs/torchft.md is the user's guide.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import torch

if TYPE_CHECKING:
    from .torch import ZephonLoader

SUPPORTED_TORCHFT = ("0.2.0",)
"""The torchft versions this mode is written and tested against: it reads the Manager's
step counter and quorum, which other versions may change."""

STATE_KEY = "zephon"
"""The key of the loader's state in torchft's state transfer."""

STATE_VERSION = 1


def require_torchft() -> Any:
    """The ``torchft`` module, after checking its version is one of
    :data:`SUPPORTED_TORCHFT`. Raises ``ImportError`` saying what to install when torchft
    is absent or of another version."""
    want = " or ".join(SUPPORTED_TORCHFT)
    try:
        module = importlib.import_module("torchft")
    except ImportError as e:
        raise ImportError(f"the torchft loader mode needs torchft {want} (pip install "
                          f"torchft=={SUPPORTED_TORCHFT[-1]}); it cannot be imported: {e}"
                          ) from e
    try:
        version = importlib.metadata.version("torchft")
    except importlib.metadata.PackageNotFoundError:
        version = getattr(module, "__version__", "unknown")
    if version not in SUPPORTED_TORCHFT:
        raise ImportError(f"the torchft loader mode supports torchft {want}, but torchft "
                          f"{version} is installed ({module.__file__}): install torchft=="
                          f"{SUPPORTED_TORCHFT[-1]}")
    return module


@dataclass(frozen=True)
class FTStep:
    """What one torchft step serves (``TorchFTPosition.current``)."""

    step: int
    """torchft's step count when the step runs (``Manager.current_step()``)."""
    gsn: int
    """The shared position: the step's samples are ``[gsn, gsn + samples)``."""
    participants: int
    """P: the groups whose shares the step consumes."""
    index: int | None
    """This group's part of the step, or None when it heals (its batches count for
    nothing: it is served part 0 so that its shapes hold)."""
    samples: int
    """Samples the step consumes: P x D x the share of one DP rank."""
    rank: int
    """The mount rank whose ``at/<gsn>`` this DP rank reads (``index * D + d``)."""

    def share_gsn(self, share: int) -> int:
        """The first gsn of the share this DP rank reads (``gsn + rank * share``)."""
        return self.gsn + self.rank * share


@dataclass
class _Pending:
    step: int           # torchft step count the step ran at
    samples: int        # what it consumes if it commits


class TorchFTPosition:
    """The shared position of a :class:`zephon.torch.ZephonLoader` in torchft mode (the
    loader's ``torchft`` attribute); see the module's documentation.

    Args:
        manager: the replica group's ``torchft.Manager``.
        loader: the loader whose mount and shapes it serves.
        group_rank: this process's DP rank within its replica group (d).
        group_degree: the DP degree of one replica group (D).

    Raises ``ValueError`` when the mount's layout has no room for whole groups of D ranks
    or does not serve every rank, ``ImportError`` for a torchft of another version."""

    def __init__(self, manager: Any, loader: "ZephonLoader", *, group_rank: int,
                 group_degree: int) -> None:
        require_torchft()
        self.manager = manager
        self.loader = loader
        self.group_rank, self.group_degree = int(group_rank), int(group_degree)
        world = int(loader.status["world_size"])
        d, deg = self.group_rank, self.group_degree
        if deg < 1 or world % deg:
            raise ValueError(f"the mount serves world_size={world}, not a whole number of "
                             f"replica groups of {deg} DP ranks; mount with world_size = "
                             f"{max(deg, 1)} x the most replica groups of the job")
        if not 0 <= d < deg:
            raise ValueError(f"dp_rank {d} is not a DP rank of a replica group of {deg}")
        if sorted(loader.ranks) != list(range(world)):
            raise ValueError(f"the mount at {loader.mount} serves ranks {loader.status['ranks']}"
                             f" of world_size={world}; in torchft mode a group reads the "
                             "shares of whichever participant rank it is, so the mount must "
                             "serve every rank: mount without ranks=")
        self.world_size = world
        self.groups: int = world // deg
        """The most replica groups a step can have: the mount's world_size / D."""
        self.group_samples: int = deg * loader.share
        """Samples one participating group consumes per step."""
        self.marks = loader._marker         # the group's DP rank 0, unless write_marks=False
        self._lock = threading.Lock()
        # the committed position: gsn, and the torchft step count it is valid at (None:
        # from the mount's start or a checkpoint, not yet tied to torchft's count)
        self._gsn = int(loader.status["start_samples"])
        self._anchor: int | None = None
        self._pending: _Pending | None = None
        self._marks_due: list[tuple[int, int]] = []
        self._future: Any = None           # the quorum the current step was served by
        # the micro-batches of the step's share, in order (the loader's position splits it)
        self._parts: Iterator[np.ndarray] = iter(())
        self.current: FTStep | None = None
        """The step being served (None before the first)."""
        manager.register_state_dict_fn(STATE_KEY, self._receive, self._send)

    # ---- the committed position ----

    def _settle(self, cur: int) -> None:
        """With the lock held: move the position past the pending step if torchft's step
        count ``cur`` shows it committed."""
        p = self._pending
        if p is None or cur == p.step:
            return              # nothing pending, or the step is still running or failed
        if self._anchor == p.step and cur == p.step + 1:
            self._gsn += p.samples
            self._anchor = cur
            if self.marks:
                self._marks_due.append((self._gsn, cur))
        self._pending = None

    def committed(self) -> tuple[int, int]:
        """``(gsn, step)``: the committed position and torchft's step count it is valid at
        (the loader's state; ``step`` is torchft's current count while it is not yet tied
        to it)."""
        cur = int(self.manager.current_step())
        with self._lock:
            self._settle(cur)
            return self._gsn, cur if self._anchor is None else self._anchor

    def load(self, gsn: int) -> None:
        """A position from a checkpoint: provisional (a peer's replaces it)."""
        with self._lock:
            self._gsn, self._anchor, self._pending = int(gsn), None, None

    def _identity(self) -> dict[str, Any]:
        ld = self.loader
        return {"fingerprint": ld.fingerprint, "seed": ld.seed, "shuffle": ld.shuffle,
                "split": ld.split, "window": ld.window, "world_size": self.world_size,
                "global_batch": ld.global_batch}

    def _send(self) -> dict[str, Any]:
        """torchft's state function, run on the sender's quorum thread: the committed
        position (never a step in flight), tied to the sender's step count, which is the
        quorum's max step."""
        cur = int(self.manager.current_step())
        with self._lock:
            self._settle(cur)
            anchor = cur if self._anchor is None else self._anchor
            return {"version": STATE_VERSION, "gsn": self._gsn, "step": anchor,
                    **self._identity()}

    def _receive(self, state: dict[str, Any]) -> None:
        """torchft's load function, run inside the healing step's ``should_commit``:
        the peer's committed position replaces this group's. Raises ``ValueError`` when
        the peer's mount serves another stream or layout."""
        mine = self._identity()
        diffs = [f"{k} {state.get(k)!r} there, {v!r} here" for k, v in mine.items()
                 if state.get(k) != v]
        if int(state.get("version", -1)) != STATE_VERSION:
            diffs.append(f"state version {state.get('version')!r} there, {STATE_VERSION} here")
        if diffs:
            raise ValueError(
                "this replica group's zephon mount serves another stream or layout than "
                f"the peer it heals from: {'; '.join(diffs)}. Every group must mount the "
                "same dataset with the same seed, shuffle, validation split, world_size "
                "and global_batch")
        with self._lock:
            self._gsn, self._anchor = int(state["gsn"]), int(state["step"])

    # ---- serving ----

    def _participants(self, cur: int) -> tuple[int, int | None]:
        """(P, this group's index or None) of the quorum just formed."""
        m = self.manager
        participants = int(m.num_participants())
        index = m.participating_rank()
        if not m.is_participating():
            index = None
        if participants > self.groups:
            raise RuntimeError(
                f"the quorum of step {cur} has {participants} replica groups, more than the "
                f"mount's layout allows: world_size={self.world_size} holds "
                f"{self.groups} groups of {self.group_degree} DP ranks; mount with "
                f"world_size={participants * self.group_degree} or more (and global_batch "
                "in proportion), or start fewer groups")
        # torchft 0.2.0: with an asynchronous quorum and init_sync, every group but the
        # primary heals at step 0 (per DP rank: the primary of group rank r is the
        # r-th of the groups), yet all report a rank among max_world_size participants;
        # the gradients torchft keeps are one group's per DP rank: one part, served to all
        if getattr(m, "_use_async_quorum", True) and getattr(m, "_init_sync", True) and cur == 0:
            return 1, 0
        return participants, (None if index is None else int(index))

    def _begin_step(self) -> None:
        m = self.manager
        fut = getattr(m, "_quorum_future", None)
        if fut is None or fut is self._future:
            raise RuntimeError(
                "the torchft loader was asked for a step's first batch before the step's "
                "quorum started: call the torchft optimizer's zero_grad() (it starts the "
                "quorum, Manager.start_quorum()) before taking the step's batches")
        m.wait_quorum()          # not under the lock: the quorum thread may call _send
        cur = int(m.current_step())
        participants, index = self._participants(cur)
        with self._lock:
            self._settle(cur)
            self._pending = None         # an earlier attempt of this step did not commit
            if index is not None:
                if self._anchor is None:
                    self._anchor = cur   # trains without having healed: its position holds
                elif self._anchor != cur:
                    raise RuntimeError(
                        f"replica group trains step {cur} with a position tied to step "
                        f"{self._anchor}: the loader missed a step (its batches must be "
                        "taken every step, after zero_grad)")
            samples = participants * self.group_samples
            self._pending = _Pending(cur, samples)
            gsn = self._gsn
            marks, self._marks_due = self._marks_due, []
        self._future = fut
        rank = (index or 0) * self.group_degree + self.group_rank
        self.current = FTStep(step=cur, gsn=gsn, participants=participants, index=index,
                              samples=samples, rank=rank)
        for g, s in marks:
            self.loader._write_mark(g, s)
        path = os.path.join(self.loader.mount, "rank", str(rank), "at", str(gsn))
        share = self.loader._read(path)   # FileNotFoundError past a finite stream
        self._parts = self.loader.position.split(share)

    def batch(self) -> torch.Tensor:
        """The next micro-batch of this DP rank (the loader's ``__next__`` in torchft
        mode); a step's first waits for its quorum. Raises StopIteration at the end of a
        finite stream, RuntimeError as the module says."""
        ld = self.loader
        rows = next(self._parts, None)
        if rows is None:
            try:
                self._begin_step()
            except FileNotFoundError:
                if ld._finite:
                    raise StopIteration from None
                raise
            rows = next(self._parts)
        # a dataset of rows: [m, 3, row_len] (zephon.sft), as the loader yields it
        return torch.from_numpy(rows.astype(np.int64).reshape(-1, *ld.sample_shape))
