"""Tables (markdown, printed) and the one plot (PNG) of a peers run, from results.json.

usage: report.py RESULTS.json [PLOT.png]   (peers.py calls it at the end of a run)
"""
from __future__ import annotations

import json
import sys

# systems that restore a position after a restart (the throughput target's peer set)
RESUMABLE = {"torchdata", "grain", "streaming", "torchtitan"}
ZEPHON = {"zephon-loader", "zephon-loader-ga8", "zephon-next"}


def fmt(v, unit=""):
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:.2f}M{unit}"
    if v >= 1e3:
        return f"{v / 1e3:.1f}k{unit}"
    return f"{v:.3g}{unit}"


def throughput_rows(res, kind="tokens", cell="mb8/w1"):
    out = {}
    for key, cells in res.get("throughput", {}).items():
        k, system = key.split("/", 1)
        if k == kind and isinstance(cells, dict) and "per_rank" in cells.get(cell, {}):
            out[system] = cells[cell]
    return out


def headline(res):
    """The ratios the targets ask for, from one run."""
    h = {}
    for cell in ("mb8/w1", "mb8/w4", "mb32/w1", "mb32/w4"):
        rows = throughput_rows(res, "tokens", cell)
        peers = {s: r["per_rank"] for s, r in rows.items() if s in RESUMABLE}
        if not peers or "zephon-loader" not in rows:
            continue
        best = max(peers, key=peers.get)
        z = rows["zephon-loader"]["per_rank"]
        zn = rows.get("zephon-next", {}).get("per_rank")
        zg = rows.get("zephon-loader-ga8", {}).get("per_rank")
        floor = rows.get("nanogpt-memmap", {}).get("per_rank")
        h[cell] = {"zephon_loader": z, "zephon_next": zn, "best_peer": best,
                   "best_peer_value": peers[best], "ratio_vs_best_peer": z / peers[best],
                   "next_ratio_vs_best_peer": zn / peers[best] if zn else None,
                   "zephon_loader_ga8": zg,
                   "ga8_ratio_vs_best_peer": zg / peers[best] if zg else None,
                   "ratio_vs_floor": z / floor if floor else None,
                   "next_ratio_vs_floor": zn / floor if zn and floor else None}
    rows = throughput_rows(res, "tokens", "mb8/w1")
    cpu = {s: r["cpu_s_per_gb"] for s, r in rows.items()}
    peers = {s: v for s, v in cpu.items() if s not in ZEPHON and s != "nanogpt-memmap"}
    if peers and "zephon-loader" in cpu:
        b = min(peers, key=peers.get)
        h["cpu"] = {"zephon_loader": cpu["zephon-loader"], "zephon_next": cpu.get("zephon-next"),
                    "best_peer": b, "best_peer_value": peers[b],
                    "ratio": cpu["zephon-loader"] / peers[b]}
    rr = res.get("resume", {}).get("rows", {})
    ok = {s: r["first_batch_s"] for s, r in rr.items() if "first_batch_s" in r}
    peers = {s: v for s, v in ok.items() if s not in ("zephon", "zephon-mounted", "nanogpt-memmap")}
    if "zephon" in ok and peers:
        b = min(peers, key=peers.get)
        h["resume"] = {"zephon_s": ok["zephon"], "best_peer": b, "best_peer_s": peers[b],
                       "speedup": peers[b] / ok["zephon"],
                       "zephon_after_imports_s": rr["zephon"]["resume_s"],
                       "best_peer_after_imports_s": rr[b]["resume_s"],
                       "speedup_after_imports": rr[b]["resume_s"] / rr["zephon"]["resume_s"]}
        if "resume_s" in rr.get("zephon-mounted", {}):
            h["resume"]["mounted_after_imports_s"] = rr["zephon-mounted"]["resume_s"]
            h["resume"]["mounted_speedup_after_imports"] = \
                rr[b]["resume_s"] / rr["zephon-mounted"]["resume_s"]
    return h


