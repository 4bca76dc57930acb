"""The tokenizer a mount's dataset was packed with, for the model's assets.

``zephon pack --tokenizer PATH`` records the tokenizer's name, its ``sha256`` (part of the
dataset's fingerprint) and, beside them, the absolute ``PATH`` it was given (``zephon info
--json``: ``tokenizer.path``; not part of the fingerprint). :func:`packed_tokenizer` reads
them for the dataset(s) a mount serves, and :func:`assets_folder` gives the folder that
still holds that very tokenizer, for TorchTitan's ``hf_assets_path``
(:mod:`zephon.recipes` sets it), or says why not: the folder moved (nothing at the
recorded path) or changed (its files' sha256 is not the pack's).

No torch, no TorchTitan: the ``zephon`` executable (``zephon info``) and the mount's
``/status``.
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass

from ._exe import ZephonError, run
from .mount import read_status
from .pack_text import tokenizer_sha256

__all__ = ["PackedTokenizer", "packed_tokenizer", "assets_folder"]


@dataclass(frozen=True)
class PackedTokenizer:
    """What a dataset recorded of the tokenizer it was packed with."""

    dataset: str
    name: str
    sha256: str
    path: str | None
    """The absolute path given to ``zephon pack --tokenizer`` (a folder, or a
    ``tokenizer.json``); None for packs that did not record it."""


def _datasets(status: dict) -> list[str]:
    mix = status.get("mixture")
    if mix:
        return [str(s["dataset"]) for s in mix.get("sources", [])]
    return [str(status["dataset"])]


def packed_tokenizer(mount: str) -> PackedTokenizer | None:
    """The tokenizer of the dataset the mount at ``mount`` serves (of every source of a
    mixture, when they agree); None where the data was not packed with ``--tokenizer``, or
    a mixture's sources were packed with different tokenizers. Raises ``OSError`` when no
    mount answers there, :class:`zephon.ZephonError` when ``zephon info`` cannot run."""
    found: list[PackedTokenizer] = []
    for ds in _datasets(read_status(mount)):
        info = json.loads(run(["info", ds, "--json"]).stdout)
        tok = info.get("tokenizer")
        if not tok:
            return None
        found.append(PackedTokenizer(ds, str(tok.get("name") or ""), str(tok["sha256"]),
                                     tok.get("path")))
    if not found or any(t.sha256 != found[0].sha256 for t in found):
        return None
    return next((t for t in found if t.path), found[0])


def assets_folder(tok: PackedTokenizer, why: str = "") -> str | None:
    """The folder that holds the tokenizer ``tok`` now: its recorded path (the folder of
    a recorded ``tokenizer.json``) when the files there still have the pack's sha256.
    Otherwise None, with a ``RuntimeWarning`` that says what happened (the folder moved
    or changed since the pack) and what to do; ``why`` tells what the folder was for."""
    if not tok.path:
        return None
    folder = tok.path if os.path.isdir(tok.path) else os.path.dirname(tok.path)
    what = (f"the dataset {tok.dataset} was packed with the tokenizer {tok.name} (sha256 "
            f"{tok.sha256}) at {tok.path}")
    try:
        now = tokenizer_sha256(tok.path)
    except OSError as e:
        warnings.warn(f"{what}, which is not there any more (moved or deleted: {e.strerror}); "
                      f"{why}give the folder that holds it now", RuntimeWarning, stacklevel=2)
        return None
    if now != tok.sha256:
        warnings.warn(f"{what}, and the files there changed since (their sha256 is now {now}): "
                      f"another tokenizer than the data's; {why}give the folder that holds "
                      "the data's tokenizer", RuntimeWarning, stacklevel=2)
        return None
    return folder


def data_assets_folder(mount: str, why: str = "") -> str | None:
    """:func:`assets_folder` of the mount's :func:`packed_tokenizer`; None (and no word)
    where nothing answers at ``mount``, ``zephon`` cannot run, or the data has no
    recorded tokenizer."""
    try:
        tok = packed_tokenizer(mount)
    except (OSError, ValueError, KeyError, ZephonError):
        return None
    return assets_folder(tok, why) if tok else None
