"""Where a loader is in a mount's global stream: :class:`Position`, the one place of the
layout's arithmetic in this package.

Every value it starts from is the mount's, as ``/status`` publishes it (``global_batch``,
``share_samples``, ``start_samples``, ``start_step``: ``zephon mount`` computes each from
the rule that owns it); what a position adds is the walk: a step's share in the loader's
micro-batches, the next step's first gsn, a restored state's checks. Nothing else in the
package steps a gsn, splits a share or checks a divisor.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

import numpy as np

# bytes of one sample id in /rank/<r>/ids/<G> (little-endian uint64)
ID_BYTES = 8


class Position:
    """One DP rank's position in the global stream of a mount: the step that starts at gsn
    :attr:`gsn`, numbered :attr:`step`, of which the rank has taken :attr:`offset` samples
    of its share. Built from a mount's ``/status`` (``status``) and the loader's
    ``micro_batch``; raises ``ValueError`` when ``micro_batch`` does not divide the rank's
    share of a step (``share_samples``).

    The same position is the same state on every rank (the gsn, the step and the offset
    into every rank's share), which is what lets a loader's state restore at any
    data-parallel degree from a step boundary."""

    __slots__ = ("global_batch", "share", "micro_batch", "micro_batches", "gsn", "step",
                 "offset")

    def __init__(self, status: Mapping[str, Any], micro_batch: int) -> None:
        self.global_batch: int = int(status["global_batch"])
        """Samples of a step (all ranks'), the mount's ``global_batch``."""
        self.share: int = int(status["share_samples"])
        """Samples of one rank's share of a step, the mount's ``share_samples``."""
        self.micro_batch: int = int(micro_batch)
        if self.micro_batch < 1 or self.share % self.micro_batch:
            raise ValueError(f"micro_batch {self.micro_batch} does not divide the rank's "
                             f"share of a step, global_batch {self.global_batch} / world_size "
                             f"{status['world_size']} = {self.share} samples; choose a divisor")
        self.micro_batches: int = self.share // self.micro_batch
        """The loader's micro-batches of one share (the mount's ``micro_batches`` when
        the loader's micro_batch is the mount's)."""
        self.gsn: int = int(status["start_samples"])
        self.step: int = int(status["start_step"])
        self.offset: int = 0

    @property
    def ids_bytes(self) -> int:
        """Bytes of one share's ids in ``ids/<G>``."""
        return ID_BYTES * self.share

    def move(self, gsn: int, step: int, offset: int) -> None:
        """Go to ``offset`` samples into the step at ``gsn`` numbered ``step`` (a loader's
        state). Raises ``ValueError``, moving nothing, for an offset this loader's
        micro-batches cannot continue from."""
        if offset % self.micro_batch or not 0 <= offset < self.share:
            raise ValueError(f"the state was saved {offset} samples into a step; "
                             f"micro_batch {self.micro_batch} cannot continue from there")
        self.gsn, self.step, self.offset = gsn, step, offset

    def state(self) -> tuple[int, int, int]:
        """``(gsn, step, offset)``: what :meth:`move` takes back."""
        return self.gsn, self.step, self.offset

    def walk(self, blocks: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        """The micro-batches of the shares in ``blocks`` (arrays of consecutive steps'
        shares from this position's step on, ``[steps, share, ...]``), in order, from this
        position's offset; the position moves past each micro-batch before it is yielded,
        so that between two it is the next one's."""
        b, share, m = self.global_batch, self.share, self.micro_batch
        for block in blocks:
            if m == share:             # one micro-batch a step: a row each
                for rows in block:
                    self.gsn += b
                    self.step += 1
                    yield rows
                continue
            for rows in block:
                for lo in range(self.offset, share, m):
                    if lo + m == share:
                        self.gsn += b
                        self.step += 1
                        self.offset = 0
                    else:
                        self.offset = lo + m
                    yield rows[lo:lo + m]

    def split(self, share: np.ndarray) -> Iterator[np.ndarray]:
        """The loader's micro-batches of one share ``[share, ...]``, in order."""
        m = self.micro_batch
        for lo in range(0, self.share, m):
            yield share[lo:lo + m]
