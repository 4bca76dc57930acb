"""zephon.torch.ZephonLoader on a real mount: the checkpoint property TorchTitan tests on
its own loader, the elastic property through torch.distributed.checkpoint (several gloo
processes: save at DP 4, load at DP 2, 3 and 8 and with another global batch), the
journal learning the position, and the refusals that consume nothing."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

import zephon
from zephon.torch import ZephonLoader, split_inputs_labels

from conftest import SEED, SEQ, reference, zrun

HERE = pathlib.Path(__file__).resolve().parent
WINDOW = SEQ + 1


def take(loader, n):
    return [next(loader) for _ in range(n)]


def resume_point(journal):
    return zrun('journal', 'resume-point', journal).decode().strip()


def test_batches_are_the_stream_split_into_inputs_and_labels(tokens, mounts):
    m = mounts(tokens, world_size=2, global_batch=8, micro_batch=2)
    ref = reference(tokens, 40, WINDOW)
    l0 = ZephonLoader(m.path, dp_rank=0, dp_world_size=2)
    l1 = ZephonLoader(m.path, dp_rank=1, dp_world_size=2)
    assert (l0.window, l0.seq_len, l0.overlap, l0.micro_batch, l0.global_batch) == \
        (WINDOW, SEQ, 1, 2, 8)
    for step in range(5):
        got = torch.cat(take(l0, 2) + take(l1, 2))
        assert got.dtype == torch.int64 and got.shape == (8, WINDOW)
        assert torch.equal(got, torch.from_numpy(ref[step * 8:(step + 1) * 8])), step
    x, y = split_inputs_labels(got)
    assert x.shape == y.shape == (8, SEQ) and torch.equal(x[:, 1:], y[:, :-1])
    # overlapping windows: the last label of a sample is the next sample's first input
    # in the unshuffled stream
    st = m.status()
    assert st['counters']['claims'] == 0 and st['cursors']['0'] == {'step': 0, 'micro': 0}
    # the mount learned the loaders' position from their reads of from/ (blocks of 1
    # and 4 steps here: exactly the 5 steps taken)
    assert (st['progress']['consumed_samples_from'], st['consumed_samples']) == ('reads', 40)
    assert {r: (p['step'], p['samples']) for r, p in st['progress']['ranks'].items()} == \
        {'0': (4, 20), '1': (4, 20)}


@pytest.mark.parametrize('taken', [40, 41])          # a step boundary, and inside a step
def test_state_dict_restores_exactly_for_every_rank(tokens, mounts, taken):
    """TorchTitan's test_dataset_checkpointing property, for every DP rank."""
    m = mounts(tokens, world_size=2, global_batch=8, micro_batch=2)
    for rank in range(2):
        full = ZephonLoader(m.path, dp_rank=rank, dp_world_size=2, micro_batch=1)
        want = take(full, taken + 8)
        a = ZephonLoader(m.path, dp_rank=rank, dp_world_size=2, micro_batch=1)
        take(a, taken)
        state = a.state_dict()
        assert state == a.state_dict()           # state_dict() moves nothing
        b = ZephonLoader(m.path, dp_rank=rank, dp_world_size=2, micro_batch=1)
        b.load_state_dict(state)
        for k, (x, y) in enumerate(zip(take(b, 8), want[taken:])):
            assert torch.equal(x, y), (rank, taken, k)


def test_state_is_the_same_on_every_rank(tokens, mounts):
    m = mounts(tokens, world_size=4, global_batch=8, micro_batch=1)
    states = []
    for r in range(4):
        loader = ZephonLoader(m.path, dp_rank=r, dp_world_size=4)
        take(loader, 6)
        states.append(loader.state_dict())
    assert all(s == states[0] for s in states)
    assert (states[0]['consumed_samples'], states[0]['step'], states[0]['step_offset']) == (24, 3, 0)


