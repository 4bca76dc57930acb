#!/usr/bin/env python3
"""Zephon's torchft loader mode beside TorchTitan's own static sharding, on the same
schedule, against torchft 0.2.0's real lighthouse on CPU (gloo): samples lost and repeated.

The schedule (tests/python/torchft_helpers.py): 3 replica groups (one process each), 45
torchft steps, a rank's share 4 samples per step (2 micro-batches of 2); group 1 killed
(SIGKILL) inside step 12 and started again (it rejoins through torchft's recovery), group
2 votes against committing step 22, group 0 killed inside step 33 and left down.
- zephon: ZephonDataLoader(torchft=True) with ZephonTorchFTManager;
- static: TorchTitan's TorchFTManager, whose get_dp_info gives group k the fixed shard k of
  3 (the loader without torchft mode: group k reads its share of every step of its own
  step count), with TorchTitan's per-replica data loader checkpoint every 1 step (its
  default), every 5, and none.
Counted over the committed steps: samples trained; of the stream's prefix up to the
furthest sample trained, those never trained (lost); trainings beyond a sample's first
(repeated). The schedule's timing differs a little between runs (where a restarted group
rejoins), so the counts vary by a few samples.

usage: ZEPHON=build/fs/zephon python3 tests/bench/bench_torchft.py   (the python suite's venv)
"""
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / 'python'))
sys.path.insert(0, str(HERE.parents[1] / 'python'))

import numpy as np  # noqa: E402

import zephon  # noqa: E402
from titan_helpers import pack_tokens, reference  # noqa: E402
from torchft_helpers import lost_repeated, run_schedule, static_trained, trained  # noqa: E402

SEQ, MICRO, ACCUM, GROUPS, STEPS, SEED = 16, 2, 2, 3, 45, 7
SHARE = MICRO * ACCUM


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        rng = np.random.default_rng(3)
        ds = pack_tokens(tmp / 'ds', rng.integers(1, 60000, 40000).astype('<u2'), SEQ)
        n = GROUPS * SHARE * STEPS * 2
        gsn_of = {tuple(w): g for g, w in enumerate(reference(ds, 0, n, SEQ + 1, SEED).tolist())}
        rows = []
        for mode, every in (('zephon', 1), ('static', 1), ('static', 5), ('static', 0)):
            run = tmp / ('%s-%d' % (mode, every))
            run.mkdir()
            ms = [zephon.mount(ds, run / ('mnt%d' % k), world_size=GROUPS,
                               global_batch=GROUPS * SHARE, seed=SEED,
                               journal=run / ('j%d.sqlite' % k)).start() for k in range(GROUPS)]
            try:
                records = run_schedule(run, [m.path for m in ms], mode, groups=GROUPS,
                                       steps=STEPS, seq=SEQ, micro=MICRO, accum=ACCUM,
                                       ckpt_every=every, kill_restart=(1, 12), fail=(2, 22),
                                       kill=(0, 33))
            finally:
                for m in ms:
                    m.stop()
            steps = (trained if mode == 'zephon' else static_trained)(records, gsn_of)
            total, lost, repeated = lost_repeated(steps)
            label = mode if mode == 'zephon' else 'static, loader checkpoint %s' % (
                'every %d step%s' % (every, 's' if every > 1 else '') if every else 'none')
            rows.append((label, len(steps), total, lost, repeated))
            print('%-40s committed steps %3d  trained %4d  lost %4d  repeated %4d'
                  % rows[-1], flush=True)


if __name__ == '__main__':
    main()
