"""One data-parallel rank of a throughput run (started by peers.py, one process per rank).

usage: rank.py SYSTEM KIND WORK TARGET RANK WORLD MB SECONDS WORKERS
Builds the loader, takes 3 batches, prints "ready" and a JSON object (build_s: the loader's
construction, first_s: its first batch, after), waits for "go" on stdin, takes batches
for SECONDS, prints one JSON line: items (tokens or samples), bytes (int64 tensors or record
bytes), seconds, cpu_s (this process and its loader workers over the window).
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))

import systems  # noqa: E402
from peers import tree_cpu  # noqa: E402


def make(system, kind, work, target, rank, world, mb, workers):
    j = os.path.join
    if kind == "tokens":
        tok = j(work, "tokens.bin")
        return {
            "zephon-loader": lambda: systems.zephon_loader_tokens(target, rank, world, mb),
            "zephon-loader-ga8": lambda: systems.zephon_loader_tokens(target, rank, world, mb),
            "zephon-next": lambda: systems.zephon_next_tokens(target, rank, world, mb),
            "nanogpt-memmap": lambda: systems.nanogpt_tokens(tok, rank, world, mb),
            "torchdata": lambda: systems.torchdata_tokens(tok, rank, world, mb, workers),
            "grain": lambda: systems.grain_tokens(tok, rank, world, mb, workers),
            "streaming": lambda: systems.streaming_tokens(j(work, "tok-mds"), rank, world, mb, workers),
            "webdataset": lambda: systems.wds_tokens(j(work, "tok-wds"), rank, world, mb, workers),
            "torchtitan": lambda: systems.titan_tokens(tok, rank, world, mb, workers),
        }[system]()
    return {
        "zephon-next": lambda: systems.zephon_next_lines(target, rank, world, mb),
        "torchdata": lambda: systems.torchdata_lines(work, rank, world, mb, workers),
        "grain": lambda: systems.grain_lines(work, rank, world, mb, workers),
        "streaming": lambda: systems.streaming_lines(j(work, "text-mds"), rank, world, mb, workers),
        "webdataset": lambda: systems.wds_lines(j(work, "text-wds"), rank, world, mb, workers),
    }[system]()


def measure(batch, kind):
    if kind == "tokens":
        return batch.numel(), batch.numel() * batch.element_size()
    return len(batch), sum(len(r) for r in batch)


def main():
    system, kind, work, target, rank, world, mb, seconds, workers = sys.argv[1:10]
    rank, world, mb, workers, seconds = int(rank), int(world), int(mb), int(workers), float(seconds)
    # numpy's and torch's own code on the paths every loader takes, once: on a cold page
    # cache (cold.py) their pages come from the disk too, and the first batch times the
    # loader, not them
    import numpy as np
    import torch
    a = np.arange(64, dtype=np.uint16).reshape(8, 8)
    torch.stack([torch.from_numpy(a[np.array([3, 1])].astype(np.int64))] * 2)
    np.searchsorted(np.arange(4), np.array([1, 2]), side="right")
    # and the system's own modules: a trainer imports them at its start, from its own disk
    for mod in {"zephon": ["zephon.torch"], "torchdata": ["torchdata.stateful_dataloader"],
                "grain": ["grain.python"], "streaming": ["streaming"],
                "webdataset": ["webdataset"],
                "torchtitan": ["torchtitan.components.dataloader"]}.get(
                    system.split("-")[0], []):
        __import__(mod)
    t = time.perf_counter()
    it = make(system, kind, work, target, rank, world, mb, workers)
    build = time.perf_counter() - t
    first = None
    for _ in range(3):
        t = time.perf_counter()
        b = next(it)
        first = time.perf_counter() - t if first is None else first
        if kind == "tokens":
            assert tuple(b.shape) == (mb, systems.WINDOW) and str(b.dtype) == "torch.int64", (b.shape, b.dtype)
        else:
            assert len(b) == mb and isinstance(b[0], (bytes, str)), (len(b), type(b[0]))
    print("ready", json.dumps({"build_s": build, "first_s": first}), flush=True)
    sys.stdin.readline()
    c0 = tree_cpu(os.getpid())
    t0 = time.perf_counter()
    items = nbytes = 0
    while True:
        b = next(it)
        i, n = measure(b, kind)
        items += i
        nbytes += n
        dt = time.perf_counter() - t0
        if dt >= seconds:
            break
    cpu = tree_cpu(os.getpid()) - c0
    print(json.dumps({"items": items, "bytes": nbytes, "seconds": dt, "cpu_s": cpu}), flush=True)
    sys.stdin.readline()     # the driver ends this session (rank and workers) with killpg


if __name__ == "__main__":
    main()
