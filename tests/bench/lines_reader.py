#!/usr/bin/python3
"""Zephon's side of benchmark B2: a Python training loop reading /rank/<r>/next.

Each step opens `next` (one claim: a micro-batch in the lines encoding), reads it whole
and splits it into its records: the list of record bytes a DataLoader batch would hold,
so the comparison with dataloader_baseline.py is like for like (neither parses JSON).
Counts records for --seconds after one warm-up step; prints one JSON object.

Two ways to read (--read):
  file  `with open(path, 'rb') as f: f.read()`, what most code does: 7 FUSE requests
        per batch (OPEN, GETATTR, IOCTL for isatty, GETATTR, READ, READ to EOF, RELEASE);
  os    `os.open` + `os.readv` into a buffer kept across batches, a fast
        path: OPEN, READ, RELEASE. A read of Zephon's that returns fewer bytes than
        asked has reached the end of the batch, so no READ is spent to see EOF.

usage: lines_reader.py PATH/rank/R/next [--seconds 5] [--read file|os]
"""
import argparse
import json
import os
import time


def read_file(path, _buf):
    with open(path, 'rb') as f:
        return f.read()


def read_os(path, buf):
    """The whole batch, reading into buf[0] (a bytearray, grown when a batch fills it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        n = 0
        while True:
            mv = memoryview(buf[0])
            want = len(mv) - n
            got = os.readv(fd, [mv[n:]])
            n += got
            if got < want:          # short: the end of the batch
                return bytes(mv[:n])
            buf[0] = buf[0] + bytearray(len(buf[0]))   # full: there may be more
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('path')
    ap.add_argument('--seconds', type=float, default=5.0)
    ap.add_argument('--read', choices=['file', 'os'], default='file')
    a = ap.parse_args()
    read = read_os if a.read == 'os' else read_file
    buf = [bytearray(1 << 20)]
    read(a.path, buf)  # warm-up claim
    records = batches = nbytes = 0
    t0 = time.perf_counter()
    while True:
        data = read(a.path, buf)
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
