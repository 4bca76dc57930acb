"""README.md's PyTorch code runs as pasted: its node_mount training loop (the block
tagged `pytorch`, which docs/pytorch.md holds too, the same) under torchrun at 2 and at 3 processes on
one node, and a resume of the 2-process run's checkpoint at 3 processes that ends with the
same model. Only paths and sizes are replaced (each replacement must match the README, so
a changed snippet fails here rather than going untested)."""
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest
import torch

from lint.doc_blocks import doc_block  # tests/lint/doc_blocks.py

ROOT = pathlib.Path(__file__).resolve().parents[2]
SIZES = ('SEQ, MICRO, GLOBAL, STEPS, SAVE, VOCAB = 2048, 4, 96, 100, 50, 50304',
         'SEQ, MICRO, GLOBAL, STEPS, SAVE, VOCAB = 16, 2, 12, 6, 3, 50304')


def readme_snippet():
    return doc_block('README.md', 'pytorch')


def test_the_pytorch_page_holds_the_same_loop():
    """docs/pytorch.md shows the loop this file runs, unchanged."""
    assert doc_block('docs/pytorch.md', 'pytorch') == readme_snippet()


def script(tmp, ds, name):
    """The snippet with the test's dataset, mountpoint, journal directory and sizes."""
    code = readme_snippet()
    for old, new in [('"/data/ds"', repr(str(ds))), ('"/tmp/z"', repr(str(tmp / 'z'))),
                     ('/shared/j/', str(tmp / 'j') + '/'), SIZES]:
        assert old in code, 'the README snippet no longer has %r' % old
        code = code.replace(old, new)
    (tmp / 'j').mkdir(exist_ok=True)
    path = tmp / name
    path.write_text(code)
    return path


def torchrun(nproc, path, cwd):
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=str(ROOT / 'python'))
    for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR',
              'MASTER_PORT'):
        env.pop(k, None)
    p = subprocess.Popen([sys.executable, '-m', 'torch.distributed.run', '--standalone',
                          '--nproc_per_node=%d' % nproc, '--monitor_interval=0.2', str(path)],
                         cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == 0, out[-6000:]
    return out


def model_of(ckpt):
    """The model's tensors of a torch.distributed.checkpoint directory."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    out = ckpt.parent / (ckpt.name + '.pt')
    dcp_to_torch_save(str(ckpt), str(out))
    sd = torch.load(str(out), weights_only=False)
    return {k: v for k, v in sd['model'].items()}


def test_the_readme_node_mount_loop_at_2_and_3_processes_and_resumed(tokens, tmp_path):
    runs = {}
    for n in (2, 3):
        d = tmp_path / ('dp%d' % n)
        d.mkdir()
        torchrun(n, script(d, tokens, 'train.py'), d)
        assert sorted(os.listdir(d / 'ckpt')) == ['step-3', 'step-6']
        assert not os.path.ismount(d / 'z')          # local rank 0 unmounted it
        assert not (d / 'j' / 'node0.sqlite-wal').exists()
        runs[n] = model_of(d / 'ckpt' / 'step-6')
    # the 2-process run again, stopped after its step-3 checkpoint: resumed at 3 processes
    d = tmp_path / 'resumed'
    shutil.copytree(tmp_path / 'dp2', d, ignore=shutil.ignore_patterns('*.pt'))
    shutil.rmtree(d / 'ckpt' / 'step-6')
    torchrun(3, script(d, tokens, 'train.py'), d)
    resumed = model_of(d / 'ckpt' / 'step-6')
    assert set(resumed) == set(runs[2]) and resumed
    for k, v in runs[2].items():
        # the same samples in each step and the mean gradient over the global batch: the
        # same model up to rounding (the DP degree only regroups the sums)
        torch.testing.assert_close(resumed[k], v, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(runs[3][k], v, rtol=1e-4, atol=1e-6)
    assert any(not torch.equal(runs[2][k], model_of(tmp_path / 'dp2' / 'ckpt' / 'step-3')[k])
               for k in runs[2])                        # it did train
