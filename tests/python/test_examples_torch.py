"""examples/ with today's PyTorch and TorchTitan 0.3.0 keep working: loader_demo.sh
(train_loader.py under torchrun: DP 2, kill -9, resumed at DP 3, losses compared) and
torchtitan_demo.sh --dry-run (torchtitan_config.py's config as TorchTitan's ConfigManager
builds it, and the loaders of every DP rank at DP 2 and 1; the trainer itself needs GPUs).
Each runs in a temporary directory of the test."""
import os
import pathlib
import re
import subprocess
import sys

from conftest import ZEPHON

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_example(script, *args, timeout=900):
    env = dict(os.environ, ZEPHON=ZEPHON, PYTHON=sys.executable,
               PYTHONPATH=str(ROOT / 'python'))
    p = subprocess.run([str(ROOT / 'examples' / script), *map(str, args)], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stdout[-6000:]
    return p.stdout


def is_mounted(path):
    with open('/proc/self/mountinfo') as f:
        return any(line.split()[4] == str(path) for line in f)


def test_loader_demo_kill_9_and_resume_at_another_dp_degree(tmp_path):
    out = run_example('loader_demo.sh', tmp_path)
    assert 'resumed from step 8 at DP 3' in out, out
    assert re.search(r'^steps compared 4, max relative difference ', out, re.M), out
    steps = re.findall(r'^(\d+) (\S+) (\S+)$', out, re.M)
    assert [int(s) for s, _, _ in steps] == [8, 9, 10, 11], out
    assert sorted(os.listdir(tmp_path / 'b' / 'ckpt')) == ['step-12', 'step-4', 'step-8']
    assert not is_mounted(tmp_path / 'a' / 'mnt') and not is_mounted(tmp_path / 'b' / 'mnt')


def test_torchtitan_demo_dry_run(tmp_path):
    out = run_example('torchtitan_demo.sh', '--dry-run', tmp_path)
    for line in ('DP 2 rank 0: train (4, 64), validation (4, 64)',
                 'DP 2 rank 1: train (4, 64), validation (4, 64)',
                 'DP 1 rank 0: train (8, 64), validation (8, 64)', 'dry run passed'):
        assert line in out, out
    assert not is_mounted(tmp_path / 'mnt')
