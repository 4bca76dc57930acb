"""Weighted mixtures, curricula and the validation split (docs/mixtures.md, docs/design.md
§11), through real mounts. The records name their source and index ({"src": "a", "i": k}),
so what a reader gets is checked from the bytes themselves, not from the code that
served them:
  - every prefix of n samples holds within 1 of n * w_s of each source;
  - each source's samples come in epochs that cover it once, in a new order each epoch;
  - the rank-order concatenation of a step is the same for every (W, m) and equals
    `zephon batch`;
  - a weight change at a remount keeps the stream before it, continues each source where
    it was, and resumes exactly at another world size;
  - bad specs, weights and journals are refused with a message and change nothing;
  - the validation split is disjoint from training, the same for any seed and world size.
"""
import json
import pathlib

import pytest

from conftest import Mount, pack, read_all, run, write_tokens

SIZES = {'a': 50, 'b': 7, 'c': 20}


def records(data):
    return [json.loads(l) for l in data.splitlines()]


def spec(path, weights, sources=None, **extra):
    srcs = [{'name': n, 'dataset': str(d), 'weight': w}
            for (n, d), w in zip((sources or {}).items(), weights)]
    path.write_text(json.dumps({'sources': srcs, **extra}))
    return path


@pytest.fixture(scope='module')
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp('mix')
    out = {}
    for name, n in SIZES.items():
        (d / (name + '.jsonl')).write_text(
            ''.join('{"src": "%s", "i": %d}\n' % (name, k) for k in range(n)))
        out[name] = pack(d / name, [d / (name + '.jsonl')])
    return out


def steps(m, world_size, first, count):
    """Steps [first, first + count) as the rank-order concatenation of their shares."""
    out = []
    for t in range(first, first + count):
        for r in range(world_size):
            out += records(read_all(m.path('rank', r, 'step', t)))
    return out


def at_step(m, world_size, g):
    """The B samples from gsn g (/rank/<r>/at/<g>, every rank in order)."""
    out = []
    for r in range(world_size):
        out += records(read_all(m.path('rank', r, 'at', g)))
    return out


def check_prefix_bound(seq, weights):
    total = sum(weights.values())
    counts = dict.fromkeys(weights, 0)
    for n, r in enumerate(seq, 1):
        counts[r['src']] += 1
        for s, w in weights.items():
            assert abs(counts[s] - n * w / total) < 1, (n, s, counts)


def test_proportions_epochs_and_layouts(sources, tmp_path):
    mix = spec(tmp_path / 'mix.json', [0.5, 0.3, 0.2], sources)
    with Mount(mix, tmp_path / 'm1', 'global_batch=10,seed=4') as m:
        seq = steps(m, 1, 0, 40)
        st = json.loads(read_all(m.path('status')))
        assert st['samples'] == sum(SIZES.values())
        assert [s['name'] for s in st['mixture']['sources']] == ['a', 'b', 'c']
        assert st['mixture']['weights'] == '5,3,2'
    check_prefix_bound(seq, {'a': 5, 'b': 3, 'c': 2})
    for name, n in SIZES.items():
        mine = [r['i'] for r in seq if r['src'] == name]
        epochs = [mine[k:k + n] for k in range(0, len(mine) - n + 1, n)]
        assert len(epochs) >= 2
        for e in epochs:
            assert sorted(e) == list(range(n)), (name, e)
        assert epochs[0] != epochs[1], name
    # the concatenation of a step over ranks is the same for every layout, and the same
    # as zephon batch
    for opts in ('world_size=2,global_batch=10', 'world_size=5,global_batch=10,micro_batch=1'):
        with Mount(mix, tmp_path / 'm2', opts + ',seed=4,journal=%s' % (tmp_path / 'j2')) as m:
            w = int(opts.split(',')[0].split('=')[1])
            assert steps(m, w, 0, 6) == seq[:60], opts
    want = run('batch', mix, '-o', 'global_batch=10,seed=4', '--rank', 0, '--step', 3).stdout
    assert records(want) == seq[30:40]