def test_peers_sharing_a_dp_rank_get_identical_bytes(tokens, mounts):
    m = mounts(tokens, world_size=2, global_batch=8, micro_batch=2)
    a = ZephonLoader(m.path, dp_rank=1, dp_world_size=2)
    b = ZephonLoader(m.path, dp_rank=1, dp_world_size=2)
    xs = take(a, 6)             # a tensor-parallel peer reading first claims nothing
    for x, y in zip(xs, take(b, 6)):
        assert torch.equal(x, y)


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def launch(world, args):
    """`world` gloo processes of dcp_worker.py (RANK/WORLD_SIZE as torchrun sets them)."""
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                   MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), OMP_NUM_THREADS='1')
        procs.append(subprocess.Popen([sys.executable, str(HERE / 'dcp_worker.py')] +
                                      [str(a) for a in args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        outs.append(out.decode(errors='replace'))
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]


def steps_of(out, world, steps, share):
    per_rank = [np.load(out / ('rank-%d.npy' % r)) for r in range(world)]
    for r in per_rank:
        assert r.shape == (steps * share, WINDOW)
    return [np.concatenate([r[t * share:(t + 1) * share] for r in per_rank])
            for t in range(steps)]


def test_elastic_restore_through_dcp(tokens, mounts, tmp_path):
    """Saved with torch.distributed.checkpoint at DP 4 after k steps; loaded at DP 2, 3, 8
    and with other global batches: per step, the rank-order concatenation is the
    uninterrupted DP 1 stream from the saved position, nothing repeated or skipped."""
    k, B = 5, 8
    ref = reference(tokens, 400, WINDOW)
    ckpt = tmp_path / 'ckpt'
    m = mounts(tokens, world_size=4, global_batch=B, micro_batch=1)
    launch(4, ['save', m.path, ckpt, k, tmp_path / 'save'])
    m.stop()
    saved = steps_of(tmp_path / 'save', 4, k, 2)
    for t in range(k):
        assert np.array_equal(saved[t], ref[t * B:(t + 1) * B]), t
    g = k * B
    # the journal learned the position: resume=auto agrees with the checkpoint
    assert resume_point(tmp_path / 'journal.sqlite') == 'samples:%d@%d' % (g, k)
    for world, batch, micro in ((2, 8, 2), (3, 24, 4), (8, 8, 1), (8, 32, 2)):
        out = tmp_path / ('load-%d-%d' % (world, batch))
        m = mounts(tokens, world_size=world, global_batch=batch, micro_batch=micro,
                   journal=tmp_path / ('j-%d-%d.sqlite' % (world, batch)))
        launch(world, ['load', m.path, ckpt, 3, out])
        m.stop()
        for t, got in enumerate(steps_of(out, world, 3, batch // world)):
            assert np.array_equal(got, ref[g + t * batch:g + (t + 1) * batch]), (world, batch, t)


def test_journal_learns_the_position(tokens, mounts, tmp_path):
    """state_dict() writes nothing; the next batch records its position as a mark;
    load_state_dict() records the loaded one. The journal is read once unmounted."""
    j = tmp_path / 'journal.sqlite'
    m = mounts(tokens, world_size=2, global_batch=8, micro_batch=2)
    a = [ZephonLoader(m.path, dp_rank=r, dp_world_size=2) for r in range(2)]
    for _ in range(3):
        for x in a:
            take(x, 2)
    state = [x.state_dict() for x in a][0]
    for x in a:
        take(x, 2)                              # the next batch records the checkpoint
        x.state_dict()                          # a state never followed by a batch
    m.stop()
    assert resume_point(j) == 'samples:24@3'
    # a loaded state is the position, wherever the mount started
    m = mounts(tokens, world_size=2, global_batch=8, micro_batch=2)   # resume=auto
    st = m.status()
    assert (st['start_step'], st['start_samples']) == (3, 24)
    b = ZephonLoader(m.path, dp_rank=0, dp_world_size=2)
    b.load_state_dict(dict(state, consumed_samples=8, step=1))       # an older checkpoint
    ref = reference(tokens, 16, WINDOW)
    assert torch.equal(next(b), torch.from_numpy(ref[8:10]))
    m.stop()
    assert resume_point(j) == 'samples:8@1'


def test_restore_at_a_position_no_step_of_the_mount_starts_at(tokens, mounts):
    """Saved at global batch 8 after 3 steps (gsn 24); the mount's global batch 16
    started at gsn 0 does not have a step at 24: the loader still continues at 24."""
    m = mounts(tokens, world_size=2, global_batch=16, micro_batch=4)
    ref = reference(tokens, 60, WINDOW)
    loaders = [ZephonLoader(m.path, dp_rank=r, dp_world_size=2) for r in range(2)]
    state = dict(loaders[0].state_dict(), consumed_samples=24, step=3)
    for x in loaders:
        x.load_state_dict(state)
    for t in range(2):
        got = torch.cat(take(loaders[0], 2) + take(loaders[1], 2))
        assert torch.equal(got, torch.from_numpy(ref[24 + 16 * t:40 + 16 * t])), t


def nothing_consumed(m):
    """No claim, and no mark in the journal; unmounts m."""
    st = m.status()
    assert st['consumed_samples'] == st['start_samples']
    assert all(c == {'step': st['start_step'], 'micro': 0} for c in st['cursors'].values())
    m.stop()                                 # the journal is the mount's while it runs
    assert b'checkpoint marks: none' in zrun('journal', 'show', st['journal'])


class TestRefusals:
    """Each a ValueError with the reason; nothing claimed, nothing recorded."""

    def test_world_size_is_not_the_dp_degree(self, tokens, mounts):
        m = mounts(tokens, world_size=4, global_batch=8)
        with pytest.raises(ValueError, match=r'world_size=4 .* degree is 8'):
            ZephonLoader(m.path, dp_rank=0, dp_world_size=8)
        nothing_consumed(m)

    def test_rank_not_served(self, tokens, mounts):
        m = mounts(tokens, world_size=4, global_batch=8, ranks='0-1')
        with pytest.raises(ValueError, match=r'dp_rank 2 is not served .*ranks=0-1'):
            ZephonLoader(m.path, dp_rank=2, dp_world_size=4)

    def test_tokens_per_batch_is_not_micro_batch_times_window(self, tokens, mounts):
        m = mounts(tokens, world_size=2, global_batch=8, micro_batch=2)
        with pytest.raises(ValueError, match=r'tokens_per_batch 48 is not micro_batch 2 x seq_len 16'):
            ZephonLoader(m.path, dp_rank=0, dp_world_size=2, micro_batch=2, tokens_per_batch=48)
        with pytest.raises(ValueError, match=r'not a multiple of the dataset.s seq_len 16'):
            ZephonLoader(m.path, dp_rank=0, dp_world_size=2, tokens_per_batch=40)
        x = ZephonLoader(m.path, dp_rank=0, dp_world_size=2, tokens_per_batch=64)
        assert x.micro_batch == 4
        with pytest.raises(ValueError, match=r'micro_batch 3 does not divide'):
            ZephonLoader(m.path, dp_rank=0, dp_world_size=2, micro_batch=3)
        with pytest.raises(ValueError, match=r"global_batch is 8 samples but the trainer's is 16"):
            ZephonLoader(m.path, dp_rank=0, dp_world_size=2, global_batch=16)
        nothing_consumed(m)

    def test_gradient_accumulation_other_than_the_mounts_step(self, tokens, mounts):
        """The trainer's loop (micro-batches per optimizer step) against the mount's share
        of a step: refused naming both and the fixes; the attribute is the mount's number,
        which a loop that takes it cannot contradict."""
        m = mounts(tokens, world_size=2, global_batch=16, micro_batch=2)
        with pytest.raises(ValueError) as e:
            ZephonLoader(m.path, dp_rank=1, dp_world_size=2, micro_batch=2,
                         gradient_accumulation_steps=2)
        msg = str(e.value)
        assert ('gradient_accumulation_steps 2 x micro_batch 2 = 4 samples per DP rank' in msg
                and "the mount's share of a step is 8 samples (global_batch 16 / world_size 2)"
                in msg and 'remount with world_size=2,global_batch=8' in msg and
                'gradient_accumulation_steps=4' in msg), msg
        ld = ZephonLoader(m.path, dp_rank=1, dp_world_size=2, micro_batch=2,
                          gradient_accumulation_steps=4)
        assert ld.gradient_accumulation_steps == 4
        assert ZephonLoader(m.path, dp_rank=0, dp_world_size=2,
                            micro_batch=8).gradient_accumulation_steps == 1
        nothing_consumed(m)

    def test_state_of_another_dataset_or_seed(self, tokens, mounts, tmp_path):
        other = tmp_path / 'other'
        raw = tmp_path / 'tok.bin'
        np.arange(4000, dtype='<u2').tofile(str(raw))
        zrun('pack', '--format', 'bin', '--dtype', 'uint16', '--seq-len', SEQ, '--overlap', 1,
             raw, '-o', other)
        m = mounts(tokens, world_size=2, global_batch=8)
        a = ZephonLoader(m.path, dp_rank=0, dp_world_size=2)
        take(a, 2)
        state = a.state_dict()
        m.stop()
        m2 = mounts(other, world_size=2, global_batch=8, journal=tmp_path / 'j2.sqlite')
        b = ZephonLoader(m2.path, dp_rank=0, dp_world_size=2)
        with pytest.raises(ValueError, match='belongs to the dataset with fingerprint'):
            b.load_state_dict(state)
        m3 = mounts(tokens, world_size=2, global_batch=8, seed=SEED + 1,
                    journal=tmp_path / 'j3.sqlite')
        c = ZephonLoader(m3.path, dp_rank=0, dp_world_size=2)
        before = c.state_dict()
        with pytest.raises(ValueError, match=r'seed=%d, shuffle=global, but the mount has seed=%d'
                           % (SEED, SEED + 1)):
            c.load_state_dict(state)
        with pytest.raises(ValueError, match='not a ZephonLoader state'):
            c.load_state_dict({'version': 1})
        assert c.state_dict() == before
        nothing_consumed(m3)

    def test_mid_step_state_at_another_dp_degree(self, tokens, mounts, tmp_path):
        m = mounts(tokens, world_size=4, global_batch=8, micro_batch=1)
        a = ZephonLoader(m.path, dp_rank=0, dp_world_size=4)
        take(a, 3)                               # one step and half of the next
        state = a.state_dict()
        assert (state['step'], state['step_offset']) == (1, 1)
        m.stop()
        m2 = mounts(tokens, world_size=2, global_batch=8, journal=tmp_path / 'j2.sqlite')
        b = ZephonLoader(m2.path, dp_rank=0, dp_world_size=2)
        with pytest.raises(ValueError, match=r'inside step 1 .* restores only at degree 4'):
            b.load_state_dict(state)

    def test_not_a_token_dataset(self, mounts, tmp_path):
        txt = tmp_path / 'lines.txt'
        txt.write_text(''.join('line %d\n' % i for i in range(100)))
        ds = tmp_path / 'lines'
        zrun('pack', txt, '-o', ds)
        m = mounts(ds, world_size=2, global_batch=8)
        with pytest.raises(ValueError, match='is a records dataset; ZephonLoader reads token datasets'):
            ZephonLoader(m.path, dp_rank=0, dp_world_size=2)
        nothing_consumed(m)


# --- /status publishes the layout a loader needs (issue 25, part 3) -------------------

@pytest.mark.parametrize('fmt', ['npy', 'bin'])
def test_status_publishes_what_a_loader_needs(tokens, mounts, fmt):
    """rank_list, share_samples, micro_batches, share_bytes, window, sample_tokens,
    npy_descr and dtype_bytes are the mount's: the sizes are those of the files it
    serves, and the loader takes them as they are."""
    m = mounts(tokens, world_size=4, global_batch=24, micro_batch=2, ranks=[1, 3],
               format=fmt)
    st = m.status()
    assert st['ranks'] == '1,3' and st['rank_list'] == [1, 3]
    assert (st['share_samples'], st['micro_batches']) == (6, 3)
    assert (st['window'], st['sample_tokens'], st['overlap']) == (WINDOW, SEQ, 1)
    assert (st['npy_descr'], st['dtype_bytes'], st['dtype']) == ('<u2', 2, 'uint16')
    at = os.path.join(m.path, 'rank', '3', 'at', '48')
    assert os.path.getsize(at) == st['share_bytes']
    with open(at, 'rb') as f:
        assert len(f.read()) == st['share_bytes']
    payload = 6 * WINDOW * 2
    assert st['share_bytes'] == payload if fmt == 'bin' else st['share_bytes'] > payload
    with open(os.path.join(m.path, 'rank', '3', 'from', '48'), 'rb') as f:
        two = f.read(2 * st['share_bytes'])
    assert two[st['share_bytes']:] == open(os.path.join(m.path, 'rank', '3', 'at', '72'),
                                           'rb').read()
    ld = ZephonLoader(m.path, dp_rank=3, dp_world_size=4)
    assert (ld.share, ld.share_bytes, ld.ranks, ld.window, ld.seq_len) == \
        (6, st['share_bytes'], [1, 3], WINDOW, SEQ)
    assert ld.dtype == np.dtype('<u2')


def test_status_of_a_lines_mount_has_no_share_bytes(mounts, tmp_path):
    txt = tmp_path / 'lines.txt'
    txt.write_text(''.join('line %d\n' % i for i in range(100)))
    zrun('pack', txt, '-o', tmp_path / 'lines')
    st = mounts(tmp_path / 'lines', world_size=2, global_batch=8).status()
    assert (st['rank_list'], st['share_samples'], st['micro_batches']) == ([0, 1], 4, 1)
    assert st['share_bytes'] is None and 'window' not in st and 'npy_descr' not in st


def test_the_package_has_one_version_and_its_types():
    import importlib.metadata
    import importlib.resources
    assert importlib.metadata.version('zephon') == zephon.__version__
    assert importlib.resources.files('zephon').joinpath('py.typed').is_file()
