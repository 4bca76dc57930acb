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
import threading
import time
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence, Union

from ._exe import PathLike, ZephonError, find_executable, require_fuse


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


_RANK_LIST = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")

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
    out: list[str] = []
    lo = rs[0]
    for a, b in zip(rs, [*rs[1:], None], strict=True):
        if b is None or b != a + 1:
            out.append(str(lo) if lo == a else f"{lo}-{a}")
            lo = a if b is None else b
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


def _status_within(mp: str, timeout: float) -> dict[str, Any] | None:
    """``/status`` of the mount at mp, read in a thread: None when nothing is mounted or
    its daemon is gone (ENOTCONN: ``zephon mount`` clears such a stale mount itself).
    Raises ZephonError when the daemon does not answer within ``timeout`` seconds (a
    stopped or hung daemon blocks every read; the reader thread is left to it)."""
    out: dict[str, Any] = {}

    def read() -> None:
        try:
            out["status"] = read_status(mp)
        except (OSError, ValueError) as e:
            out["error"] = e

    t = threading.Thread(target=read, name="zephon-status", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise ZephonError(f"{mp} is mounted but its daemon does not answer within "
                          f"{timeout:g} s (stopped or hung?); unmount it with "
                          f"fusermount3 -u {mp} (or -uz), then mount again")
    if "status" in out:
        return out["status"]
    e = out["error"]
    if isinstance(e, OSError) and e.errno in (errno.ENOENT, errno.ENOTCONN):
        return None
    raise ZephonError(f"cannot read {mp}/status to see what is mounted there: {e}; "
                      f"unmount it with fusermount3 -u {mp} if it is a leftover")


def parse_ranks(text: str) -> set[int]:
    """``"0-2,5"`` -> {0, 1, 2, 5} (the syntax of ``ranks=``), for a rank list given as
    text; a mount's own list is ``/status``' ``rank_list``. Raises ``ValueError``."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _fraction(text: str) -> fractions.Fraction:
    return fractions.Fraction(text.strip())


def _dataset_path(dataset: PathLike, resolve: Callable[[str], str]) -> str:
    """A dataset path made absolute with ``resolve``; an ``s3://`` URL as given."""
    text = os.fspath(dataset)
    return text if text.startswith("s3://") else resolve(text)


def _split_options(text: str) -> dict[str, str]:
    """An option string as :func:`format_options` writes it, back into a dict (a bare
    rank after ``ranks=`` continues the rank list, as in ``zephon mount``)."""
    out: dict[str, str] = {}
    for part in text.split(",") if text else []:
        k, eq, v = part.partition("=")
        if not eq and "ranks" in out and re.fullmatch(r"[0-9]+(-[0-9]+)?", part):
            out["ranks"] += "," + part
        else:
            out[k] = v if eq else ""
    return out


def _weights_ratio(weights: str, names: list[str]) -> list[fractions.Fraction] | None:
    """A ``weights=`` text (by name or in order, decimals, fractions or integers) as
    normalised shares in source order; None when it cannot be read (the mount says why)."""
    try:
        parts = weights.replace(",", "+").split("+")
        if all(":" in p for p in parts):
            by = {n: _fraction(w) for n, w in (p.split(":", 1) for p in parts)}
            ws = [by.get(n, fractions.Fraction(0)) for n in names]
            if set(by) - set(names):
                return None
        else:
            ws = [_fraction(p) for p in parts]
        total = sum(ws)
        return [w / total for w in ws] if total else None
    except (ValueError, ZeroDivisionError):
        return None


def stream_differences(dataset: PathLike, options: str | Mapping[str, Any],
                       status: Mapping[str, Any], *,
                       fingerprint: str | None = None) -> list[str]:
    """What makes the live mount whose ``/status`` is ``status`` another stream or layout
    than a mount of ``dataset`` with ``options`` (a string as ``-o`` takes, or keywords as
    :func:`mount` takes) would be: ``["seed 1 there, 5 asked", ...]``, empty when it is
    the same. Compared: the dataset (path, and ``fingerprint`` when given), seed, shuffle,
    world_size, global_batch, micro_batch, ranks, journal, epochs, format (when asked),
    a mixture's weights (when asked), the validation split, and the start of an explicit
    ``resume=samples:G[@S]`` or ``step:S``. Options that change neither the bytes nor who
    reads them (prefetch, workers, sync, allow_other...) are not compared. Defaults are
    ``zephon mount``'s."""
    o = _split_options(options if isinstance(options, str) else format_options(options))
    ds = _dataset_path(dataset, os.path.realpath)
    diffs: list[str] = []

    def cmp(what: str, there: Any, asked: Any) -> None:
        if there != asked:
            diffs.append(f"{what} {there} there, {asked} asked")

    def num(key: str, default: int) -> int | str:
        try:
            return int(o[key]) if key in o else default
        except ValueError:
            return o[key]

    cmp("dataset", _dataset_path(str(status.get("dataset")), os.path.realpath), ds)
    if fingerprint is not None:
        cmp("fingerprint", status.get("fingerprint"), fingerprint)
    w = num("world_size", 1)
    b = num("global_batch", w if isinstance(w, int) else 0)
    cmp("world_size", status.get("world_size"), w)
    cmp("global_batch", status.get("global_batch"), b)
    m = num("micro_batch", b // w if isinstance(b, int) and isinstance(w, int) and w else 0)
    cmp("micro_batch", status.get("micro_batch"), m)
    try:
        asked_ranks = parse_ranks(o["ranks"]) if "ranks" in o else set(range(int(w)))
        there_ranks = {int(r) for r in status.get("rank_list", [])}   # the mount's parse
        if asked_ranks != there_ranks:
            diffs.append(f"ranks {status.get('ranks')} there, "
                         f"{format_ranks(asked_ranks) if asked_ranks else o.get('ranks')} asked")
    except ValueError:
        cmp("ranks", status.get("ranks"), o.get("ranks"))
    cmp("seed", status.get("seed"), num("seed", 0))
    cmp("shuffle", status.get("shuffle"), o.get("shuffle", "global"))
    cmp("epochs", status.get("epochs"), num("epochs", 0))
    if "format" in o:
        cmp("format", status.get("format"), o["format"])
    if "journal" in o:
        journal = os.path.realpath(o["journal"])
    elif ds.startswith("s3://"):  # on the node, under the mount's cache: its own to say
        journal = os.path.realpath(str(status.get("journal")))
    elif os.path.isdir(ds):
        journal = os.path.join(ds, "journal.sqlite")
    else:
        journal = (ds[:-5] if ds.endswith(".json") else ds) + ".journal.sqlite"
    there = status.get("journal")
    cmp("journal", os.path.realpath(there) if isinstance(there, str) and os.path.isabs(there)
        else there, journal)
    val = status.get("validation") or None
    if "validation" in o or val:
        try:
            same = val is not None and "validation" in o and \
                _fraction(val["split"]) == _fraction(o["validation"])
        except (ValueError, ZeroDivisionError, TypeError, KeyError):
            same = False
        if not same:
            diffs.append(f"validation {val['split'] if val else 'none'} there, "
                         f"{o.get('validation', 'none')} asked")
    mix = status.get("mixture") or None
    if "weights" in o:
        if not mix:
            diffs.append(f"no mixture there, weights {o['weights']} asked")
        else:
            names = [src.get("name") for src in mix.get("sources", [])]
            there_w = _weights_ratio(str(mix.get("weights", "")), names)
            if there_w is None or there_w != _weights_ratio(o["weights"], names):
                diffs.append(f"weights {mix.get('weights')} ({'+'.join(map(str, names))}) "
                             f"there, {o['weights']} asked")
    resume = o.get("resume", "")
    r = re.fullmatch(r"samples:([0-9]+)(?:@([0-9]+))?|step:([0-9]+)", resume)
    if r:
        if r.group(1) is not None:
            cmp("start_samples", status.get("start_samples"), int(r.group(1)))
        if (r.group(2) or r.group(3)) is not None:
            cmp("start_step", status.get("start_step"), int(r.group(2) or r.group(3)))
    return diffs


def _fingerprint(exe: str, dataset: str) -> str | None:
    """The fingerprint ``zephon info --json`` gives for dataset, or None when it cannot
    tell (the mount attempt then says why)."""
    p = subprocess.run([exe, "info", "--json", dataset], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL)
    try:
        return json.loads(p.stdout)["fingerprint"] if p.returncode == 0 else None
    except (ValueError, KeyError, TypeError):
        return None


Shuffle = Literal["global", "none"]
Format = Literal["lines", "tar", "npy", "bin"]
Sync = Literal["normal", "full"]
Validation = Union[float, fractions.Fraction, str]


def mount_options(*, world_size: int | None = None, global_batch: int | None = None,
                  micro_batch: int | None = None, ranks: Iterable[int] | str | None = None,
                  seed: int | None = None, shuffle: Shuffle | None = None,
                  epochs: int | None = None, format: Format | None = None,
                  journal: PathLike | None = None, resume: str | None = None,
                  weights: Weights | None = None, validation: Validation | None = None,
                  prefetch: int | None = None, readahead: int | str | None = None,
                  sync: Sync | None = None,
                  workers: int | None = None, max_threads: int | None = None,
                  allow_other: bool = False, default_permissions: bool = False,
                  fuse_options: Sequence[str] = ()) -> str:
    """The ``-o`` string of ``zephon mount`` for these options (:class:`Mount` documents
    each; ``None`` and ``False`` leave an option out: the mount's default).
    ``{"world_size": 4, "allow_other": True}`` gives ``"world_size=4,allow_other"``. A
    relative ``journal`` is made absolute (the daemon reads it from this cwd; ``/status``
    names it absolutely, so that another process can compare it). Raises ``ValueError``
    for a value the option syntax cannot carry (a comma or white space)."""
    opts: dict[str, Any] = {
        "world_size": world_size, "global_batch": global_batch, "micro_batch": micro_batch,
        "ranks": None if ranks is None else format_ranks(ranks), "seed": seed,
        "shuffle": shuffle, "epochs": epochs, "format": format,
        "journal": None if journal is None else os.path.abspath(os.fspath(journal)),
        "resume": resume, "prefetch": prefetch,
        "readahead": None if readahead is None else str(readahead), "sync": sync,
        "workers": workers,
        "max_threads": max_threads, "allow_other": allow_other,
        "default_permissions": default_permissions}
    opts.update((o, True) for o in fuse_options)
    return format_options(_mixture_options(opts, weights, validation))


class Mount:
    """A mount of a dataset or a mixture spec at ``path``, for a ``with`` block (see
    :func:`mount`).

    :meth:`start` mounts it, served by a ``zephon mount -f`` child of this process, or
    reuses a live mount found at the mountpoint when that one serves the same stream and
    layout as asked (:func:`stream_differences`; ``reused`` is then True), and refuses
    with :class:`ZephonError` when it does not. Leaving the block (or :meth:`stop`)
    unmounts only a mount this object made; a reused one stays. A mount this object made
    ends with this process however it ends (``kill -9`` included): the daemon watches a
    pipe whose write end only this process holds (``watch_fd=``), and stops as on
    SIGTERM (closing its journal) when the process is gone.

    Args:
        dataset: a packed dataset directory, or a mixture spec file (``mix.json``).
        mountpoint: the directory to mount at (created when missing).
        zephon: the ``zephon`` executable (default: :func:`zephon.find_executable`'s).
        timeout: seconds to wait for the mount to answer.

    The mount options of ``zephon mount -o`` (``None``/``False``: the mount's default):

    - ``world_size``: data-parallel ranks in the job, W (default 1).
    - ``global_batch``: samples per optimizer step, a multiple of W (default W).
    - ``micro_batch``: samples per open of ``next``; divides B/W (default B/W).
    - ``ranks``: the ranks this mount serves, a list (``[0, 2]``, ``range(8)``) or the
      option's text (``"0-7"``); default all.
    - ``seed``: the shuffle seed (default 0).
    - ``shuffle``: ``"global"`` (default) or ``"none"``.
    - ``epochs``: stop after this many epochs (default 0: endless).
    - ``format``: batch encoding, ``"lines"``, ``"tar"``, ``"npy"`` or ``"bin"``
      (default by the dataset's kind).
    - ``journal``: the cursor journal's path (default ``DATASET/journal.sqlite``; for a
      mixture spec ``mix.json``, ``mix.journal.sqlite`` beside it).
    - ``resume``: where the stream starts, ``"auto"`` (default), ``"fresh"``,
      ``"samples:G[@S]"`` or ``"step:S"``.
    - ``weights``: a mixture's weights from this mount's start: a dict by source name or
      a list in the spec's order (:func:`format_weights`), or the option's text.
    - ``validation``: the fraction of every source held out for ``validation/``, at most
      1/2 (:func:`format_validation`).
    - ``prefetch``: decoded micro-batches kept ready per rank (default 2).
    - ``readahead``: bytes of each rank's coming samples whose pages the mount asks of
      the kernel ahead of the rank, an int or the option's text (``"64M"``, ``"1G"``,
      ``0``: none; default 64 MiB): for a dataset not in the page cache.
    - ``sync``: journal durability of each claim, ``"normal"`` (default) or ``"full"``.
    - ``workers``: decode threads (default: the CPUs, at most 8).
    - ``max_threads``: FUSE requests served at once, 1-256 (default: the CPUs, at least 2).
    - ``allow_other``: let other users read ``status``, ``samples/`` and ``step/``
      (implies ``default_permissions``).
    - ``default_permissions``: let the kernel check permissions.
    - ``fuse_options``: FUSE mount options passed through as they are (``"auto_unmount"``,
      ``"fsname=NAME"``, ``"noatime"``...).

    ``watch_fd`` is this object's own (see above). Raises ``ValueError`` for a value the
    option syntax cannot carry; the mount itself refuses the rest (:meth:`start`).
    """

    def __init__(self, dataset: PathLike, mountpoint: PathLike, *,
                 zephon: PathLike | None = None, timeout: float = 60.0,
                 world_size: int | None = None, global_batch: int | None = None,
                 micro_batch: int | None = None, ranks: Iterable[int] | str | None = None,
                 seed: int | None = None, shuffle: Shuffle | None = None,
                 epochs: int | None = None, format: Format | None = None,
                 journal: PathLike | None = None, resume: str | None = None,
                 weights: Weights | None = None, validation: Validation | None = None,
                 prefetch: int | None = None, readahead: int | str | None = None,
                 sync: Sync | None = None,
                 workers: int | None = None, max_threads: int | None = None,
                 allow_other: bool = False, default_permissions: bool = False,
                 fuse_options: Sequence[str] = ()) -> None:
        self.dataset = _dataset_path(dataset, os.path.abspath)
        self.path = os.path.abspath(os.fspath(mountpoint))
        self.options: str = mount_options(
            world_size=world_size, global_batch=global_batch, micro_batch=micro_batch,
            ranks=ranks, seed=seed, shuffle=shuffle, epochs=epochs, format=format,
            journal=journal, resume=resume, weights=weights, validation=validation,
            prefetch=prefetch, readahead=readahead, sync=sync, workers=workers,
            max_threads=max_threads, allow_other=allow_other,
            default_permissions=default_permissions, fuse_options=fuse_options)
        """The ``-o`` string the mount is made with (without ``watch_fd``)."""
        self.timeout = timeout
        self.reused = False
        self._exe = find_executable(zephon)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._watch_w: int | None = None

    @property
    def watch_fd(self) -> int | None:
        """The write end of the daemon's watch pipe this process holds (None for a reused
        mount, or before :meth:`start`)."""
        return self._watch_w

    def _check_live(self, st: Mapping[str, Any]) -> None:
        """Raise ZephonError unless the live mount whose /status is st is the one asked."""
        diffs = stream_differences(self.dataset, self.options, st,
                                   fingerprint=_fingerprint(self._exe, self.dataset))
        if diffs:
            raise ZephonError(
                f"{self.path} is already mounted, with another stream or layout than asked: "
                f"{'; '.join(diffs)} (there: {st.get('dataset')}; asked: {self.dataset} "
                f"-o {self.options}). If it is a leftover of an earlier run, unmount it "
                f"(fusermount3 -u {self.path}) and mount again; if it is in use, mount at "
                "another mountpoint")

    def start(self) -> "Mount":
        """Mount, and return once ``/status`` answers; or reuse a live mount of the same
        stream and layout at the mountpoint. Raises :class:`ZephonError` with zephon's
        message when the mount fails or does not answer within ``timeout``, and naming
        both sides when another stream or layout is mounted there."""
        if self._proc is not None or self.reused:
            raise ZephonError(f"{self.path} is already mounted by this object")
        if _is_mounted(self.path):
            st = _status_within(self.path, min(self.timeout, 5.0))
            if st is not None:
                self._check_live(st)
                self.reused = True
                return self
        else:
            os.makedirs(self.path, exist_ok=True)
        require_fuse()                          # what to install, before zephon fails
        watch_r, self._watch_w = os.pipe()     # both close-on-exec; the child gets watch_r
        opts = f"{self.options},watch_fd={watch_r}" if self.options else f"watch_fd={watch_r}"
        cmd = [self._exe, "mount", self.dataset, self.path, "-f", "-o", opts]
        self._log = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                          stderr=self._log, start_new_session=True,
                                          pass_fds=(watch_r,))
        except BaseException:
            self._close_watch()
            raise
        finally:
            os.close(watch_r)
        deadline = time.monotonic() + self.timeout
        delay = 0.001   # a mount is live within milliseconds: poll fast first, then back off
        while True:
            rc = self._proc.poll()
            if rc is not None:
                msg = self.log().strip() or f"zephon exited with status {rc}"
                self._proc = None
                self._close_watch()
                if "is already mounted" in msg:
                    # another process mounted it meanwhile: the same rule as above
                    st = _status_within(self.path, min(self.timeout, 5.0))
                    if st is not None:
                        self._check_live(st)
                        self.reused = True
                        return self
                raise ZephonError(f"cannot mount {self.dataset} at {self.path}: {msg}")
            try:
                # ours only while our daemon lives: a mount someone else made meanwhile
                # answers too, and our daemon then exits with "already mounted"
                if not stream_differences(self.dataset, self.options, read_status(self.path)) \
                        and self._proc.poll() is None:
                    return self
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ZephonError(f"the mount of {self.dataset} at {self.path} did not answer "
                                  f"within {self.timeout:g} s; its log: {self.log()[-2000:]}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.02)

    def _close_watch(self) -> None:
        if self._watch_w is not None:
            os.close(self._watch_w)
            self._watch_w = None

    @property
    def pid(self) -> int | None:
        """The pid of the mount's daemon (``zephon mount -f``), or None when not started
        or reused."""
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
        """Unmount a mount this object made and wait for its daemon to exit (it closes its
        journal first). A reused mount is left alone. Safe to call twice."""
        p, self._proc = self._proc, None
        self.reused = False
        if p is None:
            return
        if p.poll() is None:        # a daemon that exited unmounted nothing of ours
            _fusermount_u(self.path)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                _fusermount_u(self.path)
        self._close_watch()

    def __enter__(self) -> "Mount":
        """Mount (unless :meth:`start` already did) and return self."""
        return self if self._proc is not None or self.reused else self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def mount(dataset: PathLike, mountpoint: PathLike, *, zephon: PathLike | None = None,
          timeout: float = 60.0,
          world_size: int | None = None, global_batch: int | None = None,
          micro_batch: int | None = None, ranks: Iterable[int] | str | None = None,
          seed: int | None = None, shuffle: Shuffle | None = None,
          epochs: int | None = None, format: Format | None = None,
          journal: PathLike | None = None, resume: str | None = None,
          weights: Weights | None = None, validation: Validation | None = None,
          prefetch: int | None = None, readahead: int | str | None = None,
          sync: Sync | None = None,
          workers: int | None = None, max_threads: int | None = None,
          allow_other: bool = False, default_permissions: bool = False,
          fuse_options: Sequence[str] = ()) -> Mount:
    """Mount ``dataset`` (a packed dataset directory, or a mixture spec file such as
    ``mix.json``) at ``mountpoint`` with mount options given as keywords, for a ``with``
    block::

        with zephon.mount("/data/ds", "/tmp/z", world_size=4, global_batch=16, seed=1) as m:
            print(m.status()["start_step"])
        with zephon.mount("mix.json", "/tmp/z", weights={"web": 0.5, "code": 0.5},
                          validation=0.01, world_size=4, global_batch=16) as m:
            print(m.status()["mixture"]["weights"], m.status()["validation"]["steps"])

    Keywords are the options of ``zephon mount -o``, each named and documented in
    :class:`Mount` (``True`` for a bare flag such as ``allow_other``). ``weights`` (a
    mixture's weights from this mount's start: a dict by source name or a list in the spec's
    order, see :func:`format_weights`) and ``validation`` (the fraction of every source held
    out, :func:`format_validation`) are written in the option's syntax. The mount is live
    when the block starts and unmounted when it ends, also on an exception. A failed mount
    raises :class:`ZephonError` with zephon's reason (an unknown source name in ``weights``,
    a ``validation`` out of range, another mixture's journal...).

    A mount already live at ``mountpoint`` is reused only when it serves the stream and
    layout asked (:func:`stream_differences`), and then left mounted after the block;
    another one raises :class:`ZephonError` naming both sides. The mount made here ends
    with this process however it ends (``kill -9`` too; see :class:`Mount`).
    """
    return Mount(dataset, mountpoint, zephon=zephon, timeout=timeout, world_size=world_size,
                 global_batch=global_batch, micro_batch=micro_batch, ranks=ranks, seed=seed,
                 shuffle=shuffle, epochs=epochs, format=format, journal=journal,
                 resume=resume, weights=weights, validation=validation, prefetch=prefetch,
                 readahead=readahead, sync=sync, workers=workers, max_threads=max_threads,
                 allow_other=allow_other, default_permissions=default_permissions,
                 fuse_options=fuse_options)


class MountWaiter:
    """What :func:`node_mount` returns to the processes that did not mount: it holds a
    write end of the mount's watch pipe (when local rank 0 made the mount) so that the
    mount lives while this process does; nothing to unmount. ``path`` is the
    mountpoint."""

    def __init__(self, path: str, watch: int | None = None) -> None:
        self.path = path
        self._watch = watch

    def status(self) -> dict[str, Any]:
        """The mount's ``/status`` as a dict."""
        return read_status(self.path)

    def stop(self) -> None:
        """Let go of the mount (it stays for the others; local rank 0 unmounts it)."""
        if self._watch is not None:
            os.close(self._watch)
            self._watch = None

    def __enter__(self) -> "MountWaiter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _share_watch(lock: Any, m: Mount) -> None:
    """Publish, in node_mount's lock file, how the other local ranks join the mount's
    watch pipe: ``PID FD INODE`` of the write end local rank 0 holds (nothing for a
    reused mount, which no rank of this job made)."""
    lock.seek(0)
    lock.truncate()
    if m.watch_fd is not None:
        lock.write(f"{os.getpid()} {m.watch_fd} {os.fstat(m.watch_fd).st_ino}\n")
    lock.flush()


def _join_watch(lock_path: str) -> int | None:
    """A write end of the watch pipe local rank 0 published (see _share_watch), opened
    through /proc, or None when there is none to join (a reused mount, rank 0 gone)."""
    try:
        with open(lock_path) as f:
            # rank 0 writes the line before it lets go of the lock: a mount answers earlier
            fcntl.flock(f, fcntl.LOCK_SH)
            pid, fd, ino = (int(x) for x in f.read().split())
        w = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    if os.fstat(w).st_ino != ino:       # a stale line: that pid and fd are something else
        os.close(w)
        return None
    return w


def node_mount(dataset: PathLike, mountpoint: PathLike, *, dp_degree: int,
               dp_ranks: Iterable[int] | str, local_rank: int | None = None,
               timeout: float = 120.0, zephon: PathLike | None = None,
               global_batch: int | None = None, micro_batch: int | None = None,
               seed: int | None = None, shuffle: Shuffle | None = None,
               epochs: int | None = None, format: Format | None = None,
               journal: PathLike | None = None, resume: str | None = None,
               weights: Weights | None = None, validation: Validation | None = None,
               prefetch: int | None = None, readahead: int | str | None = None,
               sync: Sync | None = None,
               workers: int | None = None, max_threads: int | None = None,
               allow_other: bool = False, default_permissions: bool = False,
               fuse_options: Sequence[str] = ()) -> Mount | MountWaiter:
    """One mount per node for the data-parallel ranks of that node.

    ``dp_degree`` is the data-parallel degree of the job (the mount's ``world_size``; not
    the process count when tensor, pipeline or context parallelism is on) and ``dp_ranks``
    every DP rank whose processes run on this node (the same list on each of them; any
    set ``ranks=`` takes, e.g. ``range(8)`` or ``[0, 2]``). The process with
    ``local_rank`` 0 (default: the ``LOCAL_RANK`` environment variable, as torchrun sets
    it) mounts, holding the lock file ``MOUNTPOINT.lock`` meanwhile; the others wait, up
    to ``timeout`` seconds, until ``/status`` answers with this stream and layout. A live
    mount found at the mountpoint is reused only when it is this stream and layout
    (:func:`stream_differences`), else local rank 0 raises :class:`ZephonError` (the others
    time out naming what they see). Returns a context manager; leaving it unmounts in the
    mounting process only (and only a mount it made), so leave it after a barrier
    (``torch.distributed.barrier()``) when other processes still read.

    Lifecycle: a mount local rank 0 made lives while any local rank that joined it lives
    (each holds a write end of the daemon's ``watch_fd`` pipe), or until rank 0 leaves
    the block: so a rank killed with ``kill -9`` leaves no mount behind once its peers are
    gone too (torchrun ends them), and the peers of a crashed rank 0 do not lose their
    files while they save or shut down.

    ``dataset`` may be a mixture spec file; ``weights`` and ``validation`` are as for
    :func:`mount`. The other keywords are the mount options of :class:`Mount` but
    ``world_size`` and ``ranks`` (``dp_degree`` and ``dp_ranks`` set them).
    """
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    mp = os.path.abspath(os.fspath(mountpoint))
    m = Mount(dataset, mp, zephon=zephon, timeout=timeout, world_size=dp_degree,
              ranks=dp_ranks, global_batch=global_batch, micro_batch=micro_batch, seed=seed,
              shuffle=shuffle, epochs=epochs, format=format, journal=journal, resume=resume,
              weights=weights, validation=validation, prefetch=prefetch,
              readahead=readahead, sync=sync, workers=workers, max_threads=max_threads,
              allow_other=allow_other, default_permissions=default_permissions,
              fuse_options=fuse_options)
    if local_rank == 0:
        os.makedirs(os.path.dirname(mp), exist_ok=True)
        with open(mp + ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            m.start()
            _share_watch(lock, m)
            return m
    deadline = time.monotonic() + timeout
    seen = "nothing answered"
    while True:
        try:
            diffs = stream_differences(m.dataset, m.options, read_status(mp))
            if not diffs:
                return MountWaiter(mp, _join_watch(mp + ".lock"))
            seen = "a mount of another stream or layout: " + "; ".join(diffs)
        except (OSError, ValueError) as e:
            if isinstance(e, OSError) and e.errno not in (errno.ENOENT, errno.ENOTCONN):
                seen = f"{e}"
        if time.monotonic() > deadline:
            raise ZephonError(f"no mount of {m.dataset} -o {m.options} answered at {mp} within "
                              f"{timeout:g} s ({seen}); is local rank 0 mounting it (see its "
                              "error)? dp_ranks must be every DP rank of this node, the same "
                              "list in each of its processes")
        time.sleep(0.05)
