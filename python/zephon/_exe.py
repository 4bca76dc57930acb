"""Finding and running the ``zephon`` executable."""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Sequence, Union

PathLike = Union[str, "os.PathLike[str]"]


class ZephonError(RuntimeError):
    """A zephon command or a mount failed; the message says what and what to do."""


def find_executable(zephon: PathLike | None = None) -> str:
    """The path of the ``zephon`` executable.

    Looks, in order, at ``zephon`` (an explicit path), the ``ZEPHON`` environment variable,
    and ``PATH``. Raises :class:`ZephonError` when none names an executable file.
    """
    for what, cand in (("zephon=", zephon), ("ZEPHON", os.environ.get("ZEPHON"))):
        if cand:
            p = os.fspath(cand)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return os.path.abspath(p)
            raise ZephonError(f"{what}{p} is not an executable file; give the path of the "
                              "zephon executable (e.g. build/fs/zephon)")
    found = shutil.which("zephon")
    if found:
        return found
    raise ZephonError("cannot find the zephon executable: it is not on PATH; set ZEPHON "
                      "or pass zephon=PATH")


def run(args: Sequence[PathLike | int], *, zephon: PathLike | None = None,
        check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run ``zephon ARGS...`` and return the finished process (stdout and stderr as bytes).

    With ``check`` (the default) a non-zero exit raises :class:`ZephonError` carrying
    zephon's own message from stderr.
    """
    cmd = [find_executable(zephon)] + [os.fspath(a) if not isinstance(a, int) else str(a)
                                       for a in args]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if check and p.returncode != 0:
        msg = p.stderr.decode(errors="replace").strip() or f"exit status {p.returncode}"
        raise ZephonError(f"{' '.join(cmd[1:3])} failed: {msg}")
    return p
