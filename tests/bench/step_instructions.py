"""Instructions of one loader step, counted by callgrind: what the noise of a shared VM
cannot blur (issue 37). Run it under callgrind with instrumentation off at the start, the
daemon as well (ZEPHON names a wrapper that does the same): after a warm-up of 3,000
steps it turns callgrind on in this process and in the mount's daemon (callgrind_control),
takes STEPS batches of [8, 2049] int64 tokens, and turns it off; the totals of the two
output files, over STEPS, are the instructions of a step.

usage (bench_floor.py's dataset made first, in --dir, default /tmp/zephon-bench/floor):
  printf '#!/bin/sh\\nexec valgrind --tool=callgrind --instr-atstart=no \\
      --callgrind-out-file=/tmp/cgd-%%p.out %s "$@"\\n' $PWD/build/fs/zephon >/tmp/zcg
  chmod +x /tmp/zcg
  ZEPHON=/tmp/zcg valgrind --tool=callgrind --instr-atstart=no \\
      --callgrind-out-file=/tmp/cg.out python tests/bench/step_instructions.py \\
      SYSTEM STEPS [PACKAGE_DIR] [DIR]
  callgrind_annotate /tmp/cg.out | grep TOTALS; callgrind_annotate /tmp/cgd-*.out | grep TOTALS

SYSTEM: floor (bench_floor.py's: np.memmap, a permutation, a fancy index), bare (the work
no loader avoids: a fancy index of a plain array over the mapped shard, astype(int64),
from_numpy, the ids precomputed) or zephon-ids (ZephonLoader by ids). PACKAGE_DIR: the
zephon package to import (default this tree's python/; another tree's to count its
loader). A benchmark, not a test.
"""
from __future__ import annotations

import mmap
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, sys.argv[3] if len(sys.argv) > 3 else
                os.path.join(HERE, "..", "..", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import zephon  # noqa: E402
from zephon.torch import ZephonLoader  # noqa: E402

WINDOW, MICRO, SEED, WARM = 2049, 8, 1234, 3000


def toggle(on: bool, pids: list[int]) -> None:
    for p in pids:
        subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(p)],
                       stdout=subprocess.DEVNULL, check=False)


def floor(path: str, n: int):
    mm = np.memmap(path, dtype=np.uint16, mode="r", shape=(n, WINDOW))
    perm = np.random.default_rng(SEED).permutation(n)
    pos = 0
    while True:
        if pos + MICRO > n:
            pos = 0
        ids = perm[pos:pos + MICRO]
        pos += MICRO
        yield torch.from_numpy(mm[ids].astype(np.int64))


def bare(path: str, n: int):
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    arr = np.frombuffer(m, dtype=np.uint16)[:n * WINDOW].reshape(n, WINDOW)
    rows = np.random.default_rng(SEED).permutation(n)[:n // MICRO * MICRO]
    rows = rows.astype(np.int64).reshape(-1, MICRO)
    while True:
        for ids in rows:
            yield torch.from_numpy(arr[ids].astype(np.int64))


def run(it, steps: int, pids: list[int]) -> None:
    for _ in range(WARM):
        next(it)
    toggle(True, pids)
    for _ in range(steps):
        x = next(it)
    toggle(False, pids)
    assert x.shape == (MICRO, WINDOW)


def main() -> None:
    system, steps = sys.argv[1], int(sys.argv[2])
    d = sys.argv[4] if len(sys.argv) > 4 else "/tmp/zephon-bench/floor"
    ds = os.path.join(d, "ds")
    path = os.path.join(ds, sorted(f for f in os.listdir(ds) if f.endswith(".raw"))[0])
    n = os.path.getsize(path) // (2 * WINDOW)
    if system in ("floor", "bare"):
        run((floor if system == "floor" else bare)(path, n), steps, [os.getpid()])
        return
    with zephon.mount(ds, os.path.join(d, "mnt-cg"), world_size=1, global_batch=MICRO,
                      micro_batch=MICRO, journal=os.path.join(d, "journal-cg.sqlite"),
                      resume="fresh") as m:
        assert m.pid is not None
        run(ZephonLoader(m.path, dp_rank=0, dp_world_size=1, direct=True), steps,
            [os.getpid(), m.pid])


if __name__ == "__main__":
    main()
