"""tests/gpu/torchtitan_trainer.sh --dry-run: everything of the GPU check that runs on a CPU
(pack, mount, TorchTitan's ConfigManager on the script's own trainer command line, the
data loader built as the trainer builds it for every DP rank of both degrees)."""
import os
import pathlib
import subprocess
import sys

import pytest

from titan_helpers import ROOT, ZEPHON

DATA = pathlib.Path(os.environ.get('ZEPHON_DATA') or ROOT.parent / 'shared' / 'data')


def test_gpu_script_dry_run(tmp_path):
    if not (DATA / 'megatron').is_dir():
        pytest.skip('shared data folder %s is absent' % DATA)
    env = dict(os.environ, ZEPHON=ZEPHON, PYTHON=sys.executable, ZEPHON_DATA=str(DATA),
               SEQ='64', NGPU='4')
    p = subprocess.run([str(ROOT / 'tests' / 'gpu' / 'torchtitan_trainer.sh'), '--dry-run',
                        str(tmp_path / 'w')], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=600)
    out = p.stdout.decode(errors='replace')
    assert p.returncode == 0, out[-5000:]
    for r in range(4):
        assert 'dp_rank %d of 4: int64 batches of (8, 64)' % r in out, out[-3000:]
    for r in range(2):
        assert 'dp_rank %d of 2: int64 batches of (16, 64)' % r in out, out[-3000:]
    assert 'dry run passed' in out
