"""The loaders compared in tests/bench/peers: one class per system, same shape for all.

Each system's token loader yields int64 tensors [micro_batch, window] of one data-parallel
rank, each text loader lists of record bytes. ``make_tokens(work, rank, world, mb, ...)``
returns an iterator; ``prepare_*`` converts the shared inputs into the system's format
(once, timed by the driver). Each loader is configured as its documentation recommends; where
a knob has no recommendation for this machine (workers on 2 CPUs), the driver measures the
variants and keeps the best.
"""
from __future__ import annotations

import glob
import io
import json
import os
import subprocess
import sys

import numpy as np
import torch

WINDOW = 2049


def _memmap(path, window):
    data = np.memmap(path, dtype=np.uint16, mode="r")
    return data[: (len(data) // window) * window].reshape(-1, window)


class WindowSource:
    """Map-style view of a uint16 token file as windows (used by torchdata, Grain)."""

    def __init__(self, path, window=WINDOW):
        self.path, self.window = path, window
        self._arr = None
        self._n = os.path.getsize(path) // 2 // window

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        if self._arr is None:             # opened lazily: one mapping per worker process
            self._arr = _memmap(self.path, self.window)
        return np.array(self._arr[int(i)])

    def __getstate__(self):
        return {"path": self.path, "window": self.window, "_arr": None, "_n": self._n}

    def __repr__(self):           # Grain checks a restored state's source by its repr
        return f"WindowSource({self.path!r}, {self.window})"


def collate_int64(rows):
    return torch.from_numpy(np.stack(rows).astype(np.int64))


# ---------------------------------------------------------------- nanoGPT floor

def nanogpt_tokens(path, rank, world, mb, seed=1337, window=WINDOW):
    """nanoGPT's get_batch(): a fresh np.memmap per batch, mb random offsets, stack."""
    g = torch.Generator().manual_seed(seed + rank)
    n = os.path.getsize(path) // 2
    while True:
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(n - window, (mb,), generator=g)
        yield torch.stack([torch.from_numpy(data[i:i + window].astype(np.int64)) for i in ix])


# ---------------------------------------------------------------- Zephon

def zephon_loader_tokens(mount, rank, world, mb):
    from zephon.torch import ZephonLoader
    return iter(ZephonLoader(mount, dp_rank=rank, dp_world_size=world, micro_batch=mb))


def zephon_next_tokens(mount, rank, world, mb):
    """Plain file reads: np.load of rank/<r>/next (format npy), as the README shows."""
    path = os.path.join(mount, "rank", str(rank), "next")
    while True:
        yield torch.from_numpy(np.load(path).astype(np.int64))


def zephon_next_lines(mount, rank, world, mb):
    path = os.path.join(mount, "rank", str(rank), "next")
    while True:
        with open(path, "rb", buffering=0) as f:
            data = f.read()
        yield data.split(b"\n")[:-1]


# ---------------------------------------------------------------- torchdata

def torchdata_loader(ds, rank, world, mb, workers, seed=1, collate=collate_int64, **kw):
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler
    sampler = StatefulDistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True,
                                         seed=seed, drop_last=True)
    extra = dict(prefetch_factor=2, persistent_workers=True) if workers else {}
    return StatefulDataLoader(ds, batch_size=mb, sampler=sampler, num_workers=workers,
                              collate_fn=collate, drop_last=True, **extra, **kw)


def endless(loader):
    """Epoch after epoch (set_epoch reshuffles), as a training loop does."""
    epoch = 0
    while True:
        yield from loader
        epoch += 1
        loader.sampler.set_epoch(epoch)


def torchdata_tokens(path, rank, world, mb, workers=0):
    return endless(torchdata_loader(WindowSource(path), rank, world, mb, workers))


class JsonlSource:
    """JSONL records by byte offset (an offsets index built once, os.pread per record):
    what a map-style PyTorch dataset over raw JSONL does."""

    def __init__(self, path, offsets_path):
        self.path = path
        self.off = np.load(offsets_path)
        self._fd = None

    def __len__(self):
        return len(self.off) - 1

    def __getitem__(self, i):
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        a, b = int(self.off[i]), int(self.off[i + 1])
        return os.pread(self._fd, b - a - 1, a)

    def __getstate__(self):
        return {"path": self.path, "off": self.off, "_fd": None}


def list_collate(rows):
    return list(rows)


def torchdata_lines(work, rank, world, mb, workers=0):
    src = JsonlSource(os.path.join(work, "text.jsonl"), os.path.join(work, "text-offsets.npy"))
    return endless(torchdata_loader(src, rank, world, mb, workers, collate=list_collate))


# ---------------------------------------------------------------- TorchTitan 0.3.0

class TitanTokenWindows(torch.utils.data.IterableDataset):
    """The token file as TorchTitan's own datasets hand it over: rank r's windows in order
    (HuggingFaceTextDataset splits by node and shuffles no earlier than epoch 1), with the
    Stateful interface its ParallelAwareDataloader checkpoints."""

    def __init__(self, path, rank, world, window=WINDOW):
        self.path, self.rank, self.world, self.window = path, rank, world, window
        self._idx = 0

    def __iter__(self):
        arr = _memmap(self.path, self.window)
        n = len(arr)
        while True:
            i = self.rank + self._idx * self.world
            if i >= n:
                self._idx = 0
                i = self.rank
            self._idx += 1
            yield np.array(arr[i])

    def state_dict(self):
        return {"idx": self._idx}

    def load_state_dict(self, s):
        self._idx = s["idx"]


def titan_tokens(path, rank, world, mb, workers=0):
    from torchtitan.components.dataloader import ParallelAwareDataloader
    ds = TitanTokenWindows(path, rank, world)
    kw = dict(num_workers=workers, batch_size=mb, collate_fn=collate_int64)
    if workers:
        kw.update(prefetch_factor=2, persistent_workers=True)
    return iter(ParallelAwareDataloader(ds, dp_rank=rank, dp_world_size=world, **kw))


class IdTokenizer:
    """Stand-in for a tokenizer (the benchmark measures loading, not tokenization): a
    document's text is its id; encode gives [bos, id, eos]."""

    def __init__(self, const=False):
        self.const = const

    def encode(self, text, add_bos=True, add_eos=True):
        t = [7] if self.const else [int(text)]
        return ([1] if add_bos else []) + t + ([2] if add_eos else [])

    def decode(self, ids):
        return " ".join(map(str, ids))

    def get_vocab_size(self):
        return 1 << 20


def titan_hf_dataset(data_dir, rank, world, tokenizer, seq_len=2):
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset
    return HuggingFaceTextDataset("c4_test", data_dir, tokenizer, seq_len=seq_len,
                                  dp_rank=rank, dp_world_size=world, infinite=False)


def titan_hf_loader(data_dir, rank, world, mb, tokenizer, workers=0):
    from torchtitan.components.dataloader import ParallelAwareDataloader
    ds = titan_hf_dataset(data_dir, rank, world, tokenizer)
    return ParallelAwareDataloader(ds, dp_rank=rank, dp_world_size=world, batch_size=mb,
                                   num_workers=workers)


# ---------------------------------------------------------------- Grain

def grain_loader(source, rank, world, mb, workers, seed=1, num_epochs=None):
    import grain.python as gp
    sampler = gp.IndexSampler(len(source), shard_options=gp.ShardOptions(rank, world, drop_remainder=True),
                              shuffle=True, num_epochs=num_epochs, seed=seed)
    return gp.DataLoader(data_source=source, sampler=sampler,
                         operations=[gp.Batch(mb, drop_remainder=True)], worker_count=workers)


def grain_tokens(path, rank, world, mb, workers=0):
    for b in iter(grain_loader(WindowSource(path), rank, world, mb, workers)):
        yield torch.from_numpy(b.astype(np.int64))


class ArrayRecordSource:
    def __init__(self, paths):
        import grain.python as gp
        self._src = gp.ArrayRecordDataSource(paths)

    def __len__(self):
        return len(self._src)

    def __getitem__(self, i):
        return self._src[i]


def grain_lines(work, rank, world, mb, workers=0):
    import grain.python as gp
    src = gp.ArrayRecordDataSource(sorted(glob.glob(os.path.join(work, "text-ar", "*.array_record"))))
    sampler = gp.IndexSampler(len(src), shard_options=gp.ShardOptions(rank, world, drop_remainder=True),
                              shuffle=True, num_epochs=None, seed=1)
    loader = gp.DataLoader(data_source=src, sampler=sampler,
                           operations=[gp.Batch(mb, drop_remainder=True, batch_fn=list)],
                           worker_count=workers)
    return iter(loader)


# ---------------------------------------------------------------- MosaicML Streaming

def streaming_env(rank, world):
    """Streaming learns ranks from the environment (one process per rank on one node)."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), NODE_RANK="0", MASTER_ADDR="127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")


def streaming_loader(local, rank, world, mb, workers, seed=1, **kw):
    streaming_env(rank, world)
    collate = kw.pop("collate", None) or _stream_collate
    from streaming import StreamingDataset, StreamingDataLoader
    ds = StreamingDataset(local=local, remote=None, batch_size=mb, shuffle=True,
                          shuffle_seed=seed, num_canonical_nodes=1, **kw)
    extra = dict(prefetch_factor=2, persistent_workers=True) if workers else {}
    return StreamingDataLoader(ds, batch_size=mb, num_workers=workers, drop_last=True,
                               collate_fn=collate, **extra)


def _stream_collate(rows):
    return torch.from_numpy(np.stack([r["tokens"] for r in rows]).astype(np.int64))


def streaming_tokens(local, rank, world, mb, workers=0):
    loader = streaming_loader(local, rank, world, mb, workers)
    while True:                 # each pass is the next epoch
        yield from loader


def _stream_text_collate(rows):
    return [r["text"] for r in rows]


def streaming_lines(local, rank, world, mb, workers=0):
    streaming_env(rank, world)
    from streaming import StreamingDataset, StreamingDataLoader
    ds = StreamingDataset(local=local, remote=None, batch_size=mb, shuffle=True, shuffle_seed=1,
                          num_canonical_nodes=1)
    extra = dict(prefetch_factor=2, persistent_workers=True) if workers else {}
    loader = StreamingDataLoader(ds, batch_size=mb, num_workers=workers, drop_last=True,
                                 collate_fn=_stream_text_collate, **extra)
    while True:
        yield from loader


# ---------------------------------------------------------------- WebDataset

def _wds_pipeline(urls, rank, world, mb, key, seed=1):
    import webdataset as wds
    split = lambda src: (u for i, u in enumerate(src) if i % world == rank)   # noqa: E731
    ds = (wds.WebDataset(urls, shardshuffle=len(urls), nodesplitter=split, seed=seed,
                         empty_check=False)
          .shuffle(1000, seed=seed))
    return ds, wds


def wds_tokens(shard_dir, rank, world, mb, workers=0):
    urls = sorted(glob.glob(os.path.join(shard_dir, "*.tar")))
    ds, wds = _wds_pipeline(urls, rank, world, mb, "tokens.npy")
    ds = ds.decode().to_tuple("tokens.npy").batched(mb, collation_fn=lambda rows: collate_int64([r[0] for r in rows]))
    loader = wds.WebLoader(ds, batch_size=None, num_workers=workers)
    while True:
        yield from loader


def wds_lines(shard_dir, rank, world, mb, workers=0):
    urls = sorted(glob.glob(os.path.join(shard_dir, "*.tar")))
    ds, wds = _wds_pipeline(urls, rank, world, mb, "json")
    ds = ds.to_tuple("json").batched(mb, collation_fn=lambda rows: [r[0] for r in rows])
    loader = wds.WebLoader(ds, batch_size=None, num_workers=workers)
    while True:
        yield from loader
