"""The elastic property (docs/design.md §3 and §6), through real mounts.

Random histories of remounts: global_batch B sometimes changed, world_size W drawn from
the divisors of B, micro_batch m from the divisors of B/W, one mount or several "nodes"
(separate mounts with their own journals and ranks=), checkpoint marks and rewinds
through /control, and daemons killed with SIGKILL in the middle of reads. Asserted:
  - every claim's bytes are the uninterrupted W=1 stream at the claim's gsn;
  - each mount starts where the resume rules say (latest position statement when there
    is a checkpoint mark, else the slowest rank's completed steps), `zephon journal
    resume-point` agrees, and step numbers continue across remounts;
  - a killed daemon forgot no claim a reader received, counts as delivered no batch a
    reader did not finish (its close() failed or never came: served again, never
    skipped), and serves again at most the last batch each reader finished (its
    delivery is committed right after its close() is answered; repeats counted);
  - complete steps, concatenated over ranks in rank order, equal the W=1 step;
  - below the final resume point every gsn was served, so every epoch there covers every
    sample exactly once.
ZEPHON_ELASTIC_HISTORIES (default 50) sets the number of histories; a failure prints
the seed (ZEPHON_ELASTIC_SEED=S replays one).
"""
import json
import os
import random
import threading
import time

import pytest

from conftest import Mount, pack, read_all, run, unmount, write_jsonl

N = 37                      # samples: histories cross many epochs
BATCHES = [4, 6, 8, 12]
REF_LEN = 12 * N * 8        # gsns of the reference stream


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@pytest.fixture(scope='module')
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp('elastic')
    write_jsonl(d / 'in.jsonl', N)
    ds = pack(d / 'ds', [d / 'in.jsonl'])
    return ds, Reference(ds)


@pytest.fixture(scope='module')
def mixture(tmp_path_factory):
    """Three sources of 20, 7 and 15 records, weights 0.5, 0.3, 0.2; record "i" is unique
    across them (source k's records are 100 * k + j)."""
    d = tmp_path_factory.mktemp('elastic-mix')
    srcs = []
    for k, n in enumerate((20, 7, 15)):
        (d / ('s%d.jsonl' % k)).write_text(''.join('{"i": %d}\n' % (100 * k + j)
                                                   for j in range(n)))
        srcs.append({'name': 's%d' % k, 'dataset': str(pack(d / ('s%d' % k),
                                                             [d / ('s%d.jsonl' % k)])),
                     'weight': (0.5, 0.3, 0.2)[k]})
    (d / 'mix.json').write_text(json.dumps({'sources': srcs}))
    return d / 'mix.json', Reference(d / 'mix.json')


class Reference:
    """The uninterrupted single-rank stream, sample ids by gsn, as `zephon batch` gives
    it; made longer whenever a history reads past it (how far a reader thread gets
    before a kill depends on the machine's speed)."""

    def __init__(self, ds):
        self.ds, self.ids = ds, []
        self.extend(REF_LEN)

    def extend(self, n):
        if n > len(self.ids):
            n = max(n, 2 * len(self.ids))
            out = run('batch', self.ds, '-o', 'world_size=1,global_batch=%d,seed=5' % n,
                      '--rank', 0, '--step', 0).stdout
            self.ids = [ids_of(l) for l in out.splitlines()]

    def __getitem__(self, key):
        end = (key.stop if isinstance(key, slice) else key + 1)
        self.extend(end)
        return self.ids[key]


def ids_of(line):
    return json.loads(line)['i']


