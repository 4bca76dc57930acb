"""`zephon journal show` and `zephon journal resume-point`.

The journals here are written with Python's sqlite3 from schema/journal.sql, the
documented on-disk format (core/journal/journal.h, docs/design.md §6), so the CLI is checked
against the format rather than against the C code that writes it. The resume rules
themselves are covered in depth by the C tests (tests/unit/test_journal*.c).
"""
import json
import os
import pathlib
import sqlite3
import subprocess
import sys

import pytest

from conftest import ZEPHON, run

SCHEMA = pathlib.Path(__file__).resolve().parents[2] / 'schema' / 'journal.sql'
APP_ID = 0x5a50484a
FP = '0123456789abcdef0123456789abcdef'
T0 = 1_790_000_000_000_000  # unix microseconds


def make_journal(path, events, fp=FP, seed=7, shuffle='global', samples=1000,
                 user_version=1, keep_open=False, t0=T0):
    """Write a journal. events, in order: ('layout', dict) with W, B, m, ranks, S0, G0,
    rule, applied, cursors {rank: (step, micro)}, host; ('mark', step, gsn);
    ('rewind', step, gsn, {rank: (step, micro)}). Marks and rewinds belong to the
    latest layout. Returns the connection if keep_open (WAL, exclusive, never closed)."""
    con = sqlite3.connect(str(path), isolation_level=None)
    con.execute('PRAGMA page_size = 1024')
    con.execute('PRAGMA application_id = %d' % APP_ID)
    con.executescript('BEGIN;' + SCHEMA.read_text() + 'COMMIT;')
    con.execute('PRAGMA user_version = %d' % user_version)
    for k, v in [('fingerprint', fp), ('seed', str(seed)), ('shuffle', shuffle),
                 ('samples', str(samples)), ('created', '1790000000'),
                 ('zephon_version', 'test')]:
        con.execute('INSERT INTO meta VALUES (?, ?)', (k, v))
    if keep_open:  # as a mount does: exclusive, then WAL (no -shm)
        con.execute('PRAGMA locking_mode = EXCLUSIVE')
        con.execute('PRAGMA journal_mode = WAL')
    layout = None
    for seq, ev in enumerate(events, 1):
        t = t0 + seq * 1000
        if ev[0] == 'layout':
            d = ev[1]
            cur = con.execute(
                'INSERT INTO layout (seq, world_size, global_batch, micro_batch, ranks, '
                'start_step, start_samples, time_us, host, rule, applied) '
                'VALUES (?,?,?,?,?,?,?,?,?,?,?)',
                (seq, d['W'], d['B'], d['m'], d['ranks'], d['S0'], d['G0'], t,
                 d.get('host', 'node-a'), d.get('rule', 'auto'),
                 d.get('applied', d.get('rule', 'auto'))))
            layout = cur.lastrowid
            for r, (s, mi) in d['cursors'].items():
                con.execute('INSERT INTO cursor VALUES (?,?,?,?)', (layout, r, s, mi))
        elif ev[0] == 'mark':
            con.execute('INSERT INTO mark (seq, layout, step, gsn, time_us) '
                        'VALUES (?,?,?,?,?)', (seq, layout, ev[1], ev[2], t))
        elif ev[0] == 'rewind':
            cur = con.execute('INSERT INTO rewind (seq, layout, step, gsn, time_us) '
                              'VALUES (?,?,?,?,?)', (seq, layout, ev[1], ev[2], t))
            for r, (s, mi) in ev[3].items():
                con.execute('INSERT INTO rewind_cursor VALUES (?,?,?,?)',
                            (cur.lastrowid, r, s, mi))
            con.execute('UPDATE cursor SET step = ?, micro = 0 WHERE layout = ?',
                        (ev[1], layout))
    if keep_open:
        return con
    con.close()
    return None


def lay(W, B, m, ranks, S0, G0, cursors, **kw):
    d = dict(W=W, B=B, m=m, ranks=ranks, S0=S0, G0=G0, cursors=cursors)
    d.update(kw)
    return ('layout', d)


HISTORY = [
    lay(4, 16, 2, '0-3', 0, 0, {0: (5, 0), 1: (5, 1), 2: (3, 1), 3: (4, 0)},
        applied='auto: the journal has no layout yet -> step 0, samples:0', host='gpu-node-7'),
    lay(2, 24, 3, '0-1', 3, 48, {0: (9, 2), 1: (8, 0)},
        applied='auto: every rank of the last layout completed the steps below 3 -> step 3, '
                'samples:48'),
]


