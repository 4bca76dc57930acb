"""Cold, slow storage (issue 27, part 1): Zephon and its peers reading a token dataset larger
than the page cache left to them, from a disk throttled to a fixed bandwidth, with the page
cache dropped before every round. Run by tests/bench/peers/run-cold (root: cgroups and
drop_caches); writes cold.json into --out and prints a table. Never fails on a timing.

Storage: a cgroup v1 child of each of blkio, memory and cpuacct (named zephon-cold). The
blkio one limits reads of the disk that holds --work to --bps bytes/s
(blkio.throttle.read_bps_device: every read, buffered or direct, issued by a process in
it); the memory one limits what the processes of a round and their page cache may hold to
--memory; cpuacct sums the CPU of every process of a round (trainer ranks, loader workers,
the Zephon daemon). The driver moves itself into the three for a round, so that whatever
it starts (fio, the mount, the ranks) is in them, and out again after.

The limit: fio (Debian's) on the token file inside the same cgroups, the page cache
dropped, O_DIRECT: random reads of 8 KiB at queue depth 32 (a window of 2,049 uint16 tokens
is 4,098 bytes and always spans two pages, so 8 KiB is what the page cache must read per
sample whatever reads it), random 4 KiB, and sequential 1 MiB.

Each round: drop the page cache, start the system (a mount for Zephon, timed: cold), start
`world` rank processes (rank.py: build the loader, 3 batches, then a window of --seconds),
and read the cgroups' counters at the window's start and end. Reported per round: tokens/s
over the window (every rank), the first batch (loader construction + first batch, the
slowest rank; for Zephon after its mount), CPU seconds per GB of int64 tensors delivered
(cpuacct: every process), disk bytes read per sample delivered (blkio), and the memory
cgroup's high-water mark.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))

import numpy as np  # noqa: E402

import peers  # noqa: E402
from peers import log  # noqa: E402

WINDOW = peers.WINDOW
NAME = "zephon-cold"
CONTROLLERS = ("blkio", "memory", "cpuacct")

# (system, loader workers): the peers at 0 and 2 workers where the issue names both
SYSTEMS = [
    ("zephon-loader", 0), ("zephon-next", 0),
    ("torchdata", 0), ("torchdata", 2),
    ("streaming", 2), ("grain", 2),
]


def size(text: str) -> int:
    """'50M' -> 52428800 (binary units, as the mount's options)."""
    units = {"K": 10, "M": 20, "G": 30, "T": 40}
    t = text.strip().upper().rstrip("B").rstrip("I")
    return int(t[:-1]) << units[t[-1]] if t and t[-1] in units else int(t)


# ------------------------------------------------------------------ cgroups

def disk_of(path: str) -> str:
    """MAJOR:MINOR of the whole disk holding path (its parent when it is a partition)."""
    dev = os.stat(path).st_dev
    node = os.path.realpath(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if os.path.exists(os.path.join(node, "partition")):
        node = os.path.dirname(node)
    with open(os.path.join(node, "dev")) as f:
        return f.read().strip()


def cg(ctl: str, name: str = NAME) -> str:
    return os.path.join("/sys/fs/cgroup", ctl, name)


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def cg_setup(disk: str, bps: int, memory: int) -> None:
    for ctl in CONTROLLERS:
        os.makedirs(cg(ctl), exist_ok=True)
    write(os.path.join(cg("blkio"), "blkio.throttle.read_bps_device"), f"{disk} {bps}")
    write(os.path.join(cg("memory"), "memory.limit_in_bytes"), str(memory))


def cg_move(into: bool) -> None:
    for ctl in CONTROLLERS:
        write(os.path.join(cg(ctl) if into else os.path.join("/sys/fs/cgroup", ctl),
                           "cgroup.procs"), str(os.getpid()))


def cg_counters(disk: str) -> dict[str, float]:
    reads = 0
    for line in read(os.path.join(cg("blkio"), "blkio.throttle.io_service_bytes")).splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == disk and f[1] == "Read":
            reads = int(f[2])
    return {"cpu_s": int(read(os.path.join(cg("cpuacct"), "cpuacct.usage"))) / 1e9,
            "disk_read_bytes": reads,
            "mem_max_bytes": int(read(os.path.join(cg("memory"), "memory.max_usage_in_bytes")))}


def anon_mib(pid: int) -> float | None:
    """The process's anonymous memory now (RssAnon: not the shard pages it maps, which
    VmHWM counts and the page cache holds), MiB."""
    try:
        for line in read(f"/proc/{pid}/status").splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def drop_caches() -> None:
    os.sync()
    write("/proc/sys/vm/drop_caches", "3")


# ------------------------------------------------------------------ inputs

def prepare(work: str, gb: float) -> dict[str, int]:
    """tokens.bin (random uint16 windows of 2,049 tokens, seed 27), Zephon's
    --compress none pack of it, Streaming's MDS; each made once."""
    os.makedirs(work, exist_ok=True)
    tok = os.path.join(work, "tokens.bin")
    n = int(gb * 1e9) // (2 * WINDOW)
    if not os.path.exists(tok) or os.path.getsize(tok) != n * WINDOW * 2:
        log(f"making {tok}: {n} windows, {n * WINDOW * 2 / 1e9:.1f} GB")
        rng = np.random.default_rng(27)
        with open(tok + ".tmp", "wb") as f:
            left = n
            while left:
                k = min(left, 65536)
                rng.integers(0, 50257, k * WINDOW, dtype=np.uint16).tofile(f)
                left -= k
        os.replace(tok + ".tmp", tok)
    out = os.path.join(work, "tok-zephon")
    if not os.path.exists(os.path.join(out, "catalog.sqlite")):
        log("zephon pack")
        peers.zephon_pack([tok, "--format", "tokens", "--seq-len", WINDOW, "--dtype", "uint16",
                           "--compress", "none"], out)
    mds = os.path.join(work, "tok-mds")
    if not os.path.exists(os.path.join(mds, "index.json")):
        log("streaming MDSWriter")
        arr = np.memmap(tok, dtype=np.uint16, mode="r").reshape(n, WINDOW)
        peers.write_mds(mds, {"tokens": f"ndarray:uint16:{WINDOW}"},
                        ({"tokens": np.array(a)} for a in arr))
    return {"windows": n, "bytes": n * WINDOW * 2}


# ------------------------------------------------------------------ the limit

def fio(path: str, rw: str, bs: str, depth: int, seconds: int) -> dict[str, float]:
    drop_caches()
    out = subprocess.run(
        ["fio", "--name=limit", f"--filename={path}", f"--rw={rw}", f"--bs={bs}",
         f"--iodepth={depth}", "--ioengine=libaio", "--direct=1", "--readonly",
         f"--runtime={seconds}", "--time_based", "--output-format=json"],
        check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    return {"bytes_per_s": float(job["bw_bytes"]), "iops": float(job["iops"])}


# ------------------------------------------------------------------ one round

def one_round(work: str, disk: str, system: str, workers: int, world: int, mb: int,
              seconds: float, readahead: str) -> dict[str, object]:
    drop_caches()
    cg_move(True)
    write(os.path.join(cg("memory"), "memory.max_usage_in_bytes"), "0")
    mount = None
    procs: list[subprocess.Popen[str]] = []
    res: dict[str, object] = {"system": system, "workers": workers, "world": world}
    try:
        target = ""
        if system.startswith("zephon"):
            t = time.perf_counter()
            opts = dict(world_size=world, global_batch=world * mb, micro_batch=mb)
            if system == "zephon-next":
                opts["format"] = "npy"
            mount = peers.zephon_mount(os.path.join(work, "tok-zephon"),
                                       os.path.join(work, "mnt"),
                                       fuse_options=[f"readahead={readahead}"], **opts)
            mount.start()
            res["mount_s"] = time.perf_counter() - t
            target = mount.path
        if system == "streaming":
            from streaming.base.util import clean_stale_shared_memory
            clean_stale_shared_memory()
        from elastic import free_port
        env = dict(os.environ, MASTER_PORT=str(free_port()))
        deadline = time.monotonic() + 300 + seconds
        for r in range(world):
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(HERE, "rank.py"), system, "tokens", work, target,
                 str(r), str(world), str(mb), str(seconds), str(workers)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                start_new_session=True))
        starts = []
        for p in procs:
            line = peers.readline(p, deadline)
            if line.split(" ", 1)[0] != "ready":
                raise RuntimeError(f"{system} rank did not start: {line!r}")
            starts.append(json.loads(line.split(" ", 1)[1]))
        c0 = cg_counters(disk)
        t0 = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [json.loads(peers.readline(p, deadline)) for p in procs]
        wall = time.perf_counter() - t0
        c1 = cg_counters(disk)
        items = sum(o["items"] for o in outs)
        nbytes = sum(o["bytes"] for o in outs)
        samples = items / WINDOW
        res.update({
            "tokens_per_s": sum(o["items"] / o["seconds"] for o in outs),
            "first_batch_s": max(s["build_s"] + s["first_s"] for s in starts),
            "first_s": max(s["first_s"] for s in starts),
            "cpu_s_per_gb": (c1["cpu_s"] - c0["cpu_s"]) / (nbytes / 1e9),
            "disk_bytes_per_sample": (c1["disk_read_bytes"] - c0["disk_read_bytes"]) / samples,
            "disk_bytes_per_s": (c1["disk_read_bytes"] - c0["disk_read_bytes"]) / wall,
            "samples_per_s": samples / wall,
            "mem_max_bytes": c1["mem_max_bytes"],
            "daemon_hwm_mib": peers.vm_hwm_mib(mount.pid) if mount and mount.pid else None,
            "daemon_anon_mib": anon_mib(mount.pid) if mount and mount.pid else None,
            "wall_s": wall,
        })
    except Exception as e:            # a peer that fails is reported, not fatal
        res["error"] = repr(e)
        log(f"  {system}: {e!r}")
    finally:
        peers.end_sessions(procs)
        if mount:
            mount.stop()
        cg_move(False)
    return res


# ------------------------------------------------------------------ report

def table(res: dict[str, object]) -> str:
    lim = res["limit"]["randread_8k"]["bytes_per_s"]
    limit_tok = lim / 8192 * WINDOW
    rows = ["| system | ranks | tokens/s | x limit | first batch | CPU s/GB | disk bytes/sample | "
            "memory high-water |", "|---|---|---|---|---|---|---|---|"]
    for r in res["rounds"]:
        name = r["system"] + (f" ({r['workers']} workers)" if r["workers"] else "")
        if "error" in r:
            rows.append(f"| {name} | {r['world']} | failed: {r['error'][:80]} |||||")
            continue
        rows.append(
            f"| {name} | {r['world']} | {r['tokens_per_s'] / 1e6:.2f}M | "
            f"{r['tokens_per_s'] / limit_tok:.2f} | {r['first_batch_s'] * 1e3:.0f} ms"
            + (f" (mount {r['mount_s'] * 1e3:.0f} ms)" if "mount_s" in r else "")
            + f" | {r['cpu_s_per_gb']:.2f} | {r['disk_bytes_per_sample'] / 1024:.0f} KiB | "
            f"{r['mem_max_bytes'] / 2**30:.2f} GiB |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/var/tmp/zephon-cold", help="scratch data (~3x --gb)")
    ap.add_argument("--out", default=None, help="where cold.json goes (default --work)")
    ap.add_argument("--gb", type=float, default=8.5, help="token file size, GB (default 8.5)")
    ap.add_argument("--bps", default="50M", help="read limit of the disk (default 50M)")
    ap.add_argument("--memory", default="6G", help="memory cgroup limit (default 6G)")
    ap.add_argument("--seconds", type=float, default=30, help="timed window per round")
    ap.add_argument("--ranks", default="1,4", help="rank counts (default 1,4)")
    ap.add_argument("--systems", default=",".join(f"{s}:{w}" for s, w in SYSTEMS),
                    help="system:workers list")
    ap.add_argument("--readahead", default="64M", help="Zephon's readahead= (default 64M)")
    ap.add_argument("--mb", type=int, default=8, help="micro-batch (default 8)")
    ap.add_argument("--read-ahead-kb", type=int, default=None,
                    help="the disk's read_ahead_kb for the run (restored after; default: as "
                         "it is). A mmap fault reads this much around it, so it decides what "
                         "the memmap peers read per sample")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("cold.py: run as root (cgroups, drop_caches)")
    if not shutil.which("fio"):
        sys.exit("cold.py: no fio (apt-get install fio; run-cold installs it)")
    out = a.out or a.work
    os.makedirs(out, exist_ok=True)
    inputs = prepare(a.work, a.gb)
    disk = disk_of(a.work)
    cg_setup(disk, size(a.bps), size(a.memory))
    res: dict[str, object] = {"inputs": inputs, "disk": disk, "bps": size(a.bps),
                              "memory": size(a.memory), "seconds": a.seconds,
                              "readahead": a.readahead, "load_start": os.getloadavg()[0]}
    tok = os.path.join(a.work, "tokens.bin")
    ra_path = f"/sys/dev/block/{disk}/queue/read_ahead_kb"
    ra_was = read(ra_path).strip()
    if a.read_ahead_kb is not None:
        write(ra_path, str(a.read_ahead_kb))
    try:
        run(a, res, disk, tok, out)
    finally:
        write(ra_path, ra_was)
    print(table(res))


def run(a: argparse.Namespace, res: dict[str, object], disk: str, tok: str, out: str) -> None:
    """The limit, then every round, into res (and cold.json after each round)."""
    res["read_ahead_kb"] = read(f"/sys/dev/block/{disk}/queue/read_ahead_kb").strip()
    cg_move(True)
    try:
        res["limit"] = {"randread_8k": fio(tok, "randread", "8k", 32, 10),
                        "randread_4k": fio(tok, "randread", "4k", 32, 10),
                        "seqread_1m": fio(tok, "read", "1m", 4, 10)}
    finally:
        cg_move(False)
    log("limit:", json.dumps(res["limit"]))
    res["rounds"] = []
    for world in (int(w) for w in a.ranks.split(",")):
        for item in a.systems.split(","):
            system, workers = item.split(":")
            log(f"round: {system} workers={workers} ranks={world}")
            r = one_round(a.work, disk, system, int(workers), world, a.mb, a.seconds, a.readahead)
            res["rounds"].append(r)
            log("  ", json.dumps(r))
            with open(os.path.join(out, "cold.json"), "w") as f:
                json.dump(res, f, indent=1)
    res["load_end"] = os.getloadavg()[0]
    with open(os.path.join(out, "cold.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
