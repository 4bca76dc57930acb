"""The options of ``zephon mount -o``: one typed definition (:class:`MountOptions`), which
:func:`zephon.mount`, :class:`zephon.Mount`, :func:`zephon.node_mount` and
:func:`mount_options` all take, and their writing into the option text.

Nothing here knows an option's default or checks a value beyond what the option syntax
can carry: ``zephon mount`` does both (``zephon mount --check --json`` prints what it
resolved, :func:`configuration`).
"""
from __future__ import annotations

import fractions
import json
import math
import numbers
import os
import re
import subprocess
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Iterable,
    Literal,
    Mapping,
    Sequence,
    TypedDict,
    Union,
)

from ._exe import PathLike, ZephonError, find_executable

if TYPE_CHECKING:
    from typing_extensions import Unpack

Shuffle = Literal["global", "none"]
Format = Literal["lines", "tar", "npy", "bin"]
Sync = Literal["normal", "full"]
Weights = Union[Mapping[str, float], Sequence[float], str]
Validation = Union[float, fractions.Fraction, str]


class NodeMountOptions(TypedDict, total=False):
    """The mount options :func:`zephon.node_mount` takes: those of :class:`MountOptions`
    but ``world_size`` and ``ranks`` (its ``dp_degree`` and ``dp_ranks``)."""

    global_batch: int | None
    micro_batch: int | None
    seed: int | None
    shuffle: Shuffle | None
    epochs: int | None
    format: Format | None
    journal: PathLike | None
    resume: str | None
    weights: Weights | None
    validation: Validation | None
    prefetch: int | None
    readahead: int | str | None
    sync: Sync | None
    workers: int | None
    max_threads: int | None
    allow_other: bool
    default_permissions: bool
    fuse_options: Sequence[str]


class MountOptions(NodeMountOptions, total=False):
    """The options of ``zephon mount -o``, each a keyword of :func:`zephon.mount`,
    :class:`zephon.Mount` and :func:`mount_options`. Left out (or ``None``/``False``):
    the mount's default, which the mount resolves (``zephon mount --help`` says each;
    :func:`configuration` shows what it made of them).

    - ``world_size``: data-parallel ranks in the job, W.
    - ``global_batch``: samples per optimizer step, a multiple of W.
    - ``micro_batch``: samples per open of ``next``; divides B/W.
    - ``ranks``: the ranks this mount serves, a list (``[0, 2]``, ``range(8)``) or the
      option's text (``"0-7"``).
    - ``seed``: the shuffle seed.
    - ``shuffle``: ``"global"`` or ``"none"``.
    - ``epochs``: stop after this many epochs (0: endless).
    - ``format``: batch encoding, ``"lines"``, ``"tar"``, ``"npy"`` or ``"bin"``.
    - ``journal``: the cursor journal's path (a relative one is made absolute: the daemon
      reads it from this cwd, and ``/status`` names it absolutely).
    - ``resume``: where the stream starts, ``"auto"``, ``"fresh"``, ``"samples:G[@S]"`` or
      ``"step:S"``.
    - ``weights``: a mixture's weights from this mount's start: a dict by source name or a
      list in the spec's order (:func:`format_weights`), or the option's text.
    - ``validation``: the fraction of every source held out for ``validation/``, at most
      1/2 (:func:`format_validation`).
    - ``prefetch``: decoded micro-batches kept ready per rank.
    - ``readahead``: bytes of each rank's coming samples whose pages the mount asks of the
      kernel ahead of the rank, an int or the option's text (``"64M"``, ``"1G"``, ``0``:
      none): for a dataset not in the page cache.
    - ``sync``: journal durability of each claim, ``"normal"`` or ``"full"``.
    - ``workers``: decode threads.
    - ``max_threads``: FUSE requests served at once, 1-256.
    - ``allow_other``: let other users read ``status``, ``samples/`` and ``step/``
      (implies ``default_permissions``).
    - ``default_permissions``: let the kernel check permissions.
    - ``fuse_options``: FUSE mount options passed through as they are
      (``"auto_unmount"``, ``"fsname=NAME"``, ``"noatime"``...).
    """

    world_size: int | None
    ranks: Iterable[int] | str | None


# every option name, in the order the option text writes them
OPTION_NAMES: tuple[str, ...] = (
    "world_size", "global_batch", "micro_batch", "ranks", "seed", "shuffle", "epochs",
    "format", "journal", "resume", "prefetch", "readahead", "sync", "workers", "max_threads",
    "allow_other", "default_permissions", "fuse_options", "weights", "validation")
assert set(OPTION_NAMES) == set(MountOptions.__optional_keys__)