def test_help_and_usage_errors():
    p = run('journal', '--help')
    assert p.stdout.decode().startswith('usage: zephon journal show PATH')
    assert 'resume-point' in p.stdout.decode()
    assert run('journal', 'show', '-h').returncode == 0
    for args in [('journal',), ('journal', 'bogus'), ('journal', 'show'),
                 ('journal', 'show', '--bogus', 'x'), ('journal', 'resume-point'),
                 ('journal', 'show', 'a', 'b')]:
        p = run(*args, check=False)
        assert p.returncode == 2, args
        assert 'zephon' in p.stderr or 'usage' in p.stderr


def test_show_text(tmp_path):
    j = tmp_path / 'j.sqlite'
    make_journal(j, HISTORY + [('mark', 6, 120), ('rewind', 7, 144, {0: (9, 2), 1: (8, 0)})])
    out = run('journal', 'show', j).stdout.decode()
    assert 'fingerprint %s, seed 7, shuffle global (1000 samples)' % FP in out
    lines = out.splitlines()
    row1 = next(l for l in lines if l.split()[:1] == ['1'])
    assert row1.split()[3:] == ['gpu-node-7', '4', '16', '2', '0-3', '0', '0']
    row2 = next(l for l in lines if l.split()[:1] == ['2'])
    assert row2.split()[3:] == ['node-a', '2', '24', '3', '0-1', '3', '48']
    assert 'completed the steps below 3 -> step 3, samples:48' in out
    # cursors grouped by runs of ranks; consumed per layout: G0 + min completed * B
    assert 'rank 0 at 5.0, rank 1 at 5.1, rank 2 at 3.1, rank 3 at 4.0' in out
    assert 'consumed_samples 48;' in out
    assert 'ranks 0-1 at 7.0' in out
    assert 'step 6 (samples 120)' in out
    assert 'to step 7 (samples 144)' in out and 'rank 0 at 9.2, rank 1 at 8.0' in out
    assert 'consumed_samples  144 (the last layout)' in out
    # the latest statement after a mark is the rewind
    assert 'resume point      samples:144 (step 7): rewind to step 7' in out
    # one dataset, no validation split: neither is shown
    assert 'weights' not in out and 'split' not in out


def test_show_json(tmp_path):
    j = tmp_path / 'j.sqlite'
    make_journal(j, HISTORY + [('mark', 6, 120)])
    d = json.loads(run('journal', 'show', '--json', j).stdout)
    assert d['journal'] == str(j)
    assert (d['fingerprint'], d['seed'], d['shuffle'], d['samples']) == (FP, 7, 'global', 1000)
    assert [l['world_size'] for l in d['layouts']] == [4, 2]
    l0, l1 = d['layouts']
    assert (l0['global_batch'], l0['micro_batch'], l0['ranks'], l0['start_step'],
            l0['start_samples'], l0['host']) == (16, 2, '0-3', 0, 0, 'gpu-node-7')
    assert l0['time'] == (T0 + 1000) // 1000000
    assert l0['rule'] == 'auto' and l0['resume'].startswith('auto: the journal has no layout')
    # a version-1 journal (claims only): each cursor counts as delivered
    assert l0['cursors'] == {r: {'step': st, 'micro': mi, 'delivered_step': st,
                                 'delivered_micro': mi}
                             for r, (st, mi) in {'0': (5, 0), '1': (5, 1), '2': (3, 1),
                                                 '3': (4, 0)}.items()}
    assert l0['consumed_samples'] == 48
    assert l1['consumed_samples'] == 48 + 5 * 24
    assert d['checkpoints'] == [{'step': 6, 'samples': 120, 'time': (T0 + 3000) // 1000000,
                                 'time_us': T0 + 3000, 'layout': 2}]
    assert d['rewinds'] == []
    assert d['consumed_samples'] == 168
    assert d['resume_point'] == {'resume': 'samples:120@6', 'samples': 120, 'step': 6,
                                 'basis': 'statement', 'why': 'checkpoint mark at step 6',
                                 'warning': None}
    assert d['split'] is None and [l['weights'] for l in d['layouts']] == [None, None]


def upgrade_to_3(path, weights, split=None):
    """Take a journal make_journal() wrote (version 1) to schema version 3 as the
    migration steps document it (core/journal/journal.h): delivered positions, layout.weights
    ({layout id: text}), and the meta key split when given."""
    con = sqlite3.connect(str(path), isolation_level=None)
    con.executescript(
        'BEGIN;'
        'ALTER TABLE cursor ADD COLUMN delivered_step INTEGER NOT NULL DEFAULT 0;'
        'ALTER TABLE cursor ADD COLUMN delivered_micro INTEGER NOT NULL DEFAULT 0;'
        'UPDATE cursor SET delivered_step = step, delivered_micro = micro;'
        'ALTER TABLE layout ADD COLUMN weights TEXT;'
        'COMMIT;')
    for layout, text in weights.items():
        con.execute('UPDATE layout SET weights = ? WHERE id = ?', (text, layout))
    if split is not None:
        con.execute("INSERT INTO meta VALUES ('split', ?)", (split,))
    con.execute('PRAGMA user_version = 3')
    con.close()