def test_next_state_status_and_metrics(sources, tmp_path):
    mix = spec(tmp_path / 'mix.json', [1, 1, 2], sources)
    with Mount(mix, tmp_path / 'm', 'world_size=2,global_batch=8,micro_batch=2') as m:
        got = []
        for _ in range(4):
            for r in range(2):
                batch = records(read_all(m.path('rank', r, 'next')))
                state = json.loads(read_all(m.path('rank', r, 'state')))['last']
                assert state['source'] == [x['src'] for x in batch]
                assert state['source_samples'] == [x['i'] for x in batch]
                got += batch
        st = json.loads(read_all(m.path('status')))
        metrics = read_all(m.path('metrics')).decode()
    assert st['consumed_samples'] == 16
    consumed = {s['name']: s['consumed_samples'] for s in st['mixture']['sources']}
    assert consumed == {s: sum(1 for r in got if r['src'] == s) for s in SIZES}
    assert sum(consumed.values()) == 16
    for s, n in consumed.items():
        assert 'zephon_source_consumed_samples{source="%s"} %d' % (s, n) in metrics
    assert (tmp_path / 'mix.journal.sqlite').exists()


def test_state_epoch_is_the_mixtures(sources, tmp_path):
    """/rank/<r>/state's epoch of a mixture's claim is the least epoch of its weighted
    sources at the claim's gsn (as /status' epoch), not gsn / N of the union."""
    mix = spec(tmp_path / 'mix.json', [1, 1, 2], sources)
    with Mount(mix, tmp_path / 'm', 'global_batch=8') as m:
        got = []
        for _ in range(13):                    # the last claim starts at gsn 96
            got += records(read_all(m.path('rank', 0, 'next')))
            last = json.loads(read_all(m.path('rank', 0, 'state')))['last']
            before = got[:last['gsn']]
            want = min(sum(1 for r in before if r['src'] == s) // n for s, n in SIZES.items())
            assert last['epoch'] == want, last
        st = json.loads(read_all(m.path('status')))
    # a: 24 of its 50 samples before gsn 96, so epoch 0; b and c are in epochs 3 and 2
    assert (last['gsn'], last['epoch']) == (96, 0) and 96 // sum(SIZES.values()) == 1
    assert st['epoch'] == 0


def test_status_epoch_is_the_states(sources, tmp_path):
    """/status' epoch is the epoch /rank/<r>/state gives a claim at its consumed_samples:
    one rule (the mixture's, the least epoch of the sources with a weight there), also
    after a weight change that leaves a source out (a: 0, which stays in epoch 0)."""
    mix = spec(tmp_path / 'mix.json', [1, 1, 2], sources)
    j = tmp_path / 'j.sqlite'
    seen = []
    for opts, n in (('global_batch=8,journal=%s' % j, 3),
                    ('global_batch=8,journal=%s,weights=a:0+b:1+c:1' % j, 9)):
        with Mount(mix, tmp_path / 'm', opts) as m:
            for _ in range(n):
                with open(m.path('rank', 0, 'next'), 'rb') as f:   # claimed, not yet read
                    st = json.loads(read_all(m.path('status')))
                    last = json.loads(read_all(m.path('rank', 0, 'state')))['last']
                    assert st['consumed_samples'] == last['gsn'], (st, last)
                    assert st['epoch'] == last['epoch'], (st['consumed_samples'], last)
                    seen.append(st['epoch'])
                    f.read()
    # c (20 samples, half of each step from gsn 24) sets the pace: epochs 0, 1 and 2
    assert seen[0] == 0 and seen[-1] == 2 and sorted(seen) == seen, seen


def test_curriculum_keeps_the_past_and_resumes_elastically(sources, tmp_path):
    mix = spec(tmp_path / 'mix.json', [0.5, 0.3, 0.2], sources)
    j = tmp_path / 'j.sqlite'
    opts = 'world_size=2,global_batch=4,seed=9,journal=%s' % j
    with Mount(mix, tmp_path / 'm', opts) as m:
        for _ in range(5):
            for r in range(2):
                read_all(m.path('rank', r, 'next'))
        before = [at_step(m, 2, g) for g in range(0, 40, 4)]
    # from step 5 (gsn 20) on, b gets nothing and a and c share evenly
    with Mount(mix, tmp_path / 'm', opts + ',weights=c:1+a:1+b:0') as m:
        st = json.loads(read_all(m.path('status')))
        assert st['start_samples'] == 20
        assert [s['start_samples'] for s in st['mixture']['segments']] == [0, 20]
        past = [at_step(m, 2, g) for g in range(0, 20, 4)]
        assert past == before[:5]
        after = steps(m, 2, 5, 10)
    assert all(r['src'] != 'b' for r in after)
    check_prefix_bound(after, {'a': 1, 'c': 1})
    show = run('journal', 'show', '--json', j).stdout.decode()
    assert '5,3,2' in show and '1,0,1' in show
    # an elastic resume at another world size across the change: the same stream
    with Mount(mix, tmp_path / 'm', 'world_size=4,global_batch=4,seed=9,journal=%s,'
               'resume=samples:20,weights=a:1+b:0+c:1' % j) as m:
        st = json.loads(read_all(m.path('status')))
        assert [s['start_samples'] for s in st['mixture']['segments']] == [0, 20]
        ref = steps(m, 4, st['start_step'], 10)
        assert [at_step(m, 4, g) for g in range(0, 20, 4)] == before[:5]
    assert ref == after


def test_a_remount_without_weights_goes_on_with_the_recorded_curriculum(sources, tmp_path):
    """weights= changes the mixture from a mount's start; a mount without it continues
    the weights the journal recorded, changes included, even when it resumes before one."""
    mix = spec(tmp_path / 'mix.json', [0.5, 0.3, 0.2], sources)
    j = tmp_path / 'j.sqlite'
    opts = 'global_batch=4,seed=3,journal=%s' % j
    with Mount(mix, tmp_path / 'm', opts) as m:
        for _ in range(3):
            read_all(m.path('rank', 0, 'next'))
    with Mount(mix, tmp_path / 'm', opts + ',weights=1+1+1') as m:
        for _ in range(2):
            read_all(m.path('rank', 0, 'next'))
        want = [x for g in range(12, 44, 4) for x in at_step(m, 1, g)]
    for extra in ('', ',resume=samples:4'):
        with Mount(mix, tmp_path / 'm', opts + extra) as m:
            st = json.loads(read_all(m.path('status')))
            assert [(g['start_samples'], g['weights']) for g in st['mixture']['segments']] == \
                [(0, [5, 3, 2]), (12, [1, 1, 1])]
            assert st['mixture']['weights'] == ('1,1,1' if not extra else '5,3,2')
            assert [x for g in range(12, 44, 4) for x in at_step(m, 1, g)] == want
    rows = json.loads(run('journal', 'show', '--json', j).stdout)['layouts']
    assert [r['weights'] for r in rows] == ['5,3,2', '1,1,1', None, None]
    # zephon batch replays the same history, and weights= there changes it as a mount would
    got = records(run('batch', mix, '-o', opts + ',resume=samples:12@3', '--rank', 0,
                      '--step', 3).stdout)
    assert got == want[:4]
    alt = records(run('batch', mix, '-o', opts + ',resume=samples:12@3,weights=0+0+1',
                      '--rank', 0, '--step', 3).stdout)
    assert {x['src'] for x in alt} == {'c'}
    p = run('batch', mix, '-o', opts + ',resume=samples:6@1,weights=0+0+1', '--rank', 0,
            '--step', 1, check=False)
    assert p.returncode == 2 and 'step boundary' in p.stderr, p.stderr
    p = run('batch', mix, '-o', 'global_batch=4,seed=4,journal=%s' % j, '--rank', 0,
            '--step', 0, check=False)
    assert p.returncode == 2 and 'belongs to another stream' in p.stderr, p.stderr


def test_resume_fresh_takes_the_specs_weights(sources, tmp_path):
    """resume=fresh starts a new history: the spec's weights hold, not those the journal
    recorded before it (docs/mixtures.md: "the spec's weights count only for a new journal (or
    resume=fresh)"), and a later mount without weights= goes on with them."""
    mix = spec(tmp_path / 'mix.json', [0.35, 0.4, 0.25], sources)
    j = tmp_path / 'j.sqlite'
    opts = 'global_batch=10,seed=2,journal=%s' % j
    with Mount(mix, tmp_path / 'm', opts) as m:
        assert json.loads(read_all(m.path('status')))['mixture']['weights'] == '7,8,5'
        read_all(m.path('rank', 0, 'next'))
    spec(mix, [0.1, 0.1, 0.8], sources)
    for extra in (',resume=fresh', ''):
        with Mount(mix, tmp_path / 'm', opts + extra) as m:
            st = json.loads(read_all(m.path('status')))
            assert st['mixture']['weights'] == '1,1,8', extra
            assert st['mixture']['segments'] == [{'start_samples': 0, 'weights': [1, 1, 8]}]
            if extra:
                assert st['start_samples'] == 0
                first = records(read_all(m.path('rank', 0, 'next')))
                # D = 10 divides the batch: exactly 1, 1 and 8 samples of a, b and c
                assert [sum(r['src'] == s for r in first) for s in 'abc'] == [1, 1, 8]
            else:
                assert st['start_samples'] == 10
    rows = json.loads(run('journal', 'show', '--json', j).stdout)['layouts']
    assert [r['weights'] for r in rows] == ['7,8,5', '1,1,8', None]


def test_weight_change_inside_a_step_is_refused(sources, tmp_path):
    mix = spec(tmp_path / 'mix.json', [0.5, 0.3, 0.2], sources)
    j = tmp_path / 'j.sqlite'
    with Mount(mix, tmp_path / 'm', 'global_batch=4,journal=%s' % j) as m:
        for _ in range(3):
            read_all(m.path('rank', 0, 'next'))
    show = run('journal', 'show', '--json', j).stdout
    (tmp_path / 'm2').mkdir()
    p = run('mount', mix, tmp_path / 'm2', '-f', '-o',
            'global_batch=4,journal=%s,resume=samples:6,weights=1+1+1' % j, check=False)
    assert p.returncode == 2, p.stderr
    assert 'step boundary' in p.stderr and 'samples:4' in p.stderr, p.stderr
    assert run('journal', 'show', '--json', j).stdout == show
    # the same weights inside a step are no change: accepted
    with Mount(mix, tmp_path / 'm2', 'global_batch=4,journal=%s,resume=samples:6' % j):
        pass


def test_bad_input_is_refused_and_changes_nothing(sources, tmp_path):
    (tmp_path / 'm').mkdir()

    def refused(mixfile, opts, why, code=None):
        p = run('mount', mixfile, tmp_path / 'm', '-f', '-o', opts, check=False)
        assert p.returncode != 0 and why in p.stderr, (opts, p.stderr)
        if code is not None:
            assert p.returncode == code, p.stderr
        return p

    good = spec(tmp_path / 'good.json', [1, 1, 1], sources)
    bad_specs = [
        ({'sources': [{'dataset': str(sources['a']), 'weight': -1}]}, 'weight'),
        ({'sources': [{'dataset': str(sources['a']), 'weight': 'x'}]}, 'weight'),
        ({'sources': [{'dataset': str(sources['a']), 'weight': 0}]}, 'sum'),
        ({'sources': [{'dataset': str(tmp_path / 'nope'), 'weight': 1}]}, 'nope'),
        ({'sources': [{'dataset': str(sources['a']), 'weight': 1, 'wieght': 2}]}, 'wieght'),
        ({'sources': []}, 'sources'),
    ]
    for k, (body, why) in enumerate(bad_specs):
        f = tmp_path / ('bad%d.json' % k)
        f.write_text(json.dumps(body))
        refused(f, 'global_batch=2', why)
        assert not (tmp_path / ('bad%d.journal.sqlite' % k)).exists()
    (tmp_path / 'notjson.json').write_text('{"sources": [')
    refused(tmp_path / 'notjson.json', 'global_batch=2', 'notjson.json')
    # sources of another batch format
    write_tokens(tmp_path / 't.bin', 400)
    toks = pack(tmp_path / 'toks', [tmp_path / 't.bin'], '--format', 'bin', '--dtype',
                'uint16', '--seq-len', 8)
    mixed = spec(tmp_path / 'mixed.json', [1, 1], {'a': sources['a'], 't': toks})
    refused(mixed, 'global_batch=2', 'differ in')
    for opts, why in (('weights=1+2', '2 weights for 3 sources'),
                      ('weights=a:1+b:1+d:1', 'no source is named "d"'),
                      ('weights=-1+1+1', '>= 0'),
                      ('weights=0+0+0', 'sum to 0'),
                      ('validation=0.7', 'validation=0.7'),
                      ('validation=abc', 'validation=abc'),
                      ('validation=1e-9', 'not a fraction with a denominator up to 10^6'),
                      ('validation=0.01', 'holds out no sample')):
        refused(good, 'global_batch=2,' + opts, why, code=2)
    assert not (tmp_path / 'good.journal.sqlite').exists()
    refused(sources['a'], 'weights=1', 'applies to a mixture spec only', code=2)
    tiny = spec(tmp_path / 'tiny.json', [1e-12, 1], {'a': sources['a'], 'b': sources['b']})
    p = refused(tiny, 'global_batch=2', 'mixture spec %s: the weights' % tiny, code=1)
    assert 'invalid mount options' not in p.stderr
    for cmd in ('info', 'verify'):
        p = run(cmd, good, check=False)
        assert p.returncode == 2 and 'is a mixture spec, not a dataset directory' in p.stderr
    # a journal of another mixture
    j = tmp_path / 'j.sqlite'
    with Mount(good, tmp_path / 'm', 'global_batch=3,journal=%s' % j):
        pass
    other = spec(tmp_path / 'other.json', [1, 1, 1],
                 {'c': sources['c'], 'b': sources['b'], 'a': sources['a']})
    show = run('journal', 'show', '--json', j).stdout
    refused(other, 'global_batch=3,journal=%s' % j, 'fingerprint')
    refused(good, 'global_batch=3,journal=%s,validation=0.1' % j, 'validation')
    assert run('journal', 'show', '--json', j).stdout == show


def test_validation_split(sources, tmp_path):
    ds = sources['a']               # 50 samples: 10 held out with 0.2
    views = {}
    for seed, w in ((1, 1), (2, 2), (3, 5)):
        opts = 'world_size=%d,global_batch=10,seed=%d,validation=0.2,journal=%s' % (
            w, seed, tmp_path / ('j%d' % seed))
        with Mount(ds, tmp_path / 'm', opts) as m:
            st = json.loads(read_all(m.path('status')))
            assert st['validation'] == {'split': '1/5', 'samples': 10, 'steps': 1}
            assert sorted(p.name for p in m.path('rank', 0, 'validation').iterdir()) == ['0']
            val = []
            for r in range(w):
                val += records(read_all(m.path('rank', r, 'validation', 0)))
            train = steps(m, w, 0, 8)         # two epochs of the 40 training samples
            assert not m.path('rank', 0, 'validation', 1).exists()
            again = []
            for r in range(w):
                again += records(read_all(m.path('rank', r, 'validation', 0)))
            assert again == val
            assert json.loads(read_all(m.path('status')))['cursors']['0']['step'] == 0
        held = {x['i'] for x in val}
        assert len(held) == 10
        for e in range(2):
            ids = [x['i'] for x in train[40 * e:40 * (e + 1)]]
            assert sorted(ids) == sorted(set(range(50)) - held)
        views[seed] = val
    # the same held-out samples, in the same order, for every seed and world size
    assert views[1] == views[2] == views[3]


def test_mixture_validation_is_each_sources_split(sources, tmp_path):
    mix = spec(tmp_path / 'mix.json', [1, 1, 1], sources)
    with Mount(mix, tmp_path / 'm', 'global_batch=2,validation=1/5') as m:
        st = json.loads(read_all(m.path('status')))
        # 50/5 + 7/5 + 20/5 = 10 + 1 + 4
        assert st['validation']['samples'] == 15
        assert [s['validation_samples'] for s in st['mixture']['sources']] == [10, 1, 4]
        val = []
        for t in range(st['validation']['steps']):
            val += records(read_all(m.path('rank', 0, 'validation', t)))
        train = steps(m, 1, 0, 60)
    assert [x['src'] for x in val] == ['a'] * 10 + ['b'] + ['c'] * 3
    held = {(x['src'], x['i']) for x in val}
    assert not held & {(x['src'], x['i']) for x in train}


def test_weight_change_across_a_kill_and_a_batch_change(sources, tmp_path):
    """Weights 5:3:2, then 1:1:1 from a remount; the daemon is killed with -9 mid-run
    and resumed at another world size and global batch. Every claim, placed at its gsn,
    is the W=1 stream that `zephon batch` replays from the journal's weight history, and
    the records themselves keep each segment's bound and each source's epochs."""
    mix = spec(tmp_path / 'mix.json', [0.5, 0.3, 0.2], sources)
    j = tmp_path / 'j.sqlite'
    served = {}

    def claims(m, w, b, rounds):
        st = json.loads(read_all(m.path('status')))
        g0, share = st['start_samples'], b // w
        for k in range(rounds):
            for r in range(w):
                got = records(read_all(m.path('rank', r, 'next')))
                for i, x in enumerate(got):
                    served[g0 + k * b + r * share + i] = x
        return g0

    with Mount(mix, tmp_path / 'm', 'world_size=2,global_batch=4,seed=2,journal=%s' % j) as m:
        claims(m, 2, 4, 3)
    m = Mount(mix, tmp_path / 'm', 'world_size=2,global_batch=4,seed=2,journal=%s,'
              'weights=1+1+1' % j).start()
    g_change = claims(m, 2, 4, 4)
    assert g_change == 12
    m.kill9()
    m.stop()
    with Mount(mix, tmp_path / 'm', 'world_size=3,global_batch=6,micro_batch=1,seed=2,'
               'journal=%s,weights=1+1+1' % j) as m:
        st = json.loads(read_all(m.path('status')))
        assert [s['start_samples'] for s in st['mixture']['segments']] == [0, 12]
        g1 = st['start_samples']
        assert 12 < g1 <= 28 and (g1 - 12) % 4 == 0
        for k in range(5):
            for r in range(3):
                for i in range(2):
                    x = records(read_all(m.path('rank', r, 'next')))
                    served[g1 + k * 6 + r * 2 + i] = x[0]
    end = max(served) + 1
    ref = records(run('batch', mix, '-o', 'global_batch=%d,seed=2,journal=%s' % (end, j),
                      '--rank', 0, '--step', 0).stdout)
    for g, x in served.items():
        assert x == ref[g], g
    assert all(g in served for g in range(end))
    check_prefix_bound(ref[:12], {'a': 5, 'b': 3, 'c': 2})
    check_prefix_bound(ref[12:end], {'a': 1, 'b': 1, 'c': 1})
    for name, n in SIZES.items():
        mine = [x['i'] for x in ref[:end] if x['src'] == name]
        for k in range(0, len(mine) - n + 1, n):
            assert sorted(mine[k:k + n]) == list(range(n)), name
    # without the journal, zephon batch serves the spec's weights throughout
    plain = records(run('batch', mix, '-o', 'global_batch=%d,seed=2' % end, '--rank', 0,
                        '--step', 0).stdout)
    assert plain[:12] == ref[:12] and plain[12:end] != ref[12:end]


def test_a_mixture_of_1024_sources(sources, tmp_path):
    """MIXSPEC_MAX_SOURCES = 1,024 sources (one dataset under 1,024 names, equal weights):
    the first 1,024 samples hold one of each source, as the schedule's bound says (every
    prefix within 1 of n * w_s); 1,025 sources are refused, naming the limit."""
    names = ['s%04d' % k for k in range(1025)]
    many = {n: sources['a'] for n in names}
    mix = spec(tmp_path / 'mix.json', [1] * 1024, dict(list(many.items())[:1024]))
    with Mount(mix, tmp_path / 'm', 'world_size=1,global_batch=1024') as m:
        got = records(read_all(m.path('rank', 0, 'next')))
        last = json.loads(read_all(m.path('rank', 0, 'state')))['last']
        st = json.loads(read_all(m.path('status')))
    assert len(got) == 1024
    assert sorted(last['source']) == names[:1024]
    assert len(st['mixture']['sources']) == 1024
    too = spec(tmp_path / 'too.json', [1] * 1025, many)
    (tmp_path / 'm2').mkdir()
    p = run('mount', too, tmp_path / 'm2', '-o', 'world_size=1,global_batch=1025',
            '--check', check=False)
    assert p.returncode != 0 and 'at most 1024' in p.stderr, p.stderr
