#!/usr/bin/python3
"""Baseline of benchmark B2: what a user would run instead of Zephon for JSONL records.

A PyTorch map-style Dataset over one uncompressed JSONL file (an in-memory numpy index of
line offsets built by one scan; each item is os.pread of one line, without its '\\n'),
sampled by DistributedSampler (shuffle, seed 0, one replica) and batched by DataLoader
(batch_size 256, num_workers as given). The batch is the list of the records' bytes:
the same thing Zephon's lines encoding hands over, so neither side parses JSON.

Records/s are counted from the first batch received (worker start-up excluded, as the
mount is already up for Zephon) for --seconds of wall time, over as many epochs as fit.
Prints one JSON object. Run with /usr/bin/python3 (Debian's python3-torch).

usage: dataloader_baseline.py FILE.jsonl [--workers 0] [--batch 256] [--seconds 5]
"""
import argparse
import json
import os
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler


def line_index(path):
    """(offsets, lengths) of every non-empty line, as int64 arrays."""
    data = np.fromfile(path, dtype=np.uint8)
    ends = np.flatnonzero(data == 10)
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts
    keep = lengths > 0
    return starts[keep].astype(np.int64), lengths[keep].astype(np.int64)


class JsonlRecords(Dataset):
    def __init__(self, path):
        self.path = path
        self.offsets, self.lengths = line_index(path)
        self.fd = None  # opened lazily in each worker process

    def __len__(self):
        return len(self.offsets)

    def __getitem__(self, i):
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY)
        return os.pread(self.fd, int(self.lengths[i]), int(self.offsets[i]))


def as_list(batch):
    return batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('file')
    ap.add_argument('--workers', type=int, default=0)
    ap.add_argument('--batch', type=int, default=256)
    ap.add_argument('--seconds', type=float, default=5.0)
    a = ap.parse_args()

    torch.set_num_threads(1)
    ds = JsonlRecords(a.file)
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=0)
    dl = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers,
                    collate_fn=as_list, persistent_workers=a.workers > 0)
    records = batches = 0
    t0 = None
    epoch = 0
    done = False
    while not done:
        sampler.set_epoch(epoch)
        for batch in dl:
            if t0 is None:  # clock starts at the first batch
                t0 = time.perf_counter()
                continue
            records += len(batch)
            batches += 1
            if time.perf_counter() - t0 >= a.seconds:
                done = True
                break
        epoch += 1
    secs = time.perf_counter() - t0
    print(json.dumps({'workers': a.workers, 'batch': a.batch, 'records': records,
                      'batches': batches, 'seconds': secs, 'epochs': epoch,
                      'records_per_s': records / secs, 'dataset_records': len(ds)}))


if __name__ == '__main__':
    main()
