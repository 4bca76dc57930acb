"""Resume latency: a new process that resumes at 90% of an epoch of N samples, from its
start to its first batch, and its peak RSS (VmHWM; Zephon's daemon reported beside it).

Data: N tiny samples (one uint8 token each), so that N = 10^8 fits this machine: Zephon packs
an N-byte token file with --seq-len 1; MosaicML Streaming reads N / 10^6 hard links of one
10^6-sample MDS shard written by its MDSWriter, listed in one index.json; the map-style peers
(torchdata, Grain) read a source of N samples computed from the index (what they hold per
sample does not change how they restore a position). Each state is one taken by the system
after a batch, with its position counter set to 90% of the epoch (the format is the system's
own: what it would hold after iterating that far).

usage (child): resume.py SYSTEM WORK N T_SPAWN
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))

WORLD, MB = 4, 8


def hwm(pid="self"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


class Virtual:
    """N samples, each a 1-element uint8 array computed from its index."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __repr__(self):           # Grain checks a restored state's source by its repr
        return f"Virtual({self.n})"

    def __getitem__(self, i):
        import numpy as np
        return np.array([int(i) & 255], dtype=np.uint8)


def target(n):
    """gsn of the resume point: 90% of the epoch, at a step boundary."""
    b = WORLD * MB
    return (n * 9 // 10) // b * b


# ------------------------------------------------------------------ children

def child(system, work, n, t_spawn):
    marks = {}
    import numpy as np  # noqa: F401
    import torch  # noqa: F401
    marks["imported"] = time.time()
    g = target(n)
    extra = {}
    if system == "zephon":
        import zephon
        from zephon.torch import ZephonLoader
        marks["imported"] = time.time()
        mp = os.path.join(work, "mnt-resume")
        j = mp + ".sqlite"
        for suf in ("", "-wal", "-shm"):
            if os.path.exists(j + suf):
                os.unlink(j + suf)
        with zephon.mount(os.path.join(work, f"res-zephon-{n}"), mp, world_size=WORLD,
                          global_batch=WORLD * MB, journal=j,
                          resume=f"samples:{g}@{g // (WORLD * MB)}") as m:
            ld = ZephonLoader(m.path, dp_rank=0, dp_world_size=WORLD)
            b = next(iter(ld))
            marks["first"] = time.time()
            extra["daemon_hwm_mib"] = hwm(m._proc.pid)
            extra["position"] = ld.state_dict()["consumed_samples"]
    elif system == "zephon-mounted":
        # the node's mount outlives the trainer (systemd unit, fstab, a launcher's mount):
        # the new process restores the loader's state from its checkpoint
        from zephon.torch import ZephonLoader
        marks["imported"] = time.time()
        ld = ZephonLoader(os.path.join(work, "mnt-resume-up"), dp_rank=0, dp_world_size=WORLD)
        st = ld.state_dict()
        st.update(consumed_samples=g, step=g // (WORLD * MB), step_offset=0)
        ld.load_state_dict(st)
        b = next(iter(ld))
        marks["first"] = time.time()
        extra["position"] = ld.state_dict()["consumed_samples"]
    elif system == "torchdata":
        import systems
        ld = systems.torchdata_loader(Virtual(n), 0, WORLD, MB, 0)
        st = json.load(open(os.path.join(work, f"res-torchdata-{n}.json")))
        ld.load_state_dict(st)
        b = next(iter(ld))
        marks["first"] = time.time()
        extra["position"] = ld.state_dict()["_sampler_iter_state"]["samples_yielded"] * WORLD
    elif system == "grain":
        import systems
        it = iter(systems.grain_loader(Virtual(n), 0, WORLD, MB, 0))
        with open(os.path.join(work, f"res-grain-{n}.state"), "rb") as f:
            it.set_state(f.read())
        b = next(it)
        marks["first"] = time.time()
    elif system == "grain-elastic":
        import grain
        from grain.experimental import ElasticIterator
        ds = grain.MapDataset.range(n).shuffle(seed=1)
        it = ElasticIterator(ds, global_batch_size=WORLD * MB,
                             shard_options=grain.sharding.ShardOptions(0, WORLD, drop_remainder=True))
        it.set_state(json.load(open(os.path.join(work, f"res-grain-elastic-{n}.json"))))
        b = next(it)
        marks["first"] = time.time()
    elif system == "streaming":
        import pickle
        import systems
        from streaming.base.util import clean_stale_shared_memory
        clean_stale_shared_memory()
        ld = systems.streaming_loader(os.path.join(work, f"res-mds-{n}"), 0, 1, MB, 0,
                                      collate=lambda rows: rows)
        with open(os.path.join(work, f"res-streaming-{n}.pkl"), "rb") as f:
            ld.load_state_dict(pickle.load(f))
        b = next(iter(ld))
        marks["first"] = time.time()
    elif system == "nanogpt-memmap":
        import numpy as np
        import torch as t
        data = np.memmap(os.path.join(work, f"res-{n}.bin"), dtype=np.uint8, mode="r")
        ix = t.randint(len(data) - 1, (MB,))
        b = t.stack([t.from_numpy(data[i:i + 1].astype(np.int64)) for i in ix])
        marks["first"] = time.time()
    else:
        raise SystemExit(f"unknown system {system}")
    out = {"first_batch_s": marks["first"] - t_spawn, "resume_s": marks["first"] - marks["imported"],
           "imports_s": marks["imported"] - t_spawn, "hwm_mib": hwm(), **extra}
    print(json.dumps(out), flush=True)
    os._exit(0)


# ------------------------------------------------------------------ driver side

def prepare(work, n, log):
    """The N-sample inputs and each system's saved state at 90% of the epoch."""
    import numpy as np
    raw = os.path.join(work, f"res-{n}.bin")
    if not os.path.exists(raw):
        f = np.memmap(raw + ".tmp", dtype=np.uint8, mode="w+", shape=(n,))
        f[:] = np.arange(n, dtype=np.uint64).astype(np.uint8)[:n] if n <= 10**7 else 7
        f.flush()
        del f
        os.replace(raw + ".tmp", raw)
    zd = os.path.join(work, f"res-zephon-{n}")
    if not os.path.exists(zd):
        t = time.time()
        subprocess.run([os.environ["ZEPHON"], "pack", raw, "--format", "tokens", "--seq-len", "1",
                        "--dtype", "uint8", "--compress", "none", "-o", zd], check=True,
                       stdout=subprocess.DEVNULL)
        log(f"  resume: zephon pack of {n} samples {time.time() - t:.0f} s")
    g = target(n)
    per_rank = g // WORLD
    # torchdata: a state after one batch, its counters moved to the rank's share of g
    import systems
    ld = systems.torchdata_loader(Virtual(n), 0, WORLD, MB, 0)
    it = iter(ld)
    next(it)
    st = ld.state_dict()
    st = _set_counters(st, per_rank, MB)
    with open(os.path.join(work, f"res-torchdata-{n}.json"), "w") as f:
        json.dump(st, f)
    # grain DataLoader: last_seen_indices holds the global index of the last record read
    it = iter(systems.grain_loader(Virtual(n), 0, WORLD, MB, 0))
    next(it)
    s = json.loads(it.get_state())
    s["last_seen_indices"] = {k: g - WORLD for k in s["last_seen_indices"]}
    with open(os.path.join(work, f"res-grain-{n}.state"), "wb") as f:
        f.write(json.dumps(s).encode())
    try:
        import grain
        from grain.experimental import ElasticIterator
        ds = grain.MapDataset.range(n).shuffle(seed=1)
        el = ElasticIterator(ds, global_batch_size=WORLD * MB,
                             shard_options=grain.sharding.ShardOptions(0, WORLD, drop_remainder=True))
        next(el)
        s = el.get_state()
        s["global_next_index"] = g
        with open(os.path.join(work, f"res-grain-elastic-{n}.json"), "w") as f:
            json.dump(s, f)
    except Exception as e:
        log(f"  resume: grain ElasticIterator: {e!r}")
    _prepare_streaming(work, n, g, log)


def _set_counters(st, per_rank, mb):
    """StatefulDataLoader's counters (samples yielded by the sampler, batches yielded)."""
    def walk(x):
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                if k in ("yielded", "next_yielded", "samples_yielded", "_sampler_iter_yielded") and isinstance(v, int):
                    out[k] = per_rank if "sampler" not in k else per_rank // mb
                elif k == "_num_yielded":
                    out[k] = per_rank // mb
                else:
                    out[k] = walk(v)
            return out
        return x
    return walk(st)


def _prepare_streaming(work, n, g, log):
    import pickle
    mds = os.path.join(work, f"res-mds-{n}")
    if not os.path.exists(os.path.join(mds, "index.json")):
        from streaming import MDSWriter
        import numpy as np
        per = min(n, 10**6)
        one = os.path.join(work, "res-mds-one")
        shutil.rmtree(one, ignore_errors=True)
        with MDSWriter(out=one, columns={"x": "uint8"}, size_limit=1 << 30) as w:
            for i in range(per):
                w.write({"x": np.uint8(i & 255)})
        idx = json.load(open(os.path.join(one, "index.json")))
        assert len(idx["shards"]) == 1, idx
        sh = idx["shards"][0]
        os.makedirs(mds + ".tmp", exist_ok=True)
        shards = []
        for c in range(n // per):
            name = f"shard.{c:05d}.mds"
            os.link(os.path.join(one, sh["raw_data"]["basename"]), os.path.join(mds + ".tmp", name))
            e = json.loads(json.dumps(sh))
            e["raw_data"]["basename"] = name
            shards.append(e)
        idx["shards"] = shards
        json.dump(idx, open(os.path.join(mds + ".tmp", "index.json"), "w"))
        shutil.rmtree(mds, ignore_errors=True)
        os.replace(mds + ".tmp", mds)
    st = {"epoch": 0, "sample_in_epoch": g, "num_canonical_nodes": 1, "shuffle_seed": 1,
          "initial_physical_nodes": 1}
    with open(os.path.join(work, f"res-streaming-{n}.pkl"), "wb") as f:
        pickle.dump(st, f)


SYSTEMS = ["zephon", "zephon-mounted", "torchdata", "grain", "grain-elastic", "streaming", "nanogpt-memmap"]


def run_all(work, quick, log, repeat=2, limit=150):
    n = 10**6 if quick else 10**8
    out = {"n": n, "world": WORLD, "micro_batch": MB, "target_gsn": target(n), "rows": {}}
    prepare(work, n, log)
    import zephon
    mp = os.path.join(work, "mnt-resume-up")
    up = zephon.mount(os.path.join(work, f"res-zephon-{n}"), mp, world_size=WORLD,
                      global_batch=WORLD * MB, journal=mp + ".sqlite", resume="fresh")
    up.start()
    try:
        _run_systems(work, n, quick, log, repeat, limit, out)
    finally:
        up.stop()
    return out


def _run_systems(work, n, quick, log, repeat, limit, out):
    for s in SYSTEMS:
        best = None
        try:
            for _ in range(1 if quick else repeat):
                t = time.time()
                try:
                    p = subprocess.run([sys.executable, os.path.abspath(__file__), s, work, str(n),
                                        repr(t)], capture_output=True, text=True, timeout=limit,
                                       start_new_session=True)
                except subprocess.TimeoutExpired:
                    raise RuntimeError(f"no first batch within {limit} s (stopped there)")
                if p.returncode:
                    raise RuntimeError((p.stderr.strip().splitlines() or ["?"])[-1])
                r = json.loads(p.stdout.strip().splitlines()[-1])
                if best is None or r["first_batch_s"] < best["first_batch_s"]:
                    best = r
            out["rows"][s] = best
            log(f"  resume {s}: first batch {best['first_batch_s']:.2f} s "
                f"(after imports {best['resume_s']:.3f} s), VmHWM {best['hwm_mib']:.0f} MiB")
        except Exception as e:
            out["rows"][s] = {"error": repr(e)}
            log(f"  resume {s}: {e!r}")


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
