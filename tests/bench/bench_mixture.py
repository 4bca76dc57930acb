#!/usr/bin/env python3
"""B-mix: a mounted mixture of 10 token sources against one dataset of the same total.

For each of the two (a mixture spec of 10 datasets of N samples each, weights
0.3,0.2,0.1,0.1,0.08,0.07,0.05,0.04,0.03,0.03; and one dataset of 10 N samples):
  - mount->first batch: wall time from the exec of `zephon mount ... -f` to the first
    batch read whole from /rank/0/next, a fresh journal each time (median of --mounts);
  - claims/s: opens + reads of /rank/0/next at W=1, micro_batch 8 and 256 (median of
    --rounds rounds of --claims claims).
Mounts and rounds alternate single / mixture, so that a noisy second falls on both; the
ratio mixture/single of each round is taken within the round and its median printed.

N is what fits on one machine (10 x 10^9 samples of 16 uint16 tokens would be 320 GB of
tokens and 240 GB of index); the order's cost at N = 10^9 per source, which is what
could depend on N, is measured without data by tests/bench/bench_mix.

Datasets are packed once into --work (kept for the next run; --fresh repacks).
A benchmark: it prints, it never fails on a timing.
usage: tests/bench/bench_mixture.py [--zephon build-bench/fs/zephon] [--n 1000000]
"""
import argparse
import contextlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

WEIGHTS = [0.3, 0.2, 0.1, 0.1, 0.08, 0.07, 0.05, 0.04, 0.03, 0.03]
SEQ = 16


def write_tokens(path, samples, seed):
    """samples windows of SEQ random uint16 tokens, deterministic in seed."""
    import random
    rng = random.Random(seed)
    left = samples * SEQ * 2
    with open(path, 'wb') as f:
        while left:
            n = min(left, 1 << 22)
            f.write(rng.randbytes(n))
            left -= n


def pack(zephon, work, name, samples, seed):
    ds = work / name
    mark = work / (name + '.samples')
    if ds.exists() and mark.exists() and mark.read_text() == str(samples):
        return ds
    shutil.rmtree(ds, ignore_errors=True)
    src = work / (name + '.bin')
    write_tokens(src, samples, seed)
    try:
        subprocess.run([str(zephon), 'pack', str(src), '-o', str(ds), '--format', 'bin',
                        '--dtype', 'uint16', '--seq-len', str(SEQ), '--compress', 'none'],
                       check=True, stdout=subprocess.DEVNULL)
    finally:
        src.unlink()
    mark.write_text(str(samples))
    return ds


