"""One gloo process of test_loader.py's elastic test (RANK, WORLD_SIZE, MASTER_* set).

usage: dcp_worker.py save MOUNT CKPT STEPS OUT   take STEPS steps, then save the loader's
                                                 state with torch.distributed.checkpoint
       dcp_worker.py load MOUNT CKPT STEPS OUT   load it (the DP degree is WORLD_SIZE),
                                                 then take STEPS steps
Each writes the token windows it took, in order, to OUT/rank-RANK.npy ([n, window]).
"""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from zephon.torch import ZephonLoader


def main():
    mode, mount, ckpt, steps, out = sys.argv[1:6]
    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = ZephonLoader(mount, dp_rank=rank, dp_world_size=world)
    if mode == 'load':
        dcp.load({'dataloader': loader}, checkpoint_id=ckpt)
    micros = loader.global_batch // world // loader.micro_batch
    taken = [next(loader) for _ in range(int(steps) * micros)]
    if mode == 'save':
        dcp.save({'dataloader': loader}, checkpoint_id=ckpt)
        next(loader)       # training goes on: the next batch records the saved position
    os.makedirs(out, exist_ok=True)
    np.save(os.path.join(out, 'rank-%d.npy' % rank), torch.cat(taken).numpy())
    dist.barrier()
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
