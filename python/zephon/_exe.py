"""Finding and running the ``zephon`` executable.

:func:`find_executable` looks, in this order, at

1. an explicit ``zephon=`` argument (a path);
2. the ``ZEPHON`` environment variable (a path): the override, for running a build tree
   (``ZEPHON=build/fs/zephon``; the test suites run the sanitizer builds so);
3. the executable inside this package, ``zephon/_bin/zephon``, which the wheel and
   ``pip install .`` install with it: the build of this very package;
4. ``zephon`` on ``PATH`` (the package used from a source tree, which has no ``_bin``).

``python -m zephon ARGS`` and the ``zephon`` command that pip installs (:func:`main`) run
the executable this order finds, with ``ARGS``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Mapping, NoReturn, Sequence, Union

PathLike = Union[str, "os.PathLike[str]"]

# What a mount needs of the host besides the package: the kernel's FUSE device, and
# fusermount3 (mounting without root, and every unmount), which Debian's fuse3 installs.
FUSE_INSTALL = "sudo apt-get install fuse3"
FUSE_DEVICE = "/dev/fuse"


class ZephonError(RuntimeError):
    """A zephon command or a mount failed; the message says what and what to do."""


def packaged_executable() -> str | None:
    """The executable installed inside this package (``zephon/_bin/zephon``), or None
    when the package has none (it is used from a source tree)."""
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "zephon")
    return p if os.path.isfile(p) and os.access(p, os.X_OK) else None


def find_executable(zephon: PathLike | None = None) -> str:
    """The path of the ``zephon`` executable.

    Looks, in order, at ``zephon`` (an explicit path), the ``ZEPHON`` environment variable,
    the executable installed in this package, and ``PATH`` (the module's docstring says
    why). Raises :class:`ZephonError` when an explicit path or ``ZEPHON`` does not name an
    executable file, or when none of the four has one.
    """
    for what, cand in (("zephon=", zephon), ("ZEPHON=", os.environ.get("ZEPHON"))):
        if cand:
            p = os.fspath(cand)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return os.path.abspath(p)
            raise ZephonError(f"{what}{p} is not an executable file; give the path of the "
                              "zephon executable (e.g. build/fs/zephon)")
    found = packaged_executable() or shutil.which("zephon")
    if found:
        return found
    raise ZephonError("cannot find the zephon executable: this zephon package has none "
                      "(installed from a source tree?) and it is not on PATH; install the "
                      "wheel (pip install .), set ZEPHON or pass zephon=PATH")


def require_fuse() -> None:
    """Raise :class:`ZephonError` saying what to install when this machine cannot mount:
    no ``fusermount3`` on ``PATH`` (Debian's and Ubuntu's ``fuse3``) or no kernel FUSE
    device. Everything else a mount needs travels in the wheel."""
    if shutil.which("fusermount3") is None:
        raise ZephonError(f"fusermount3 is not installed (not on PATH): FUSE mounts need "
                          f"it; on Debian or Ubuntu: {FUSE_INSTALL}")
    if not os.path.exists(FUSE_DEVICE):
        raise ZephonError(f"{FUSE_DEVICE} is missing: the kernel's FUSE is not available "
                          "(load it: sudo modprobe fuse; in a container, pass the device: "
                          "--device /dev/fuse)")


def _env() -> Mapping[str, str]:
    """The environment for the executable: ``zephon pack --tokenizer`` runs
    ``$ZEPHON_PYTHON -m zephon.pack_text``, so it gets this interpreter (the one that has
    this package) unless one is named."""
    if os.environ.get("ZEPHON_PYTHON"):
        return os.environ
    return dict(os.environ, ZEPHON_PYTHON=sys.executable)


def run(args: Sequence[PathLike | int], *, zephon: PathLike | None = None,
        check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run ``zephon ARGS...`` and return the finished process (stdout and stderr as bytes).

    With ``check`` (the default) a non-zero exit raises :class:`ZephonError` carrying
    zephon's own message from stderr.
    """
    cmd = [find_executable(zephon)] + [os.fspath(a) if not isinstance(a, int) else str(a)
                                       for a in args]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                       env=_env())
    if check and p.returncode != 0:
        msg = p.stderr.decode(errors="replace").strip() or f"exit status {p.returncode}"
        raise ZephonError(f"{' '.join(cmd[1:3])} failed: {msg}")
    return p


def _mounts(args: Sequence[str]) -> bool:
    """Whether ``zephon ARGS`` makes a mount (``mount``, but not ``mount --check`` or a
    help request, which print and mount nothing)."""
    return bool(args) and args[0] == "mount" and not any(
        a in ("--check", "-h", "--help") for a in args[1:])


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """``zephon ARGS`` and ``python -m zephon ARGS``: replace this process with the
    executable :func:`find_executable` finds, run with ``ARGS`` (its exit status is the
    command's). Before a mount, says what to install when FUSE is missing (exit 1)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        exe = find_executable()
        # ZEPHON or PATH naming this very command (a Python script): it would run itself
        if os.path.exists(sys.argv[0]) and os.path.samefile(exe, sys.argv[0]):
            raise ZephonError(f"{exe} is this zephon command itself, not the executable; "
                              "unset ZEPHON or point it at the executable (e.g. "
                              "build/fs/zephon)")
        if _mounts(args):
            require_fuse()
    except ZephonError as e:
        print(f"zephon: {e}", file=sys.stderr)
        sys.exit(1)
    sys.stdout.flush()
    os.execve(exe, [exe, *args], _env())
