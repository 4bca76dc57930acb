#!/usr/bin/env python3
"""bench_scale_mount: /status and /metrics of a mount that serves 8 ranks of a layout of
world_size W = 8 .. 10^4 (issue 27, part 2): render time (best of 5 reads of each file)
and size; and a mixture of k = 10 .. 1,024 sources (one dataset under k names, equal
weights): the time from the mount's exec to its first batch of next (global_batch k,
one of each source) and the daemon's peak RSS (VmHWM). A benchmark, not a test: it
prints rows "SERIES X VALUE UNIT" as tests/bench/bench_scale does, for
tests/bench/scale_plot.sh.

usage: ZEPHON=build-bench/fs/zephon python3 tests/bench/bench_scale_mount.py [DIR]
"""
import json
import os
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / 'fuse'))
import conftest  # noqa: E402  (the fuse suite's mount helpers)


def best_read(path, reps=5):
    best, size = 1e9, 0
    for _ in range(reps):
        t0 = time.perf_counter()
        with open(path, 'rb') as f:
            size = len(f.read())
        best = min(best, time.perf_counter() - t0)
    return best, size


def main():
    d = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
    conftest.write_jsonl(d / 'in.jsonl', 1000)
    ds = conftest.pack(d / 'ds', [d / 'in.jsonl'])
    for w in (8, 100, 1000, 10000):
        m = conftest.Mount(ds, d / ('mp%d' % w), 'world_size=%d,global_batch=%d,ranks=0-7,'
                           'journal=%s' % (w, w, d / ('j%d.sqlite' % w))).start()
        try:
            for r in range(8):   # a claim per served rank: the cursors and last claims
                conftest.read_all(m.path('rank', r, 'next'))
            for name in ('status', 'metrics'):
                t, size = best_read(m.path(name))
                print('%s_render_ms %d %.3f ms' % (name, w, t * 1e3))
                print('%s_bytes %d %d B' % (name, w, size))
        finally:
            m.stop()
    for k in (10, 100, 1000):
        mix = d / ('mix%d.json' % k)
        mix.write_text(json.dumps({'sources': [{'name': 's%d' % i, 'dataset': str(ds),
                                                'weight': 1} for i in range(k)]}))
        t0 = time.perf_counter()
        m = conftest.Mount(mix, d / ('mpk%d' % k), 'world_size=1,global_batch=%d' % k).start()
        try:
            conftest.read_all(m.path('rank', 0, 'next'))
            t = time.perf_counter() - t0
            hwm = [l for l in open('/proc/%d/status' % m.proc.pid) if l.startswith('VmHWM')]
            print('mix_mount_first_batch_s %d %.3f s' % (k, t))
            print('mix_mount_hwm_mib %d %.1f MiB' % (k, int(hwm[0].split()[1]) / 1024))
        finally:
            m.stop()


if __name__ == '__main__':
    main()
