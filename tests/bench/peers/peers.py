"""Zephon side by side with the data loaders its users would pick instead (issue 17).

usage: tests/bench/peers/run [--quick] [--only elastic,throughput,resume,pack] [--work DIR]

One run: builds the inputs (fixed seed), converts them into every system's format (timed),
then the elastic correctness matrix, throughput per rank with CPU seconds per GB, resume
latency at 90% of an epoch and peak RSS. Writes results.json and peers.png (--out DIR),
and prints the tables. A benchmark: nothing here fails on a timing.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

WINDOW = 2049
ZEPHON = os.environ.get("ZEPHON", os.path.join(ROOT, "build-bench", "fs", "zephon"))
os.environ["ZEPHON"] = ZEPHON
TICK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sh(*cmd, **kw):
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


# ------------------------------------------------------------------ CPU accounting

def proc_cpu(pid):
    """utime + stime of one process, seconds (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / TICK
    except OSError:
        return 0.0


def tree_pids(root):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def tree_cpu(root):
    return sum(proc_cpu(p) for p in tree_pids(root))


def vm_hwm_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


# ------------------------------------------------------------------ inputs

def make_inputs(work, quick):
    """Token file, JSONL corpus and the small id data set of the elastic matrix; fixed seeds."""
    os.makedirs(work, exist_ok=True)
    n_windows = 2048 if quick else 16384
    tok = os.path.join(work, "tokens.bin")
    if not os.path.exists(tok) or os.path.getsize(tok) != n_windows * WINDOW * 2:
        rng = np.random.default_rng(17)
        rng.integers(0, 50257, n_windows * WINDOW, dtype=np.uint16).tofile(tok)
    text_mb = 20 if quick else 200
    txt = os.path.join(work, "text.jsonl")
    if not os.path.exists(txt) or abs(os.path.getsize(txt) - text_mb * 1e6) > 2e6:
        rng = np.random.default_rng(18)
        vocab = ["".join(chr(97 + c) for c in rng.integers(0, 26, rng.integers(2, 10)))
                 for _ in range(8000)]
        vocab = np.array(vocab, dtype=object)
        size, i = 0, 0
        with open(txt + ".tmp", "w") as f:
            while size < text_mb * 1e6:
                words = vocab[rng.integers(0, len(vocab), rng.integers(60, 300))]
                line = json.dumps({"id": i, "text": " ".join(words)}) + "\n"
                f.write(line)
                size += len(line)
                i += 1
        os.replace(txt + ".tmp", txt)
    ids = os.path.join(work, "ids.bin")
    np.repeat(np.arange(ELASTIC_N, dtype=np.uint16), 8).tofile(ids)
    os.makedirs(os.path.join(work, "ids-text"), exist_ok=True)
    with open(os.path.join(work, "ids-text", "ids.jsonl"), "w") as f:
        for i in range(ELASTIC_N):
            f.write(json.dumps({"text": str(i)}) + "\n")


# ------------------------------------------------------------------ conversions

def timed(fn):
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def du(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(path, "**"), recursive=True)
               if os.path.isfile(p))


def zephon_pack(args, out):
    shutil.rmtree(out, ignore_errors=True)
    sh(ZEPHON, "pack", *args, "-o", out, stdout=subprocess.DEVNULL)


def write_mds(out, columns, rows, compression=None):
    from streaming import MDSWriter
    shutil.rmtree(out, ignore_errors=True)
    with MDSWriter(out=out, columns=columns, compression=compression) as w:
        for r in rows:
            w.write(r)


def write_wds(out, samples, per_shard):
    import webdataset as wds
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    with wds.ShardWriter(os.path.join(out, "shard-%05d.tar"), maxcount=per_shard, verbose=0) as w:
        for s in samples:
            w.write(s)


def jsonl_lines(path):
    with open(path, "rb") as f:
        for line in f:
            yield line.rstrip(b"\n")


def write_array_record(out, path):
    from array_record.python.array_record_module import ArrayRecordWriter
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    w = ArrayRecordWriter(os.path.join(out, "text-00000.array_record"), "group_size:1")
    for line in jsonl_lines(path):
        w.write(line)
    w.close()


def titan_convert(work):
    """What TorchTitan's HF path does with local JSONL: datasets' json builder into Arrow."""
    from datasets import load_dataset
    shutil.rmtree(os.path.join(work, "hf-cache"), ignore_errors=True)
    load_dataset("json", data_files=os.path.join(work, "text.jsonl"), split="train",
                 cache_dir=os.path.join(work, "hf-cache"))


def offsets_index(work):
    off = [0]
    with open(os.path.join(work, "text.jsonl"), "rb") as f:
        for line in f:
            off.append(off[-1] + len(line))
    np.save(os.path.join(work, "text-offsets.npy"), np.array(off, dtype=np.int64))