def check_names(where: str, options: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Raise TypeError, as Python does for a keyword a signature lacks, for a key of
    ``options`` that is not an option of ``where``."""
    names = set(allowed)
    for k in options:
        if k not in names:
            raise TypeError(f"{where}() got an unexpected keyword argument {k!r}")


_RANK_LIST = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")
_SOURCE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def format_options(options: Mapping[str, Any]) -> str:
    """``{"world_size": 4, "allow_other": True}`` as ``"world_size=4,allow_other"``.

    ``True`` gives a bare flag, ``False`` and ``None`` leave the key out; values must not
    contain commas or white space (the mount's option syntax has no quoting), except a
    rank list: ``ranks=0,2`` (as ``zephon mount`` reads it, bare ranks after ``ranks=``
    continue its list).
    """
    parts = []
    for k, v in options.items():
        if v is None or v is False:
            continue
        s = k if v is True else f"{k}={os.fspath(v) if isinstance(v, os.PathLike) else v}"
        if k == "ranks" and _RANK_LIST.fullmatch(s[len("ranks="):]):
            pass
        elif "," in s or any(c.isspace() for c in s):
            raise ValueError(f"mount option {s!r} contains a comma or white space, which the "
                             "option syntax cannot carry; use another path or value")
        parts.append(s)
    return ",".join(parts)


def _number(what: str, v: Any) -> str:
    """A weight or fraction as the mount reads it: an int as is, anything else real as
    the shortest decimal that reads back as the same double (the mount turns it into the
    nearest fraction of small denominator, so ``1/3`` is exactly a third)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"{what} {v!r} is not a number; give an int or a float")
    if isinstance(v, numbers.Integral):
        return str(int(v))
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"{what} {v!r} is not a finite number; give a number >= 0")
    return repr(f)


def format_weights(weights: Weights) -> str:
    """A mixture's weights as the ``weights=`` option writes them: ``{"web": 0.7, "code":
    0.3}`` -> ``"web:0.7+code:0.3"`` (by source name), ``[0.7, 0.3]`` -> ``"0.7+0.3"`` (in
    the spec's source order); a string is passed as it is. Raises ``ValueError`` for an
    empty list, a name that is not a source name (letters, digits, ``_.-``) or a weight
    that is not a finite number; the mount itself refuses unknown names, negative
    weights and weights that are all 0."""
    if isinstance(weights, str):
        return weights
    if isinstance(weights, Mapping):
        parts = []
        for name, w in weights.items():
            if not isinstance(name, str) or not _SOURCE_NAME.fullmatch(name):
                raise ValueError(f"weights: {name!r} is not a source name (letters, digits "
                                 "and _.- only); name the sources as the mixture spec does")
            parts.append(f"{name}:{_number(f'the weight of {name}', w)}")
    else:
        parts = [_number("weight", w) for w in weights]
    if not parts:
        raise ValueError("weights: the list is empty; give one weight per source")
    return "+".join(parts)


def format_validation(validation: Validation) -> str:
    """The ``validation=`` option: a fraction of every source held out, ``0.01`` ->
    ``"0.01"``, ``Fraction(1, 100)`` -> ``"1/100"``; a string is passed as it is. The
    mount refuses a fraction outside (0, 1/2]."""
    if isinstance(validation, str):
        return validation
    if isinstance(validation, fractions.Fraction):
        return f"{validation.numerator}/{validation.denominator}"
    return _number("validation", validation)


def format_ranks(ranks: Iterable[int] | str) -> str:
    """A rank list as the ``ranks=`` option writes it: ``[0, 1, 2, 5]`` -> ``"0-2,5"``.
    The mount checks it (ranks below ``world_size``); this only writes it."""
    if isinstance(ranks, str):
        return ranks
    rs = sorted(set(int(r) for r in ranks))
    if not rs or rs[0] < 0:
        raise ValueError(f"ranks {ranks!r}: give one or more ranks >= 0")
    out: list[str] = []
    lo = rs[0]
    for a, b in zip(rs, [*rs[1:], None], strict=True):
        if b is None or b != a + 1:
            out.append(str(lo) if lo == a else f"{lo}-{a}")
            lo = a if b is None else b
    return ",".join(out)


def mount_options(**options: Unpack[MountOptions]) -> str:
    """The ``-o`` string of ``zephon mount`` for these options (:class:`MountOptions`
    names each; left out, ``None`` and ``False``: the mount's default).
    ``{"world_size": 4, "allow_other": True}`` gives ``"world_size=4,allow_other"``. A
    relative ``journal`` is made absolute. Raises ``ValueError`` for a value the option
    syntax cannot carry (a comma or white space), ``TypeError`` for a name that is not an
    option."""
    check_names("mount_options", options, OPTION_NAMES)
    given: dict[str, Any] = dict(options)
    conv: dict[str, Callable[[Any], str]] = {"ranks": format_ranks, "weights": format_weights,
            "validation": format_validation, "readahead": str,
            "journal": lambda j: os.path.abspath(os.fspath(j))}
    text: dict[str, Any] = {}
    for k in OPTION_NAMES:
        v = given.get(k)
        if k == "fuse_options":
            text.update((o, True) for o in v or ())
        elif v is not None:
            text[k] = conv[k](v) if k in conv else v
    return format_options(text)


def configuration(dataset: PathLike, mountpoint: PathLike, options: str, *,
                  zephon: PathLike | None = None) -> dict[str, Any]:
    """The configuration a mount of ``dataset`` at ``mountpoint`` with the option text
    ``options`` would serve, as ``zephon mount --check --json`` resolves it: a dict with
    ``/status``' keys (``start_step``, ``start_samples`` and a mixture's ``weights`` are
    ``None`` where the journal decides them). Mounts nothing. Raises
    :class:`ZephonError` with zephon's reason when the mount would refuse the options or
    the dataset."""
    cmd = [find_executable(zephon), "mount", os.fspath(dataset), os.fspath(mountpoint),
           "--check", "--json"] + (["-o", options] if options else [])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        msg = p.stderr.decode(errors="replace").strip() or f"exit status {p.returncode}"
        raise ZephonError(f"cannot mount {os.fspath(dataset)} at {os.fspath(mountpoint)}: "
                          f"{msg.removeprefix('zephon: ')}")
    out: dict[str, Any] = json.loads(p.stdout)
    return out
