"""The trainer's step and the mount's step: one optimizer step must be one step of the mount.

A mount serves steps of ``global_batch`` samples (``zephon mount -o global_batch=B``); a
trainer takes ``gradient_accumulation_steps`` x pipeline microbatches micro-batches of each
DP rank per optimizer step. Where the two differ nothing fails at once: the trainer just
reads across the mount's step boundaries, and the first sign is a checkpoint taken inside
a step of the mount, which restores only at the same layout. So the loaders compare them
when they are built, and refuse a disagreement with a ``ValueError`` that names both numbers
and the fix.

- :class:`TitanBatching`: what a TorchTitan ``Trainer.Config`` says about its step, read
  after the command line's overrides (``zephon.torchtitan.bind_trainer``), and
  :meth:`TitanBatching.step`, the trainer's arithmetic for a DP degree, as each version's
  ``torchtitan/trainer.py`` does it:

  - 0.3.0: ``global_batch_size`` samples (``-1``: ``local_batch_size`` x DP degree); each DP
    rank takes ``local_batch_size`` samples per gradient accumulation step, in micro-batches
    of ``parallelism.pipeline_parallel_microbatch_size`` with pipeline parallelism (the
    size the trainer builds its data loader with), else of ``local_batch_size``.
  - git main: ``num_tokens_per_train_step`` tokens (``-1``:
    ``num_tokens_per_microbatch_per_dp_rank`` x ``num_pp_microbatches`` x DP degree, the
    pipeline microbatches counting only with pipeline parallelism); each next() of a DP
    rank is ``num_tokens_per_microbatch_per_dp_rank`` tokens. Samples are the pack's
    ``--seq-len`` tokens, so the global batch in samples is the tokens / ``seq_len``.

- :func:`require_same_step`: the refusal, shared by ``zephon.torchtitan``'s loader (and so
  TorchTitan's trainer and ``python -m zephon.recipes``) and :class:`zephon.torch.ZephonLoader`.

Pure Python: nothing here imports torch or TorchTitan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TitanBatching", "TrainerStep", "require_same_step", "require_accumulation"]


@dataclass(frozen=True)
class TrainerStep:
    """One optimizer step of a trainer at a DP degree, in samples."""

    global_batch: int
    """Samples per optimizer step, all DP ranks together."""
    micro_batch: int
    """Samples per next() of one DP rank (one micro-batch the data loader yields)."""
    micro_batches: int
    """next() calls of one DP rank per optimizer step: gradient accumulation steps x
    pipeline microbatches."""
    accumulation_samples: int
    """Samples of one gradient accumulation step, all DP ranks together: the global batch
    is a whole number of them."""
    formed: str
    """How the trainer forms ``global_batch``, in its own option names."""
    option: str = ""
    """The trainer option that sets the global batch, with ``{}`` for its value."""
    option_scale: int = 1
    """The option's value per sample (main's is in tokens: the samples' tokens)."""

    def option_for(self, global_batch: int) -> str:
        """The trainer option that makes its global batch ``global_batch`` samples, or ""
        where TorchTitan would refuse it (not a whole number of gradient accumulation
        steps of this trainer)."""
        if not self.option or global_batch < 1 or global_batch % self.accumulation_samples:
            return ""
        return self.option.format(global_batch * self.option_scale)


