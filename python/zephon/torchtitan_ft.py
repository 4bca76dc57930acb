"""TorchTitan's fault tolerance (``torchtitan.experiments.torchft``) with Zephon's torchft
loader mode (:mod:`zephon.torchft`), by configuration only: :func:`use_torchft` in a
config function of TorchTitan's ``FaultTolerantTrainer``::

    from zephon.torchtitan_ft import use_torchft
    def my_config():
        config = llama3_torchft_debugmodel()           # any FaultTolerantTrainer.Config
        return use_torchft(config, mount="/mnt/z")

It sets three things:

- ``config.fault_tolerance``: :class:`ZephonTorchFTManager.Config`, TorchTitan's own
  ``FaultTolerance`` config with the same values (the command line still sets
  ``--fault_tolerance.replica_id`` and the rest); the manager it builds is TorchTitan's
  ``TorchFTManager`` that also hands its ``torchft.Manager`` to the data loader, which
  TorchTitan's trainer builds next (it passes the loader no manager);
- ``config.dataloader``: :class:`zephon.torchtitan.ZephonDataLoader` with ``torchft=True``;
- ``config.checkpoint.enable_ft_dataloader_checkpoints = False``: the per-group loader
  checkpoints TorchTitan writes every step are not needed (the position travels with the
  model to a group that heals) and, loaded at a restart, hold a stale position; the
  loader's state is then saved and loaded with the model in the full checkpoint.

TorchTitan's trainer builds the loader with the job's DP view of ``get_dp_info``
(``dp_world_size`` = D x ``group_size``, ``dp_rank`` = D x ``replica_id`` + d); the loader
takes D and d back from it. Works with TorchTitan 0.3.0 and its git main (the two share
``experiments/torchft``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torchtitan.experiments.torchft.config.job_config import FaultTolerance
from torchtitan.experiments.torchft.manager import TorchFTManager

__all__ = ["ZephonTorchFTManager", "use_torchft", "replica_group"]

_built: list["ZephonTorchFTManager"] = []   # the one a trainer of this process built


class ZephonTorchFTManager(TorchFTManager):
    """TorchTitan's ``TorchFTManager`` that makes its ``torchft.Manager`` known to the
    data loader built after it in this process (:func:`replica_group`)."""

    @dataclass(kw_only=True, slots=True)
    class Config(FaultTolerance):
        pass

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        if self.enabled:
            _built[:] = [self]


def replica_group(dp_rank: int, dp_world_size: int) -> tuple[int, int, Any]:
    """``(d, D, manager)``: this rank's DP rank and degree within its replica group and
    the group's ``torchft.Manager``, from the job's DP view that TorchTitan's trainer
    passes its data loader. Raises ``ValueError`` when no :class:`ZephonTorchFTManager`
    was built (the config's ``fault_tolerance`` is not it, or not enabled), it runs a
    semi-synchronous method (no quorum per step), or the view does not fit it."""
    if not _built:
        raise ValueError(
            "the data loader's torchft=True needs the trainer's fault tolerance to be "
            "zephon.torchtitan_ft.ZephonTorchFTManager.Config with enable=True (it hands "
            "the torchft Manager to the loader): apply zephon.torchtitan_ft.use_torchft"
            "(config, mount=...) in the config function, and run FaultTolerantTrainer "
            "with --fault_tolerance.enable")
    ft = _built[-1]
    if not ft.use_async_quorum:
        raise ValueError(
            "the torchft loader mode serves a quorum per step; fault_tolerance."
            "semi_sync_method (DiLoCo, LocalSGD) syncs every few steps: leave it unset")
    groups = int(ft.group_size)
    if groups < 1 or dp_world_size % groups:
        raise ValueError(f"the trainer's data-parallel degree {dp_world_size} is not "
                         f"fault_tolerance.group_size {groups} x the DP degree of a group")
    degree = dp_world_size // groups
    d = dp_rank - degree * int(ft.replica_id)
    if not 0 <= d < degree:
        raise ValueError(f"dp_rank {dp_rank} is not a rank of replica group "
                         f"{ft.replica_id} ({degree} DP ranks each)")
    return d, degree, ft.manager


def use_torchft(config: Any, *, mount: str = "", **dataloader: Any) -> Any:
    """``config`` (a ``FaultTolerantTrainer.Config``) with Zephon's torchft loader mode: see
    the module's documentation. ``mount`` and ``dataloader`` (``eod_token``,
    ``vocab_size``) go to :class:`zephon.torchtitan.ZephonDataLoader.Config`. Returns
    the config."""
    from .torchtitan import ZephonDataLoader
    ft = config.fault_tolerance
    values = {f.name: getattr(ft, f.name) for f in dataclasses.fields(ft) if f.init}
    config.fault_tolerance = ZephonTorchFTManager.Config(**values)
    config.dataloader = ZephonDataLoader.Config(mount=mount, torchft=True, **dataloader)
    if hasattr(config.checkpoint, "enable_ft_dataloader_checkpoints"):
        config.checkpoint.enable_ft_dataloader_checkpoints = False
    return config
