"""Zephon's torchft loader mode (zephon.torchft, docs/torchft.md) against torchft 0.2.0's
real lighthouse, on CPU (gloo), with TorchTitan's TorchFTManager (each version's) and
zephon.torchtitan.ZephonDataLoader built as TorchTitan's FaultTolerantTrainer builds it.

The proof: 3 replica groups (one process each), a small model, 45 torchft steps; group 1
killed with SIGKILL inside step 10 (its peers' all-reduce fails: that step does not
commit) and started again (it loads its own stale loader checkpoint, as TorchTitan does,
and heals from a peer); group 2 votes against committing step 20 (the groups disagree);
group 0 killed inside step 30 and left down. The samples of the committed steps, in step
order, are the global stream's prefix: none lost, none repeated; each committed step's
loss is recorded. Bad input: a quorum of more groups than the mount's layout has, a group
whose mount has another seed or dataset, torchft absent or of another version.
"""
import io
import math
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip('torchft')

import zephon  # noqa: E402
from titan_helpers import CONTRACT, pack_tokens, reference  # noqa: E402
from torchft_helpers import Group, Lighthouse, read_records, run_schedule, trained  # noqa: E402
from lint.doc_blocks import doc_block  # noqa: E402  (tests/lint/doc_blocks.py)
from zexe import zrun  # noqa: E402

SEQ, MICRO, ACCUM, GROUPS, STEPS, SEED = 16, 2, 2, 3, 45, 7
SHARE = MICRO * ACCUM                   # samples of one DP rank per step
HERE = pathlib.Path(__file__).resolve().parent
# what does not depend on TorchTitan's version runs once, in the venv with 0.3.0
once = pytest.mark.skipif(CONTRACT == 'data.loader', reason='the same with TorchTitan 0.3.0: '
                          'run by the python suite')


@pytest.fixture(scope='module')
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp('ftds')
    rng = np.random.default_rng(3)   # random tokens: every window of the stream differs
    return pack_tokens(d / 'ds', rng.integers(1, 60000, 40000).astype('<u2'), SEQ)


def gsn_map(ds, n, seed=SEED):
    ref = reference(ds, 0, n, SEQ + 1, seed)
    out = {tuple(w): g for g, w in enumerate(ref.tolist())}
    assert len(out) == n
    return out


def group_mounts(tmp, ds, n, world_size):
    """One mount per group (as one per node), the job's layout at full strength."""
    return [zephon.mount(ds, tmp / ('mnt%d' % k), world_size=world_size,
                         global_batch=world_size * SHARE, seed=SEED,
                         journal=tmp / ('j%d.sqlite' % k)).start() for k in range(n)]


