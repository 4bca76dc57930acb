"""The elastic correctness matrix: each system at world size 4 takes k steps of global batch
B, saves its state the way its documentation says, and resumes at another world size or
global batch; the samples it then delivers to the end of the epoch are compared with the
same system's uninterrupted stream (world size 4, batch B).

Data: ELASTIC_N samples whose content is their id (8 uint16 tokens, all equal to the id; a
JSONL record {"text": "<id>"} for TorchTitan's text dataset). A run function returns one
list of sample ids per global step (the ranks' micro-batches in rank order).
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import systems  # noqa: E402


def judge(ref, before, after, n, k, b, b2):
    """Verdict of one cell: ref is the uninterrupted stream's steps (one epoch), before the k
    steps taken before the save, after the steps taken after the resume."""
    flat_ref = [i for s in ref for i in s]
    seen = [i for s in before for i in s] + [i for s in after for i in s]
    counts = np.bincount(np.array(seen, dtype=np.int64), minlength=n) if seen else np.zeros(n, int)
    repeated = int((counts[counts > 1] - 1).sum())
    skipped = int((counts == 0).sum())
    expect_steps = (n - k * b) // b2
    same_sets = before == ref[:k] and all(
        sorted(s) == sorted(flat_ref[k * b + i * b2: k * b + (i + 1) * b2]) for i, s in enumerate(after))
    same_order = same_sets and seen == flat_ref[:len(seen)]
    short = len(after) < expect_steps
    if same_sets and not short and not repeated and not skipped:
        verdict = "exact" + ("" if same_order else " (same samples per step, order within a step differs)")
    else:
        parts = []
        if repeated:
            parts.append(f"repeated {repeated}")
        if skipped:
            parts.append(f"skipped {skipped}")
        if not parts:
            parts.append("no repeats or skips, but other samples per step than the uninterrupted stream")
        if short:
            parts.append(f"a rank's epoch ran out after {len(after)} of {expect_steps} steps")
        verdict = ", ".join(parts)
    return {"verdict": verdict, "repeated": repeated, "skipped": skipped,
            "exact": verdict.startswith("exact"), "steps_after": len(after),
            "steps_expected": expect_steps}


def refused(msg):
    return {"verdict": "refused: " + " ".join(msg.split())[:240], "refused": True,
            "exact": False}


def matrix(run, n, b, k, cells, note=""):
    """run(world, batch, state, steps) -> (steps_ids, state) ; state None = fresh."""
    out = {"note": note}
    ref, _ = run(4, b, None, n // b)
    before, state = run(4, b, None, k)
    out["uninterrupted_steps"] = len(ref)
    for w2, b2 in cells:
        key = f"4->{w2}" + (f", B {b}->{b2}" if b2 != b else "")
        try:
            after, _ = run(w2, b2, state, (n - k * b) // b2)
            out[key] = judge(ref, before, after, n, k, b, b2)
        except Exception as e:          # the system's own refusal, quoted
            out[key] = refused(f"{type(e).__name__}: {e}")
    return out


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def take(iters, steps, ids_of):
    """steps global steps from per-rank iterators (one micro-batch per rank per step)."""
    out = []
    for _ in range(steps):
        step = []
        try:
            for it in iters:
                step.extend(ids_of(next(it)))
        except StopIteration:
            break
        out.append(step)
    return out


def tok_ids(batch):
    return [int(x) for x in batch[:, 0]]


# ------------------------------------------------------------------ Zephon

def zephon_matrix(work, n, b, k, cells):
    import zephon
    from zephon.torch import ZephonLoader
    ds = os.path.join(work, "ids-zephon")
    mp = os.path.join(work, "mnt-elastic")
    journal = os.path.join(work, "elastic-journal.sqlite")
    os.makedirs(mp, exist_ok=True)

    def run(w, gb, state, steps):
        if state is None:
            for suf in ("", "-wal", "-shm"):
                if os.path.exists(journal + suf):
                    os.unlink(journal + suf)
        with zephon.mount(ds, mp, world_size=w, global_batch=gb, seed=1, journal=journal) as m:
            loaders = [ZephonLoader(m.path, dp_rank=r, dp_world_size=w) for r in range(w)]
            if state is not None:
                for ld in loaders:
                    ld.load_state_dict(state)
            out = take([iter(ld) for ld in loaders], steps, tok_ids)
            st = loaders[0].state_dict()
            assert all(ld.state_dict() == st for ld in loaders)   # one state for every rank
        return out, st
    return matrix(run, n, b, k, cells, "ZephonLoader per rank over one mount (world_size=W, "
                  "global_batch=B); rank 0's state_dict() saved (every rank's is the same); "
                  "remount with the new layout and the same journal, load_state_dict on every rank")


# ------------------------------------------------------------------ torchdata

def torchdata_matrix(work, n, b, k, cells):
    src = systems.WindowSource(os.path.join(work, "ids.bin"), window=8)

    def run(w, gb, states, steps):
        loaders = [systems.torchdata_loader(src, r, w, gb // w, 0) for r in range(w)]
        if states is not None:
            for r, ld in enumerate(loaders):
                if r < len(states):
                    ld.load_state_dict(states[r])
        its = [iter(ld) for ld in loaders]
        out = take(its, steps, tok_ids)
        return out, [ld.state_dict() for ld in loaders]
    return matrix(run, n, b, k, cells, "StatefulDataLoader + StatefulDistributedSampler "
                  "(shuffle, seed 1) per rank, num_workers 0; each rank saves its own "
                  "state_dict(); on resume rank r loads rank r's state (a new rank 4-7 has "
                  "none and starts fresh)")


# ------------------------------------------------------------------ TorchTitan 0.3.0

def titan_matrix(work, n, b, k, cells):
    os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(work, "hf-cache-ids"))
    data = os.path.join(work, "ids-text")
    tok = systems.IdTokenizer()

    def ids_of(batch):
        inputs, labels = batch
        return [int(x) for x in inputs["input"][:, 1]]

    def run(w, gb, state, steps):
        loaders = [systems.titan_hf_loader(data, r, w, gb // w, tok) for r in range(w)]
        if state is not None:
            for ld in loaders:
                ld.load_state_dict(state)
        out = take([iter(ld) for ld in loaders], steps, ids_of)
        merged = {}
        for ld in loaders:     # what torch.distributed.checkpoint stores: every rank's keys
            merged.update(ld.state_dict())
        return out, merged
    return matrix(run, n, b, k, cells, "ParallelAwareDataloader over HuggingFaceTextDataset "
                  "(local JSONL, one document per seq_len-2 window, tokenizer stubbed to the "
                  "document id); the checkpoint is the union of every rank's state_dict(), as "
                  "DCP stores it; each new rank calls load_state_dict on it")


# ------------------------------------------------------------------ Grain

def grain_matrix(work, n, b, k, cells):
    src = systems.WindowSource(os.path.join(work, "ids.bin"), window=8)

    def run(w, gb, states, steps):
        its = [iter(systems.grain_loader(src, r, w, gb // w, 0, num_epochs=1)) for r in range(w)]
        if states is not None:
            for r, it in enumerate(its):
                if r < len(states):
                    it.set_state(states[r])
        out = take(its, steps, tok_ids)
        return out, [it.get_state() for it in its]
    return matrix(run, n, b, k, cells, "grain.python.DataLoader (IndexSampler, ShardOptions per "
                  "rank, shuffle seed 1, Batch), worker_count 0; each rank saves "
                  "iterator.get_state(); rank r restores rank r's state (new ranks start fresh)")


def grain_elastic_matrix(work, n, b, k, cells):
    import grain
    from grain.experimental import ElasticIterator
    arr = np.fromfile(os.path.join(work, "ids.bin"), dtype=np.uint16).reshape(-1, 8)

    def run(w, gb, state, steps):
        ds = grain.MapDataset.source(arr).shuffle(seed=1)
        its = [ElasticIterator(ds, global_batch_size=gb,
                               shard_options=grain.sharding.ShardOptions(r, w, drop_remainder=True))
               for r in range(w)]
        if state is not None:
            for it in its:
                it.set_state(state)
        out = take(its, steps, lambda x: [int(v) for v in np.asarray(x)[:, 0]])
        return out, its[0].get_state()
    return matrix(run, n, b, k, cells, "grain.experimental.ElasticIterator over "
                  "MapDataset.source(...).shuffle(seed=1), global_batch_size=B, ShardOptions "
                  "per rank; rank 0's get_state() restored on every rank")


# ------------------------------------------------------------------ MosaicML Streaming

def streaming_matrix(work, n, b, k, cells):
    state_file = os.path.join(work, "streaming-elastic-state.pkl")

    def run(w, gb, state, steps):
        from streaming.base.util import clean_stale_shared_memory
        clean_stale_shared_memory()
        if state is not None:
            with open(state_file, "wb") as f:
                pickle.dump(state, f)
        env = dict(os.environ, MASTER_PORT=str(free_port()))
        procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "streaming_rank.py"),
                                   os.path.join(work, "ids-mds"), str(r), str(w), str(gb // w),
                                   str(steps), state_file if state is not None else ""],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
                 for r in range(w)]
        res = []
        for p in procs:
            o, e = p.communicate(timeout=300)
            if p.returncode:
                raise RuntimeError(e.decode(errors="replace").strip().splitlines()[-1])
            res.append(pickle.loads(o))
        nsteps = min(len(r["steps"]) for r in res)
        out = [[i for r in res for i in r["steps"][t]] for t in range(nsteps)]
        return out, res[0]["state"]
    return matrix(run, n, b, k, cells, "StreamingDataset (shuffle, seed 1, num_canonical_nodes 1, "
                  "batch_size = per-rank batch) + StreamingDataLoader, one process per rank; "
                  "rank 0's dataloader.state_dict() saved, load_state_dict on every rank "
                  "(the documented elastic resumption: fixed num_canonical_nodes)")


# ------------------------------------------------------------------ WebDataset

def wds_matrix(work, n, b, k, cells):
    import glob
    import webdataset as wds
    urls = sorted(glob.glob(os.path.join(work, "ids-wds", "*.tar")))

    def run(w, gb, state, steps):
        its = []
        for r in range(w):
            split = (lambda r: lambda src: (u for i, u in enumerate(src) if i % w == r))(r)
            ds = (wds.WebDataset(urls, shardshuffle=len(urls), nodesplitter=split, seed=1,
                                 empty_check=False).shuffle(100, seed=1).decode()
                  .to_tuple("tokens.npy").batched(gb // w))
            its.append(iter(ds))
        return take(its, steps, lambda x: [int(t[0]) for t in x[0]]), None
    return matrix(run, n, b, k, cells, "WebDataset(shardshuffle, nodesplitter by rank, seed 1)"
                  ".shuffle(100).batched(B/W): it has no state_dict, so a restarted job starts "
                  "its epoch again (what remains is the user's own skip logic)")


ELASTIC_SYSTEMS = {
    "zephon": zephon_matrix,
    "torchtitan": titan_matrix,
    "grain": grain_matrix,
    "grain-elastic": grain_elastic_matrix,
    "streaming": streaming_matrix,
    "torchdata": torchdata_matrix,
    "webdataset": wds_matrix,
}
