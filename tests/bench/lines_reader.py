#!/usr/bin/python3
"""Zephon's side of benchmark B2: a Python training loop reading /rank/<r>/next.

Each step opens `next` (one claim: a micro-batch in the lines encoding), reads it whole
and splits it into its records: the list of record bytes a DataLoader batch would hold,
so the comparison with dataloader_baseline.py is like for like (neither parses JSON).
Counts records for --seconds after one warm-up step; prints one JSON object.

usage: lines_reader.py PATH/rank/R/next [--seconds 5]
"""
import argparse
import json
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('path')
    ap.add_argument('--seconds', type=float, default=5.0)
    a = ap.parse_args()
    with open(a.path, 'rb') as f:  # warm-up claim
        f.read()
    records = batches = nbytes = 0
    t0 = time.perf_counter()
    while True:
        with open(a.path, 'rb') as f:
            data = f.read()
        batch = data.split(b'\n')[:-1]
        records += len(batch)
        nbytes += len(data)
        batches += 1
        if time.perf_counter() - t0 >= a.seconds:
            break
    secs = time.perf_counter() - t0
    print(json.dumps({'records': records, 'batches': batches, 'bytes': nbytes,
                      'seconds': secs, 'records_per_s': records / secs}))


if __name__ == '__main__':
    main()
