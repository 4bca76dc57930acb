"""A tiny data-parallel training job on a Zephon mount, for tests/fuse/test_training.py.

Started by torchrun (gloo, CPU): each worker is rank $RANK of $WORLD_SIZE and reads its
micro-batches from $ZEPHON_MOUNT/rank/$RANK/next (npy, shape (m, L) tokens). The model is a
next-token predictor, embedding + linear in float64 with a fixed initialisation; gradients
of the global mean loss are all-reduced, so every world size computes the same steps.

usage: train.py --log DIR --to T [--save-at S --ckpt PATH] [--load PATH] [--hang-after T]
  --to T          train until step T (exclusive)
  --save-at S     after step S-1, rank 0 saves model + optimizer to PATH and writes
                  "checkpoint S" to /control (the saved state contains every step below S)
  --load PATH     start from a saved state; its step must be the mount's start_step
  --hang-after T  after logging step T, stop and wait to be killed
Each rank appends JSON lines to DIR/rank-R.jsonl: step, micro, the claim's sample ids
(from rank/R/state), the raw token bytes (hex) and, once per step, the global loss.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

VOCAB = 512          # tokens are taken modulo VOCAB: a tiny output layer
DIM = 16


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM, dtype=torch.float64)
        self.out = torch.nn.Linear(DIM, VOCAB, dtype=torch.float64)

    def forward(self, x):
        return self.out(torch.tanh(self.emb(x)))


def read_json(path):
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--log', required=True)
    ap.add_argument('--to', type=int, required=True)
    ap.add_argument('--save-at', type=int)
    ap.add_argument('--ckpt')
    ap.add_argument('--load')
    ap.add_argument('--hang-after', type=int)
    a = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    mp = os.environ['ZEPHON_MOUNT']
    st = read_json(os.path.join(mp, 'status'))
    assert st['world_size'] == world, (st['world_size'], world)
    b, m = st['global_batch'], st['micro_batch']
    micros = b // world // m

    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    start = st['start_step']
    if a.load:
        state = torch.load(a.load)
        model.load_state_dict(state['model'])
        opt.load_state_dict(state['opt'])
        assert state['step'] == start, ('checkpoint of step', state['step'], 'mount starts at', start)

    log = open(os.path.join(a.log, 'rank-%d.jsonl' % rank), 'a')
    nxt = os.path.join(mp, 'rank', str(rank), 'next')
    state_path = os.path.join(mp, 'rank', str(rank), 'state')
    for t in range(start, a.to):
        opt.zero_grad()
        loss_sum = torch.zeros(1, dtype=torch.float64)
        records = []
        for k in range(micros):
            tokens = np.load(nxt)                     # one open: one claim
            last = read_json(state_path)['last']
            assert (last['step'], last['micro']) == (t, k), (last, t, k)
            x = torch.from_numpy(tokens.astype(np.int64)) % VOCAB
            logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1),
                                   reduction='sum')
            # the gradient of the global mean loss: every rank divides by the global count
            (loss / (b * (x.shape[1] - 1))).backward()
            loss_sum += loss.detach()
            records.append(dict(step=t, micro=k, samples=last['samples'],
                                tokens=tokens.astype('<u2').tobytes().hex()))
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
        opt.step()
        global_loss = loss_sum.item() / (b * (x.shape[1] - 1))
        for r in records:
            r['loss'] = global_loss
            log.write(json.dumps(r) + '\n')
        log.flush()
        if a.save_at is not None and t + 1 == a.save_at:
            if rank == 0:
                tmp = a.ckpt + '.tmp'
                torch.save({'model': model.state_dict(), 'opt': opt.state_dict(),
                            'step': t + 1}, tmp)
                os.replace(tmp, a.ckpt)
                with open(os.path.join(mp, 'control'), 'w') as f:
                    f.write('checkpoint %d\n' % (t + 1))
            dist.barrier()
        if a.hang_after is not None and t == a.hang_after:
            with open(os.path.join(a.log, 'hung-%d' % rank), 'w'):
                pass
            # The test kills the job with -9. A worker in a session of its own (torchrun 2.x)
            # outlives that: it exits once its torchrun is gone, not never.
            parent = os.getppid()
            while os.getppid() == parent:
                time.sleep(0.2)
            os._exit(1)
    log.close()
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
