"""Mounting a dataset from Python: :func:`mount` and, one per node, :func:`node_mount`."""
from __future__ import annotations

import errno
import fcntl
import fractions
import json
import math
import numbers
import os
import re
import subprocess
import tempfile
import time
from typing import Any, Iterable, Mapping, Sequence, Union

from ._exe import PathLike, ZephonError, find_executable


def format_options(options: Mapping[str, Any]) -> str:
    """``{"world_size": 4, "allow_other": True}`` as ``"world_size=4,allow_other"``.

    ``True`` gives a bare flag, ``False`` and ``None`` leave the key out; values must not
    contain commas or white space (the mount's option syntax has no quoting).
    """
    parts = []
    for k, v in options.items():
        if v is None or v is False:
            continue
        s = k if v is True else f"{k}={os.fspath(v) if isinstance(v, os.PathLike) else v}"
        if "," in s or any(c.isspace() for c in s):
            raise ValueError(f"mount option {s!r} contains a comma or white space, which the "
                             "option syntax cannot carry; use another path or value")
        parts.append(s)
    return ",".join(parts)


Weights = Union[Mapping[str, float], Sequence[float], str]

_SOURCE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


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


def format_validation(validation: float | fractions.Fraction | str) -> str:
    """The ``validation=`` option: a fraction of every source held out, ``0.01`` ->
    ``"0.01"``, ``Fraction(1, 100)`` -> ``"1/100"``; a string is passed as it is. The
    mount refuses a fraction outside (0, 1/2]."""
    if isinstance(validation, str):
        return validation
    if isinstance(validation, fractions.Fraction):
        return f"{validation.numerator}/{validation.denominator}"
    return _number("validation", validation)


def _mixture_options(options: dict[str, Any], weights: Weights | None,
                     validation: float | fractions.Fraction | str | None) -> dict[str, Any]:
    if weights is not None:
        options["weights"] = format_weights(weights)
    if validation is not None:
        options["validation"] = format_validation(validation)
    return options


def format_ranks(ranks: Iterable[int] | str) -> str:
    """A rank list as the ``ranks=`` option writes it: ``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    if isinstance(ranks, str):
        return ranks
    rs = sorted(set(int(r) for r in ranks))
    if not rs or rs[0] < 0:
        raise ValueError(f"ranks {ranks!r}: give one or more ranks >= 0")
    out, lo = [], rs[0]
    for a, b in zip(rs, rs[1:] + [None]):
        if b != a + 1:
            out.append(str(lo) if lo == a else f"{lo}-{a}")
            lo = b
    return ",".join(out)


def read_status(mountpoint: PathLike) -> dict[str, Any]:
    """The mount's ``/status`` as a dict. Raises OSError when nothing answers there."""
    with open(os.path.join(os.fspath(mountpoint), "status"), "rb") as f:
        return json.loads(f.read())


def _is_mounted(mp: str) -> bool:
    esc = mp.replace("\\", "\\134").replace(" ", "\\040")
    try:
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4] == esc for line in f)
    except OSError:
        return False


def _fusermount_u(mp: str) -> None:
    if subprocess.run(["fusermount3", "-u", mp], stderr=subprocess.DEVNULL).returncode:
        subprocess.run(["fusermount3", "-uz", mp], stderr=subprocess.DEVNULL)