def prepare(work, res, timed_pack):
    """Every system's copy of the inputs. The text conversions are figure 5 (timed)."""
    txt = os.path.join(work, "text.jsonl")
    tok = os.path.join(work, "tokens.bin")
    ids = os.path.join(work, "ids.bin")
    raw = os.path.getsize(txt)
    import datasets, streaming, webdataset  # noqa: F401  (imports are not conversion time)
    from array_record.python import array_record_module  # noqa: F401
    pack = res.setdefault("pack", {"input_bytes": raw, "rows": {}})
    rows = pack["rows"]

    def conv(name, fn, out):
        if not timed_pack and os.path.exists(out):
            return
        try:
            wall, cpu = timed(fn)
            rows[name] = {"seconds": wall, "driver_cpu_s": cpu, "bytes": du(out),
                          "mb_per_s": raw / 1e6 / wall}
            log(f"  convert {name}: {wall:.1f} s, {du(out) / 1e6:.0f} MB")
        except Exception as e:            # a peer that cannot convert is reported, not fatal
            rows[name] = {"error": repr(e)}
            log(f"  convert {name}: {e!r}")

    conv("zephon pack (zstd, dictionary)", lambda: zephon_pack([txt], os.path.join(work, "text-zephon")),
         os.path.join(work, "text-zephon"))
    conv("zephon pack --compress none", lambda: zephon_pack([txt, "--compress", "none"],
         os.path.join(work, "text-zephon-raw")), os.path.join(work, "text-zephon-raw"))
    conv("streaming MDSWriter (no compression)",
         lambda: write_mds(os.path.join(work, "text-mds"), {"text": "bytes"},
                           ({"text": l} for l in jsonl_lines(txt))), os.path.join(work, "text-mds"))
    conv("streaming MDSWriter (zstd)",
         lambda: write_mds(os.path.join(work, "text-mds-zstd"), {"text": "bytes"},
                           ({"text": l} for l in jsonl_lines(txt)), "zstd"),
         os.path.join(work, "text-mds-zstd"))
    conv("webdataset ShardWriter (tar)",
         lambda: write_wds(os.path.join(work, "text-wds"),
                           ({"__key__": "%09d" % i, "json": l} for i, l in enumerate(jsonl_lines(txt))),
                           # enough shards for 4 ranks x 2 workers in --quick too (a
                           # WebDataset worker without a shard never yields)
                           10000 if raw > 100e6 else 1000), os.path.join(work, "text-wds"))
    conv("grain ArrayRecordWriter", lambda: write_array_record(os.path.join(work, "text-ar"), txt),
         os.path.join(work, "text-ar"))
    conv("torchtitan (datasets json -> Arrow)", lambda: titan_convert(work),
         os.path.join(work, "hf-cache"))
    conv("torchdata (offsets index)", lambda: offsets_index(work),
         os.path.join(work, "text-offsets.npy"))

    # token and id inputs: untimed
    def once(out, fn):
        if not os.path.exists(out):
            fn()
    once(os.path.join(work, "tok-zephon"), lambda: zephon_pack(
        [tok, "--format", "tokens", "--seq-len", WINDOW, "--dtype", "uint16", "--compress", "none"],
        os.path.join(work, "tok-zephon")))
    once(os.path.join(work, "ids-zephon"), lambda: zephon_pack(
        [ids, "--format", "tokens", "--seq-len", 8, "--dtype", "uint16", "--compress", "none"],
        os.path.join(work, "ids-zephon")))
    n = os.path.getsize(tok) // 2 // WINDOW
    arr = np.memmap(tok, dtype=np.uint16, mode="r").reshape(n, WINDOW)
    once(os.path.join(work, "tok-mds"), lambda: write_mds(
        os.path.join(work, "tok-mds"), {"tokens": f"ndarray:uint16:{WINDOW}"},
        ({"tokens": np.array(a)} for a in arr)))
    once(os.path.join(work, "tok-wds"), lambda: write_wds(
        os.path.join(work, "tok-wds"), ({"__key__": "%09d" % i, "tokens.npy": np.array(a)}
                                        for i, a in enumerate(arr)), max(64, n // 16)))
    idarr = np.fromfile(ids, dtype=np.uint16).reshape(-1, 8)
    once(os.path.join(work, "ids-mds"), lambda: write_mds(
        os.path.join(work, "ids-mds"), {"tokens": "ndarray:uint16:8"},
        ({"tokens": np.array(a)} for a in idarr)))
    once(os.path.join(work, "ids-wds"), lambda: write_wds(
        os.path.join(work, "ids-wds"), ({"__key__": "%09d" % i, "tokens.npy": np.array(a)}
                                        for i, a in enumerate(idarr)), 60))


# ------------------------------------------------------------------ elastic matrix

ELASTIC_N = 960          # samples in the id data set: 40 steps of 24
ELASTIC_B = 24           # global batch: divisible by 2, 3, 4 and 8
ELASTIC_K = 10           # steps at world size 4 before the save
CELLS = [(2, 24), (3, 24), (8, 24), (4, 48)]

from elastic import ELASTIC_SYSTEMS, judge  # noqa: E402


def run_elastic(work, res, only_systems=None):
    out = res.setdefault("elastic", {})
    for name, fn in ELASTIC_SYSTEMS.items():
        if only_systems and name not in only_systems:
            continue
        log(f"elastic: {name}")
        try:
            out[name] = fn(work, ELASTIC_N, ELASTIC_B, ELASTIC_K, CELLS)
        except Exception as e:
            out[name] = {"error": repr(e), "trace": traceback.format_exc()[-2000:]}
            log(traceback.format_exc())
        for cell, v in out[name].items() if isinstance(out[name], dict) else []:
            if isinstance(v, dict) and "verdict" in v:
                log(f"   {cell}: {v['verdict']}")


# ------------------------------------------------------------------ throughput

TOKEN_SYSTEMS = ["zephon-loader", "zephon-loader-ga8", "zephon-next", "nanogpt-memmap", "torchdata", "grain",
                 "streaming", "webdataset", "torchtitan"]
TEXT_SYSTEMS = ["zephon-next", "torchdata", "grain", "streaming", "webdataset"]
WORKER_CHOICES = {"torchdata": [0, 2], "grain": [0, 2], "streaming": [0, 2],
                  "webdataset": [0, 2], "torchtitan": [0]}


def zephon_mount(dataset, mp, **opts):
    import zephon
    os.makedirs(mp, exist_ok=True)
    j = mp.rstrip("/") + ".sqlite"
    for suf in ("", "-wal", "-shm"):
        if os.path.exists(j + suf):
            os.unlink(j + suf)
    return zephon.mount(dataset, mp, journal=j, resume="fresh", **opts)


def run_ranks(work, system, kind, mb, world, seconds, workers):
    """world rank processes of one system at once; returns per-rank results and the
    CPU of a Zephon daemon over the timed window."""
    mount = None
    target = None
    if system.startswith("zephon"):
        # the peers read the text uncompressed, so Zephon serves its --compress none pack
        ds = os.path.join(work, "tok-zephon" if kind == "tokens" else "text-zephon-raw")
        # one micro-batch per rank per step; -ga8: 8 (gradient accumulation), so that the
        # loader reads a rank's step share in one file of 8 micro-batches
        ga = 8 if system.endswith("-ga8") else 1
        opts = dict(world_size=world, global_batch=world * mb * ga, micro_batch=mb)
        if kind == "tokens":
            opts["format"] = "npy"
        mount = zephon_mount(ds, os.path.join(work, "mnt"), **opts)
        mount.start()
        target = mount.path
    if system == "streaming":
        from streaming.base.util import clean_stale_shared_memory
        clean_stale_shared_memory()
    procs = []
    from elastic import free_port
    env = dict(os.environ, MASTER_PORT=str(free_port()))
    deadline = time.monotonic() + 60 + seconds
    try:
        for r in range(world):
            cmd = [sys.executable, os.path.join(HERE, "rank.py"), system, kind, work,
                   str(target or ""), str(r), str(world), str(mb), str(seconds), str(workers)]
            # a session of its own: the rank and its loader workers end together (killpg)
            procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          text=True, env=env, start_new_session=True))
        for p in procs:                        # every rank warmed up: the window starts
            line = readline(p, deadline)
            if line.split(" ", 1)[0].strip() != "ready":
                raise RuntimeError(f"{system} rank did not start: {line!r}")
        d0 = proc_cpu(mount._proc.pid) if mount else 0.0
        t0 = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [json.loads(readline(p, deadline)) for p in procs]
        wall = time.perf_counter() - t0
        d1 = proc_cpu(mount._proc.pid) if mount else 0.0
    finally:
        end_sessions(procs)
        if mount:
            mount.stop()
    return {"ranks": outs, "daemon_cpu_s": d1 - d0, "wall_s": wall}


def end_sessions(procs):
    """End each rank process's session (the rank and its loader workers): TERM first, so
    that loader workers get to unlink what they made, then KILL."""
    for sig in (15, 9):
        for p in procs:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def readline(p, deadline):
    import select
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError("rank process did not answer in time")
        r, _, _ = select.select([p.stdout], [], [], left)
        if r:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"rank process exited with status {p.wait()}")
            return line


