"""Data-parallel training from a Zephon mount: a template to start from.

One torchrun worker per rank. Worker $RANK of $WORLD_SIZE reads its micro-batches from
$ZEPHON_MOUNT/rank/$RANK/next: every open() of that file hands out the rank's next
micro-batch of the global order, and the mount journals it. A token dataset is served in
the `npy` format, so np.load() of `next` gives an (m, L) array: m samples of L tokens.

The loop accumulates gradients over the A = global_batch / (world_size * micro_batch)
micro-batches of a step, then DistributedDataParallel averages them over the ranks: each
step trains on exactly one global batch, whatever the world size. Every --save-every
steps rank 0 saves the model and writes "checkpoint STEP" to $ZEPHON_MOUNT/control: the
next mount (resume=auto, the default) then starts at that step, and this script, started
again with the same --ckpt, loads the model saved there. The world size, micro-batch and
global batch may change between the two runs; the samples of every step stay the same.

usage (see examples/README.md):
  ZEPHON_MOUNT=/mnt/z torchrun --nproc_per_node=W examples/train_torchrun.py \\
      --steps 100 --ckpt /path/model.pt [--save-every 10] [--vocab V]

Runs on CPU with the gloo backend (Debian 12's python3-torch 1.13 is enough); with CUDA
it uses nccl and one GPU per local rank.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


class TinyLM(torch.nn.Module):
    """A next-token predictor small enough for a CPU; put your model here."""

    def __init__(self, vocab, dim):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, x):
        return self.out(torch.tanh(self.emb(x)))


def read_json(path):
    with open(path) as f:
        return json.load(f)


def fail(msg):
    print('train_torchrun: ' + msg, file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--steps', type=int, required=True,
                    help='optimizer steps to train in this run')
    ap.add_argument('--ckpt', required=True,
                    help='model checkpoint: loaded at the start when it exists, saved to')
    ap.add_argument('--save-every', type=int, default=10, metavar='N',
                    help='save the model and mark the journal every N steps (default 10)')
    ap.add_argument('--vocab', type=int, default=50304,
                    help='vocabulary size: every token must be below it (default 50304, GPT-2)')
    ap.add_argument('--dim', type=int, default=64)
    ap.add_argument('--lr', type=float, default=0.1)
    a = ap.parse_args()

    mount = os.environ.get('ZEPHON_MOUNT')
    if not mount or not os.path.isfile(os.path.join(mount, 'status')):
        fail('ZEPHON_MOUNT (%s) is not a Zephon mount; set it to the mount point' % mount)

    cuda = torch.cuda.is_available()
    dist.init_process_group('nccl' if cuda else 'gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device('cuda', int(os.environ.get('LOCAL_RANK', 0))) if cuda else torch.device('cpu')
    if cuda:
        torch.cuda.set_device(device)

    # The mount says how the stream is cut: its layout must be this job's.
    status = read_json(os.path.join(mount, 'status'))
    if status['world_size'] != world:
        fail('the mount serves world_size %d but torchrun started %d workers; mount with '
             '-o world_size=%d' % (status['world_size'], world, world))
    global_batch, micro_batch = status['global_batch'], status['micro_batch']
    micros = global_batch // world // micro_batch          # A: micro-batches per step
    start = status['start_step']                           # where the stream resumes

    torch.manual_seed(0)                                   # the same initial model on every rank
    model = TinyLM(a.vocab, a.dim).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    if os.path.exists(a.ckpt):
        saved = torch.load(a.ckpt, map_location=device)
        if saved['step'] != start:
            fail('%s holds the model after step %d but the mount starts at step %d: remount '
                 'with -o resume=step:%d, or use another --ckpt' % (
                     a.ckpt, saved['step'] - 1, start, saved['step']))
        model.load_state_dict(saved['model'])
        opt.load_state_dict(saved['opt'])
    elif start != 0 and rank == 0:
        print('train_torchrun: no checkpoint at %s: a new model starts at step %d' % (a.ckpt, start))
    ddp = DistributedDataParallel(model)

    nxt = os.path.join(mount, 'rank', str(rank), 'next')
    for step in range(start, start + a.steps):
        opt.zero_grad()
        loss_sum = torch.zeros((), device=device)
        for k in range(micros):
            # One open of `next` is one claim: read it whole, from one process per rank
            # (DataLoader workers would reorder the batches; see docs/mounting.md, "Reading rules").
            tokens = np.load(nxt)                          # (micro_batch, L)
            if tokens.max() >= a.vocab:
                fail('token %d is not below --vocab %d' % (tokens.max(), a.vocab))
            # torch 1.13 refuses uint16 arrays: widen first
            x = torch.from_numpy(tokens.astype(np.int64)).to(device)
            logits = ddp(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, a.vocab), x[:, 1:].reshape(-1))
            # DDP averages gradients over ranks at the last micro-batch's backward; skip
            # that all-reduce for the others. Dividing by A makes the result the gradient
            # of the mean loss over the whole global batch.
            if k < micros - 1:
                with ddp.no_sync():
                    (loss / micros).backward()
            else:
                (loss / micros).backward()
            loss_sum += loss.detach()
        opt.step()
        dist.all_reduce(loss_sum)
        if rank == 0:
            print('step %d loss %.4f' % (step, loss_sum.item() / (micros * world)), flush=True)

        done = step + 1                                    # the model now holds steps < done
        if done % a.save_every == 0 or done == start + a.steps:
            if rank == 0:
                tmp = a.ckpt + '.tmp'
                torch.save({'model': model.state_dict(), 'opt': opt.state_dict(), 'step': done}, tmp)
                os.replace(tmp, a.ckpt)                    # never a half-written checkpoint
                # Only now tell the journal: a restart resumes where a saved model is.
                with open(os.path.join(mount, 'control'), 'w') as f:
                    f.write('checkpoint %d\n' % done)
            dist.barrier()

    dist.destroy_process_group()


if __name__ == '__main__':
    main()
