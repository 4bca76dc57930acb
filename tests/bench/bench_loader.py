"""Overhead of zephon.torch.ZephonLoader against plain Python reading the same step files.

usage: ZEPHON=build/fs/zephon python tests/bench/bench_loader.py DATASET MOUNTPOINT [STEPS]
DATASET: a token dataset of 2049-token windows (pack --seq-len 2048 --overlap 1). One mount
of world_size=1, global_batch=8, micro_batch=8: a step is one 8 x 2049 batch.
  plain:  np.load(rank/0/step/t) -> int64 tensor
  loader: next(ZephonLoader)     -> int64 tensor (reads rank/0/from/G, 8 steps a read)
Alternating rounds of STEPS steps each; prints the median time per step of each and the
overhead. A benchmark, not a test: nothing here can fail on timing.
"""
import statistics
import sys
import time

import numpy as np
import torch

import zephon
from zephon.torch import ZephonLoader


def main():
    ds, mp = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    with zephon.mount(ds, mp, world_size=1, global_batch=8, micro_batch=8,
                      journal=mp.rstrip('/') + '.sqlite', resume='fresh') as m:
        loader = ZephonLoader(m.path, dp_rank=0, dp_world_size=1)
        assert loader.window == 2049, loader.window
        plain_t, loader_t = [], []
        t0 = 0
        for rnd in range(7):
            a = time.perf_counter()
            for t in range(t0, t0 + steps):
                x = torch.from_numpy(np.load('%s/rank/0/step/%d' % (m.path, t)).astype(np.int64))
            b = time.perf_counter()
            for _ in range(steps):
                y = next(loader)
            c = time.perf_counter()
            assert torch.equal(x, y)      # the same step: rounds read the same files
            t0 += steps
            plain_t.append((b - a) / steps)
            loader_t.append((c - b) / steps)
        p, q = statistics.median(plain_t), statistics.median(loader_t)
        print('plain  %.1f us/step (rounds: %s)' % (p * 1e6, ' '.join('%.0f' % (v * 1e6) for v in plain_t)))
        print('loader %.1f us/step (rounds: %s)' % (q * 1e6, ' '.join('%.0f' % (v * 1e6) for v in loader_t)))
        print('overhead %+.1f%%' % ((q / p - 1) * 100))


if __name__ == '__main__':
    main()