def test_show_mixture_weights_and_split(tmp_path):
    j = tmp_path / 'j.sqlite'
    make_journal(j, HISTORY)
    upgrade_to_3(j, {2: '7,3,0'}, split='validation=1/100')
    out = run('journal', 'show', j).stdout.decode()
    assert ('fingerprint %s, seed 7, shuffle global, split validation=1/100 (1000 samples)'
            % FP) in out
    lines = out.splitlines()
    # the layout rows keep their columns; the weights follow the row they belong to
    i1 = next(i for i, l in enumerate(lines) if l.split()[:1] == ['1'])
    i2 = next(i for i, l in enumerate(lines) if l.split()[:1] == ['2'])
    assert lines[i1].split()[3:] == ['gpu-node-7', '4', '16', '2', '0-3', '0', '0']
    assert lines[i2].split()[3:] == ['node-a', '2', '24', '3', '0-1', '3', '48']
    weights = [i for i, l in enumerate(lines) if l.split()[:1] == ['weights']]
    assert len(weights) == 1 and i2 < weights[0]
    assert lines[weights[0]].split()[1] == '7,3,0'
    d = json.loads(run('journal', 'show', '--json', j).stdout)
    assert d['split'] == 'validation=1/100'
    assert [l['weights'] for l in d['layouts']] == [None, '7,3,0']
    # the journals of one job share the split: another split is another job
    k = tmp_path / 'k.sqlite'
    make_journal(k, HISTORY)
    upgrade_to_3(k, {}, split='validation=1/50')
    p = run('journal', 'resume-point', j, k, check=False)
    assert p.returncode == 1
    assert 'split validation=1/100' in p.stderr and 'split validation=1/50' in p.stderr


def test_show_empty_history(tmp_path):
    j = tmp_path / 'j.sqlite'
    make_journal(j, [])
    out = run('journal', 'show', j).stdout.decode()
    assert 'none: no mount has started' in out
    assert 'resume point      samples:0 (step 0)' in out
    d = json.loads(run('journal', 'show', j, '--json').stdout)
    assert d['layouts'] == [] and d['resume_point']['basis'] == 'empty'
    assert run('journal', 'resume-point', j).stdout == b'samples:0@0\n'


def test_resume_point_one_journal(tmp_path):
    j = tmp_path / 'j.sqlite'
    make_journal(j, HISTORY)
    # no marks: the last layout's slowest rank completed 8 - 3 = 5 steps of 24
    p = run('journal', 'resume-point', j)
    assert p.stdout == b'samples:168@8\n'
    assert p.stderr == ''
    d = json.loads(run('journal', 'resume-point', '--json', j).stdout)
    assert (d['resume'], d['samples'], d['step'], d['basis']) == ('samples:168@8', 168, 8,
                                                                 'cursors')
    assert d['journals'] == [str(j)]
    assert d['last_layout'] == {'world_size': 2, 'global_batch': 24, 'micro_batch': 3,
                                'start_step': 3, 'start_samples': 48}
    assert 'rank 1 is the slowest' in d['why']


def test_resume_point_several_nodes(tmp_path):
    a, b, c = (tmp_path / ('node%d.sqlite' % i) for i in range(3))
    # one job layout W=4, B=8 from samples:80 (step 10); node a serves 0-1, node b 2-3
    make_journal(a, [lay(4, 8, 1, '0-1', 10, 80, {0: (17, 0), 1: (15, 1)},
                         rule='samples:80')])
    make_journal(b, [lay(4, 8, 1, '2-3', 10, 80, {2: (16, 0), 3: (19, 1)},
                         rule='samples:80')])
    # node c took part in an older layout only: stale, ignored
    make_journal(c, [lay(2, 4, 1, '0-1', 0, 0, {0: (3, 0), 1: (2, 0)}, rule='samples:0')],
                 t0=T0 - 10**9)
    p = run('journal', 'resume-point', a, b, c)
    assert p.stdout == b'samples:120@15\n'   # min completed: rank 1, 15 - 10 = 5 steps of 8
    assert p.stderr == ''
    d = json.loads(run('journal', 'resume-point', '--json', a, b, c).stdout)
    assert (d['samples'], d['step'], d['basis']) == (120, 15, 'cursors')
    assert d['journals'] == [str(a), str(b), str(c)]
    # a node's journal missing: its ranks' progress is unknown -> the layout's start
    p = run('journal', 'resume-point', a)
    assert p.stdout == b'samples:80@10\n'
    assert 'warning' in p.stderr and 'ranks 2-3' in p.stderr
    # a checkpoint mark in any journal wins
    b.unlink()
    make_journal(b, [lay(4, 8, 1, '2-3', 10, 80, {2: (16, 0), 3: (19, 1)},
                         rule='samples:80'), ('mark', 12, 96)])
    assert run('journal', 'resume-point', a, b).stdout == b'samples:96@12\n'


