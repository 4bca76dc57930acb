"""The Python side of mixture mounts and validation splits: zephon.mount with a mixture spec,
weights= and validation= as keywords (the mount's own refusals surfacing as ZephonError),
ZephonLoader over a mixture (batches are the mount's step/ files; a state restores at
another DP degree and global batch; a finite stream ends where the mount says), and
ZephonValidationLoader (the same for every DP degree, held out of training, read again
each time without moving the training position)."""
import fractions
import io
import json
import os
import threading

import numpy as np
import pytest
import torch

import zephon
from zephon.mount import format_validation, format_weights
from zephon.torch import ZephonLoader, ZephonValidationLoader

from conftest import SEED, SEQ, zrun

WINDOW = SEQ + 1
# three token sources told apart by their tokens: sample i of a source starts with token
# BASE + SEQ * i (windows of SEQ + 1 tokens overlapping by one)
SOURCES = {'web': (0, 4000), 'code': (10000, 2000), 'math': (20000, 800)}
WEIGHTS = {'web': 0.5, 'code': 0.3, 'math': 0.2}


def n_samples(name):
    return (SOURCES[name][1] - 1) // SEQ


def source_of(first_token):
    for name, (base, size) in SOURCES.items():
        if base <= first_token < base + size:
            return name
    raise AssertionError('token %d is of no source' % first_token)


@pytest.fixture(scope='module')
def mix(tmp_path_factory):
    """A spec of three bin-packed token sources of 249, 124 and 49 samples."""
    d = tmp_path_factory.mktemp('mix')
    for name, (base, size) in SOURCES.items():
        raw = d / (name + '.bin')
        np.arange(base, base + size, dtype='<u2').tofile(str(raw))
        zrun('pack', '--format', 'bin', '--dtype', 'uint16', '--seq-len', SEQ, '--overlap', 1,
             '--compress', 'none', raw, '-o', d / name)
    spec = d / 'mix.json'
    spec.write_text(json.dumps({'sources': [{'name': n, 'dataset': n, 'weight': w}
                                            for n, w in WEIGHTS.items()]}))
    return spec


def mix_reference(spec, n, **options):
    """The first n samples of the uninterrupted single-rank stream of the mixture."""
    opts = dict({'world_size': 1, 'global_batch': n, 'seed': SEED, 'format': 'bin'}, **options)
    raw = zrun('batch', spec, '-o', ','.join('%s=%s' % kv for kv in opts.items()),
               '--rank', 0, '--step', 0)
    return np.frombuffer(raw, dtype='<u2').reshape(n, WINDOW).astype(np.int64)


def take(loader, n):
    return [next(loader) for _ in range(n)]


def step_file(m, rank, t):
    with open(os.path.join(m.path, 'rank', str(rank), 'step', str(t)), 'rb') as f:
        return np.load(io.BytesIO(f.read())).astype(np.int64)


def starts(windows):
    """The first token of each window: which sample of which source it is."""
    return [int(x) for x in np.asarray(windows)[:, 0]]


def test_mixture_batches_are_the_mounts_step_files(mix, mounts):
    m = mounts(mix, world_size=2, global_batch=8, micro_batch=2)
    st = m.status()
    assert [s['name'] for s in st['mixture']['sources']] == list(WEIGHTS)
    loaders = [ZephonLoader(m.path, dp_rank=r, dp_world_size=2) for r in range(2)]
    assert loaders[0].fingerprint == st['fingerprint']
    ref = mix_reference(mix, 80)
    got = []
    for t in range(10):
        batch = torch.cat(take(loaders[0], 2) + take(loaders[1], 2)).numpy()
        want = np.concatenate([step_file(m, r, t) for r in range(2)])
        assert np.array_equal(batch, want), t
        got.append(batch)
    got = np.concatenate(got)
    assert np.array_equal(got, ref)
    # each source's count in every prefix is within 1 of n x its weight
    counts = dict.fromkeys(WEIGHTS, 0)
    for n, tok in enumerate(starts(got), 1):
        counts[source_of(tok)] += 1
        for name, w in WEIGHTS.items():
            assert abs(counts[name] - n * w) < 1, (n, counts)
    # reading through the loader claimed nothing, and its reads are the job's progress:
    # 10 steps of 8 (the step/ files read last), each source's share of them
    st = m.status()
    assert st['counters']['claims'] == 0 and st['consumed_samples'] == 80
    assert {s['name']: s['consumed_samples'] for s in st['mixture']['sources']} == \
        {'web': 40, 'code': 24, 'math': 16}


