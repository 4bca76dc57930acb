"""Helpers of the torchft tests and benchmark: torchft's real lighthouse, replica groups of
torchft_worker.py (one process each), and the accounting of what the committed steps
trained against the global stream.

A schedule (``run_schedule``): N groups start; group ``kill_restart`` is killed with
SIGKILL inside torchft step ``at``, while its peers wait in the step's all-reduce (that step
does not commit), and started again (it rejoins through torchft's recovery); group
``fail`` votes against committing step ``at`` (groups disagree on it); group ``kill`` is
killed inside a later step and stays down. Then ``trained`` lists, per committed step, the
samples its participants trained (by gsn), and ``lost_repeated`` counts against the
stream's prefix.
"""
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError('timed out waiting for ' + what)


class Lighthouse:
    """torchft's lighthouse (the torchft_lighthouse of this venv) on a free loopback port."""

    def __init__(self, log_dir, min_replicas=1):
        self.port = free_port()
        exe = pathlib.Path(sys.executable).parent / 'torchft_lighthouse'
        self.log = open(pathlib.Path(log_dir) / 'lighthouse.out', 'ab')
        # stragglers are waited for 0.5 s, a silent replica is dead after 1.5 s
        self.proc = subprocess.Popen(
            [str(exe), '--min_replicas', str(min_replicas), '--bind', '127.0.0.1:%d' % self.port,
             '--join_timeout_ms', '500', '--heartbeat_timeout_ms', '1500',
             '--quorum_tick_ms', '50'], stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.address = 'http://127.0.0.1:%d' % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


class Group:
    """One replica group: a torchft_worker.py process in a session of its own."""

    def __init__(self, k, args, records):
        self.k, self.args, self.records = k, [str(x) for x in args], pathlib.Path(records)
        self.proc = None
        self.runs = 0

    def start(self, *extra):
        env = dict(os.environ, OMP_NUM_THREADS='1', TORCHFT_TIMEOUT_SEC='20',
                   TORCHFT_QUORUM_TIMEOUT_SEC='60', TORCHFT_CONNECT_TIMEOUT_SEC='20',
                   PYTHONPATH=os.pathsep.join([str(ROOT / 'python'), str(HERE)]))
        for key in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
            env.pop(key, None)
        self.runs += 1
        out = open(self.records / ('group-%d.run%d.out' % (self.k, self.runs)), 'wb')
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / 'torchft_worker.py'), *self.args,
             '--store-port', str(free_port()), *map(str, extra)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()

    def output(self):
        return (self.records / ('group-%d.run%d.out' % (self.k, self.runs))).read_text(
            errors='replace')

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError('group %d did not finish in %d s: %s'
                                 % (self.k, timeout, self.output()[-3000:])) from None


def run_schedule(tmp, mounts, mode, *, groups=3, steps=45, seq=16, micro=2, accum=2,
                 kill_restart=(1, 10), fail=(2, 20), kill=(0, 30), ckpt_every=1,
                 timeout=300):
    """Run the schedule (module docstring) with ``groups`` workers reading ``mounts[k]``;
    returns the records directory. Asserts that every group still up ends well."""
    tmp = pathlib.Path(tmp)
    records = tmp / ('records-' + mode)
    records.mkdir()
    lh = Lighthouse(records, min_replicas=2)     # a majority of the 3: no split brain
    gs = []
    try:
        for k in range(groups):
            gs.append(Group(k, ['--mode', mode, '--mount', mounts[k], '--lighthouse',
                                lh.address, '--records', records, '--ckpt', tmp / ('ckpt-' + mode),
                                '--ckpt-every', ckpt_every, '--replica-id', k, '--groups',
                                groups, '--steps', steps, '--seq', seq, '--micro', micro,
                                '--accum', accum], records))
        for g in gs:
            extra = []
            if kill_restart and g.k == kill_restart[0]:
                extra += ['--hang-at', kill_restart[1]]
            if kill and g.k == kill[0]:
                extra += ['--hang-at', kill[1]]
            if fail and g.k == fail[0]:
                extra += ['--fail-at', fail[1]]
            g.start(*extra)
        wait_for(lambda: all((records / ('ready-%d' % g.k)).exists() or g.proc.poll() is not None
                             for g in gs), timeout, 'the groups to start')
        (records / 'go').write_text('')
        if kill_restart:
            g = gs[kill_restart[0]]
            wait_for(lambda: (records / ('hang-%d' % g.k)).exists() or g.proc.poll() is not None,
                     timeout, 'group %d to reach step %d' % (g.k, kill_restart[1]))
            assert g.proc.poll() is None, g.output()[-3000:]
            g.kill()                                  # kill -9 inside the step
            (records / ('hang-%d' % g.k)).unlink()
            g.start()                                 # it rejoins: torchft heals it
        if kill:
            g = gs[kill[0]]
            wait_for(lambda: (records / ('hang-%d' % g.k)).exists() or g.proc.poll() is not None,
                     timeout, 'group %d to reach step %d' % (g.k, kill[1]))
            assert g.proc.poll() is None, g.output()[-3000:]
            g.kill()
        for g in gs:
            if kill and g.k == kill[0]:
                continue
            rc = g.wait(timeout)
            assert rc == 0, 'group %d: %s' % (g.k, g.output()[-5000:])
    finally:
        for g in gs:
            g.kill()
        lh.stop()
    return records