def test_groups_fail_and_rejoin_without_losing_or_repeating_a_sample(ds, tmp_path):
    ms = group_mounts(tmp_path, ds, GROUPS, GROUPS)
    try:
        records = run_schedule(tmp_path, [m.path for m in ms], 'zephon', groups=GROUPS,
                               steps=STEPS, seq=SEQ, micro=MICRO, accum=ACCUM)
    finally:
        for m in ms:
            m.stop()
    journals = [zephon_journal(tmp_path / ('j%d.sqlite' % k)) for k in range(GROUPS)]
    steps = trained(records, gsn_map(ds, GROUPS * SHARE * STEPS))
    assert [t for t, _, _ in steps] == list(range(STEPS))
    gsns = [g for _, gs, _ in steps for g in gs]
    assert gsns == list(range(len(gsns)))                 # the prefix: none lost or repeated
    assert all(math.isfinite(loss) for _, _, loss in steps)
    per = [len(gs) // SHARE for _, gs, _ in steps]        # participants of each step
    assert per[0] == 1                                    # init_sync: one group trains step 0
    assert 3 in per and 2 in per, per                     # full and shrunken quorums
    recs = read_records(records)
    assert any(r['ev'] == 'done' and not r['committed'] for r in recs[2])   # voted no
    # group 1 again: healed (not a participant) before it trained with the others
    assert any(r['ev'] == 'served' and r['index'] is None for r in recs[1])
    # each group's DP rank 0 marked every step it committed: samples:G@S
    done = {(r['step'] + 1, r['position']) for k in recs for r in recs[k]
            if r['ev'] == 'done' and r['committed']}
    marks = set().union(*journals)
    assert marks and marks <= done, marks - done
    # docs/torchft.md's zephon batch command gives a participant's share of a step with
    # fewer participants: step S of 2 groups, participant rank 1 (mark S: where S starts)
    s = next(t for t, gs, _ in steps if len(gs) == 2 * SHARE and t > 1)
    g = dict(marks)[s]
    words = doc_block('docs/torchft.md', 'batch').split()
    args = [w.replace('/data/ds', str(ds)).replace('seed=1', 'seed=%d' % SEED)
            .replace('samples:G@S', 'samples:%d@%d' % (g, s)) for w in words[2:]]
    args = [{'j': '1', 'S': str(s)}.get(w, w) for w in args]
    assert 'world_size=3,global_batch=12' in args[2], args
    share = np.load(io.BytesIO(zrun('batch', *args))).astype(np.int64)
    ref = reference(ds, 0, g + 2 * SHARE, SEQ + 1, SEED)[g + SHARE:g + 2 * SHARE]
    assert share.tolist() == ref.tolist()
    assert [gs for t, gs, _ in steps if t == s][0] == list(range(g, g + 2 * SHARE))


def zephon_journal(path):
    """{(step, gsn)} of the checkpoint marks in a journal (zephon journal show)."""
    out = zrun('journal', 'show', path).decode()
    return {(int(m.group(1)), int(m.group(2)))
            for m in re.finditer(r'^  step (\d+) \(samples (\d+)\) at ', out, re.M)}


def groups_of(tmp_path, ms, steps=3):
    """A lighthouse that waits for every group, and a group per mount."""
    records = tmp_path / 'records'
    records.mkdir()
    lh = Lighthouse(records, min_replicas=len(ms))
    gs = [Group(k, ['--mode', 'zephon', '--mount', ms[k].path, '--lighthouse', lh.address,
                    '--records', records, '--ckpt', tmp_path / 'ckpt', '--replica-id', k,
                    '--groups', len(ms), '--steps', steps, '--seq', SEQ, '--micro', MICRO,
                    '--accum', ACCUM], records) for k in range(len(ms))]
    return lh, gs


@once
@pytest.mark.parametrize('what', ['seed', 'dataset'])
def test_a_group_whose_mount_serves_another_stream_is_refused(ds, tmp_path, what):
    other = {}
    if what == 'dataset':
        rng = np.random.default_rng(4)
        other = {1: pack_tokens(tmp_path / 'other', rng.integers(1, 60000, 40000).astype('<u2'),
                                SEQ)}
    ms = []
    try:
        for k in range(2):
            ms.append(zephon.mount(other.get(k, ds), tmp_path / ('mnt%d' % k), world_size=2,
                                   global_batch=2 * SHARE,
                                   seed=SEED + (k if what == 'seed' else 0),
                                   journal=tmp_path / ('j%d.sqlite' % k)).start())
        lh, gs = groups_of(tmp_path, ms)
        try:
            for g in gs:
                g.start()
            (tmp_path / 'records' / 'go').write_text('')
            # group 1 heals from group 0 at step 0 (init_sync) and gets its position
            rc = gs[1].wait(120)
            out = gs[1].output()
        finally:
            for g in gs:
                g.kill()
            lh.stop()
    finally:
        for m in ms:
            m.stop()
    assert rc != 0
    assert 'serves another stream or layout than the peer it heals from' in out, out[-3000:]
    assert ('seed' if what == 'seed' else 'fingerprint') in out.split('heals from')[-1]


@once
def test_a_quorum_larger_than_the_layout_is_refused(ds, tmp_path):
    # a layout of 2 groups (world_size 2, one DP rank each), 3 groups join
    ms = []
    try:
        for k in range(3):
            ms.append(zephon.mount(ds, tmp_path / ('mnt%d' % k), world_size=2,
                                   global_batch=2 * SHARE, seed=SEED,
                                   journal=tmp_path / ('j%d.sqlite' % k)).start())
        lh, gs = groups_of(tmp_path, ms)
        try:
            for g in gs:
                g.start()
            (tmp_path / 'records' / 'go').write_text('')
            rcs = [g.wait(120) for g in gs]
            outs = [g.output() for g in gs]
        finally:
            for g in gs:
                g.kill()
            lh.stop()
    finally:
        for m in ms:
            m.stop()
    assert all(rc != 0 for rc in rcs)
    for out in outs:
        assert 'has 3 replica groups, more than the mount\'s layout allows: world_size=2 ' \
               'holds 2 groups of 1 DP ranks' in out, out[-3000:]


def run_python(code, env_extra=None, path=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, path),
                                                       str(HERE.parents[1] / 'python')]))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True)


@once
def test_torchft_absent_or_of_another_version_is_refused(tmp_path):
    absent = run_python('import sys; sys.modules["torchft"] = None\n'
                        'from zephon.torchft import require_torchft; require_torchft()')
    assert absent.returncode != 0
    assert 'ImportError: the torchft loader mode needs torchft 0.2.0 (pip install ' \
           'torchft==0.2.0)' in absent.stderr, absent.stderr
    # a torchft 0.1.0 first on the path (its own dist-info says the version)
    fake = tmp_path / 'site'
    (fake / 'torchft').mkdir(parents=True)
    (fake / 'torchft' / '__init__.py').write_text('')
    (fake / 'torchft-0.1.0.dist-info').mkdir()
    (fake / 'torchft-0.1.0.dist-info' / 'METADATA').write_text(
        'Metadata-Version: 2.1\nName: torchft\nVersion: 0.1.0\n')
    other = run_python('from zephon.torchft import require_torchft; require_torchft()',
                       path=[fake])
    assert other.returncode != 0
    assert 'supports torchft 0.2.0, but torchft 0.1.0 is installed' in other.stderr, other.stderr
    ok = run_python('from zephon.torchft import require_torchft; print(require_torchft().__name__)')
    assert ok.returncode == 0 and ok.stdout.strip() == 'torchft', ok.stderr


