#!/usr/bin/python3
"""Read MOUNT/rank/R/step/<t> whole for consecutive t, with a pool of threads (a map-style
DataLoader's workers reading step files); prints steps/s and MB/s.

Not part of bench.py's table: RESULTS.md ("step/ files: one build per read") compares two
builds with it, both mounted at once, runs alternating.

usage: step_reader.py MOUNT [--rank R] [--first T] [--seconds S] [--threads N]
"""
import argparse
import concurrent.futures
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('mount')
    ap.add_argument('--rank', type=int, default=0)
    ap.add_argument('--first', type=int, default=0, help='first step read')
    ap.add_argument('--seconds', type=float, default=3.0)
    ap.add_argument('--threads', type=int, default=1)
    a = ap.parse_args()

    def read(t):
        with open('%s/rank/%d/step/%d' % (a.mount, a.rank, t), 'rb') as f:
            return len(f.read())

    t, steps, nbytes = a.first, 0, 0
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(a.threads) as ex:
        while time.perf_counter() - t0 < a.seconds:
            for n in ex.map(read, range(t, t + 8 * a.threads)):
                nbytes += n
                steps += 1
            t += 8 * a.threads
    secs = time.perf_counter() - t0
    print('%.0f steps/s %.0f MB/s' % (steps / secs, nbytes / secs / 1e6))


if __name__ == '__main__':
    main()
