"""Batches of a dataset of rows (``zephon pack --whole-documents`` or ``--chat``).

Each sample of such a dataset is a row of ``row_len`` positions holding whole documents
(docs/fine-tuning.md), stored as three planes of int32: inputs, labels (``-100`` where no
loss is taken: a chat prompt, padding) and positions (0 at each document's first token, 0
in the padding). The mount serves a micro-batch of ``m`` rows as an array ``[m, 3,
row_len]`` (npy), and :class:`zephon.torch.ZephonLoader` yields it as an ``int64``
tensor of that shape. Nothing is computed here but the shapes: the mask and the positions
are the dataset's.

- :func:`split_rows` gives ``(inputs, labels, positions)``, each ``[m, row_len]``.
- :func:`rows_trainer_batch` gives TorchTitan's batch ``({"input": inputs, "positions":
  positions}, labels)``: ``[m, row_len]`` each (TorchTitan 0.3.0), or 1-D of ``m x
  row_len`` (``flat``, TorchTitan's main: its ``num_tokens_per_batch`` tokens, the rows one
  after the other). For rows of ``num_tokens_per_batch`` positions that is one row per
  micro-batch, exactly the rows TorchTitan main's ``FirstFitPackIterDataset`` makes of the
  same documents (input 0, label -100 and position 0 in the padding).
"""
from __future__ import annotations

from typing import Any

import torch

#: The label of a position whose loss is not taken (TorchTitan's IGNORE_INDEX).
IGNORE_INDEX = -100
#: The planes of a row, in this order.
PLANES = ("inputs", "labels", "positions")


def split_rows(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(inputs, labels, positions)`` of rows ``[..., 3, row_len]``: views of ``batch``,
    each ``[..., row_len]``. Raises ValueError for another shape."""
    if batch.dim() < 2 or batch.shape[-2] != len(PLANES):
        raise ValueError(f"rows are [..., 3, row_len] (inputs, labels, positions); got "
                         f"{tuple(batch.shape)}")
    return batch[..., 0, :], batch[..., 1, :], batch[..., 2, :]


def rows_trainer_batch(batch: torch.Tensor, *, flat: bool = False) -> tuple[dict[str, Any],
                                                                           torch.Tensor]:
    """TorchTitan's batch of rows ``[m, 3, row_len]`` (int64): ``({"input": inputs,
    "positions": positions}, labels)``, each ``[m, row_len]``, or with ``flat`` 1-D of
    ``m * row_len`` (the rows one after the other)."""
    inputs, labels, positions = split_rows(batch)
    if flat:
        return ({"input": inputs.reshape(-1), "positions": positions.reshape(-1)},
                labels.reshape(-1))
    return ({"input": inputs.contiguous(), "positions": positions.contiguous()},
            labels.contiguous())


def check_rows_length(mount: str, seq_len: int) -> None:
    """Refuse (ValueError) a trainer of batches ``[b, seq_len]`` (TorchTitan 0.3.0) over a
    mount of rows of another length: read from its ``/status`` first, so that it is the
    reason given rather than a layout that follows from it. Nothing for other datasets."""
    from .mount import read_status

    st = read_status(mount)
    if st.get("layout") == "rows":
        check_rows(_Rows(int(st["row_len"]), int(st["max_context_length"])), seq_len=seq_len)


class _Rows:
    """What :func:`check_rows` reads of a loader."""

    def __init__(self, row_len: int, max_context_length: int) -> None:
        self.row_len, self.max_context_length = row_len, max_context_length


def check_rows(loader: Any, *, seq_len: int | None = None,
               max_context_length: int | None = None, eod_token: int | None = None) -> None:
    """Refuse (ValueError) a trainer that the rows of ``loader`` (a
    :class:`zephon.torch.TokenMount` of a dataset of rows) do not fit: TorchTitan 0.3.0's
    ``seq_len`` other than ``row_len`` (its batches are ``[local_batch_size, seq_len]``),
    main's ``max_context_length`` below the dataset's (a document as long as the
    dataset's longest would hold positions the model has no room for), or an
    ``eod_token`` (positions are the dataset's; there is nothing to restart)."""
    L = loader.row_len
    if seq_len is not None and int(seq_len) != L:
        raise ValueError(f"the mount serves rows of {L} positions, but the trainer's seq_len "
                         f"is {seq_len}: set training.seq_len to {L}, or pack with --seq-len "
                         f"{seq_len}")
    if max_context_length is not None and loader.max_context_length > int(max_context_length):
        raise ValueError(f"the mount's rows hold documents of up to {loader.max_context_length} "
                         f"input tokens, more than the trainer's max_context_length "
                         f"{max_context_length}: pack with --max-context-length "
                         f"{max_context_length}, or raise training.max_context_length")
    if eod_token is not None:
        raise ValueError("the mount serves rows of whole documents whose positions are "
                         "stored: there is no eod_token to restart them at; drop "
                         "--dataloader.eod_token (and ZEPHON_EOD_TOKEN)")