def read_records(records):
    """{group: [record, ...]} in the order each group wrote them."""
    out = {}
    for f in sorted(pathlib.Path(records).glob('group-*.jsonl')):
        out[int(f.stem.split('-')[1])] = [json.loads(line) for line in f.read_text().splitlines()]
    return out


def trained(records, gsn_of):
    """[(step, [gsn, ...], loss)] of the committed steps in step order: per committed
    attempt (torchft step, quorum), the rows that its training groups were served, in
    participant order, mapped to gsns by ``gsn_of`` (window tuple -> gsn). Checks that
    groups serving the same part of a step got the same rows, and that the groups that
    committed a step agree on its loss."""
    served, done = {}, {}
    for k, recs in read_records(records).items():
        for r in recs:
            key = (r['step'], r['quorum'])
            if r['ev'] == 'served':
                served.setdefault(key, {})[k] = r        # a group's last attempt wins
            else:
                done.setdefault(key, {})[k] = r
    committed = sorted(key for key, d in done.items() if any(r['committed'] for r in d.values()))
    steps = [key[0] for key in committed]
    assert steps == list(range(len(steps))), ('committed torchft steps', steps)
    out = []
    for key in committed:
        parts = {}
        for k, r in served[key].items():
            if r['index'] is None:
                continue                                  # heals: trains nothing
            if r['index'] in parts:
                assert parts[r['index']] == r['rows'], ('part', r['index'], 'of', key)
            parts[r['index']] = r['rows']
        losses = {r['loss'] for r in done[key].values() if r['committed']}
        assert len(losses) == 1, ('groups disagree on the loss of', key, losses)
        gsns = [gsn_of[tuple(w)] for i in sorted(parts) for w in parts[i]]
        out.append((key[0], gsns, losses.pop()))
    return out


def static_trained(records, gsn_of):
    """As :func:`trained`, for TorchTitan's static sharding: per committed attempt, the
    rows of every group that trained it (torchft's is_participating)."""
    served, done = {}, {}
    for k, recs in read_records(records).items():
        for r in recs:
            key = (r['step'], r['quorum'])
            (served if r['ev'] == 'served' else done).setdefault(key, {})[k] = r
    committed = sorted(key for key, d in done.items() if any(r['committed'] for r in d.values()))
    out = []
    for key in committed:
        gsns = [gsn_of[tuple(w)] for k in sorted(served[key]) if served[key][k]['trains']
                for w in served[key][k]['rows']]
        out.append((key[0], gsns, None))
    return out


def lost_repeated(steps):
    """(trained, lost, repeated): samples trained by the committed steps; of the stream's
    prefix up to the furthest one trained, those never trained; and the trainings beyond
    the first of any sample."""
    gsns = [g for _, gs, _ in steps for g in gs]
    if not gsns:
        return 0, 0, 0
    counts = np.bincount(np.array(gsns), minlength=max(gsns) + 1)
    return len(gsns), int((counts == 0).sum()), int(np.maximum(counts - 1, 0).sum())
