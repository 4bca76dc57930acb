"""A small Llama-style model trained through zephon.torchtitan.ZephonDataLoader, for
test_torchtitan_training.py (torchrun, gloo, CPU).

Processes form DP x TP: rank = dp_rank * TP + tp_rank, so the TP peers of a DP rank share
its data (the loader is built with that dp_rank, as TorchTitan's trainer builds it from
the "batch" mesh). The model is replicated (the TP peers stand for a sharded model: they
read the same batches and compute the same loss); gradients of the global mean loss are
all-reduced over the DP group of each TP rank. The model, the optimizer and the loader's
state are saved together with torch.distributed.checkpoint, as TorchTitan's checkpointer
does (the loader under "dataloader").

usage: titan_train.py --mount MP --tp T --seq L --micro M --to N --records DIR
                      [--save-at S --ckpt DIR] [--load DIR] [--hang-after T]
  --save-at S     after step S - 1 save model + optimizer + loader + step to --ckpt
  --load DIR      start from a saved checkpoint (its step, its loader position)
  --hang-after T  after logging step T, wait to be killed
Each rank appends JSON lines to DIR/rank-R.jsonl: step, dp_rank, tp_rank, the windows of
the step (inputs + last label), the global loss of the step.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torchtitan.components.loss import IGNORE_INDEX

from titan_helpers import rows, trainer_kwargs, windows_of
from zephon.torchtitan import ZephonDataLoader

VOCAB, DIM, HEADS, LAYERS, EOD = 64, 32, 2, 2, 0
DT = torch.float64


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(d, dtype=DT))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


def rope(x, positions):
    """Rotary embedding of x [b, h, n, d] at positions [b, n]."""
    d = x.shape[-1]
    freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=DT) / d))
    ang = positions[:, None, :, None].to(DT) * freq            # [b, 1, n, d/2]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(DIM), RMSNorm(DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM, bias=False, dtype=DT)
        self.o = torch.nn.Linear(DIM, DIM, bias=False, dtype=DT)
        self.w1 = torch.nn.Linear(DIM, 2 * DIM, bias=False, dtype=DT)
        self.w3 = torch.nn.Linear(DIM, 2 * DIM, bias=False, dtype=DT)
        self.w2 = torch.nn.Linear(2 * DIM, DIM, bias=False, dtype=DT)

    def forward(self, x, positions, mask):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        q, k = rope(q, positions), rope(k, positions)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o(att.transpose(1, 2).reshape(b, n, DIM))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class TinyLlama(torch.nn.Module):
    """Embedding, LAYERS blocks (RMSNorm, RoPE attention, SwiGLU), RMSNorm, output."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM, dtype=DT)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.out = torch.nn.Linear(DIM, VOCAB, bias=False, dtype=DT)

    def forward(self, tokens, positions):
        # block-causal: a token sees the earlier tokens of its own document, where a
        # document starts wherever positions return to 0
        doc = torch.cumsum(positions == 0, dim=1)
        n = tokens.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        mask = (doc[:, :, None] == doc[:, None, :]) & causal
        x = self.emb(tokens)
        for blk in self.blocks:
            x = blk(x, positions, mask[:, None])
        return self.out(self.norm(x))


class TrainState(Stateful):
    """Model + optimizer, keyed by parameter names (torch.distributed.checkpoint.state_dict)."""

    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def state_dict(self):
        m, o = get_state_dict(self.model, self.opt)
        return {'model': m, 'optim': o}

    def load_state_dict(self, sd):
        set_state_dict(self.model, self.opt, model_state_dict=sd['model'],
                       optim_state_dict=sd['optim'])


def main():
    ap = argparse.ArgumentParser()
    for a in ('--mount', '--records', '--ckpt', '--load'):
        ap.add_argument(a)
    for a in ('--tp', '--seq', '--micro', '--to'):
        ap.add_argument(a, type=int, required=True)
    ap.add_argument('--save-at', type=int)
    ap.add_argument('--hang-after', type=int)
    a = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world % a.tp == 0
    dp, dp_rank, tp_rank = world // a.tp, rank // a.tp, rank % a.tp
    dp_group = None
    for t in range(a.tp):                       # every process creates every group
        g = dist.new_group([d * a.tp + t for d in range(dp)])
        if t == tp_rank:
            dp_group = g

    dl = ZephonDataLoader.Config(mount=a.mount, eod_token=EOD).build(
        dp_world_size=dp, dp_rank=dp_rank, tokenizer=None, **trainer_kwargs(a.seq, a.micro))
    b = dl.loader.global_batch
    micros = b // dp // a.micro

    torch.manual_seed(0)
    model = TinyLlama()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    train = TrainState(model, opt)
    progress = {'step': 0}
    if a.load:
        dcp.load({'train': train, 'dataloader': dl, 'progress': progress}, checkpoint_id=a.load)
    start = progress['step']

    log = open(os.path.join(a.records, 'rank-%d.jsonl' % rank), 'a')
    it = iter(dl)
    for t in range(start, a.to):
        opt.zero_grad()
        loss_sum = torch.zeros(1, dtype=DT)
        count = torch.zeros(1, dtype=DT)
        windows = []
        for _ in range(micros):
            # main's 1-D batches as rows: the samples one after the other, positions
            # restarting at each, so the same attention as 0.3.0's [micro, seq]
            batch = next(it)
            x, positions, labels = rows(batch, a.seq)
            logits = model(x % VOCAB, positions)
            lab = torch.where(labels == IGNORE_INDEX, labels, labels % VOCAB)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), lab.reshape(-1),
                                   ignore_index=IGNORE_INDEX, reduction='sum')
            # the gradient of the global mean loss: every rank divides by the global count
            (loss / (b * a.seq)).backward()
            loss_sum += loss.detach()
            count += (labels != IGNORE_INDEX).sum()
            windows += windows_of(batch, a.seq, EOD).tolist()
        for p in model.parameters():
            dist.all_reduce(p.grad, group=dp_group)
        dist.all_reduce(loss_sum, group=dp_group)
        dist.all_reduce(count, group=dp_group)
        opt.step()
        global_loss = (loss_sum / count).item()
        assert math.isfinite(global_loss)
        log.write(json.dumps({'step': t, 'dp_rank': dp_rank, 'tp_rank': tp_rank,
                              'windows': windows, 'loss': global_loss}) + '\n')
        log.flush()
        if a.save_at is not None and t + 1 == a.save_at:
            progress['step'] = t + 1
            dcp.save({'train': train, 'dataloader': dl, 'progress': progress},
                     checkpoint_id=a.ckpt)
        if a.hang_after is not None and t == a.hang_after:
            with open(os.path.join(a.records, 'hung-%d' % rank), 'w'):
                pass
            # The test kills the job with -9. A worker in a session of its own (torchrun 2.x)
            # outlives that: it exits once its torchrun is gone, not never.
            parent = os.getppid()
            while os.getppid() == parent:
                time.sleep(0.2)
            os._exit(1)
    log.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
