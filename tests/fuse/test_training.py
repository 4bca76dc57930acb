"""The training proof: a training run cannot tell an elastic restart from an
uninterrupted run.

torchrun (python3 -m torch.distributed.run, gloo, CPU) starts W workers of
tests/fuse/training/train.py on a token dataset packed from the real Megatron-LM files in
../shared/data/megatron; each reads /rank/$RANK/next and trains a tiny float64 model with
all-reduced gradients.
  run 1: W=4, steps 0-29, uninterrupted;
  run 2: W=4; at step 10 rank 0 saves the model and writes "checkpoint 10" to /control;
         after step 12 the job and the mount are killed with SIGKILL; remount with W=2
         (resume=auto from the journal: the checkpoint mark), load the checkpoint, train
         to step 29.
Every step's set of sample ids, and its tokens in rank order, equal run 1's and the
uninterrupted single-rank stream (`zephon batch`); every step's loss equals run 1's
within 1e-6 relative.
And an unmodified legacy loader: a torch DataLoader over a map-style Dataset whose
__getitem__(t) reads /rank/R/step/t with numpy.load (num_workers=2) yields the same
batches as the `next` stream of the same layout.

Debian 12's python3-torch is required (mountscripts/deps test installs it): without it
these tests fail, they do not skip.
"""
import json
import os
import pathlib
import signal
import socket
import subprocess
import time
import uuid

import numpy as np
import pytest

from conftest import DATA, Mount, pack, read_all, run, unmount