@dataclass(frozen=True)
class TitanBatching:
    """What a TorchTitan ``Trainer.Config`` says about one optimizer step, before the DP
    degree is known (it comes from the device mesh when the trainer starts).

    ``contract`` is ``zephon.torchtitan.CONTRACT``: ``"dataloader"`` (0.3.0, sizes in
    samples) or ``"data.loader"`` (git main, sizes in tokens). Fields of the other version
    keep their defaults."""

    contract: str
    pp_degree: int = 1                       # parallelism.pipeline_parallel_degree
    # 0.3.0: training.local_batch_size, training.global_batch_size,
    # parallelism.pipeline_parallel_microbatch_size
    local_batch_size: int = 0
    global_batch_size: int = -1
    pp_microbatch_size: int = 1
    # main: training.num_tokens_per_microbatch_per_dp_rank,
    # training.num_tokens_per_train_step, parallelism.num_pp_microbatches
    tokens_per_microbatch: int = 0
    tokens_per_train_step: int = -1
    num_pp_microbatches: int = 1

    @classmethod
    def of(cls, config: Any, contract: str) -> TitanBatching:
        """The batching of a ``Trainer.Config`` of the TorchTitan whose contract is given."""
        t, p = config.training, config.parallelism
        if contract == "data.loader":
            return cls(contract, pp_degree=int(p.pipeline_parallel_degree),
                       tokens_per_microbatch=int(t.num_tokens_per_microbatch_per_dp_rank),
                       tokens_per_train_step=int(t.num_tokens_per_train_step),
                       num_pp_microbatches=int(p.num_pp_microbatches))
        return cls(contract, pp_degree=int(p.pipeline_parallel_degree),
                   local_batch_size=int(t.local_batch_size),
                   global_batch_size=int(t.global_batch_size),
                   pp_microbatch_size=int(p.pipeline_parallel_microbatch_size))

    def step(self, dp_degree: int, sample_tokens: int) -> TrainerStep:
        """The trainer's step at ``dp_degree`` for samples of ``sample_tokens`` input tokens
        (the pack's ``--seq-len``; used by main, whose sizes are tokens).

        Raises ``ValueError`` where TorchTitan's trainer refuses the sizes (a global batch
        that is not a whole number of gradient accumulation steps, a local batch that is not
        a whole number of pipeline microbatches) or where main's token counts are not whole
        samples."""
        dp = int(dp_degree)
        pp = self.pp_degree > 1
        if self.contract == "data.loader":
            return self._main_step(dp, int(sample_tokens), pp)
        local = self.local_batch_size
        micro = self.pp_microbatch_size if pp else local
        if local < 1 or micro < 1 or local % micro:
            raise ValueError(f"training.local_batch_size {local} is not a whole number of "
                             f"pipeline microbatches of {micro} "
                             "(parallelism.pipeline_parallel_microbatch_size): TorchTitan's "
                             "trainer refuses it")
        per_accum = local * dp
        if self.global_batch_size < 0:
            g = per_accum
            formed = f"training.local_batch_size {local} x data-parallel degree {dp}"
        else:
            g = self.global_batch_size
            formed = f"training.global_batch_size {g}"
            if g < 1 or g % per_accum:
                raise ValueError(f"{formed} is not a multiple of training.local_batch_size "
                                 f"{local} x data-parallel degree {dp} = {per_accum}: "
                                 "TorchTitan's trainer refuses it")
            formed += (f" (gradient accumulation {g // per_accum} x local_batch_size {local} "
                       f"x data-parallel degree {dp})")
        if pp:
            formed += f", in pipeline microbatches of {micro}"
        return TrainerStep(g, micro, g // (micro * dp), per_accum, formed,
                           "--training.global_batch_size {}")

    def _main_step(self, dp: int, seq: int, pp: bool) -> TrainerStep:
        """:meth:`step` of git main, whose sizes are tokens (``seq`` per sample)."""
        micro_tokens = self.tokens_per_microbatch
        if seq < 1 or micro_tokens < 1 or micro_tokens % seq:
            raise ValueError(f"training.num_tokens_per_microbatch_per_dp_rank {micro_tokens} "
                             f"is not a whole number of samples of {seq} tokens (the pack's "
                             f"--seq-len); make it a multiple of {seq}")
        n_pp = self.num_pp_microbatches if pp else 1
        per_accum = micro_tokens * n_pp * dp
        pp_text = f" x parallelism.num_pp_microbatches {n_pp}" if pp else ""
        if self.tokens_per_train_step < 0:
            tokens = per_accum
            formed = (f"training.num_tokens_per_microbatch_per_dp_rank {micro_tokens}{pp_text}"
                      f" x data-parallel degree {dp} = {tokens} tokens")
        else:
            tokens = self.tokens_per_train_step
            formed = f"training.num_tokens_per_train_step {tokens}"
            if tokens % per_accum:
                raise ValueError(f"{formed} is not a multiple of the tokens of one gradient "
                                 f"accumulation step, num_tokens_per_microbatch_per_dp_rank "
                                 f"{micro_tokens}{pp_text} x data-parallel degree {dp} = "
                                 f"{per_accum}: TorchTitan's trainer refuses it")
            formed += (f" (gradient accumulation {tokens // per_accum} x "
                       f"num_tokens_per_microbatch_per_dp_rank {micro_tokens}{pp_text} x "
                       f"data-parallel degree {dp})")
        formed += f", in samples of {seq} tokens"
        return TrainerStep(tokens // seq, micro_tokens // seq, tokens // micro_tokens // dp,
                           per_accum // seq, formed, "--training.num_tokens_per_train_step {}",
                           seq)


def require_same_step(mount_global_batch: int, world_size: int, step: TrainerStep) -> None:
    """Refuse (``ValueError``) a mount whose ``global_batch`` is not the trainer's global
    batch, naming both, how the trainer forms its own, and the fixes: remount with the
    trainer's, or the trainer option that gives the mount's (where TorchTitan takes it)."""
    if int(mount_global_batch) == step.global_batch:
        return
    option = step.option_for(int(mount_global_batch))
    fix = f"remount with world_size={world_size},global_batch={step.global_batch}"
    if option:
        fix += f", or give the trainer {option}"
    raise ValueError(
        f"the trainer's global batch is {step.global_batch} samples ({step.formed}), but the "
        f"mount's global_batch is {mount_global_batch}: one optimizer step would not be one "
        f"step of the mount, and every checkpoint would land inside one of its steps; {fix}")


def require_accumulation(position: Any, accumulation: int, world_size: int) -> None:
    """Refuse (``ValueError``) a trainer that takes ``accumulation`` micro-batches per
    optimizer step from each DP rank when the mount's share of a step is another number of
    the loader's micro-batches (``position``: the loader's :class:`zephon.position.Position`,
    its ``micro_batches``, ``micro_batch``, ``share`` and ``global_batch``, the mount's)."""
    if int(accumulation) == position.micro_batches:
        return
    m = position.micro_batch
    per_rank = int(accumulation) * m
    raise ValueError(
        f"the trainer takes gradient_accumulation_steps {accumulation} x micro_batch "
        f"{m} = {per_rank} samples per DP rank and step (a global batch of "
        f"{per_rank * world_size}), but the mount's share of a step is {position.share} "
        f"samples (global_batch {position.global_batch} / world_size {world_size}); remount "
        f"with world_size={world_size},global_batch={per_rank * world_size}, or take "
        f"gradient_accumulation_steps={position.micro_batches} (the loader's "
        "gradient_accumulation_steps attribute)")