class Mount:
    """zephon mount -f of `target` at work/mnt-<name>, with a fresh journal."""

    def __init__(self, zephon, work, name, target, opts):
        self.mnt = work / ('mnt-' + name)
        self.mnt.mkdir(exist_ok=True)
        self.journal = work / ('journal-%s.sqlite' % name)
        for suffix in ('', '-wal', '-shm'):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.journal) + suffix)
        self.log = open(work / ('daemon-%s.log' % name), 'w+')
        self.next = self.mnt / 'rank' / '0' / 'next'
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen([str(zephon), 'mount', str(target), str(self.mnt), '-f',
                                   '-o', 'journal=%s,%s' % (self.journal, opts)],
                                  stdout=self.log, stderr=self.log)

    def first_batch(self, expect):
        """Seconds from the exec to the first batch of `expect` bytes, read whole."""
        while True:
            try:
                fd = os.open(self.next, os.O_RDONLY)
                break
            except (FileNotFoundError, NotADirectoryError):
                if self.p.poll() is not None:
                    self.log.seek(0)
                    raise RuntimeError('zephon mount exited: ' + self.log.read()[-2000:])
                if time.perf_counter() - self.t0 > 60:
                    raise RuntimeError('no first batch within 60 s')
                time.sleep(0.0005)
        try:
            got = os.read(fd, expect + 1)
        finally:
            os.close(fd)
        secs = time.perf_counter() - self.t0
        if len(got) != expect:
            raise RuntimeError('first batch of %d bytes, expected %d' % (len(got), expect))
        return secs

    def claims(self, count, expect):
        """claims/s of `count` opens + whole reads of rank 0's next."""
        path = str(self.next)
        t0 = time.perf_counter()
        for _ in range(count):
            fd = os.open(path, os.O_RDONLY)
            n = len(os.read(fd, expect + 1))
            os.close(fd)
            if n != expect:
                raise RuntimeError('a batch of %d bytes, expected %d' % (n, expect))
        return count / (time.perf_counter() - t0)

    def close(self):
        subprocess.run(['fusermount3', '-u', str(self.mnt)], stderr=subprocess.DEVNULL)
        try:
            self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            subprocess.run(['fusermount3', '-uz', str(self.mnt)], stderr=subprocess.DEVNULL)
            self.p.kill()
            self.p.wait()
        self.log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = pathlib.Path(__file__).resolve().parents[2]
    ap.add_argument('--zephon', default=str(root / 'build' / 'fs' / 'zephon'))
    ap.add_argument('--work', default=os.environ.get('ZEPHON_BENCH_DIR', '/tmp/zephon-bench')
                    + '/mix')
    ap.add_argument('--n', type=int, default=1000000, help='samples per source')
    ap.add_argument('--mounts', type=int, default=5)
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--claims', type=int, default=3000, help='claims per round at m=8')
    ap.add_argument('--fresh', action='store_true', help='repack the datasets')
    a = ap.parse_args()
    zephon = pathlib.Path(a.zephon).resolve()
    work = pathlib.Path(a.work)
    if a.fresh:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    names = ['src%d' % s for s in range(10)]
    for s, name in enumerate(names):
        pack(zephon, work, name, a.n, 100 + s)
    single = pack(zephon, work, 'single', 10 * a.n, 99)
    spec = work / 'mix.json'
    spec.write_text(json.dumps({'sources': [{'name': n, 'dataset': n, 'weight': w}
                                            for n, w in zip(names, WEIGHTS)]}))
    print('datasets ready in %.0f s: 10 sources of N = %d, one of %d; %d tokens (uint16) '
          'per sample' % (time.perf_counter() - t0, a.n, 10 * a.n, SEQ), flush=True)
    targets = {'single': single, 'mixture': spec}

    # mount -> first batch, alternating; micro_batch 8: the first claim is one batch
    first = {k: [] for k in targets}
    opts = 'world_size=1,global_batch=256,micro_batch=8,format=bin,resume=fresh'
    for _ in range(a.mounts):
        for k, t in targets.items():
            m = Mount(zephon, work, k, t, opts)
            try:
                first[k].append(m.first_batch(8 * SEQ * 2))
            finally:
                m.close()

    # claims/s: both mounted at once, rounds alternate
    rates = {}
    for mb, count in ((8, a.claims), (256, max(a.claims // 4, 100))):
        opts = 'world_size=1,global_batch=%d,micro_batch=%d,format=bin,resume=fresh' % (
            max(256, mb), mb)
        mounts = {k: Mount(zephon, work, k, t, opts) for k, t in targets.items()}
        try:
            for m in mounts.values():
                m.first_batch(mb * SEQ * 2)
            r = {k: [] for k in targets}
            for _ in range(a.rounds):
                for k, m in mounts.items():
                    r[k].append(m.claims(count, mb * SEQ * 2))
            rates[mb] = (count, r)
        finally:
            for m in mounts.values():
                m.close()

    load = os.getloadavg()[0]
    print('\nB-mix: mixture of 10 sources (N = %d each) vs one dataset (N = %d), W=1' %
          (a.n, 10 * a.n))
    print('%-42s %14s %14s %22s' % ('', 'single', 'mixture', 'mixture/single'))
    fr = [m / s for s, m in zip(first['single'], first['mixture'])]
    print('%-42s %11.1f ms %11.1f ms %16.2fx (%.2f-%.2f)' % (
        'mount->first batch, median of %d' % a.mounts, statistics.median(first['single']) * 1e3,
        statistics.median(first['mixture']) * 1e3, statistics.median(fr), min(fr), max(fr)))
    for mb, (count, r) in rates.items():
        # claims/s: a lower rate is the slower one, so the cost ratio is single/mixture
        cr = [s / m for s, m in zip(r['single'], r['mixture'])]
        print('%-42s %12.0f/s %12.0f/s %16.2fx (%.2f-%.2f)' % (
            'claims/s, m=%d, median of %d x %d' % (mb, a.rounds, count),
            statistics.median(r['single']), statistics.median(r['mixture']),
            statistics.median(cr), min(cr), max(cr)))
    print('(ratio: time per claim or to first batch, mixture over single, median of the '
          'rounds\' own ratios (range); target <= 1.2x)')
    print('load average (1 min) at the end %.2f on %d CPUs' % (load, os.cpu_count()))
    print(json.dumps({'n': a.n, 'first_s': first,
                      'claims_per_s': {mb: r for mb, (_, r) in rates.items()}}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
