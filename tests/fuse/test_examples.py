"""examples/ keeps working: examples/train_torchrun.py trains a few steps from a small
mount with torchrun (Debian's torch 1.13, gloo, CPU), saves, marks the journal, and a
restart with another world size continues at the mark with the saved model.
"""
import json
import os
import pathlib
import re
import signal
import subprocess

import numpy as np

from conftest import Mount, pack, read_all, run

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAIN = ROOT / 'examples' / 'train_torchrun.py'
# torch 1.13's torchrun on Python 3.11 needs --redirects/--tee of 1 or 2 (see
# mountscripts/torchrun-zephon.sh); workers' stderr is then copied to the console.
TORCHRUN = ['/usr/bin/python3', '-m', 'torch.distributed.run', '--standalone',
            '--redirects=2', '--tee=2', '--monitor_interval=0.2']
VOCAB = 512


def tokens_dataset(tmp_path):
    rng = np.random.default_rng(3)
    src = tmp_path / 'tokens.bin'
    rng.integers(0, VOCAB, size=128 * 16, dtype=np.uint16).tofile(str(src))
    return pack(tmp_path / 'ds', [src], '--format', 'tokens', '--dtype', 'uint16',
                '--seq-len', 16)


def train(mnt, workers, *args):
    env = dict(os.environ, ZEPHON_MOUNT=str(mnt.mp), OMP_NUM_THREADS='1')
    for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
        env.pop(k, None)
    log = mnt.mp.parent / ('torchrun-%s' % mnt.mp.name)
    p = subprocess.Popen(TORCHRUN + ['--nproc_per_node=%d' % workers, '--log_dir=%s' % log,
                                     str(TRAIN), '--vocab', str(VOCAB)] + [str(a) for a in args],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)          # torchrun and its workers
        out, _ = p.communicate()
        raise AssertionError('torchrun did not finish within 300 s (does the host name '
                             'resolve? torchrun connects to it): %s' % out[-5000:])
    return subprocess.CompletedProcess(p.args, p.returncode, out)


def logged_steps(out):
    return [(int(s), float(l)) for s, l in re.findall(r'^step (\d+) loss (\S+)$', out, re.M)]


def test_train_torchrun_example_trains_saves_and_resumes_elastically(tmp_path):
    ds = tokens_dataset(tmp_path)
    journal = tmp_path / 'journal.sqlite'
    ckpt = tmp_path / 'model.pt'

    # 2 workers, 3 steps of 8 samples (2 micro-batches of 2 per rank), saved at steps 2 and 3
    with Mount(ds, tmp_path / 'mnt', 'world_size=2,global_batch=8,micro_batch=2,journal=%s'
               % journal) as m:
        p = train(m, 2, '--steps', 3, '--save-every', 2, '--ckpt', ckpt)
        assert p.returncode == 0, p.stdout[-5000:]
        steps = logged_steps(p.stdout)
        assert [s for s, _ in steps] == [0, 1, 2], p.stdout[-5000:]
        assert all(np.isfinite(l) and 0 < l < 2 * np.log(VOCAB) for _, l in steps), steps
        st = json.loads(read_all(m.path('status')))
        assert st['consumed_samples'] == 24, st
    assert ckpt.is_file()
    assert run('journal', 'resume-point', journal).stdout.decode().strip() == 'samples:24@3'

    # 1 worker with micro-batches of 4: resume=auto starts at the mark, the model is loaded
    with Mount(ds, tmp_path / 'mnt', 'world_size=1,global_batch=8,micro_batch=4,journal=%s'
               % journal) as m:
        assert json.loads(read_all(m.path('status')))['start_step'] == 3
        p = train(m, 1, '--steps', 2, '--ckpt', ckpt)
        assert p.returncode == 0, p.stdout[-5000:]
        assert [s for s, _ in logged_steps(p.stdout)] == [3, 4], p.stdout[-5000:]
        assert 'no checkpoint' not in p.stdout
    assert run('journal', 'resume-point', journal).stdout.decode().strip() == 'samples:40@5'


def test_train_torchrun_example_refuses_a_checkpoint_of_another_step(tmp_path):
    """A saved model that is not where the mount starts would train on the wrong samples:
    the example stops, names both steps and says how to remount."""
    ds = tokens_dataset(tmp_path)
    ckpt = tmp_path / 'model.pt'
    with Mount(ds, tmp_path / 'a', 'global_batch=4,journal=%s' % (tmp_path / 'a.sqlite')) as m:
        assert train(m, 1, '--steps', 2, '--ckpt', ckpt).returncode == 0
    with Mount(ds, tmp_path / 'b', 'global_batch=4,journal=%s' % (tmp_path / 'b.sqlite')) as m:
        p = train(m, 1, '--steps', 1, '--ckpt', ckpt)
        assert p.returncode != 0
        assert 'holds the model after step 1 but the mount starts at step 0' in p.stdout, p.stdout
        assert 'resume=step:2' in p.stdout, p.stdout
        assert json.loads(read_all(m.path('status')))['consumed_samples'] == 0
