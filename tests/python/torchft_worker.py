"""One torchft replica group (one process, DP degree 1) training a small model on CPU
(gloo) with TorchTitan's TorchFTManager, for test_torchtitan_torchft.py and
tests/bench/bench_torchft.py.

The data loader is zephon.torchtitan.ZephonDataLoader, built as TorchTitan's
FaultTolerantTrainer builds its loader (with get_dp_info's DP view):
  --mode zephon   torchft mode (ZephonTorchFTManager + ZephonDataLoader torchft=True);
  --mode static   TorchTitan's own static sharding: replica group k reads shard k of
                  every step of its own step count (TorchFTManager + the loader without
                  torchft mode: what get_dp_info gives any TorchTitan loader).
Both save the loader's state every --ckpt-every steps (TorchTitan's per-replica data
loader checkpoint, by default every step) into --ckpt/replica-K and load the group's
latest at start, as TorchTitan's TorchFTCheckpointManager does (_ft_save/_ft_load). The
model, the optimizer and the trainer's step count travel to a healing group through
torchft's state transfer, as TorchTitan's checkpointer registers them.

Each step: optimizer zero_grad (torchft starts the quorum), --accum micro-batches,
forward/backward, gradients and the loss all-reduced through the Manager, optimizer step
(torchft's should_commit). Records (JSON lines in --records/group-K.jsonl):
  {"ev": "served", "step", "quorum", "index", "participants", "trains", "rows"}
  {"ev": "done", "step", "quorum", "committed", "loss", "position"}
--hang-at S: after serving torchft step S, write --records/hang-K and wait to be killed.
--fail-at S: report an error at step S (this group votes against committing it).
Before the first step each group writes --records/ready-K and waits for --records/go.
Runs until torchft's step count reaches --steps.
"""
import argparse
import json
import os
import pathlib
import time

import torch
import torch.nn.functional as F

from titan_helpers import rows, trainer_kwargs

VOCAB = 512


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--mode', choices=('zephon', 'static'), required=True)
    for a in ('--mount', '--lighthouse', '--records', '--ckpt'):
        ap.add_argument(a, required=True)
    for a in ('--replica-id', '--groups', '--steps', '--seq', '--micro', '--accum',
              '--store-port'):
        ap.add_argument(a, type=int, required=True)
    ap.add_argument('--ckpt-every', type=int, default=1)
    ap.add_argument('--hang-at', type=int)
    ap.add_argument('--fail-at', type=int)
    a = ap.parse_args()

    torch.set_num_threads(1)
    k = a.replica_id
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(a.store_port), RANK='0',
                      WORLD_SIZE='1', TORCHFT_LIGHTHOUSE=a.lighthouse)
    # the replica group's own store (torchelastic starts one per job)
    store = torch.distributed.TCPStore('127.0.0.1', a.store_port, is_master=True,
                                       wait_for_workers=False)
    # the group's own default process group (TorchTitan's init_distributed, ranks of the group)
    torch.distributed.init_process_group('gloo', store=store, rank=0, world_size=1)
    if a.mode == 'zephon':
        from zephon.torchtitan_ft import ZephonTorchFTManager as Manager
    else:
        from torchtitan.experiments.torchft.manager import TorchFTManager as Manager
    from zephon.torchtitan import ZephonDataLoader
    import torchft

    ftm = Manager.Config(enable=True, replica_id=k, group_size=a.groups,
                         process_group='gloo', process_group_timeout_ms=5000,
                         min_replica_size=1).build()
    manager = ftm.manager
    dp_world, dp_rank = ftm.get_dp_info(1, 0)        # as FaultTolerantTrainer does
    dl = ZephonDataLoader.Config(mount=a.mount, torchft=a.mode == 'zephon').build(
        dp_world_size=dp_world, dp_rank=dp_rank, tokenizer=None,
        **trainer_kwargs(a.seq, a.micro))

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 16), torch.nn.Linear(16, VOCAB))
    inner = torch.optim.SGD(model.parameters(), lr=0.5)
    opt = torchft.Optimizer(manager, inner)
    train = {'step': 0}                              # TorchTitan's train_state

    def state():
        return {'model': model.state_dict(), 'optim': inner.state_dict(), 'train': dict(train)}

    def load(sd):
        model.load_state_dict(sd['model'])
        inner.load_state_dict(sd['optim'])
        train.update(sd['train'])
    manager.register_state_dict_fn('train', load, state)

    ckpt = pathlib.Path(a.ckpt) / ('replica-%d' % k)
    ckpt.mkdir(parents=True, exist_ok=True)
    saved = sorted(int(p.stem[5:]) for p in ckpt.glob('step-*.json'))
    if saved:                                        # TorchTitan's _ft_load: the latest
        dl.load_state_dict(json.loads((ckpt / ('step-%d.json' % saved[-1])).read_text()))

    # all groups up before the first quorum (the launcher writes records/go): the first
    # quorum has them all
    records = pathlib.Path(a.records)
    (records / ('ready-%d' % k)).write_text('')
    while not (records / 'go').exists():
        time.sleep(0.05)
    log = open(records / ('group-%d.jsonl' % k), 'a')
    it = iter(dl)
    while manager.current_step() < a.steps:
        opt.zero_grad()                              # torchft: start the quorum
        batches = [next(it) for _ in range(a.accum)]
        manager.wait_quorum()            # (the static loader does not wait for it)
        step = manager.current_step()
        quorum = manager._quorum_id
        if a.mode == 'zephon':
            cur = dl.loader.torchft.current
            index, participants = cur.index, cur.participants
        else:
            index, participants = manager.participating_rank(), manager.num_participants()
        trains = manager.is_participating()
        windows = []
        for b in batches:
            x, _, labels = rows(b, a.seq)
            windows += torch.cat([x, labels[:, -1:]], 1).tolist()
        log.write(json.dumps({'ev': 'served', 'step': step, 'quorum': quorum, 'index': index,
                              'participants': participants, 'trains': trains,
                              'rows': windows}) + '\n')
        log.flush()
        if a.hang_at is not None and step == a.hang_at:
            (pathlib.Path(a.records) / ('hang-%d' % k)).write_text('')
            while True:                              # killed here, inside the step
                time.sleep(1)
        loss_sum = torch.zeros(())
        for b in batches:
            x, _, labels = rows(b, a.seq)
            logits = model(x % VOCAB)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), (labels % VOCAB).reshape(-1))
            (loss / a.accum).backward()
            loss_sum += loss.detach() / a.accum
        works = [manager.allreduce(p.grad) for p in model.parameters()]
        works.append(manager.allreduce(loss_sum))
        for w in works:
            w.wait()
        if a.fail_at is not None and step == a.fail_at:
            a.fail_at = None                         # once
            manager.report_error(RuntimeError('injected: this group votes against the step'))
        opt.step()                                   # torchft: should_commit
        committed = manager.current_step() > step
        position = dl.state_dict()['consumed_samples']
        log.write(json.dumps({'ev': 'done', 'step': step, 'quorum': quorum,
                              'committed': committed, 'loss': float(loss_sum),
                              'position': position}) + '\n')
        log.flush()
        train['step'] += 1
        if a.ckpt_every and train['step'] % a.ckpt_every == 0:
            (ckpt / ('step-%d.json' % train['step'])).write_text(json.dumps(dl.state_dict()))
    log.close()
    manager.shutdown()
    torch.distributed.destroy_process_group()
    del store


if __name__ == '__main__':
    main()