def test_status_shows_the_loaders_progress(mix, mounts):
    """The mount learns the position of loaders that claim nothing from their reads of
    from/: /status' consumed_samples, each rank's step and each source's count follow
    them, back as well as forward (a load_state_dict of an earlier position)."""
    m = mounts(mix, world_size=2, global_batch=10, micro_batch=5)
    loaders = [ZephonLoader(m.path, dp_rank=r, dp_world_size=2) for r in range(2)]
    st = m.status()
    assert st['consumed_samples'] == 0 and st['progress']['seconds_since_read'] is None
    for x in loaders:
        take(x, 5)                     # 5 steps: blocks of 1 and 4 steps read, no more
    st = m.status()
    assert (st['progress']['consumed_samples_from'], st['consumed_samples']) == ('reads', 50)
    assert {r: (p['step'], p['consumed_samples'], p['samples'])
            for r, p in st['progress']['ranks'].items()} == {'0': (4, 50, 25), '1': (4, 50, 25)}
    assert {s['name']: s['consumed_samples'] for s in st['mixture']['sources']} == \
        {'web': 25, 'code': 15, 'math': 10}
    assert st['progress']['seconds_since_read'] >= 0 and st['counters']['claims'] == 0
    metrics = open(os.path.join(m.path, 'metrics')).read()
    assert 'zephon_source_consumed_samples{source="code"} 15' in metrics
    # back to gsn 5, where no step of the mount starts: its first read of from/5 (one
    # step) moves the position back
    state = dict(loaders[0].state_dict(), consumed_samples=5, step=0)
    for x in loaders:
        x.load_state_dict(state)
        take(x, 1)
    st = m.status()
    assert st['consumed_samples'] == 15
    assert [(p['step'], p['gsn']) for p in st['progress']['ranks'].values()] == [(None, 5)] * 2
    counts = {s['name']: s['consumed_samples'] for s in st['mixture']['sources']}
    assert sum(counts.values()) == 15
    for name, w in WEIGHTS.items():
        assert abs(counts[name] - 15 * w) < 1, counts


def test_mixture_state_restores_at_another_dp_degree(mix, mounts, tmp_path):
    """Saved at a step boundary at DP 4, global batch 8; loaded at DP 2 and 3 and with
    another global batch: each step's rank-order concatenation is the uninterrupted
    single-rank stream from the saved position."""
    k, B = 5, 8
    m = mounts(mix, world_size=4, global_batch=B, micro_batch=1)
    loaders = [ZephonLoader(m.path, dp_rank=r, dp_world_size=4) for r in range(4)]
    for _ in range(k):
        for x in loaders:
            take(x, 2)
    states = [x.state_dict() for x in loaders]
    assert all(s == states[0] for s in states)
    state = states[0]
    assert (state['consumed_samples'], state['step'], state['step_offset']) == (k * B, k, 0)
    assert state['fingerprint'] == m.status()['fingerprint']
    m.stop()
    g = k * B
    ref = mix_reference(mix, g + 3 * 24)
    for world, batch, micro in ((2, 8, 2), (3, 24, 4), (1, 16, 8)):
        m = mounts(mix, world_size=world, global_batch=batch, micro_batch=micro,
                   journal=tmp_path / ('j-%d-%d.sqlite' % (world, batch)))
        ls = [ZephonLoader(m.path, dp_rank=r, dp_world_size=world) for r in range(world)]
        for x in ls:
            x.load_state_dict(state)
        per = batch // world // micro
        for t in range(3):
            got = torch.cat([b for x in ls for b in take(x, per)]).numpy()
            assert np.array_equal(got, ref[g + t * batch:g + (t + 1) * batch]), (world, t)
        m.stop()


def test_weights_keyword_reaches_the_mount(mix, mounts):
    m = mounts(mix, world_size=1, global_batch=8, weights={'web': 0, 'code': 1, 'math': 0})
    st = m.status()
    assert [s['weight'] for s in st['mixture']['sources']] == [0, 1, 0]
    x = ZephonLoader(m.path, dp_rank=0, dp_world_size=1)
    assert {source_of(t) for _ in range(4) for t in starts(next(x))} == {'code'}
    m.stop()
    m = mounts(mix, world_size=1, global_batch=8, weights=[1, 1, 2],
               journal=m.path + '.j2.sqlite')
    assert [s['weight'] for s in m.status()['mixture']['sources']] == [1, 1, 2]