def summarize(run, kind):
    ranks = run["ranks"]
    per_rank = sum(r["items"] / r["seconds"] for r in ranks) / len(ranks)
    total_bytes = sum(r["bytes"] for r in ranks)
    cpu = sum(r["cpu_s"] for r in ranks) + run["daemon_cpu_s"]
    return {"per_rank": per_rank, "unit": "tokens/s" if kind == "tokens" else "samples/s",
            "cpu_s_per_gb": cpu / (total_bytes / 1e9), "cpu_s": cpu, "gb": total_bytes / 1e9,
            "daemon_cpu_s": run["daemon_cpu_s"]}


def run_throughput(work, res, seconds, quick):
    out = res.setdefault("throughput", {})
    best_workers = {}
    for kind, systems, mbs in (("tokens", TOKEN_SYSTEMS, (8,) if quick else (8, 32)),
                               ("text", TEXT_SYSTEMS, (32,))):
        for system in systems:
            # the worker count this system does best with here (1 rank, first micro-batch)
            choices = WORKER_CHOICES.get(system, [0])
            if quick:
                choices = choices[-1:]
            tried = {}
            for w in choices:
                try:
                    s = summarize(run_ranks(work, system, kind, mbs[0], 1, seconds, w), kind)
                    tried[w] = s
                    log(f"  {kind} {system} w={w} mb={mbs[0]} 1 rank: {s['per_rank']:.0f} {s['unit']}")
                except Exception as e:
                    tried[w] = {"error": repr(e)}
                    log(f"  {kind} {system} w={w}: {e!r}")
            ok = {w: s for w, s in tried.items() if "per_rank" in s}
            if not ok:
                out[f"{kind}/{system}"] = {"error": tried}
                continue
            w = max(ok, key=lambda k: ok[k]["per_rank"])
            best_workers[(kind, system)] = w
            cells = {"workers": w, "workers_tried": {str(k): v.get("per_rank", v.get("error"))
                                                     for k, v in tried.items()}}
            for mb in mbs:
                for world in (1, 4):
                    key = f"mb{mb}/w{world}"
                    if mb == mbs[0] and world == 1:
                        cells[key] = ok[w]
                        continue
                    try:
                        cells[key] = summarize(run_ranks(work, system, kind, mb, world, seconds, w), kind)
                        log(f"  {kind} {system} w={w} mb={mb} {world} ranks: "
                            f"{cells[key]['per_rank']:.0f} {cells[key]['unit']}/rank")
                    except Exception as e:
                        cells[key] = {"error": repr(e)}
                        log(f"  {kind} {system} mb={mb} {world} ranks: {e!r}")
            out[f"{kind}/{system}"] = cells


