"""A torchrun worker (gloo, CPU) of test_torchtitan_elastic.py: one data-parallel rank
reading a Zephon mount through zephon.torchtitan.ZephonDataLoader, built as TorchTitan
0.3.0's trainer builds its data loader, checkpointed with torch.distributed.checkpoint
under the trainer's key "dataloader"; and the same with TorchTitan's own
ParallelAwareDataloader.

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

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset
from torchtitan.components.dataloader import ParallelAwareDataloader

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

    # as torchtitan/trainer.py (0.3.0) builds the data loader
    dl = ZephonDataLoader.Config(mount=a.mount).build(
        dp_world_size=world, dp_rank=rank, tokenizer=None, seq_len=a.seq,
        local_batch_size=a.micro, snapshot_every_n_steps=None)
    if a.load:
        dcp.load({'dataloader': dl}, checkpoint_id=a.load)
    per_step = dl.loader.global_batch // world // a.micro
    it = iter(dl)
    steps = []
    for _ in range(a.steps):
        rows = []
        for _ in range(per_step):
            inp, labels = next(it)
            x = inp['input']
            assert x.shape == (a.micro, a.seq) and x.dtype == torch.int64
            assert torch.equal(x[:, 1:], labels[:, :-1])
            rows += torch.cat([x, labels[:, -1:]], 1).tolist()   # the stored window
        steps.append(rows)
    if a.save:
        dcp.save({'dataloader': dl}, checkpoint_id=a.save)

    titan_error = None
    if a.titan_save:
        tdl = ParallelAwareDataloader(RankShard(rank, world), dp_rank=rank,
                                      dp_world_size=world, batch_size=a.micro)
        tit = iter(tdl)
        for _ in range(a.steps * per_step):
            next(tit)
        dcp.save({'dataloader': tdl}, checkpoint_id=a.titan_save)
    if a.titan_load:
        tdl = ParallelAwareDataloader(RankShard(rank, world), dp_rank=rank,
                                      dp_world_size=world, batch_size=a.micro)
        try:
            dcp.load({'dataloader': tdl}, checkpoint_id=a.titan_load)
        except BaseException as e:          # AssertionError is what it raises
            titan_error = '%s: %s' % (type(e).__name__, e)

    with open(os.path.join(a.out, 'rank-%d.json' % rank), 'w') as f:
        json.dump({'steps': steps, 'titan_error': titan_error}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
