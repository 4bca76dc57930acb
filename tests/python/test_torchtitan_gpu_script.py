"""tests/gpu/torchtitan_trainer.sh --dry-run: everything of the GPU check that runs on a CPU
(pack, mount, TorchTitan's ConfigManager on the script's own trainer command line, the
data loader built as the trainer builds it for every DP rank of both degrees), with the
TorchTitan of this venv (0.3.0, or main under run-titan-main: its own options)."""
import os
import pathlib
import subprocess
import sys

import pytest

from titan_helpers import FLAT, ROOT, ZEPHON

DATA = pathlib.Path(os.environ.get('ZEPHON_DATA') or ROOT.parent / 'shared' / 'data')


def test_gpu_script_dry_run(tmp_path):
    for f in ('tokenizer/torchtitan-test', 'text/tinyshakespeare.txt',
              'jsonl/cc_en_head-0091.jsonl'):
        if not (DATA / f).exists():
            pytest.skip('shared data %s is absent' % (DATA / f))
    env = dict(os.environ, ZEPHON=ZEPHON, PYTHON=sys.executable, ZEPHON_DATA=str(DATA),
               SEQ='64', NGPU='4')
    p = subprocess.run([str(ROOT / 'tests' / 'gpu' / 'torchtitan_trainer.sh'), '--dry-run',
                        str(tmp_path / 'w')], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=600)
    out = p.stdout.decode(errors='replace')
    assert p.returncode == 0, out[-5000:]
    # this TorchTitan's batches (main: 1-D, the micro-batch's tokens)
    for dp, micro in ((4, 8), (2, 16)):
        shape = (micro * 64,) if FLAT else (micro, 64)
        for r in range(dp):
            assert 'dp_rank %d of %d: int64 batches of %s' % (r, dp, shape) in out, out[-3000:]
    assert 'dry run passed' in out