class History:
    def __init__(self, ds, ref, tmp, seed):
        self.ds, self.ref, self.tmp = ds, ref, tmp
        self.rng = random.Random(seed)
        self.served = {}          # gsn -> sample id, as last served
        # (step, gsn, kind, journal) of marks, rewinds and explicit starts, in order
        self.statements = []
        self.layout = None        # (S0, G0, W, B, m) of the current round
        self.cursor = {}          # rank -> [step, micro] (the next claim)
        # rank -> [step, micro]: the delivered position the journal holds (every claim
        # before it was read whole and closed). A close writes it before it returns, so
        # it is the cursor after every claim read here; a kill -9 may leave a claim in
        # flight (opened, not closed) undelivered.
        self.written = {}
        self.killed = None
        self.mounts = []          # [(Mount, ranks, journal)]
        self.round = 0
        self.prev_nodes = 1
        self.whole_epochs = True  # a mixture has per-source epochs, not N-sample ones
        self.kills = 0
        self.claims = 0           # claims read (finished or in flight at a kill)
        self.repeats = 0          # finished claims a kill left undelivered: the last
                                  # one of a reader at most

    # -- the model ---------------------------------------------------------------
    def gsn(self, rank, step, micro):
        s0, g0, w, b, m = self.layout
        return g0 + (step - s0) * b + rank * (b // w) + micro * m

    def log(self, *a):
        if os.environ.get('ZEPHON_ELASTIC_TRACE'):
            print(*a)

    def resume_point(self, journals=None):
        """(S, G) where the next round starts when resuming from `journals` (default all):
        docs/design.md §6, as journal.h states it. With a checkpoint mark in
        those journals, the latest position statement in them; else the slowest rank's
        completed steps in the last layout."""
        if self.layout is None:
            return 0, 0
        seen = [x for x in self.statements if journals is None or x[3] in journals]
        if any(kind == 'mark' for _, _, kind, _ in seen):
            return seen[-1][:2]
        s0, g0, w, b, m = self.layout
        done = min(self.written[r][0] - s0 for r in range(w))
        return s0 + done, g0 + done * b

    # -- actions -----------------------------------------------------------------
    def start_round(self, b, w, m, nodes):
        # auto reads one journal: right when the previous round was one mount too
        auto = nodes == 1 and self.prev_nodes == 1 and self.rng.random() < 0.8
        j0 = self.tmp / 'j0.sqlite'
        s_expect, g_expect = self.resume_point([j0] if auto else None)
        ranks = list(range(w))
        self.rng.shuffle(ranks)
        cuts = sorted(self.rng.sample(range(1, w), nodes - 1)) if nodes > 1 else []
        groups = [sorted(ranks[i:j]) for i, j in zip([0] + cuts, cuts + [w])]
        opts = 'world_size=%d,global_batch=%d,micro_batch=%d,seed=5' % (w, b, m)
        if auto:
            resume = 'auto'
            journals = [j0]
        else:
            journals = [self.tmp / ('j%d.sqlite' % i) for i in range(max(nodes, 1))]
            resume = 'samples:%d@%d' % (g_expect, s_expect)
            prev = sorted(str(p) for p in self.tmp.glob('j*.sqlite'))
            if prev:  # what a launcher does: one resume point over every node's journal
                point = run('journal', 'resume-point', *prev).stdout.decode().strip()
                assert point == resume, (point, resume)
        self.mounts = []
        for i, group in enumerate(groups):
            o = '%s,ranks=%s,journal=%s,resume=%s' % (
                opts, ','.join(map(str, group)), journals[i], resume)
            mnt = Mount(self.ds, self.tmp / ('mnt%d_%d' % (self.round, i)), o).start()
            mnt.journal = journals[i]
            self.mounts.append((mnt, group))
            status = json.loads(read_all(mnt.path('status')))
            assert (status['start_step'], status['start_samples']) == (s_expect, g_expect), \
                (status, s_expect, g_expect)
        self.log('round', self.round, 'W B m', w, b, m, 'groups', groups, 'resume', resume,
                 'start', s_expect, g_expect)
        self.round += 1
        self.prev_nodes = nodes
        self.layout = (s_expect, g_expect, w, b, m)
        self.cursor = {r: [s_expect, 0] for r in range(w)}
        self.written = {r: [s_expect, 0] for r in range(w)}
        self.killed = None
        if resume != 'auto':
            self.statements += [(s_expect, g_expect, 'start', j) for j in journals[:nodes]]
        self.round_claims = {r: [] for r in range(w)}

    def mount_of(self, rank):
        return next(mnt for mnt, group in self.mounts if rank in group)

    def claim(self, rank):
        s0, g0, w, b, m = self.layout
        data = read_all(self.mount_of(rank).path('rank', rank, 'next'))
        self.check_claim(rank, [ids_of(l) for l in data.splitlines()])

    def check_claim(self, rank, ids):
        s0, g0, w, b, m = self.layout
        step, micro = self.cursor[rank]
        g = self.gsn(rank, step, micro)
        assert ids == self.ref[g:g + m], ('rank', rank, 'step', step, 'micro', micro, 'gsn', g)
        for i, sid in enumerate(ids):
            self.served[g + i] = sid
        self.claims += 1
        self.round_claims[rank].append((step, micro, ids))
        self.advance(rank)
        self.written[rank] = list(self.cursor[rank])   # finished: written by its close

    def advance(self, rank):
        s0, g0, w, b, m = self.layout
        c = self.cursor[rank]
        c[1] += 1
        if c[1] == b // w // m:
            c[0], c[1] = c[0] + 1, 0

    def control(self, verb):
        s0 = self.layout[0]
        low = min(c[0] for c in self.cursor.values())
        step = self.rng.randint(s0, low)
        targets = [mnt for mnt, _ in self.mounts]
        if verb == 'checkpoint':
            targets = [self.rng.choice(targets)]
        for mnt in targets:
            with open(mnt.path('control'), 'w') as f:
                f.write('%s %d\n' % (verb, step))
            self.statements.append((step, self.gsn(0, step, 0),
                                    'mark' if verb == 'checkpoint' else 'rewind', mnt.journal))
        self.log(verb, step, 'cursors', self.cursor)
        if verb == 'rewind':
            for r in self.cursor:
                self.cursor[r] = [step, 0]
                self.written[r] = [step, 0]

    def kill_during_reads(self):
        """SIGKILL one node's daemon while a thread reads one of its ranks."""
        mnt, group = self.rng.choice(self.mounts)
        rank = self.rng.choice(group)
        got, stop = [], threading.Event()
        inflight = []   # a claim opened and not finished: [bytes read or None]

        def reader():
            path = mnt.path('rank', rank, 'next')
            while not stop.is_set():
                try:
                    f = open(path, 'rb')
                except OSError:
                    return
                inflight.append(None)
                try:
                    inflight[-1] = f.read()
                    f.close()   # finished: close() returned
                except OSError:
                    return
                got.append(inflight.pop())
        t = threading.Thread(target=reader)
        t.start()
        time.sleep(self.rng.uniform(0.001, 0.03))
        mnt.kill9()
        self.killed = mnt
        self.log('kill -9 while reading rank', rank, 'of', group)
        stop.set()
        t.join(timeout=30)
        assert not t.is_alive()
        unmount(mnt.mp)
        mnt.stop(check=True)
        for data in got:
            self.check_claim(rank, [ids_of(l) for l in data.splitlines()])
        finished = {r: list(self.written[r]) for r in group}
        # Nothing handed out is forgotten: the journal has every claim the reader got
        # (finished or in flight). Its cursor may be one claim further: the one the
        # reader was opening when the daemon died, or one a close reserved (its commit
        # carries the rank's next claim); neither was handed out whole.
        show = json.loads(run('journal', 'show', '--json', mnt.journal).stdout)
        cursors = show['layouts'][-1]['cursors']
        s0, g0, w, b, m = self.layout
        for r in group:
            if r == rank and inflight:
                # opened (journaled), then lost with the daemon: the reader may have had
                # some of its bytes, which are the pure function of its gsn
                g = self.gsn(r, *self.cursor[r])
                self.served.update((g + i, self.ref[g + i]) for i in range(m))
                self.advance(r)
            jc = [cursors[str(r)]['step'], cursors[str(r)]['micro']]
            c = self.cursor[r]
            ahead = [c[0] + 1, 0] if c[1] + 1 == b // w // m else [c[0], c[1] + 1]
            assert jc in (self.cursor[r], ahead), (r, jc, self.cursor[r])
            # Every batch a reader finished is delivered, but perhaps its last (killed
            # between its close's reply and the commit); the in-flight one is not (its
            # close failed or never came, so its reader may not use it): ahead of what
            # the reader finished would be a skip.
            jd = [cursors[str(r)]['delivered_step'], cursors[str(r)]['delivered_micro']]
            repeats = self.claims_between(jd, finished[r])
            self.repeats += repeats
            assert repeats <= 1, ('finished batches served again', r, jd, finished[r])
            assert jd <= finished[r], ('delivered ahead of what was finished', r, jd,
                                       finished[r])
            self.written[r] = jd
        self.kills += 1
        self.log('kill -9: journal cursors', cursors)

    def claims_between(self, lo, hi):
        """Claims of one rank from position lo up to hi (0 when hi <= lo)."""
        s0, g0, w, b, m = self.layout
        a = b // w // m
        return max(0, (hi[0] * a + hi[1]) - (lo[0] * a + lo[1]))

    def stop_mounts(self):
        """Unmount every mount of the round; the clean ones write their deliveries (the
        killed one was stopped and checked already)."""
        for mnt, group in self.mounts:
            mnt.stop()
            if mnt is not self.killed:
                for r in group:
                    self.written[r] = list(self.cursor[r])

    def end_round(self):
        self.stop_mounts()
        self.check_complete_steps()

    def check_complete_steps(self):
        """Steps every rank claimed whole in this round: their rank-order concatenation
        is the W=1 step."""
        s0, g0, w, b, m = self.layout
        a = b // w // m
        by_step = {}
        for r, claims in self.round_claims.items():
            for step, micro, ids in claims:
                by_step.setdefault(step, {})[(r, micro)] = ids
        for step, parts in by_step.items():
            if len(parts) == w * a:
                cat = [i for r in range(w) for k in range(a) for i in parts[(r, k)]]
                start = g0 + (step - s0) * b
                assert cat == self.ref[start:start + b], ('step', step)

    def run(self):
        b = self.rng.choice(BATCHES)
        for rnd in range(self.rng.randint(3, 5)):
            if rnd and self.rng.random() < 0.4:
                b = self.rng.choice(BATCHES)
            w = self.rng.choice(divisors(b))
            m = self.rng.choice(divisors(b // w))
            nodes = self.rng.choice([1, 1, 2, 3]) if w > 1 else 1
            nodes = min(nodes, w)
            self.start_round(b, w, m, nodes)
            a = b // w // m
            killed = False
            for _ in range(self.rng.randint(0, 4 * w * a)):
                self.claim(self.rng.randrange(w))
                x = self.rng.random()
                if x < 0.04:
                    self.control('checkpoint')
                elif x < 0.06:
                    self.control('rewind')
                elif x < 0.08:
                    self.kill_during_reads()
                    killed = True
                    break
            self.end_round() if not killed else self.stop_mounts()
            if killed:
                self.check_complete_steps()
        # Below the final resume point every gsn was served: each epoch there is whole.
        _, g_end = self.resume_point()
        assert all(g in self.served for g in range(g_end)), 'gap below the resume point'
        for e in range(g_end // N if self.whole_epochs else 0):
            assert sorted(self.served[g] for g in range(e * N, (e + 1) * N)) == list(range(N))


def history_seeds():
    if os.environ.get('ZEPHON_ELASTIC_SEED'):
        return [int(os.environ['ZEPHON_ELASTIC_SEED'])]
    return list(range(int(os.environ.get('ZEPHON_ELASTIC_HISTORIES', '50'))))


@pytest.mark.parametrize('seed', history_seeds())
def test_elastic_history(dataset, tmp_path, seed):
    run_history(*dataset, tmp_path, seed)


@pytest.mark.parametrize('seed', history_seeds()[:12])
def test_elastic_mixture_history(mixture, tmp_path, seed):
    """The same histories over a weighted mixture of three datasets (docs/mixtures.md)."""
    run_history(*mixture, tmp_path, seed, whole_epochs=False)


def run_history(ds, ref, tmp_path, seed, whole_epochs=True):
    h = History(ds, ref, tmp_path, seed)
    h.whole_epochs = whole_epochs
    try:
        h.run()
        print('elastic history %d: %d kills, %d claims, %d finished claims served again'
              % (seed, h.kills, h.claims, h.repeats))
    except BaseException:
        for mnt, _ in h.mounts:
            mnt.stop(check=False)
        print('elastic history failed: replay with ZEPHON_ELASTIC_SEED=%d' % seed)
        raise
