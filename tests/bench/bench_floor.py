"""The warm-cache floor of a token loader, and Zephon's loaders against it (issue 27, part 4).

usage: ZEPHON=build/fs/zephon python tests/bench/bench_floor.py [--tokens 50000000]
           [--rounds 5] [--steps 2000] [--dir /tmp/zephon-bench/floor] [--only a,b]
           [--readahead BYTES] [--ranks R]

R ranks (default 1), batches of 8 windows of 2,049 tokens (``int64`` tensors ``[8,
2049]``), the dataset in the page cache (every file read once before, then one warm-up
round each). With R > 1 every system serves R data-parallel ranks from this one process,
a batch of each rank in turn (the mount: world_size=R, global_batch=8R; the floor: R
disjoint slices of its permutation; getitems: R samplers of R replicas); --steps counts
batches of all ranks together, so a batch costs the same work at every R.
Generates (fixed seed, reused) a uint16 token file of --tokens random tokens and packs it
``--compress none --seq-len 2048 --overlap 1``. Systems, in one process, each round in
turn (rounds alternate, so each ratio is between figures of the same minutes):

  floor        one np.memmap of the shard, a permutation of the windows, 8 windows per
               step by one fancy index -> astype(int64) -> tensor (no guarantees)
  nanogpt      nanoGPT's get_batch(): a new np.memmap per batch, 8 random token offsets,
               torch.stack of int64 windows (no guarantees)
  getitems     torchdata StatefulDataLoader(batch_size=8) over a map-style Dataset whose
               __getitems__ gathers the whole batch by one fancy index, a shuffling
               StatefulDistributedSampler, num_workers=0
  zephon-ids   ZephonLoader reading rank/0/ids/<G> and gathering from the mapped shard
  zephon-from  ZephonLoader(direct=False) reading rank/0/from/<G>
  zephon-ids-4k  zephon-ids with blocks of 4096 steps' ids (256 KiB) instead of 256

Tokens/s is of tensors handed over; CPU s/GB counts this process and, for Zephon, the
daemon (the run time of every thread, /proc/<pid>/task/*/schedstat, over the round), per GB of int64 tensors. Prints
per system the median over rounds (and the range), and the ratios to the floor, with the
load average before and after. A benchmark, not a test: nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

# the package of this tree, not whichever one the venv had installed last
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import zephon  # noqa: E402
from zephon.torch import ZephonLoader, _IdsRun  # noqa: E402

WINDOW, MICRO, SEED = 2049, 8, 1234


def cpu_s(pid: int) -> float:
    """CPU seconds of every thread of pid so far (the run time of /proc/<pid>/task/*/
    schedstat, in ns: user and system time, finer than stat's clock ticks)."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:      # a thread that ended: its time is lost, not wrong
            pass
    return total / 1e9


def prepare(d: str, tokens: int) -> str:
    """The packed dataset (made once): DIR/ds, of `tokens` random uint16 tokens."""
    ds = os.path.join(d, "ds")
    if not os.path.isdir(ds):
        os.makedirs(d, exist_ok=True)
        raw = os.path.join(d, "tokens.bin")
        np.random.default_rng(SEED).integers(0, 50257, tokens, dtype=np.uint16).tofile(raw)
        subprocess.run([os.environ.get("ZEPHON", "zephon"), "pack", "--format", "bin",
                        "--dtype", "uint16", "--seq-len", "2048", "--overlap", "1",
                        "--compress", "none", raw, "-o", ds], check=True)
        os.unlink(raw)
    for name in os.listdir(ds):                    # warm: every byte in the page cache
        with open(os.path.join(ds, name), "rb") as f:
            while f.read(1 << 24):
                pass
    return ds


def floor(path: str, n: int, rank: int = 0, ranks: int = 1):
    mm = np.memmap(path, dtype=np.uint16, mode="r", shape=(n, WINDOW))
    perm = np.random.default_rng(SEED).permutation(n)
    pos = rank * MICRO
    while True:
        if pos + MICRO > n:
            pos = rank * MICRO
        ids = perm[pos:pos + MICRO]
        pos += MICRO * ranks
        yield torch.from_numpy(mm[ids].astype(np.int64))


def in_turn(gens):
    """A batch of each rank's generator in turn (R ranks from one process)."""
    while True:
        for g in gens:
            yield next(g)


def nanogpt(path: str, n: int):
    tokens = n * (WINDOW - 1) + 1
    while True:
        data = np.memmap(path, dtype=np.uint16, mode="r")     # a new memmap per batch
        ix = torch.randint(tokens - WINDOW, (MICRO,))
        yield torch.stack([torch.from_numpy(data[i:i + WINDOW].astype(np.int64)) for i in ix])


class Windows(torch.utils.data.Dataset):
    """The shard's windows; __getitems__ gathers a whole batch (torch's fetcher calls it
    with the batch's indices when a dataset has it)."""

    def __init__(self, path: str, n: int) -> None:
        self.mm = np.memmap(path, dtype=np.uint16, mode="r", shape=(n, WINDOW))

    def __len__(self) -> int:
        return self.mm.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(self.mm[i].astype(np.int64))

    def __getitems__(self, ids: list[int]) -> torch.Tensor:
        return torch.from_numpy(self.mm[ids].astype(np.int64))


def getitems(path: str, n: int, rank: int = 0, ranks: int = 1):
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler
    ds = Windows(path, n)
    sampler = StatefulDistributedSampler(ds, num_replicas=ranks, rank=rank, shuffle=True,
                                         seed=SEED)
    dl = StatefulDataLoader(ds, batch_size=MICRO, sampler=sampler, num_workers=0,
                            collate_fn=lambda b: b, drop_last=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from dl
        epoch += 1


def zephon_loader(mount: str, direct: bool, block: int = 0, rank: int = 0, ranks: int = 1):
    ld = ZephonLoader(mount, dp_rank=rank, dp_world_size=ranks, direct=direct)
    assert ld.direct == direct and ld.window == WINDOW
    if block:                  # a variant: blocks of up to `block` shares of ids

        class Blocks(_IdsRun):
            MAX_SHARES, MAX_BYTES = block, block * 8 * ld.share

        ld._ids_run = Blocks
    while True:
        yield next(ld)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=50_000_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--dir", default="/tmp/zephon-bench/floor")
    ap.add_argument("--only", default="floor,nanogpt,getitems,zephon-ids,zephon-from,zephon-ids-4k")
    ap.add_argument("--readahead", default=None,
                    help="the mount's readahead= (bytes, e.g. 0 or 64M; default: the mount's)")
    ap.add_argument("--ranks", type=int, default=1,
                    help="data-parallel ranks served from this process, a batch each in turn")
    a = ap.parse_args()
    ds = prepare(a.dir, a.tokens)
    shard = sorted(f for f in os.listdir(ds) if f.endswith(".raw"))
    assert len(shard) == 1, shard
    path = os.path.join(ds, shard[0])
    n = os.path.getsize(path) // (2 * WINDOW)
    mp = os.path.join(a.dir, "mnt")
    journal = os.path.join(a.dir, "journal.sqlite")
    if os.path.exists(journal):
        os.unlink(journal)
    R = a.ranks
    with zephon.mount(ds, mp, world_size=R, global_batch=MICRO * R, micro_batch=MICRO,
                      journal=journal, resume="fresh", readahead=a.readahead) as m:
        daemon = m.pid
        make = {"floor": lambda r: floor(path, n, r, R), "nanogpt": lambda r: nanogpt(path, n),
                "getitems": lambda r: getitems(path, n, r, R),
                "zephon-ids": lambda r: zephon_loader(m.path, True, 0, r, R),
                "zephon-from": lambda r: zephon_loader(m.path, False, 0, r, R),
                "zephon-ids-4k": lambda r: zephon_loader(m.path, True, 4096, r, R)}
        names = a.only.split(",")
        its = {k: make[k](0) if R == 1 else in_turn([make[k](r) for r in range(R)])
               for k in names}
        for k in names:                            # warm-up round, not counted
            for _ in range(a.steps):
                next(its[k])
        rate: dict[str, list[float]] = {k: [] for k in names}
        cpu: dict[str, list[float]] = {k: [] for k in names}
        load0 = os.getloadavg()
        for r in range(a.rounds):
            for k in (names if r % 2 == 0 else names[::-1]):
                it, pids = its[k], [os.getpid()] + ([daemon] if k.startswith("zephon") else [])
                c0, t0 = sum(cpu_s(p) for p in pids), time.perf_counter()
                for _ in range(a.steps):
                    x = next(it)
                t1, c1 = time.perf_counter(), sum(cpu_s(p) for p in pids)
                assert x.shape == (MICRO, WINDOW) and x.dtype == torch.int64
                gb = a.steps * x.numel() * 8 / 1e9
                rate[k].append(a.steps * x.numel() / (t1 - t0))
                cpu[k].append((c1 - c0) / gb)
        load1 = os.getloadavg()
    print(f"{n} windows of {WINDOW} tokens, {R} rank{'s' if R > 1 else ''}, {a.rounds} rounds "
          f"x {a.steps} steps of [{MICRO}, {WINDOW}]; load average {load0[0]:.2f} before, "
          f"{load1[0]:.2f} after; {os.cpu_count()} CPUs")
    base = statistics.median(rate["floor"]) if "floor" in rate else None
    base_cpu = statistics.median(cpu["floor"]) if "floor" in cpu else None
    for k in names:
        r, c = statistics.median(rate[k]), statistics.median(cpu[k])
        ratios = (f"  {r / base:.2f}x floor tokens/s, {c / base_cpu:.2f}x its CPU"
                  if base else "")
        # per-round ratios: each round's figure against the same round's floor
        per = (" (per round: " + " ".join(f"{x / y:.2f}" for x, y in zip(rate[k], rate["floor"]))
               + ")") if base else ""
        print(f"{k:12s} {r / 1e6:7.1f}M tokens/s ({min(rate[k]) / 1e6:.0f}-"
              f"{max(rate[k]) / 1e6:.0f}M)  {c:.3f} CPU s/GB{ratios}{per}")


if __name__ == "__main__":
    main()
