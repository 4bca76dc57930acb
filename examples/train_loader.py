"""Data-parallel training with zephon.torch.ZephonLoader: a template to start from.

usage: torchrun --nproc_per_node=N examples/train_loader.py --data DS --work DIR \\
           [--steps 12] [--save-every 4] [--global-batch 12] [--micro-batch 2] [--vocab V]

Every process is a data-parallel (DP) rank of this node (with tensor, pipeline or context
parallelism, use your DP mesh's rank and size instead, and mount the node's DP ranks).
Local rank 0 mounts the dataset DS once for the node (zephon.node_mount) at DIR/mnt with
the journal DIR/journal/node<first rank>.sqlite; every rank reads its micro-batches with
ZephonLoader (pure files: nothing is claimed). Every --save-every steps the model and the
loader are saved with torch.distributed.checkpoint to DIR/ckpt/step-S. Started again with
the same --work, at any N that divides the global batch (with the micro-batch), it resumes
from the latest checkpoint: the loader's state is the position of the global stream, so
every step trains on the same samples as an uninterrupted run. Rank 0 prints
"step S loss L", L the mean over the step's global batch, the same at any N.

A run killed with kill -9 leaves no mount behind: the mount lives while a local rank
that joined it lives (zephon.node_mount's lifecycle).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F

import zephon
from zephon.torch import ZephonLoader, split_inputs_labels


class TinyLM(torch.nn.Module):
    """A next-token predictor small enough for a CPU; put your model here."""

    def __init__(self, vocab: int, dim: int = 32) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.emb(x)))


def latest_checkpoint(ckpt: str) -> int:
    """The step of the newest DIR/ckpt/step-S, 0 when there is none."""
    steps = [int(d[len("step-"):]) for d in os.listdir(ckpt) if d.startswith("step-")] \
        if os.path.isdir(ckpt) else []
    return max(steps, default=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="a packed token dataset (zephon pack)")
    ap.add_argument("--work", required=True, help="the mount, journal and checkpoints")
    ap.add_argument("--steps", type=int, default=12, help="train up to this step")
    ap.add_argument("--save-every", type=int, default=4)
    ap.add_argument("--global-batch", type=int, default=12, help="samples per step")
    ap.add_argument("--micro-batch", type=int, default=2, help="samples per forward")
    ap.add_argument("--vocab", type=int, default=512, help="token ids are below this")
    ap.add_argument("--step-seconds", type=float, default=0.0,
                    help="sleep this long after each step (to watch it, or to kill it)")
    a = ap.parse_args()

    dist.init_process_group("gloo")                # torchrun sets RANK, WORLD_SIZE...
    dp_rank, dp = dist.get_rank(), dist.get_world_size()
    first = dp_rank - int(os.environ["LOCAL_RANK"])
    node_ranks = range(first, first + int(os.environ["LOCAL_WORLD_SIZE"]))
    os.makedirs(os.path.join(a.work, "journal"), exist_ok=True)
    torch.manual_seed(0)                           # the same initial model in every run
    model = torch.nn.parallel.DistributedDataParallel(TinyLM(a.vocab))
    # SGD keeps no state; with Adam save the optimizer too
    # (torch.distributed.checkpoint.state_dict.get_state_dict)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    mnt = os.path.join(a.work, "mnt")
    with zephon.node_mount(a.data, mnt, dp_degree=dp, dp_ranks=node_ranks,
                           global_batch=a.global_batch, seed=1,
                           journal=os.path.join(a.work, "journal", f"node{first}.sqlite")):
        loader = ZephonLoader(mnt, dp_rank=dp_rank, dp_world_size=dp,
                              micro_batch=a.micro_batch)
        state = {"model": model, "dataloader": loader}
        start = latest_checkpoint(os.path.join(a.work, "ckpt"))
        if start:
            dcp.load(state, checkpoint_id=os.path.join(a.work, "ckpt", f"step-{start}"))
            if dp_rank == 0:
                print(f"resumed from step {start} at DP {dp}", flush=True)
        accum = a.global_batch // dp // loader.micro_batch
        for step in range(start, a.steps):
            total = torch.zeros(())
            for _ in range(accum):
                inputs, labels = split_inputs_labels(next(loader))
                loss = F.cross_entropy(model(inputs).flatten(0, 1), labels.flatten()) / accum
                loss.backward()
                total += loss.detach()
            opt.step()
            opt.zero_grad()
            dist.all_reduce(total)                 # the global batch's mean loss
            if dp_rank == 0:
                print(f"step {step} loss {total.item() / dp:.9g}", flush=True)
            if (step + 1) % a.save_every == 0:
                dcp.save(state, checkpoint_id=os.path.join(a.work, "ckpt", f"step-{step + 1}"))
            time.sleep(a.step_seconds)
        dist.barrier()                             # before local rank 0 unmounts
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