def test_a_finite_mixture_ends_where_the_mount_says(mix, mounts):
    """epochs=1 ends the stream when the first source would begin its second epoch: the
    loader stops at the last step the mount has, having seen no sample twice."""
    m = mounts(mix, world_size=2, global_batch=8, micro_batch=4, epochs=1)
    loaders = [ZephonLoader(m.path, dp_rank=r, dp_world_size=2) for r in range(2)]
    seen, steps = [], 0
    while True:
        parts = [next(x, None) for x in loaders]
        if parts[0] is None:
            assert parts[1] is None
            break
        seen += starts(torch.cat(parts))
        steps += 1
    assert steps > 0 and len(seen) == len(set(seen)) == steps * 8
    step_dir = os.path.join(m.path, 'rank', '0', 'step')
    assert os.path.exists(os.path.join(step_dir, str(steps - 1)))
    assert not os.path.exists(os.path.join(step_dir, str(steps)))
    # the stream ended within a step of some source's epoch end
    per = {n: sum(source_of(t) == n for t in seen) for n in WEIGHTS}
    assert any(n_samples(n) - 8 < per[n] <= n_samples(n) for n in WEIGHTS), per
    with pytest.raises(StopIteration):
        next(loaders[0])                         # and stays ended


def test_a_finite_stream_with_a_split_ends_where_the_mount_says(tmp_path, mounts):
    """One dataset, validation=0.25, epochs=1: an epoch is the N - V training samples,
    not N; the loader ends there, never having read a held-out sample."""
    raw = tmp_path / 'tok.bin'
    np.arange(0, 1601, dtype='<u2').tofile(str(raw))           # 100 samples
    zrun('pack', '--format', 'bin', '--dtype', 'uint16', '--seq-len', SEQ, '--overlap', 1,
         raw, '-o', tmp_path / 'one')
    m = mounts(tmp_path / 'one', world_size=1, global_batch=10, validation=0.25, epochs=1)
    assert m.status()['validation']['samples'] == 25
    train = [t for b in ZephonLoader(m.path, dp_rank=0, dp_world_size=1) for t in starts(b)]
    held = [t for b in ZephonValidationLoader(m.path, dp_rank=0, dp_world_size=1)
            for t in starts(b)]
    assert len(train) == 70 and len(held) == 20          # whole steps of 10
    assert len(set(train)) == 70 and not set(train) & set(held)