def test_the_torchtitan_config_of_docs_torchft(tmp_path):
    """docs/torchft.md's TorchTitan block, as written: the config function's result."""
    code = doc_block('docs/torchft.md', 'torchtitan')
    ns = {}
    exec(compile(code, 'docs/torchft.md', 'exec'), ns)
    config = ns['my_config']()
    from zephon.torchtitan import ZephonDataLoader
    from zephon.torchtitan_ft import ZephonTorchFTManager
    assert type(config.fault_tolerance) is ZephonTorchFTManager.Config
    assert config.fault_tolerance.semi_sync_method is None
    assert type(config.dataloader) is ZephonDataLoader.Config
    assert config.dataloader.mount == '/mnt/z' and config.dataloader.torchft
    assert config.checkpoint.enable_ft_dataloader_checkpoints is False
    assert config.fault_tolerance.enable and config.fault_tolerance.num_fragments == 2
    assert type(config.fault_tolerance)._owner is ZephonTorchFTManager   # what build() makes


@once
def test_misuse_of_the_torchft_mode_is_refused(ds, tmp_path):
    """A mount that does not serve every rank, a world_size that is not whole groups
    (ValueError, nothing read), and a step's first batch taken before the step's quorum
    started (RuntimeError): with a real Manager on torchft's lighthouse."""
    import torch
    import torchft
    from torchft_helpers import free_port
    from zephon.torch import ZephonLoader
    lh = Lighthouse(tmp_path, min_replicas=1)
    port = free_port()
    store = torch.distributed.TCPStore('127.0.0.1', port, is_master=True, wait_for_workers=False)
    manager = torchft.Manager(pg=torchft.ProcessGroupGloo(), load_state_dict=None,
                              state_dict=None, min_replica_size=1, store_addr='127.0.0.1',
                              store_port=port, rank=0, world_size=1,
                              lighthouse_addr=lh.address, replica_id='misuse')
    try:
        with zephon.mount(ds, tmp_path / 'some', world_size=3, global_batch=12, ranks=[0],
                          seed=SEED, journal=tmp_path / 'j1.sqlite') as m:
            with pytest.raises(ValueError, match='the mount must serve every rank: mount '
                                                 'without ranks='):
                ZephonLoader(m.path, dp_rank=0, dp_world_size=1, torchft=manager)
        with zephon.mount(ds, tmp_path / 'all', world_size=3, global_batch=12, seed=SEED,
                          journal=tmp_path / 'j2.sqlite') as m:
            with pytest.raises(ValueError, match='world_size=3, not a whole number of replica '
                                                 'groups of 2 DP ranks'):
                ZephonLoader(m.path, dp_rank=0, dp_world_size=2, torchft=manager)
            loader = ZephonLoader(m.path, dp_rank=0, dp_world_size=1, torchft=manager)
            with pytest.raises(RuntimeError, match="asked for a step's first batch before the "
                                                   "step's quorum started"):
                next(loader)
            manager.start_quorum()
            first = next(loader)                    # step 0 (init_sync): one group, part 0
            assert loader.torchft.current.participants == 1
            assert loader.torchft.current.index == 0 and loader.torchft.current.gsn == 0
            assert first.tolist() == reference(ds, 0, 4, SEQ + 1, SEED).tolist()   # micro 4
    finally:
        manager.shutdown(wait=False)
        lh.stop()
        del store


def test_the_titan_loader_in_torchft_mode_needs_zephons_ft_manager(ds, tmp_path):
    """ZephonDataLoader.Config(torchft=True) in a trainer whose fault tolerance is not
    ZephonTorchFTManager (no Manager handed over): a ValueError that says what to set."""
    from titan_helpers import trainer_kwargs
    from zephon.torchtitan import ZephonDataLoader
    with zephon.mount(ds, tmp_path / 'z', world_size=3, global_batch=12, seed=SEED,
                      journal=tmp_path / 'j.sqlite') as m:
        with pytest.raises(ValueError, match='needs the trainer.s fault tolerance to be '
                                             'zephon.torchtitan_ft.ZephonTorchFTManager.Config'):
            ZephonDataLoader.Config(mount=m.path, torchft=True).build(
                dp_world_size=3, dp_rank=1, tokenizer=None, **trainer_kwargs(SEQ, 2))
