"""The elastic property TorchTitan's own loader refuses, through torch.distributed.checkpoint.

torchrun (gloo, CPU) runs titan_dcp_worker.py: DP 4 reads k steps of a Zephon mount
through zephon.torchtitan.ZephonDataLoader (global batch 24) and saves its state with
dcp.save under the trainer's key "dataloader"; the job ends; the dataset is remounted at DP
2, 3 and 8 (global batch 24) and at DP 2 with global batch 16, each loads the checkpoint
with dcp.load. Per step, the rank-order concatenation of every rank's windows equals the
uninterrupted single-rank stream from the saved position (`zephon batch`): nothing
repeated, nothing skipped. The same scenario with TorchTitan's own loader raises:
- 0.3.0's ParallelAwareDataloader: its load_state_dict asserts "dp_degree is inconsistent
  before and after checkpoint, dataloader resharding is not supported yet." (DP 2, 3);
- main's GrainDataLoader (run-titan-main): its load_state_dict raises ValueError("cannot
  resume after changing the effective data-parallel degree") (DP 2, 3);
- at DP 8 both find no state for DP ranks 4-7 ("Missing key in checkpoint state_dict").
What each raised is printed (pytest -s; tests/bench/RESULTS.md quotes it).
"""
import json
import re

import numpy as np
import pytest

import zephon
from titan_helpers import FLAT, documents, pack_tokens, reference, torchrun

SEQ = 16
SEED = 3
K = 3                 # steps read at DP 4 before the checkpoint
AFTER = 2             # steps read after each restore
if FLAT:      # main's GrainDataLoader
    TITAN_REFUSAL = 'ValueError: cannot resume after changing the effective data-parallel degree'
else:         # 0.3.0's ParallelAwareDataloader
    TITAN_REFUSAL = ('AssertionError: dp_degree is inconsistent before and after checkpoint, '
                     'dataloader resharding is not supported yet.')


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    """The DP 4 job: K steps of global batch 24, micro-batch 3; checkpoints of the Zephon
    loader and of TorchTitan's loader."""
    d = tmp_path_factory.mktemp('elastic')
    ds = pack_tokens(d / 'ds', documents(40000, 512), SEQ)
    with zephon.mount(ds, d / 'mnt', world_size=4, global_batch=24, seed=SEED,
                      journal=d / 'journal.sqlite'):
        rc, out = torchrun(4, 'titan_dcp_worker.py', [
            '--mount', d / 'mnt', '--seq', SEQ, '--micro', 3, '--steps', K, '--out', d,
            '--save', d / 'ckpt', '--titan-save', d / 'titan-ckpt'], d / 'log4')
    assert rc == 0, out[-5000:]
    ref = reference(ds, 0, K * 24, SEQ + 1, SEED)
    for t in range(K):      # the DP 4 run itself is the single-rank stream
        got = sum((json.loads((d / ('rank-%d.json' % r)).read_text())['steps'][t]
                   for r in range(4)), [])
        assert np.array_equal(np.array(got), ref[t * 24:(t + 1) * 24]), ('step', t)
    return d, ds


@pytest.mark.parametrize('dp,batch,micro', [(2, 24, 4), (3, 24, 4), (8, 24, 3), (2, 16, 8)])
def test_restore_at_another_dp_degree_continues_the_stream(saved, dp, batch, micro):
    d, ds = saved
    out = d / ('dp%d-b%d' % (dp, batch))
    out.mkdir()
    with zephon.mount(ds, d / 'mnt', world_size=dp, global_batch=batch, seed=SEED,
                      journal=d / 'journal.sqlite'):
        rc, log = torchrun(dp, 'titan_dcp_worker.py', [
            '--mount', d / 'mnt', '--seq', SEQ, '--micro', micro, '--steps', AFTER,
            '--out', out, '--load', d / 'ckpt', '--titan-load', d / 'titan-ckpt'], out / 'log')
    assert rc == 0, log[-5000:]
    ranks = [json.loads((out / ('rank-%d.json' % r)).read_text()) for r in range(dp)]
    ref = reference(ds, K * 24, AFTER * batch, SEQ + 1, SEED)
    for t in range(AFTER):
        got = np.array(sum((r['steps'][t] for r in ranks), []))
        assert got.shape == (batch, SEQ + 1)
        assert np.array_equal(got, ref[t * batch:(t + 1) * batch]), ('step', t)

    # TorchTitan's own loader, same checkpoint position, same new degree: refused
    errors = [r['titan_error'] for r in ranks]
    raised = sorted({m for e in errors if e for m in re.findall(r'\w+(?:Error|Exception): .*', e)})
    print('TorchTitan %s, DP 4 -> %d, global batch %d: its own loader raised %s'
          % ('main' if FLAT else '0.3.0', dp, batch, raised))
    assert all(errors), errors
    if dp < 4:
        assert all(e.startswith(TITAN_REFUSAL) for e in errors), errors
    else:
        assert all('Missing key in checkpoint state_dict: dataloader.dp_rank_' in e
                   for e in errors), errors