class Mount:
    """A live mount of a dataset or a mixture spec, served by a ``zephon mount -f`` child of
    this process.

    Use it as a context manager (see :func:`mount`): leaving the block unmounts, also on an
    exception. ``path`` is the mountpoint; ``status()`` reads ``/status``.
    """

    def __init__(self, dataset: PathLike, mountpoint: PathLike, *, zephon: PathLike | None = None,
                 timeout: float = 60.0, weights: Weights | None = None,
                 validation: float | fractions.Fraction | str | None = None,
                 **options: Any) -> None:
        self.dataset = os.path.abspath(os.fspath(dataset))
        self.path = os.path.abspath(os.fspath(mountpoint))
        self.options = format_options(_mixture_options(dict(options), weights, validation))
        self.timeout = timeout
        self._exe = find_executable(zephon)
        self._proc: subprocess.Popen | None = None
        self._log: Any = None

    def start(self) -> "Mount":
        """Mount, and return once ``/status`` answers. Raises :class:`ZephonError` with
        zephon's message when the mount fails or does not answer within ``timeout``."""
        if self._proc is not None:
            raise ZephonError(f"{self.path} is already mounted by this object")
        if not _is_mounted(self.path):
            os.makedirs(self.path, exist_ok=True)
        cmd = [self._exe, "mount", self.dataset, self.path, "-f"]
        if self.options:
            cmd += ["-o", self.options]
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=self._log, start_new_session=True)
        deadline = time.monotonic() + self.timeout
        delay = 0.001   # a mount is live within milliseconds: poll fast first, then back off
        while True:
            rc = self._proc.poll()
            if rc is not None:
                msg = self.log().strip() or f"zephon exited with status {rc}"
                self._proc = None
                raise ZephonError(f"cannot mount {self.dataset} at {self.path}: {msg}")
            try:
                st = read_status(self.path)
                if st.get("dataset") == self.dataset or os.path.realpath(
                        st.get("dataset", "")) == os.path.realpath(self.dataset):
                    return self
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ZephonError(f"the mount of {self.dataset} at {self.path} did not answer "
                                  f"within {self.timeout:g} s; its log: {self.log()[-2000:]}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.02)

    @property
    def pid(self) -> int | None:
        """The pid of the mount's daemon (``zephon mount -f``), or None when not started."""
        return self._proc.pid if self._proc is not None else None

    def log(self) -> str:
        """What the mount has written to its log (stderr) so far."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def status(self) -> dict[str, Any]:
        """The mount's ``/status`` as a dict."""
        return read_status(self.path)

    def stop(self, timeout: float = 30.0) -> None:
        """Unmount and wait for the daemon to exit (it closes its journal first). Safe to
        call twice."""
        p, self._proc = self._proc, None
        if p is None:
            return
        _fusermount_u(self.path)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            _fusermount_u(self.path)

    def __enter__(self) -> "Mount":
        """Mount (unless :meth:`start` already did) and return self."""
        return self if self._proc is not None else self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def mount(dataset: PathLike, mountpoint: PathLike, *, zephon: PathLike | None = None,
          timeout: float = 60.0, weights: Weights | None = None,
          validation: float | fractions.Fraction | str | None = None,
          **options: Any) -> Mount:
    """Mount ``dataset`` (a packed dataset directory, or a mixture spec file such as
    ``mix.json``) at ``mountpoint`` with mount options given as keywords, for a ``with``
    block::

        with zephon.mount("/data/ds", "/tmp/z", world_size=4, global_batch=16, seed=1) as m:
            print(m.status()["start_step"])
        with zephon.mount("mix.json", "/tmp/z", weights={"web": 0.5, "code": 0.5},
                          validation=0.01, world_size=4, global_batch=16) as m:
            print(m.status()["mixture"]["weights"], m.status()["validation"]["steps"])

    Keywords are the options of ``zephon mount -o`` (``True`` for a bare flag such as
    ``allow_other``). ``weights`` (a mixture's weights from this mount's start: a dict by
    source name or a list in the spec's order, see :func:`format_weights`) and
    ``validation`` (the fraction of every source held out, :func:`format_validation`) are
    written in the option's syntax. The mount is live when the block starts and unmounted
    when it ends, also on an exception. A failed mount raises :class:`ZephonError` with
    zephon's reason (an unknown source name in ``weights``, a ``validation`` out of range,
    another mixture's journal...).
    """
    return Mount(dataset, mountpoint, zephon=zephon, timeout=timeout, weights=weights,
                 validation=validation, **options)


class _Waiter:
    """node_mount's object for the processes that did not mount: nothing to undo."""

    def __init__(self, path: str) -> None:
        self.path = path

    def status(self) -> dict[str, Any]:
        return read_status(self.path)

    def stop(self) -> None:
        pass

    def __enter__(self) -> "_Waiter":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def node_mount(dataset: PathLike, mountpoint: PathLike, *, dp_degree: int,
               dp_ranks: Iterable[int] | str, local_rank: int | None = None,
               timeout: float = 120.0, zephon: PathLike | None = None,
               weights: Weights | None = None,
               validation: float | fractions.Fraction | str | None = None,
               **options: Any) -> Mount | _Waiter:
    """One mount per node for the data-parallel ranks of that node.

    ``dp_degree`` is the data-parallel degree of the job (the mount's ``world_size``; not
    the process count when tensor, pipeline or context parallelism is on) and ``dp_ranks``
    the DP ranks whose processes run on this node. The process with ``local_rank`` 0
    (default: the ``LOCAL_RANK`` environment variable, as torchrun sets it) mounts, holding
    the lock file ``MOUNTPOINT.lock`` meanwhile; the others wait, up to ``timeout`` seconds,
    until ``/status`` answers with this dataset, DP degree and ranks. Returns a context
    manager; leaving it unmounts in the mounting process only, so leave it after a barrier
    (``torch.distributed.barrier()``) when other processes still read. ``dataset`` may be a
    mixture spec file; ``weights`` and ``validation`` are as for :func:`mount`. Other
    keywords are mount options (``global_batch``, ``micro_batch``, ``seed``, ``journal``,
    ``resume``...).
    """
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    ranks = format_ranks(dp_ranks)
    for k in ("world_size", "ranks"):
        if k in options:
            raise ValueError(f"node_mount sets {k}= itself (from dp_degree and dp_ranks); "
                             "do not pass it")
    mp = os.path.abspath(os.fspath(mountpoint))
    if local_rank == 0:
        os.makedirs(os.path.dirname(mp), exist_ok=True)
        lock = open(mp + ".lock", "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            m = Mount(dataset, mp, zephon=zephon, timeout=timeout, world_size=dp_degree,
                      ranks=ranks, weights=weights, validation=validation, **options)
            return m.start()
        finally:
            lock.close()
    want = (os.path.realpath(os.fspath(dataset)), int(dp_degree), ranks)
    deadline = time.monotonic() + timeout
    seen = "nothing answered"
    while True:
        try:
            st = read_status(mp)
            got = (os.path.realpath(st["dataset"]), int(st["world_size"]), st["ranks"])
            if got == want:
                return _Waiter(mp)
            seen = f"a mount of {got[0]} for world_size {got[1]}, ranks {got[2]}"
        except (OSError, ValueError, KeyError) as e:
            if isinstance(e, OSError) and e.errno not in (errno.ENOENT, errno.ENOTCONN):
                seen = f"{e}"
        if time.monotonic() > deadline:
            raise ZephonError(f"no mount of {want[0]} for world_size {want[1]}, ranks {want[2]} "
                              f"answered at {mp} within {timeout:g} s ({seen}); is local rank 0 "
                              "mounting it (see its error)?")
        time.sleep(0.05)
