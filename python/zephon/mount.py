"""Mounting a dataset from Python: :func:`mount` and, one per node, :func:`node_mount`."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from ._exe import PathLike, ZephonError, find_executable, require_fuse
from .options import (
    OPTION_NAMES,
    Format,
    MountOptions,
    NodeMountOptions,
    Shuffle,
    Sync,
    Validation,
    Weights,
    check_names,
    configuration,
    format_options,
    format_ranks,
    format_validation,
    format_weights,
    mount_options,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Format", "Mount", "MountOptions", "MountWaiter", "NodeMountOptions", "Shuffle",
           "Sync", "Validation", "Weights", "configuration", "format_options", "format_ranks",
           "format_validation", "format_weights", "mount", "mount_options", "node_mount",
           "read_status", "stream_differences"]


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


def _dataset_path(dataset: PathLike, resolve: Callable[[str], str]) -> str:
    """A dataset path made absolute with ``resolve``; an ``s3://`` URL as given."""
    text = os.fspath(dataset)
    return text if text.startswith("s3://") else resolve(text)


# What makes two mounts another stream or layout, compared as /status spells them (the
# mount's own values); the options that change neither the bytes nor who reads them
# (prefetch, workers, sync, allow_other...) are not among them.
_STREAM_KEYS = ("dataset", "fingerprint", "world_size", "global_batch", "micro_batch",
                "rank_list", "journal", "seed", "shuffle", "epochs", "format",
                "start_samples", "start_step")