def test_reads_the_wal_of_a_killed_mount(tmp_path):
    """A writer killed without closing leaves its claims in the -wal: show and
    resume-point see them, and leave both files as they were."""
    j = tmp_path / 'j.sqlite'
    code = '''
import os, sys
sys.path.insert(0, %r)
import test_journal_cli as t
con = t.make_journal(%r, [], keep_open=True)
con.execute("INSERT INTO layout (seq, world_size, global_batch, micro_batch, ranks, "
            "start_step, start_samples, time_us, host, rule, applied) "
            "VALUES (1, 1, 4, 4, '0', 0, 0, 1790000000000000, 'h', 'auto', 'auto')")
con.execute("INSERT INTO cursor VALUES (1, 0, 6, 0)")
os._exit(0)
''' % (str(pathlib.Path(__file__).parent), str(j))
    subprocess.run([sys.executable, '-c', code], check=True)
    wal = pathlib.Path(str(j) + '-wal')
    assert wal.exists() and wal.stat().st_size > 0
    before = (j.read_bytes(), wal.read_bytes())
    assert run('journal', 'resume-point', j).stdout == b'samples:24@6\n'
    assert 'rank 0 at 6.0' in run('journal', 'show', j).stdout.decode()
    assert (j.read_bytes(), wal.read_bytes()) == before


def test_refuses_a_journal_in_use(tmp_path):
    j = tmp_path / 'j.sqlite'
    con = make_journal(j, HISTORY, keep_open=True)
    con.execute('BEGIN IMMEDIATE')  # holds the exclusive lock like a running mount
    con.execute('COMMIT')
    p = run('journal', 'show', j, check=False)
    assert p.returncode == 1
    assert 'in use' in p.stderr and str(j) in p.stderr
    con.close()
    assert run('journal', 'show', j).returncode == 0


@pytest.mark.parametrize('kind', ['missing', 'random', 'text', 'other-sqlite', 'newer',
                                  'empty', 'directory'])
def test_bad_files_exit_1_and_stay_untouched(tmp_path, kind):
    j = tmp_path / 'j.sqlite'
    want = {'missing': 'No such file', 'random': 'not a Zephon journal',
            'text': 'not a Zephon journal', 'other-sqlite': 'not a Zephon journal',
            'newer': 'schema version 4', 'empty': 'is empty', 'directory': 'directory'}[kind]
    if kind == 'random':
        j.write_bytes(os.urandom(5000))
    elif kind == 'text':
        j.write_text('{"not": "a journal"}\n')
    elif kind == 'other-sqlite':
        con = sqlite3.connect(str(j))
        con.execute('CREATE TABLE layout (x)')
        con.commit()
        con.close()
    elif kind == 'newer':
        make_journal(j, HISTORY, user_version=4)
    elif kind == 'empty':
        j.write_bytes(b'')
    elif kind == 'directory':
        j.mkdir()
    before = j.read_bytes() if j.is_file() else None
    for args in [('show', j), ('show', '--json', j), ('resume-point', j),
                 ('resume-point', j, j)]:
        p = run('journal', *args, check=False)
        assert p.returncode == 1, (args, p.stderr)
        assert p.stdout == b''
        assert p.stderr.startswith('zephon: ')
        assert want in p.stderr and str(j) in p.stderr, p.stderr
    if before is not None:
        assert j.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ['j.sqlite'] or kind == 'missing'


def test_resume_point_refuses_mixed_identities(tmp_path):
    a, b = tmp_path / 'a.sqlite', tmp_path / 'b.sqlite'
    make_journal(a, HISTORY)
    make_journal(b, HISTORY, seed=8)
    p = run('journal', 'resume-point', a, b, check=False)
    assert p.returncode == 1
    assert str(a) in p.stderr and str(b) in p.stderr
    assert 'seed 7' in p.stderr and 'seed 8' in p.stderr
