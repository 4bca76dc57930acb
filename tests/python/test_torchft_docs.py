"""docs/torchft.md's PyTorch block runs as written: two replica groups, each a torchrun of
the block (only paths and sizes replaced; each replacement must match the page), against
torchft's lighthouse; both end well and the journal of group 0 marks each step it
committed (step 0 one part at init_sync, then both groups' parts)."""
import os
import pathlib
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip('torchft')

from titan_helpers import pack_tokens  # noqa: E402
from torchft_helpers import Lighthouse  # noqa: E402
from zephon.mount import read_status  # noqa: E402
from lint.doc_blocks import doc_block  # noqa: E402  (tests/lint/doc_blocks.py)
from zexe import zrun  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
SIZES = ('GROUPS, MICRO, STEPS, VOCAB = 3, 4, 1000, 50304',
         'GROUPS, MICRO, STEPS, VOCAB = 2, 2, 5, 50304')




def test_the_pytorch_block_with_two_groups(tmp_path):
    rng = np.random.default_rng(5)
    ds = pack_tokens(tmp_path / 'ds', rng.integers(1, 50000, 4000).astype('<u2'), 16)
    code = doc_block('docs/torchft.md', 'pytorch')
    for old, new in [('"/data/ds"', repr(str(ds))), ('f"/tmp/z{group}"', 'f"%s/z{group}"' % tmp_path),
                     ('f"/tmp/journal{group}.sqlite"', 'f"%s/journal{group}.sqlite"' % tmp_path),
                     SIZES]:
        assert old in code, 'docs/torchft.md no longer has %r' % old
        code = code.replace(old, new)
    script = tmp_path / 'train.py'
    script.write_text(code)
    lh = Lighthouse(tmp_path, min_replicas=2)
    procs = []
    try:
        for g in range(2):
            env = dict(os.environ, OMP_NUM_THREADS='1', REPLICA_GROUP_ID=str(g),
                       TORCHFT_LIGHTHOUSE=lh.address, TORCHFT_TIMEOUT_SEC='20',
                       PYTHONPATH=str(ROOT / 'python'))
            for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
                env.pop(k, None)
            procs.append(subprocess.Popen(
                [sys.executable, '-m', 'torch.distributed.run', '--standalone',
                 '--nproc_per_node=1', str(script)], cwd=tmp_path, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True))
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        lh.stop()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-5000:]
    shown = zrun('journal', 'show', tmp_path / 'journal0.sqlite').decode()
    marks = re.findall(r'^  step (\d+) \(samples (\d+)\) at ', shown, re.M)
    # step 0: one part of 2 samples (init_sync); then 2 groups x 2 samples a step; the
    # mark of step S is written when the group serves step S
    assert [(int(s), int(g)) for s, g in marks] == [(1, 2), (2, 6), (3, 10), (4, 14)], shown




def test_the_mount_command(tmp_path):
    rng = np.random.default_rng(6)
    ds = pack_tokens(tmp_path / 'ds', rng.integers(1, 50000, 4000).astype('<u2'), 16)
    words = doc_block('docs/torchft.md', 'mount').split()
    assert words[:4] == ['zephon', 'mount', '/data/ds', '/mnt/z'], words
    opts = words[5].replace('/var/lib/zephon/', '%s/' % tmp_path)
    assert words[4] == '-o' and opts != words[5]
    (tmp_path / 'z').mkdir()
    zrun('mount', ds, tmp_path / 'z', '-o', opts)
    try:
        st = read_status(tmp_path / 'z')
        assert (st['world_size'], st['global_batch'], st['seed']) == (3, 12, 1)
        assert st['rank_list'] == [0, 1, 2]              # every rank served
    finally:
        subprocess.run(['fusermount3', '-u', str(tmp_path / 'z')])