def stream_differences(asked: Mapping[str, Any], there: Mapping[str, Any]) -> list[str]:
    """What makes the mount whose ``/status`` is ``there`` another stream or layout than
    the configuration ``asked`` (:func:`configuration`: what a mount with the options
    asked would serve, as ``zephon mount --check --json`` resolves them): ``["seed 1
    there, 5 asked", ...]``, empty when it is the same. Compared: the dataset (path and
    fingerprint), world_size, global_batch, micro_batch, the served ranks, journal, seed,
    shuffle, epochs, format, start_samples and start_step, the validation split and a
    mixture's weights; a value ``asked`` leaves ``None`` (the start and the weights that
    the journal decides) is not compared. Both sides are the mount's own spelling: no
    default and no layout rule is computed here."""
    diffs: list[str] = []
    for key in _STREAM_KEYS:
        a, t = asked.get(key), there.get(key)
        if a is None:
            continue
        if key in ("dataset", "journal"):
            a = _dataset_path(a, os.path.realpath)
            t = _dataset_path(t, os.path.realpath) if isinstance(t, str) and (
                os.path.isabs(t) or t.startswith("s3://")) else t
        if a != t:
            if key == "rank_list":
                diffs.append(f"ranks {there.get('ranks')} there, {asked.get('ranks')} asked")
            else:
                diffs.append(f"{key} {t} there, {a} asked")
    val_a = (asked.get("validation") or {}).get("split")
    val_t = (there.get("validation") or {}).get("split")
    if val_a != val_t:
        diffs.append(f"validation {val_t or 'none'} there, {val_a or 'none'} asked")
    w_a = (asked.get("mixture") or {}).get("weights")
    if w_a is not None:
        mix = there.get("mixture") or None
        if not mix:
            diffs.append(f"no mixture there, weights {w_a} asked")
        elif mix.get("weights") != w_a:
            diffs.append(f"weights {mix.get('weights')} there, {w_a} asked")
    return diffs


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

    The mount options of ``zephon mount -o`` are keywords, each named and typed in
    :class:`zephon.options.MountOptions` (left out, ``None`` or ``False``: the mount's
    default, which ``zephon mount`` resolves: ``configuration()`` shows what it made of
    them).

    ``watch_fd`` is this object's own (see above). Raises ``ValueError`` for a value the
    option syntax cannot carry; the mount itself refuses the rest (:meth:`start`).
    """

    def __init__(self, dataset: PathLike, mountpoint: PathLike, *,
                 zephon: PathLike | None = None, timeout: float = 60.0,
                 **options: Unpack[MountOptions]) -> None:
        self.dataset = _dataset_path(dataset, os.path.abspath)
        self.path = os.path.abspath(os.fspath(mountpoint))
        check_names(type(self).__name__, options, OPTION_NAMES)
        self.options: str = mount_options(**options)
        """The ``-o`` string the mount is made with (without ``watch_fd``)."""
        self.timeout = timeout
        self.reused = False
        self._exe = find_executable(zephon)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._watch_w: int | None = None
        self._asked: dict[str, Any] | None = None

    def configuration(self) -> dict[str, Any]:
        """What this mount serves, as ``zephon mount --check --json`` resolves its options
        against the dataset (:func:`zephon.options.configuration`; asked once). Raises
        :class:`ZephonError` with zephon's reason for options the mount refuses."""
        if self._asked is None:
            self._asked = configuration(self.dataset, self.path, self.options,
                                        zephon=self._exe)
        return self._asked

    @property
    def watch_fd(self) -> int | None:
        """The write end of the daemon's watch pipe this process holds (None for a reused
        mount, or before :meth:`start`)."""
        return self._watch_w

    def _check_live(self, st: Mapping[str, Any]) -> None:
        """Raise ZephonError unless the live mount whose /status is st is the one asked."""
        diffs = stream_differences(self.configuration(), st)
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
                # ours when its daemon is ours: a mount someone else made meanwhile answers
                # too (and our daemon then exits with "already mounted")
                if read_status(self.path).get("pid") == self._proc.pid:
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
          timeout: float = 60.0, **options: Unpack[MountOptions]) -> Mount:
    """Mount ``dataset`` (a packed dataset directory, or a mixture spec file such as
    ``mix.json``) at ``mountpoint`` with mount options given as keywords, for a ``with``
    block::

        with zephon.mount("/data/ds", "/tmp/z", world_size=4, global_batch=16, seed=1) as m:
            print(m.status()["start_step"])
        with zephon.mount("mix.json", "/tmp/z", weights={"web": 0.5, "code": 0.5},
                          validation=0.01, world_size=4, global_batch=16) as m:
            print(m.status()["mixture"]["weights"], m.status()["validation"]["steps"])

    Keywords are the options of ``zephon mount -o``, each named and documented in
    :class:`zephon.options.MountOptions` (``True`` for a bare flag such as
    ``allow_other``). ``weights`` (a mixture's weights from this mount's start: a dict by
    source name or a list in the spec's order, see :func:`format_weights`) and
    ``validation`` (the fraction of every source held out, :func:`format_validation`) are
    written in the option's syntax. The mount is live
    when the block starts and unmounted when it ends, also on an exception. A failed mount
    raises :class:`ZephonError` with zephon's reason (an unknown source name in ``weights``,
    a ``validation`` out of range, another mixture's journal...).

    A mount already live at ``mountpoint`` is reused only when it serves the stream and
    layout asked (:func:`stream_differences`), and then left mounted after the block;
    another one raises :class:`ZephonError` naming both sides. The mount made here ends
    with this process however it ends (``kill -9`` too; see :class:`Mount`).
    """
    check_names("mount", options, OPTION_NAMES)
    return Mount(dataset, mountpoint, zephon=zephon, timeout=timeout, **options)


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
               **options: Unpack[NodeMountOptions]) -> Mount | MountWaiter:
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
    :func:`mount`. The other keywords are the mount options
    (:class:`zephon.options.NodeMountOptions`: those of :func:`mount` but ``world_size``
    and ``ranks``, which ``dp_degree`` and ``dp_ranks`` set).
    """
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    mp = os.path.abspath(os.fspath(mountpoint))
    check_names("node_mount", options, NodeMountOptions.__optional_keys__)
    m = Mount(dataset, mp, zephon=zephon, timeout=timeout, world_size=dp_degree,
              ranks=dp_ranks, **options)
    if local_rank == 0:
        os.makedirs(os.path.dirname(mp), exist_ok=True)
        with open(mp + ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            m.start()
            _share_watch(lock, m)
            return m
    asked = m.configuration()       # what local rank 0's mount serves, resolved once
    deadline = time.monotonic() + timeout
    seen = "nothing answered"
    while True:
        try:
            diffs = stream_differences(asked, read_status(mp))
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
