"""The training proof on PyTorch 2, through zephon.torchtitan.ZephonDataLoader.

torchrun (gloo, CPU) trains a small Llama-style model (titan_train.py: RoPE at the
loader's positions, block-causal attention per document, SwiGLU, float64) on a token
dataset with end-of-document tokens, global batch 12:
  run 1: DP 2 (micro-batch 2), steps 0-11, uninterrupted;
  run 2: DP 4 (micro-batch 3); after step 4 the model, the optimizer and the loader's
         state are saved with torch.distributed.checkpoint; after step 6 the job and the
         mount get SIGKILL;
  run 3: the dataset is mounted again at DP 3 with resume=fresh (the checkpoint, not the
         journal, positions the stream) and the job runs 6 processes, DP 3 x TP 2 (two
         processes per DP rank, as tensor-parallel peers; micro-batch 2); it loads the
         checkpoint and trains steps 5-11.
Every step's windows (in DP rank order) equal run 1's and the uninterrupted single-rank
stream; every step's loss equals run 1's within 1e-9 relative; the TP peers of a DP rank
read the same windows.
"""
import json
import os
import pathlib
import signal
import subprocess
import time

import numpy as np
import pytest

import zephon
from titan_helpers import EOD, documents, masked_windows, pack_tokens, reference, torchrun

SEQ, B, STEPS, SEED = 16, 12, 12, 13
SAVE_AT, HANG_AFTER = 5, 6


def steps_of(log, tp=1):
    """{step: {'windows': [...] in DP rank order, 'loss': float}}; checks the TP peers."""
    per = {}
    for f in pathlib.Path(log).glob('rank-*.jsonl'):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            per.setdefault(r['step'], {}).setdefault(r['dp_rank'], {})[r['tp_rank']] = r
    out = {}
    for t, ranks in per.items():
        windows, losses = [], set()
        for d in sorted(ranks):
            peers = ranks[d]
            assert sorted(peers) == list(range(tp)), (t, d, sorted(peers))
            assert all(p['windows'] == peers[0]['windows'] for p in peers.values()), \
                ('TP peers of DP rank', d, 'read different windows at step', t)
            windows += peers[0]['windows']
            losses |= {p['loss'] for p in peers.values()}
        assert len(losses) == 1, ('ranks disagree on the loss of step', t, losses)
        out[t] = {'windows': windows, 'loss': losses.pop()}
    return out


def same_steps(a, b, steps):
    for t in steps:
        assert a[t]['windows'] == b[t]['windows'], ('step', t)
        assert abs(a[t]['loss'] - b[t]['loss']) <= 1e-9 * abs(b[t]['loss']), \
            ('step', t, a[t]['loss'], b[t]['loss'])


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError('timed out waiting for ' + what)


def test_elastic_restart_with_tp_peers_trains_like_an_uninterrupted_run(tmp_path):
    ds = pack_tokens(tmp_path / 'ds', documents(30000, 64), SEQ)
    opts = dict(global_batch=B, seed=SEED)
    args = ['--seq', SEQ, '--to', STEPS]

    with zephon.mount(ds, tmp_path / 'mnt1', world_size=2, journal=tmp_path / 'j1.sqlite',
                      **opts) as m:
        rc, out = torchrun(2, 'titan_train.py', ['--mount', m.path, '--tp', 1, '--micro', 2,
                                                  '--records', tmp_path / 'run1', *args], tmp_path / 'run1')
    assert rc == 0, out[-5000:]
    run1 = steps_of(tmp_path / 'run1')
    assert sorted(run1) == list(range(STEPS))
    # the loader masks the label after each EOD: so do the reference's windows
    ref = masked_windows(reference(ds, 0, STEPS * B, SEQ + 1, SEED), EOD)
    for t in range(STEPS):
        assert np.array_equal(np.array(run1[t]['windows']), ref[t * B:(t + 1) * B]), t
    losses = [run1[t]['loss'] for t in range(STEPS)]
    assert losses[-1] < losses[0], losses            # it learns

    # run 2: DP 4, checkpoint after step 4, killed (-9, job and mount) after step 6
    j2, ckpt, log2 = tmp_path / 'j2.sqlite', tmp_path / 'ckpt', tmp_path / 'run2'
    log2.mkdir()
    m2 = zephon.mount(ds, tmp_path / 'mnt2', world_size=4, journal=j2, **opts).start()
    job = torchrun(4, 'titan_train.py', ['--mount', m2.path, '--tp', 1, '--micro', 3, '--records', log2, *args,
                                         '--save-at', SAVE_AT, '--ckpt', ckpt,
                                         '--hang-after', HANG_AFTER], log2, detach=True)
    try:
        wait_for(lambda: len(list(log2.glob('hung-*'))) == 4 or job.poll() is not None, 600,
                 'all 4 workers to finish step %d' % HANG_AFTER)
        assert job.poll() is None, (log2 / 'torchrun.out').read_text(errors='replace')[-5000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)          # the job: torchrun and its workers
        job.wait()
        os.kill(m2.pid, signal.SIGKILL)           # and the mount
        m2._proc.wait()
        subprocess.run(['fusermount3', '-uz', m2.path], stderr=subprocess.DEVNULL)
        m2.stop()
    part1 = steps_of(log2)
    assert sorted(part1) == list(range(HANG_AFTER + 1))
    same_steps(part1, run1, range(HANG_AFTER + 1))

    # run 3: DP 3 x TP 2 from the checkpoint of step 5; the loader's state positions the
    # stream, whatever the mount's journal says (resume=fresh: the mount starts at 0)
    log3 = tmp_path / 'run3'
    log3.mkdir()
    with zephon.mount(ds, tmp_path / 'mnt2', world_size=3, journal=j2, resume='fresh',
                      **opts) as m3:
        assert m3.status()['start_samples'] == 0
        rc, out = torchrun(6, 'titan_train.py', ['--mount', m3.path, '--tp', 2, '--micro', 2, '--records',
                                                  log3, *args, '--load', ckpt], log3)
        status = m3.status()
    assert rc == 0, out[-5000:]
    part2 = steps_of(log3, tp=2)
    assert sorted(part2) == list(range(SAVE_AT, STEPS))
    same_steps(part2, run1, range(SAVE_AT, STEPS))
    assert status['world_size'] == 3