def print_tables(res, out=sys.stdout):
    p = lambda *a: print(*a, file=out)   # noqa: E731
    p(f"\nversions: {json.dumps(res.get('versions', {}))}")
    p(f"load average (1/5/15 min) at start {res.get('load_start')}, at end {res.get('load_end')}")
    el = res.get("elastic", {})
    if el:
        cols = None
        p("\n### Elastic correctness (world size 4, k steps, save, resume; to the end of the epoch)\n")
        for name, cells in el.items():
            if "error" in cells:
                p(f"| {name} | could not run: {cells['error'][:200]} |")
                continue
            keys = [k for k in cells if "->" in k]
            if cols is None:
                cols = keys
                p("| system | " + " | ".join(cols) + " |")
                p("|---" * (len(cols) + 1) + "|")
            p(f"| {name} | " + " | ".join(cells[k]["verdict"].replace("|", "/") for k in cols) + " |")
    th = res.get("throughput", {})
    if th:
        p("\n### Throughput per rank (tokens/s at 2049-token windows; JSONL samples/s), CPU s per GB\n")
        p("| kind | system | workers | mb8 1 rank | mb8 4 ranks | mb32 1 rank | mb32 4 ranks | CPU s/GB (mb8, 1 rank) |")
        p("|---|---|---|---|---|---|---|---|")
        for key, cells in th.items():
            kind, system = key.split("/", 1)
            if "error" in cells and "workers" not in cells:
                p(f"| {kind} | {system} | - | error: {str(cells['error'])[:150]} |||||")
                continue
            mbs = ["mb8", "mb32"] if kind == "tokens" else ["mb32"]
            vals = []
            for mb in ["mb8", "mb32"]:
                for w in ("w1", "w4"):
                    c = cells.get(f"{mb}/{w}", {}) if mb in mbs else {}
                    vals.append(fmt(c.get("per_rank")) if "per_rank" in c else ("err" if c else "-"))
            first = cells.get(f"{mbs[0]}/w1", {})
            p(f"| {kind} | {system} | {cells.get('workers')} | " + " | ".join(vals) +
              f" | {first.get('cpu_s_per_gb', 0):.2f} |")
    pk = res.get("pack", {})
    if pk.get("rows"):
        p(f"\n### Pack/convert {pk['input_bytes'] / 1e6:.0f} MB of JSONL\n")
        p("| system | seconds | MB/s | bytes out | out/in |")
        p("|---|---|---|---|---|")
        for name, r in pk["rows"].items():
            if "error" in r:
                p(f"| {name} | error: {r['error'][:150]} | | | |")
            else:
                p(f"| {name} | {r['seconds']:.1f} | {r['mb_per_s']:.0f} | {r['bytes'] / 1e6:.0f} MB | "
                  f"{r['bytes'] / pk['input_bytes']:.2f} |")
    rs = res.get("resume", {})
    if rs.get("rows"):
        p(f"\n### Resume at 90% of an epoch of N = {rs['n']:.0e} samples (new process to first batch)\n")
        p("| system | first batch (s) | of which imports (s) | after imports (s) | peak RSS (MiB) |")
        p("|---|---|---|---|---|")
        for name, r in rs["rows"].items():
            if "error" in r:
                p(f"| {name} | error: {r['error'][:200]} | | | |")
            else:
                extra = f" + daemon {r['daemon_hwm_mib']:.0f}" if r.get("daemon_hwm_mib") else ""
                p(f"| {name} | {r['first_batch_s']:.2f} | {r['imports_s']:.2f} | {r['resume_s']:.3f} | "
                  f"{r['hwm_mib']:.0f}{extra} |")
    h = headline(res)
    if h:
        p("\n### Targets\n")
        p("```\n" + json.dumps(h, indent=1) + "\n```")


def plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    colors = {"zephon-loader": "#d62728", "zephon-loader-ga8": "#d62728", "zephon-next": "#ff9896",
              "zephon": "#d62728", "zephon-mounted": "#ff9896"}
    # 1: tokens/s per rank, mb 8, 1 and 4 ranks
    ax = axes[0]
    r1 = throughput_rows(res, "tokens", "mb8/w1")
    r4 = throughput_rows(res, "tokens", "mb8/w4")
    names = sorted(r1, key=lambda s: -r1[s]["per_rank"])
    y = range(len(names))
    ax.barh([i + 0.2 for i in y], [r1[s]["per_rank"] / 1e6 for s in names], 0.4,
            color=[colors.get(s, "#7f7f7f") for s in names], label="1 rank")
    ax.barh([i - 0.2 for i in y], [r4.get(s, {}).get("per_rank", 0) / 1e6 for s in names], 0.4,
            color=[colors.get(s, "#7f7f7f") for s in names], alpha=0.45, label="4 ranks (per rank)")
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xlabel("million tokens/s per rank (8 x 2049, int64)")
    ax.set_title("Throughput (higher is better)")
    ax.legend(loc="lower right", fontsize=8)
    # 2: resume latency, log scale
    ax = axes[1]
    rr = {s: r for s, r in res.get("resume", {}).get("rows", {}).items() if "first_batch_s" in r}
    rr.pop("nanogpt-memmap", None)           # restores no position: nothing to compare
    names = sorted(rr, key=lambda s: rr[s]["resume_s"])
    ax.barh(names, [max(rr[s]["resume_s"], 1e-4) for s in names],
            color=[colors.get(s, "#7f7f7f") for s in names])
    ax.set_xscale("log")
    ax.invert_yaxis()
    n = res.get("resume", {}).get("n", 0)
    ax.set_xlabel("s from imports done to first batch (log); peak RSS incl. daemon")
    ax.set_title(f"Resume at 90% of an epoch of {n:.0e} (lower is better)")
    for i, s in enumerate(names):
        rss = rr[s]["hwm_mib"] + (rr[s].get("daemon_hwm_mib") or 0)
        ax.text(max(rr[s]["resume_s"], 1e-4), i, f" {rr[s]['resume_s']:.3g} s, RSS {rss:.0f} MiB",
                va="center", fontsize=8)
    # 3: elastic matrix
    ax = axes[2]
    el = {k: v for k, v in res.get("elastic", {}).items() if "error" not in v}
    if el:
        names = list(el)
        cols = [k for k in next(iter(el.values())) if "->" in k]
        code = {"exact": 0, "refused": 1, "wrong": 2}
        grid, labels = [], []
        for s in names:
            row, lab = [], []
            for c in cols:
                v = el[s].get(c, {})
                if v.get("exact"):
                    row.append(0)
                    lab.append("exact")
                elif v.get("refused"):
                    row.append(1)
                    lab.append("refused")
                else:
                    row.append(2)
                    lab.append(f"rep {v.get('repeated', '?')}\nskip {v.get('skipped', '?')}")
            grid.append(row)
            labels.append(lab)
        from matplotlib.colors import ListedColormap
        ax.imshow(grid, cmap=ListedColormap(["#2ca02c", "#ffbf00", "#d62728"]), vmin=0, vmax=2,
                  aspect="auto")
        for i in range(len(names)):
            for j in range(len(cols)):
                ax.text(j, i, labels[i][j], ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(cols)), [c.replace(", ", "\n") for c in cols], fontsize=8)
        ax.set_yticks(range(len(names)), names)
        ax.set_title("Elastic resume from world size 4")
    fig.suptitle(f"Zephon vs its peers on 2 shared vCPUs (last section run {res.get('started')}, "
                 f"load {res.get('load_start', [0])[0]:.1f}; tests/bench/RESULTS.md, Peers)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    r = json.load(open(sys.argv[1]))
    print_tables(r)
    if len(sys.argv) > 2:
        plot(r, sys.argv[2])