# ------------------------------------------------------------------ resume latency

def run_resume(work, res, quick):
    import resume
    res["resume"] = resume.run_all(work, quick, log)


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small inputs, short windows (3-5 min)")
    ap.add_argument("--only", default="pack,elastic,throughput,resume")
    ap.add_argument("--systems", default="", help="elastic: only these systems")
    ap.add_argument("--work", default=os.environ.get("ZEPHON_BENCH_DIR", "/tmp/zephon-bench") + "/peers")
    ap.add_argument("--out", default=None, help="results.json and peers.png go here (default --work)")
    ap.add_argument("--seconds", type=float, default=None)
    a = ap.parse_args()
    only = set(a.only.split(","))
    work = a.work + ("-quick" if a.quick else "")
    out = a.out or work
    os.makedirs(out, exist_ok=True)
    seconds = a.seconds or (1.0 if a.quick else 3.0)
    res = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": a.quick,
           "load_start": os.getloadavg(), "versions": versions(), "seconds": seconds}
    path = os.path.join(out, "results.json")
    if os.path.exists(path):                   # keep earlier sections of a partial rerun
        old = json.load(open(path))
        for k, v in old.items():
            if k not in res and k.split("_")[0] not in only:
                res[k] = v
    t0 = time.time()
    log(f"inputs in {work}")
    make_inputs(work, a.quick)
    prepare(work, res, "pack" in only)
    if "elastic" in only:
        run_elastic(work, res, set(a.systems.split(",")) - {""})
    if "throughput" in only:
        run_throughput(work, res, seconds, a.quick)
    if "resume" in only:
        run_resume(work, res, a.quick)
    res["load_end"] = os.getloadavg()
    res["elapsed_s"] = time.time() - t0
    with open(path, "w") as f:
        json.dump(res, f, indent=1, default=str)
    import report
    report.print_tables(res)
    report.plot(res, os.path.join(out, "peers.png"))
    log(f"results: {path}")


def versions():
    import importlib.metadata as md
    out = {"python": sys.version.split()[0]}
    for p in ("torch", "numpy", "grain", "mosaicml-streaming", "torchdata", "webdataset",
              "torchtitan", "megatron-energon", "datasets", "array-record", "matplotlib"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            out[p] = None
    try:
        out["zephon"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return out


if __name__ == "__main__":
    main()