HERE = pathlib.Path(__file__).resolve().parent
TRAIN = HERE / 'training' / 'train.py'
PY = '/usr/bin/python3'
SEQ = 16                  # tokens per sample
B = 8                     # global batch
STEPS = 30
SEED = 11
# Debian 12's torch 1.13 on Python 3.11: torchrun needs --redirects/--tee of 1 or 2
# (see mountscripts/torchrun-zephon.sh); workers' stderr is copied to the console.
# One node with a rendezvous on a free port: torch 1.13's --standalone always takes port
# 29400, which any other torchrun on the machine may hold.
TORCHRUN = [PY, '-m', 'torch.distributed.run', '--nnodes=1', '--rdzv_backend=c10d',
            '--redirects=2', '--tee=2', '--monitor_interval=0.2']


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_torch_is_importable():
    """The project promises this proof: a missing torch is a failure, not a skip."""
    p = subprocess.run([PY, '-c', 'import torch, torch.distributed as d; '
                        'print(torch.__version__, d.is_gloo_available())'],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.returncode == 0 and p.stdout.split()[-1] == b'True', \
        'python3-torch with gloo is needed (mountscripts/deps test): %s' % p.stdout.decode()


@pytest.fixture(scope='module')
def tokens(tmp_path_factory):
    if not DATA.is_dir():  # the data README: skip, with the reason, when it is absent
        pytest.skip('shared data folder %s is absent' % DATA)
    idx = DATA / 'megatron' / 'meg-gpt2-openwebtext_text_document.idx'
    assert idx.is_file(), 'the shared Megatron files are missing: %s' % idx
    d = tmp_path_factory.mktemp('training')
    ds = pack(d / 'owt', [idx], '--seq-len', SEQ, '--compress', 'none')
    info = json.loads(run('info', '--json', ds).stdout)
    assert (info['kind'], info['dtype'], info['seq_len']) == ('tokens', 'uint16', SEQ)
    # the uninterrupted single-rank stream: steps 0..29 of B samples, raw tokens
    ref = run('batch', ds, '-o', 'world_size=1,global_batch=%d,seed=%d,format=bin' % (
        B * STEPS, SEED), '--rank', 0, '--step', 0).stdout
    return ds, ref


def torchrun(w, mnt, args, log, detach=False):
    log.mkdir(exist_ok=True)
    env = dict(os.environ, ZEPHON_MOUNT=str(mnt.mp), OMP_NUM_THREADS='1')
    for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
        env.pop(k, None)
    out = open(log / 'torchrun.out', 'ab')
    p = subprocess.Popen(TORCHRUN + ['--rdzv_endpoint=127.0.0.1:%d' % free_port(),
                                     '--rdzv_id=%s' % uuid.uuid4(),
                                     '--nproc_per_node=%d' % w, '--log_dir=%s' % (log / 'tel'),
                                     str(TRAIN), '--log', str(log)] + [str(a) for a in args],
                         env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    if detach:
        return p
    try:
        rc = p.wait(timeout=900)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert rc == 0, (log / 'torchrun.out').read_text(errors='replace')[-5000:]


def steps_of(log):
    """{step: {'samples': set, 'tokens': bytes in rank order, 'loss': float}} from the logs."""
    per = {}
    for f in sorted(pathlib.Path(log).glob('rank-*.jsonl'), key=lambda p: int(p.stem[5:])):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            s = per.setdefault(r['step'], {'samples': [], 'tokens': b'', 'loss': []})
            s['samples'] += r['samples']
            s['tokens'] += bytes.fromhex(r['tokens'])   # files in rank order, claims in order
            s['loss'].append(r['loss'])
    for t, s in per.items():
        assert len(set(s['loss'])) == 1, ('ranks disagree on the loss of step', t, s['loss'])
        s['loss'] = s['loss'][0]
        assert len(s['samples']) == B and len(set(s['samples'])) == B, (t, s['samples'])
        s['samples'] = set(s['samples'])
    return per


def same_steps(a, b, steps):
    for t in steps:
        assert a[t]['samples'] == b[t]['samples'], ('step', t)
        assert a[t]['tokens'] == b[t]['tokens'], ('step', t)
        assert abs(a[t]['loss'] - b[t]['loss']) <= 1e-6 * abs(b[t]['loss']), \
            ('step', t, a[t]['loss'], b[t]['loss'])


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError('timed out waiting for ' + what)


def test_elastic_restart_trains_like_an_uninterrupted_run(tokens, tmp_path):
    ds, ref = tokens
    step_bytes = B * SEQ * 2
    opts = 'global_batch=%d,micro_batch=1,seed=%d' % (B, SEED)

    # run 1: W=4, uninterrupted
    with Mount(ds, tmp_path / 'mnt1', 'world_size=4,%s,journal=%s' % (opts, tmp_path / 'j1.sqlite')) as m1:
        torchrun(4, m1, ['--to', STEPS], tmp_path / 'run1')
    run1 = steps_of(tmp_path / 'run1')
    assert sorted(run1) == list(range(STEPS))
    for t in range(STEPS):       # the W=1 stream, step by step
        assert run1[t]['tokens'] == ref[t * step_bytes:(t + 1) * step_bytes], ('step', t)
    losses = [run1[t]['loss'] for t in range(STEPS)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses   # it learns

    # run 2: W=4 until killed after step 12, with a checkpoint at step 10
    j2 = tmp_path / 'j2.sqlite'
    ckpt = tmp_path / 'model-10.pt'
    log2 = tmp_path / 'run2'
    m2 = Mount(ds, tmp_path / 'mnt2', 'world_size=4,%s,journal=%s' % (opts, j2)).start()
    job = torchrun(4, m2, ['--to', STEPS, '--save-at', 10, '--ckpt', ckpt, '--hang-after', 12],
                   log2, detach=True)
    try:
        wait_for(lambda: len(list(log2.glob('hung-*'))) == 4 or job.poll() is not None, 600,
                 'all 4 workers to finish step 12')
        assert job.poll() is None, (log2 / 'torchrun.out').read_text(errors='replace')[-5000:]
    finally:
        os.killpg(job.pid, signal.SIGKILL)      # the job: torchrun and its workers
        job.wait()
        m2.kill9()                              # and the mount
        unmount(m2.mp)
        m2.stop()
    assert ckpt.is_file()
    part1 = steps_of(log2)
    assert sorted(part1) == list(range(13))
    same_steps(part1, run1, range(13))

    # remount with W=2: resume=auto finds the checkpoint mark; the job loads the model
    m3 = Mount(ds, tmp_path / 'mnt2', 'world_size=2,%s,journal=%s' % (opts, j2))
    with m3:
        st = json.loads(read_all(m3.path('status')))
        assert (st['start_step'], st['start_samples']) == (10, 10 * B), st
        assert 'checkpoint' in st['resume'], st['resume']
        log3 = tmp_path / 'run2b'
        torchrun(2, m3, ['--to', STEPS, '--load', ckpt], log3)
    part2 = steps_of(log3)
    assert sorted(part2) == list(range(10, STEPS))
    same_steps(part2, run1, range(10, STEPS))


def test_legacy_dataloader_over_step_files(tokens, tmp_path):
    """A map-style Dataset reading /rank/R/step/t with numpy.load, in a DataLoader with
    two worker processes, yields what the `next` stream of the same layout yields."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    ds, ref = tokens
    opts = 'world_size=2,global_batch=8,micro_batch=2,seed=%d' % SEED
    steps = 10

    class StepFiles(Dataset):        # what an unmodified file-reading loader looks like
        def __init__(self, root, rank):
            self.root, self.rank = root, rank

        def __len__(self):
            return steps

        def __getitem__(self, t):
            return torch.from_numpy(np.load(os.path.join(self.root, 'rank', str(self.rank),
                                                         'step', str(t))).astype(np.int64))

    with Mount(ds, tmp_path / 'mnt', '%s,journal=%s' % (opts, tmp_path / 'j.sqlite')) as m:
        loaded = {}
        for r in (0, 1):
            loader = DataLoader(StepFiles(str(m.mp), r), batch_size=None, shuffle=False,
                                num_workers=2)
            loaded[r] = [x for x in loader]
        st = json.loads(read_all(m.path('status')))
        assert st['counters']['claims'] == 0     # step files claim nothing
        # but they are progress: every share of both ranks was read (in the workers' order)
        assert st['progress']['consumed_samples_from'] == 'reads'
        assert [st['progress']['ranks'][r]['samples'] for r in '01'] == [4 * steps] * 2
        for r in (0, 1):
            assert len(loaded[r]) == steps
            for t in range(steps):
                got = [np.load(str(m.path('rank', r, 'next'))) for _ in range(2)]
                want = np.concatenate(got).astype(np.int64)
                assert want.shape == (4, SEQ)
                assert torch.equal(loaded[r][t], torch.from_numpy(want)), (r, t)
                # and the W=1 stream: rank r's half of step t
                g = t * 8 + r * 4
                assert want.astype('<u2').tobytes() == ref[g * SEQ * 2:(g + 4) * SEQ * 2]
        # the two ranks' steps, read through the loader, tile the global stream
        both = b''.join(loaded[r][t].numpy().astype('<u2').tobytes()
                        for t in range(steps) for r in (0, 1))
        assert both == ref[:steps * 8 * SEQ * 2]