def test_validation_is_the_same_at_every_dp_degree_and_held_out(mix, mounts, tmp_path):
    B = 8
    streams = {}
    for world, micro in ((1, 4), (2, 2), (4, 1)):
        m = mounts(mix, world_size=world, global_batch=B, validation=0.1,
                   journal=tmp_path / ('j%d.sqlite' % world))
        st = m.status()
        assert st['validation']['split'] == '1/10'
        assert st['validation']['samples'] == sum(n_samples(n) // 10 for n in WEIGHTS)
        steps = st['validation']['steps']
        assert steps == st['validation']['samples'] // B
        vs = [ZephonValidationLoader(m.path, dp_rank=r, dp_world_size=world, micro_batch=micro)
              for r in range(world)]
        assert vs[0].steps == steps and len(vs[0]) == steps * (B // world // micro)
        per_rank = [list(v) for v in vs]
        assert all(len(p) == len(vs[0]) for p in per_rank)
        k = B // world // micro                  # micro-batches per step and rank
        streams[world] = np.concatenate([
            torch.cat([b for p in per_rank for b in p[t * k:(t + 1) * k]]).numpy()
            for t in range(steps)])
        # the same each time it is read
        assert all(torch.equal(a, b) for a, b in zip(per_rank[0], list(vs[0])))
        m.stop()
    assert np.array_equal(streams[1], streams[2]) and np.array_equal(streams[1], streams[4])
    held = set(starts(streams[1]))
    assert len(held) == len(streams[1])
    # training never sees a held-out sample, and (for the small source, whose epoch the
    # first 60 steps cover) training and validation together are all its samples
    m = mounts(mix, world_size=1, global_batch=B, validation=0.1,
               journal=tmp_path / 'train.sqlite')
    train = set(t for b in take(ZephonLoader(m.path, dp_rank=0, dp_world_size=1), 60)
                for t in starts(b))
    assert not train & held
    math = {t for t in train | held if source_of(t) == 'math'}
    assert math == {SOURCES['math'][0] + SEQ * i for i in range(n_samples('math'))}


def test_validation_moves_no_training_position(mix, mounts):
    m = mounts(mix, world_size=2, global_batch=8, micro_batch=2, validation=0.1)
    ref = mix_reference(mix, 24, validation=0.1)
    train = [ZephonLoader(m.path, dp_rank=r, dp_world_size=2) for r in range(2)]
    first = torch.cat(take(train[0], 2) + take(train[1], 2))
    with open(os.path.join(m.path, 'rank', '0', 'next'), 'rb') as f:
        f.read()                                 # a claim, so the cursors are not at 0
    before, state = m.status(), train[0].state_dict()
    for r in range(2):
        list(ZephonValidationLoader(m.path, dp_rank=r, dp_world_size=2))
    after = m.status()
    assert (after['consumed_samples'], after['cursors']) == \
        (before['consumed_samples'], before['cursors'])
    assert train[0].state_dict() == state
    second = torch.cat(take(train[0], 2) + take(train[1], 2))
    assert np.array_equal(torch.cat([first, second]).numpy(), ref[:16])


class TestRefusals:
    def test_a_state_of_another_split_is_refused(self, mix, mounts, tmp_path):
        """The split changes the training stream (each epoch permutes the others), so a
        state saved under one split does not position a mount of another."""
        with_split = mounts(mix, world_size=2, global_batch=8, validation=0.1)
        state = ZephonLoader(with_split.path, dp_rank=0, dp_world_size=2).state_dict()
        assert state['split'] == '1/10'
        plain = mounts(mix, world_size=2, global_batch=8, journal=str(tmp_path / 'j2.sqlite'))
        loader = ZephonLoader(plain.path, dp_rank=0, dp_world_size=2, write_marks=False)
        before = loader.state_dict()
        with pytest.raises(ValueError, match=r'validation split 1/10, but the mount has none'):
            loader.load_state_dict(state)
        assert loader.state_dict() == before
        other = dict(before, split='1/10')
        with pytest.raises(ValueError, match=r'mount with validation=1/10'):
            loader.load_state_dict(other)
        old = {k: v for k, v in before.items() if k != 'split'}   # a state from before splits
        loader.load_state_dict(old)

    def test_validation_loader_without_a_split(self, mix, mounts):
        m = mounts(mix, world_size=2, global_batch=8)
        assert m.status()['validation'] is None
        with pytest.raises(ValueError, match=r'has no validation split; mount with validation=F'):
            ZephonValidationLoader(m.path, dp_rank=0, dp_world_size=2)

    def test_validation_split_smaller_than_a_step(self, mix, mounts):
        m = mounts(mix, world_size=2, global_batch=8, validation=0.01)
        with pytest.raises(ValueError, match=r'holds 3 samples, less than one global batch of 8'):
            ZephonValidationLoader(m.path, dp_rank=0, dp_world_size=2)

    def test_validation_loader_checks_the_layout(self, mix, mounts):
        m = mounts(mix, world_size=2, global_batch=8, validation=0.1)
        with pytest.raises(ValueError, match=r'world_size=2 .* degree is 4'):
            ZephonValidationLoader(m.path, dp_rank=0, dp_world_size=4)
        with pytest.raises(ValueError, match=r'micro_batch 3 does not divide'):
            ZephonValidationLoader(m.path, dp_rank=0, dp_world_size=2, micro_batch=3)
        with pytest.raises(TypeError, match=r"unexpected keyword argument 'write_marks'"):
            ZephonValidationLoader(m.path, dp_rank=0, dp_world_size=2, write_marks=False)

    def test_unknown_source_in_weights(self, mix, tmp_path):
        with pytest.raises(zephon.ZephonError, match=r'no source is named "books"'):
            with zephon.mount(mix, tmp_path / 'mnt', weights={'web': 1, 'books': 1},
                              journal=tmp_path / 'j.sqlite'):
                pass
        assert not os.path.exists(tmp_path / 'j.sqlite')

    def test_weights_the_mount_refuses(self, mix, tmp_path):
        for weights, why in (([1, -1, 1], r'weight 2 \(-1\) must be a finite number >= 0'),
                             ([0, 0, 0], r'the weights sum to 0'),
                             ([1, 1], r'2 weights for 3 sources')):
            with pytest.raises(zephon.ZephonError, match=why):
                zephon.mount(mix, tmp_path / 'mnt', weights=weights,
                             journal=tmp_path / 'j.sqlite').start()
        with pytest.raises(zephon.ZephonError, match=r'validation'):
            zephon.mount(mix, tmp_path / 'mnt', validation=0.6,
                         journal=tmp_path / 'j.sqlite').start()
        assert not os.path.exists(tmp_path / 'j.sqlite')

    def test_weights_python_refuses_before_mounting(self, mix, tmp_path):
        for weights in ({'we+b': 1}, {'web': 'x'}, [float('nan')], [], [True, 1, 1]):
            with pytest.raises(ValueError):
                zephon.mount(mix, tmp_path / 'mnt', weights=weights)
        assert not os.path.exists(tmp_path / 'mnt')


def test_stream_differences_compare_what_the_mount_resolves(mix, mounts):
    """weights and validation compare as the mount resolves them (0.5+0.3+0.2 is 5:3:2 is
    web:5+code:3+math:2; 0.1 is 1/10): both sides are zephon's, Python only compares."""
    from zephon.mount import stream_differences
    from zephon.options import configuration, mount_options
    m = mounts(mix, global_batch=4, weights=[0.5, 0.3, 0.2], validation=0.1)
    st = m.status()
    same = dict(global_batch=4, journal=m.status()['journal'], seed=SEED)

    def asked(**o):
        return configuration(mix, m.path, mount_options(**same, **o))
    for o in (dict(weights='web:5+code:3+math:2', validation='1/10'),
              dict(weights=[5, 3, 2], validation=fractions.Fraction(1, 10)),
              dict(validation=0.1)):                 # no weights=: the journal's
        assert stream_differences(asked(**o), st) == [], o
    assert asked(validation=0.1)['mixture'] == {'weights': None}
    assert stream_differences(asked(weights={'web': 0.7, 'code': 0.3, 'math': 0},
                                    validation=0.1), st) == \
        ['weights 5,3,2 there, 7,3,0 asked']
    assert stream_differences(asked(weights=[5, 3, 2]), st) == \
        ['validation 1/10 there, none asked']


def test_format_weights_and_validation():
    assert format_weights({'web': 0.7, 'code': 0.3}) == 'web:0.7+code:0.3'
    assert format_weights([1, 2.5, 0]) == '1+2.5+0'
    assert format_weights((np.float32(0.5), np.int64(3))) == '0.5+3'
    assert format_weights([1 / 3, 2 / 3]) == '0.3333333333333333+0.6666666666666666'
    assert format_weights('a:1+b:2') == 'a:1+b:2'
    assert format_validation(0.01) == '0.01'
    assert format_validation(fractions.Fraction(1, 100)) == '1/100'
    assert format_validation('1/50') == '1/50'
    with pytest.raises(ValueError, match='not a source name'):
        format_weights({'a,b': 1})
    with pytest.raises(ValueError, match='is not a finite number'):
        format_weights([float('inf')])
    with pytest.raises(ValueError, match='is not a number'):
        format_validation(object())


def test_node_mount_of_a_mixture(mix, tmp_path):
    mp = tmp_path / 'node'
    kw = dict(dp_degree=2, dp_ranks=[0, 1], global_batch=8, journal=tmp_path / 'j.sqlite',
              weights=[1, 1, 0], validation=0.1, timeout=30)
    got = {}

    def waiter():
        try:
            with zephon.node_mount(mix, mp, local_rank=1, **kw) as w:
                got['status'] = w.status()
        except Exception as e:      # reported below
            got['error'] = e

    t = threading.Thread(target=waiter)
    t.start()
    with zephon.node_mount(mix, mp, local_rank=0, **kw):
        t.join(30)
        assert not t.is_alive() and 'error' not in got, got
    st = got['status']
    assert [s['weight'] for s in st['mixture']['sources']] == [1, 1, 0]
    assert st['validation']['split'] == '1/10'
