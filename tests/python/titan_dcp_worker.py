"""A torchrun worker (gloo, CPU) of test_torchtitan_elastic.py: one data-parallel rank
reading a Zephon mount through zephon.torchtitan.ZephonDataLoader, built as the installed
TorchTitan's trainer builds its data loader (0.3.0 or git main), checkpointed with
torch.distributed.checkpoint under the trainer's key "dataloader"; and the same with
TorchTitan's own loader of that version: 0.3.0's ParallelAwareDataloader, main's
GrainDataLoader.

usage: titan_dcp_worker.py --mount MP --seq L --micro M --steps N --out DIR
                           [--load CKPT] [--save CKPT] [--titan-save CKPT] [--titan-load CKPT]
  --load CKPT        dcp.load the Zephon loader's state before reading
  --save CKPT        dcp.save it after N steps
  --titan-save CKPT  also run TorchTitan's loader for N steps and dcp.save it
  --titan-load CKPT  build TorchTitan's loader at this DP degree and dcp.load CKPT into it;
                     record what it raises
Writes DIR/rank-R.json: {"steps": [[window tokens of each sample of step t, in order]],
"titan_error": "..." or null}.
"""
import argparse
import json
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset

from titan_helpers import FLAT, trainer_kwargs, windows_of
from zephon.torchtitan import ZephonDataLoader


class RankShard(IterableDataset, Stateful):
    """Sample ids dp_rank, dp_rank + W, ...: a stand-in dataset of one DP rank, with the
    state (its index) TorchTitan's datasets keep."""

    def __init__(self, dp_rank, dp_world_size):
        self.rank, self.world, self.i = dp_rank, dp_world_size, 0

    def __iter__(self):
        while True:
            yield torch.tensor([self.i * self.world + self.rank])
            self.i += 1

    def state_dict(self):
        return {'i': self.i}

    def load_state_dict(self, state):
        self.i = state['i']


class RankRange:
    """A stand-in dataset config for main's GrainDataLoader (its DatasetConfig protocol):
    sample ids dp_rank, dp_rank + W, ..., each a row of num_tokens_per_batch copies."""

    def build(self, *, context, dataset_iteration_policy):
        import grain.python as grain
        from torchtitan.components.data.dataset import TextSequence
        p, n = dataset_iteration_policy, context.num_tokens_per_batch
        ids = grain.MapDataset.range(1 << 20)[p.dp_rank::p.dp_world_size]
        return ids.map(lambda i: TextSequence(input_ids=np.full(n, i), labels=np.full(n, i)))


def titan_loader(rank, world, micro, seq):
    """TorchTitan's own loader of the installed version, for one DP rank."""
    if FLAT:
        from torchtitan.components.data.loader import GrainDataLoader
        return GrainDataLoader.Config(dataset=RankRange(), shuffle=False).build(
            dp_world_size=world, dp_rank=rank, tokenizer=None, **trainer_kwargs(seq, micro))
    from torchtitan.components.dataloader import ParallelAwareDataloader
    return ParallelAwareDataloader(RankShard(rank, world), dp_rank=rank, dp_world_size=world,
                                   batch_size=micro)


def main():
    ap = argparse.ArgumentParser()
    for a in ('--mount', '--out', '--load', '--save', '--titan-save', '--titan-load'):
        ap.add_argument(a)
    for a in ('--seq', '--micro', '--steps'):
        ap.add_argument(a, type=int, required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()

    # as torchtitan/trainer.py builds the data loader
    dl = ZephonDataLoader.Config(mount=a.mount).build(
        dp_world_size=world, dp_rank=rank, tokenizer=None, **trainer_kwargs(a.seq, a.micro))
    if a.load:
        dcp.load({'dataloader': dl}, checkpoint_id=a.load)
    per_step = dl.loader.global_batch // world // a.micro
    it = iter(dl)
    steps = []
    for _ in range(a.steps):
        rows = []
        for _ in range(per_step):
            batch = next(it)
            x = batch[0]['input']
            assert x.shape == ((a.micro * a.seq,) if FLAT else (a.micro, a.seq))
            assert x.dtype == torch.int64
            rows += windows_of(batch, a.seq).tolist()   # the stored windows
        steps.append(rows)
    if a.save:
        dcp.save({'dataloader': dl}, checkpoint_id=a.save)

    titan_error = None
    if a.titan_save:
        tdl = titan_loader(rank, world, a.micro, a.seq)
        tit = iter(tdl)
        for _ in range(a.steps * per_step):
            next(tit)
        dcp.save({'dataloader': tdl}, checkpoint_id=a.titan_save)
        getattr(tdl, 'close', lambda: None)()      # main's: its prefetch thread
    if a.titan_load:
        tdl = titan_loader(rank, world, a.micro, a.seq)
        try:
            dcp.load({'dataloader': tdl}, checkpoint_id=a.titan_load)
        except BaseException as e:          # 0.3.0: AssertionError; main: ValueError
            titan_error = '%s: %s' % (type(e).__name__, e)
        getattr(tdl, 'close', lambda: None)()

    with open(os.path.join(a.out, 'rank-%d.json' % rank), 'w') as f:
        json.dump({'steps': steps, 'titan_error': titan_error}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
