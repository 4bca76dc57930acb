"""mountscripts/ on this machine: several mounts in separate mountpoints act as the
nodes of a job, driven through the real launch scripts with the variables SLURM and
torchrun set; fstab and `mount -t fuse.zephon` through mount(8) and mount.fuse3; the
systemd template unit; the installer.

Every claim a "node" serves is checked against `zephon batch` (the same layout, no FUSE)
and against the uninterrupted single-rank stream: the gsn a claim covers follows from the
layout each mount reports, and a restart with other nodes, ranks per node and global
batch continues at `zephon journal resume-point` over all nodes' journals.
"""
import json
import os
import pathlib
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import ZEPHON, sanitizers, batch, mounted, pack, read_all, run, unmount, write_jsonl
from lint.doc_blocks import doc_block  # tests/lint/doc_blocks.py

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / 'mountscripts'
NODE = SCRIPTS / 'zephon-node'
SLURM = SCRIPTS / 'slurm-zephon.sh'
TORCHRUN = SCRIPTS / 'torchrun-zephon.sh'
HELPERS = pathlib.Path(__file__).resolve().parent / 'training'
READER = HELPERS / 'reader.py'
PY = '/usr/bin/python3'
N = 29          # samples: the histories below cross epochs
SEED = 3


@pytest.fixture
def ds(tmp_path):
    write_jsonl(tmp_path / 'in.jsonl', N)
    d = pack(tmp_path / 'ds', [tmp_path / 'in.jsonl'])
    ref = run('batch', d, '-o', 'world_size=1,global_batch=300,seed=%d' % SEED,
              '--rank', 0, '--step', 0).stdout.splitlines(keepends=True)
    return d, ref


def base_env(tmp, name, **kw):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(('SLURM_', 'ZEPHON_')) or k in ('RANK', 'NNODES', 'NODE_RANK',
                                                        'NPROC_PER_NODE'):
            del env[k]
    env.update(ZEPHON=ZEPHON, ZEPHON_JOURNAL_DIR=str(tmp / (name + '-journals')),
               ZEPHON_MOUNT=str(tmp / (name + '-node%n')), ZEPHON_MOUNT_TIMEOUT='30',
               PATH='%s:%s' % (HELPERS, env.get('PATH', '/usr/bin:/bin')),
               ASAN_OPTIONS=env.get('ASAN_OPTIONS', '') + ':quarantine_size_mb=4')
    env.update({k: str(v) for k, v in kw.items()})
    return env


def strenv(env):
    return {k: str(v) for k, v in env.items()}


def sh(args, env, check=True, timeout=300):
    p = subprocess.run([str(a) for a in args], env=strenv(env), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    out, err = p.stdout.decode(), p.stderr.decode(errors='replace')
    if check:
        assert p.returncode == 0, (args, p.returncode, out, err)
    sanitizers.scan(err)
    return p.returncode, out, err


def claims_of(path):
    """Claims recorded by reader.py (or by read_claims) in rank order then claim order."""
    out = []
    for f in sorted(pathlib.Path(path).glob('rank-*.jsonl')):
        out += [json.loads(l) for l in f.read_text().splitlines()]
    return out


def read_claims(mp, rank, micros, log):
    """What reader.py does, in this process: open next, then read state."""
    with open(log, 'a') as f:
        for _ in range(micros):
            data = read_all(mp / 'rank' / str(rank) / 'next')
            last = json.loads(read_all(mp / 'rank' / str(rank) / 'state'))['last']
            f.write(json.dumps(dict(rank=rank, step=last['step'], micro=last['micro'],
                                    gsn=last['gsn'], samples=last['samples'],
                                    data=data.hex())) + '\n')


def check_claims(ds, ref, claims, layout, expect_count):
    """Each claim is the layout's (rank, step, micro): its gsn follows from the layout, its
    bytes equal `zephon batch` for that claim and the single-rank stream at that gsn."""
    s0, g0, w, b, m = layout
    assert len(claims) == expect_count, (len(claims), expect_count)
    resume = ',resume=samples:%d' % g0 if g0 or s0 else ''
    opts = 'world_size=%d,global_batch=%d,micro_batch=%d,seed=%d%s' % (w, b, m, SEED, resume)
    extra = ('--start-step', s0) if resume else ()
    seen = set()
    for c in claims:
        r, t, k = c['rank'], c['step'], c['micro']
        assert (r, t, k) not in seen, ('claimed twice', c)
        seen.add((r, t, k))
        g = g0 + (t - s0) * b + r * (b // w) + k * m
        data = bytes.fromhex(c['data'])
        assert c['gsn'] == g, (c, layout)
        assert data == b''.join(ref[g:g + m]), ('not the stream at gsn', g, c)
        assert [json.loads(l)['i'] for l in data.splitlines()] == c['samples']
        assert data == batch(ds, opts, r, t, k, *extra), ('zephon batch differs', c)
    # every rank's claims are its next ones, in order, from the layout's start
    for r in range(w):
        mine = [(c['step'], c['micro']) for c in claims if c['rank'] == r]
        a = b // w // m
        assert mine == [(s0 + i // a, i % a) for i in range(len(mine))], (r, mine)


def status(mp):
    return json.loads(read_all(pathlib.Path(mp) / 'status'))


def mounts_under(tmp):
    with open('/proc/self/mountinfo') as f:
        return [l.split()[4] for l in f if l.split()[4].startswith(str(tmp))]


def node_umount(env, mp):
    """Cleanup after a test: zephon-node umount with env, then mp by hand if still there."""
    sh([NODE, 'umount'], env, check=False)
    if mounted(mp):
        unmount(mp)


@pytest.fixture
def nodes():
    """Started per-node processes (pid, mountpoint); all killed and unmounted at the end."""
    started = []
    yield started
    for proc, mp in started:
        if proc.poll() is None:
            unmount(mp)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if mounted(mp):
            unmount(mp)


def start_slurm_nodes(env, count, tmp, started, tag):
    """`slurm-zephon.sh node` once per node, as the mount step's srun would (SLURM_NODEID
    differs per task), then `slurm-zephon.sh wait` on each."""
    procs = []
    for n in range(count):
        e = dict(env, SLURM_NODEID=str(n), SLURM_PROCID=str(n), SLURM_LOCALID='0')
        err = open(tmp / ('%s-node%d.stderr' % (tag, n)), 'wb')
        p = subprocess.Popen([str(SLURM), 'node'], env=strenv(e), stdout=subprocess.DEVNULL, stderr=err)
        err.close()
        mp = pathlib.Path(env['ZEPHON_MOUNT'].replace('%n', str(n)))
        started.append((p, mp))
        procs.append((p, mp))
    for n in range(count):
        sh([SLURM, 'wait'], dict(env, SLURM_NODEID=str(n)))
    return procs


def node_log(tmp, tag, n):
    text = (tmp / ('%s-node%d.stderr' % (tag, n))).read_text(errors='replace')
    sanitizers.scan(text)
    return text


def test_slurm_nodes_kill9_then_three_nodes(ds, tmp_path, nodes):
    """2 nodes x 2 ranks; node 1's mount dies by SIGKILL; the job restarts on 3 nodes x 1
    rank with another global batch, from the resume point over both nodes' journals."""
    d, ref = ds
    env = base_env(tmp_path, 'slurm', ZEPHON_DATASET=d, SLURM_JOB_ID=7,
                   SLURM_JOB_NUM_NODES=2, SLURM_NNODES=2, SLURM_NTASKS_PER_NODE=2,
                   SLURM_NTASKS=4, ZEPHON_OPTIONS='global_batch=8,micro_batch=1,seed=%d' % SEED)
    # the first run: no journals yet
    assert sh([SLURM, 'resume-point'], env)[1].strip() == 'samples:0@0'
    env['ZEPHON_RESUME'] = 'samples:0@0'
    r1 = tmp_path / 'round1'
    r1.mkdir()
    procs = start_slurm_nodes(env, 2, tmp_path, nodes, 'r1')
    (p0, mp0), (p1, mp1) = procs
    assert sorted(os.listdir(mp0 / 'rank')) == ['0', '1']
    assert sorted(os.listdir(mp1 / 'rank')) == ['2', '3']
    for mp in (mp0, mp1):
        st = status(mp)
        assert (st['world_size'], st['global_batch'], st['micro_batch']) == (4, 8, 1)
        assert st['journal'] == str(pathlib.Path(env['ZEPHON_JOURNAL_DIR']) /
                                    ('node-%s.sqlite' % ('0' if mp == mp0 else '1')))
    # ranks 0, 1, 3 finish steps 0-2 (2 micro-batches each); rank 2 stops inside step 2
    for r, micros in ((0, 6), (1, 6), (2, 5), (3, 6)):
        read_claims(mp0 if r < 2 else mp1, r, micros, r1 / ('rank-%d.jsonl' % r))
    p1.send_signal(signal.SIGKILL)          # the node fails
    p1.wait(timeout=20)
    sh([SLURM, 'umount'], dict(env, SLURM_NODEID='0'))
    assert p0.wait(timeout=30) == 0
    sh([SLURM, 'umount'], dict(env, SLURM_NODEID='1'))   # the stale one
    assert not mounts_under(tmp_path)
    assert 'error' not in node_log(tmp_path, 'r1', 0).lower()
    node_log(tmp_path, 'r1', 1)
    check_claims(d, ref, claims_of(r1), (0, 0, 4, 8, 1), 23)

    # the restart: 3 nodes x 1 rank, global_batch 6, resume point computed once
    env.update(SLURM_JOB_ID=8, SLURM_JOB_NUM_NODES=3, SLURM_NNODES=3, SLURM_NTASKS_PER_NODE=1,
               SLURM_NTASKS=3, ZEPHON_OPTIONS='global_batch=6,micro_batch=1,seed=%d' % SEED)
    del env['ZEPHON_RESUME']
    point = sh([SLURM, 'resume-point'], env)[1].strip()
    assert point == 'samples:16@2'          # rank 2 completed steps 0 and 1: 2 x 8 samples
    env['ZEPHON_RESUME'] = point
    r2 = tmp_path / 'round2'
    r2.mkdir()
    procs = start_slurm_nodes(env, 3, tmp_path, nodes, 'r2')
    for n, (p, mp) in enumerate(procs):
        st = status(mp)
        assert (st['start_step'], st['start_samples'], st['world_size']) == (2, 16, 3), st
        assert os.listdir(mp / 'rank') == [str(n)]
        read_claims(mp, n, 4, r2 / ('rank-%d.jsonl' % n))
    for n, (p, mp) in enumerate(procs):
        sh([SLURM, 'umount'], dict(env, SLURM_NODEID=str(n)))
        assert p.wait(timeout=30) == 0
        assert 'error' not in node_log(tmp_path, 'r2', n).lower()
    check_claims(d, ref, claims_of(r2), (2, 16, 3, 6, 1), 12)
    # the node that joined (node 2) has a new journal; the resume point covers all three
    del env['ZEPHON_RESUME']
    assert sh([SLURM, 'resume-point'], env)[1].strip() == 'samples:28@4'


def test_slurm_job_script_with_srun(ds, tmp_path):
    """The whole batch script through a stand-in srun (tests/fuse/training/srun): mounts on
    every node, the training step, unmounts; a shrunk job continues; a failed step
    still unmounts and passes its status on."""
    d, ref = ds
    job = dict(SLURM_JOB_ID=11, SLURM_JOB_NUM_NODES=2, SLURM_NNODES=2, SLURM_NTASKS_PER_NODE=2,
               SLURM_NTASKS=4, SLURM_NODEID=0, SLURM_PROCID=0, SLURM_LOCALID=0)
    env = base_env(tmp_path, 'job', ZEPHON_DATASET=d,
                   ZEPHON_OPTIONS='global_batch=8,micro_batch=2,seed=%d' % SEED, **job)
    out = tmp_path / 'job1'
    out.mkdir()
    rc, _, err = sh([SLURM, 'srun', PY, READER, out, 3], env)
    assert '2 nodes x 2 ranks (data-parallel degree 4), resume=samples:0@0' in err, err
    assert not mounts_under(tmp_path), err
    check_claims(d, ref, claims_of(out), (0, 0, 4, 8, 2), 12)

    # one node left, 2 ranks on it, global_batch 4: continues at gsn 24 (step 3)
    env.update(SLURM_JOB_ID=12, SLURM_JOB_NUM_NODES=1, SLURM_NNODES=1, SLURM_NTASKS=2,
               ZEPHON_OPTIONS='global_batch=4,micro_batch=1,seed=%d' % SEED)
    out = tmp_path / 'job2'
    out.mkdir()
    rc, _, err = sh([SLURM, 'srun', PY, READER, out, 4], env)
    assert '1 nodes x 2 ranks (data-parallel degree 2), resume=samples:24@3' in err, err
    check_claims(d, ref, claims_of(out), (3, 24, 2, 4, 1), 8)

    # a worker crashes: the job fails with its status, and no mount is left behind
    out = tmp_path / 'job3'
    out.mkdir()
    rc, _, err = sh([SLURM, 'srun', PY, READER, out, 2, '1=1!'], env, check=False)
    assert rc == 3, err
    assert not mounts_under(tmp_path), err
    check_claims(d, ref, claims_of(out), (5, 32, 2, 4, 1), 3)
    assert sh([SLURM, 'resume-point'], env)[1].strip() == 'samples:32@5'  # rank 1 is behind


def test_slurm_script_refuses_clearly(ds, tmp_path):
    d, _ = ds
    env = base_env(tmp_path, 'bad', ZEPHON_DATASET=d)
    rc, _, err = sh([SLURM, 'true'], env, check=False)
    assert rc == 2 and 'not inside a SLURM allocation' in err, err
    rc, _, err = sh([SLURM, 'node'], env, check=False)
    assert rc == 2 and 'SLURM_NODEID is not set' in err, err
    env.update(SLURM_JOB_NUM_NODES=2, SLURM_NTASKS_PER_NODE=2, SLURM_NODEID=0,
               ZEPHON_OPTIONS='world_size=4')
    rc, _, err = sh([SLURM, 'node'], env, check=False)
    assert rc != 0 and 'must not set world_size=' in err, err
    env['ZEPHON_OPTIONS'] = 'global_batch=8'
    rc, _, err = sh([SLURM, 'node'], env, check=False)
    assert rc != 0 and 'ZEPHON_RESUME is not set' in err, err
    assert not mounts_under(tmp_path)


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def torchrun_nodes(env, count, args, tmp, tag):
    """torchrun-zephon.sh on `count` "nodes" at once; returns their stderr texts."""
    procs = []
    for n in range(count):
        err = open(tmp / ('%s-%d.stderr' % (tag, n)), 'wb')
        procs.append(subprocess.Popen([str(TORCHRUN)] + [str(a).replace('{n}', str(n))
                                                          for a in args],
                                      env=strenv(env(n)), stdout=err, stderr=err))
        err.close()
    texts = []
    try:
        for n, p in enumerate(procs):
            rc = p.wait(timeout=600)
            texts.append((tmp / ('%s-%d.stderr' % (tag, n))).read_text(errors='replace'))
            assert rc == 0, texts[-1]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=60)
    for t in texts:
        sanitizers.scan(t)
    return texts


def test_torchrun_two_nodes_then_three(ds, tmp_path):
    """Real torchrun (static rendezvous on 127.0.0.1): 2 nodes x 2 workers, one worker
    behind; then 3 nodes x 1 worker (NNODES/NODE_RANK/NPROC_PER_NODE in the environment)
    with global_batch 6, from the resume point computed once."""
    d, ref = ds
    env = base_env(tmp_path, 'tr', ZEPHON_DATASET=d,
                   ZEPHON_TORCHRUN=PY + ' -m torch.distributed.run',
                   ZEPHON_OPTIONS='global_batch=8,micro_batch=1,seed=%d' % SEED)
    env['ZEPHON_RESUME'] = sh([NODE, 'resume-point'], env)[1].strip()
    assert env['ZEPHON_RESUME'] == 'samples:0@0'
    out = tmp_path / 'tr1'
    out.mkdir()
    port = free_port()
    texts = torchrun_nodes(lambda n: env, 2, [
        '--nnodes=2', '--node_rank', '{n}', '--nproc_per_node=2', '--master_addr=127.0.0.1',
        '--master_port=%d' % port, '--monitor_interval=0.2', '--log_dir=%s/logs{n}' % out,
        READER, out, 4, '3=3'],
        tmp_path, 'tr1')
    assert 'node 1 of 2: ranks 2-3 at %s' % (tmp_path / 'tr-node1') in texts[1], texts[1]
    assert not mounts_under(tmp_path)
    check_claims(d, ref, claims_of(out), (0, 0, 4, 8, 1), 15)

    env.pop('ZEPHON_RESUME')
    point = sh([NODE, 'resume-point'], env)[1].strip()
    assert point == 'samples:8@1'           # rank 3 completed step 0 only
    out = tmp_path / 'tr2'
    out.mkdir()
    port = free_port()
    env.update(ZEPHON_RESUME=point, ZEPHON_OPTIONS='global_batch=6,micro_batch=1,seed=%d' % SEED)
    texts = torchrun_nodes(lambda n: dict(env, NNODES='3', NODE_RANK=str(n), NPROC_PER_NODE='1'),
                           3, ['--master_addr=127.0.0.1', '--master_port=%d' % port,
                               '--monitor_interval=0.2', '--log_dir=%s/logs{n}' % out,
                               READER, out, 4], tmp_path, 'tr2')
    assert not mounts_under(tmp_path)
    check_claims(d, ref, claims_of(out), (1, 8, 3, 6, 1), 12)
    env.pop('ZEPHON_RESUME')
    assert sh([NODE, 'resume-point'], env)[1].strip() == 'samples:20@3'


def test_torchrun_script_refuses_clearly(ds, tmp_path):
    d, _ = ds
    env = base_env(tmp_path, 'trbad', ZEPHON_DATASET=d, ZEPHON_OPTIONS='global_batch=4')
    rc, _, err = sh([TORCHRUN, '--nnodes=2', '--node_rank=0', '--nproc_per_node=2', 'x.py'],
                    env, check=False)
    assert rc == 2 and 'ZEPHON_RESUME is not set' in err, err
    rc, _, err = sh([TORCHRUN, '--nnodes=1:4', '--nproc_per_node=2', 'x.py'], env, check=False)
    assert rc == 2 and 'a fixed number of nodes' in err, err
    rc, _, err = sh([TORCHRUN, '--standalone', 'x.py'], env, check=False)
    assert rc == 2 and 'give --nproc_per_node' in err, err
    assert not mounts_under(tmp_path)


@pytest.mark.parametrize('options,why', [
    ('global_batch=3', 'must be a multiple of world_size'),
    ('global_batch=4,bogus=1', "unknown mount option 'bogus=1'"),
])
def test_torchrun_script_with_invalid_options_creates_nothing(ds, tmp_path, options, why):
    """Options the mount refuses stop the script before it creates the journal directory
    or the mountpoint."""
    d, _ = ds
    env = base_env(tmp_path, 'inval', ZEPHON_DATASET=d, ZEPHON_OPTIONS=options,
                   ZEPHON_TORCHRUN=PY + ' -m torch.distributed.run')
    rc, _, err = sh([TORCHRUN, '--standalone', '--nproc_per_node=2', 'x.py'], env, check=False)
    assert rc == 2 and why in err, err
    assert not (tmp_path / 'inval-journals').exists(), err
    assert not (tmp_path / 'inval-node0').exists(), err
    assert not mounts_under(tmp_path)


def test_torchrun_single_node_standalone(ds, tmp_path):
    """One node: the script computes the resume point itself; two runs continue."""
    d, ref = ds
    env = base_env(tmp_path, 'one', ZEPHON_DATASET=d,
                   ZEPHON_TORCHRUN=PY + ' -m torch.distributed.run',
                   ZEPHON_OPTIONS='global_batch=4,micro_batch=2,seed=%d' % SEED)
    for i, (w, layout, count) in enumerate(((2, (0, 0, 2, 4, 2), 6), (4, (3, 12, 4, 4, 1), 8))):
        out = tmp_path / ('one%d' % i)
        out.mkdir()
        if w == 4:
            env['ZEPHON_OPTIONS'] = 'global_batch=4,micro_batch=1,seed=%d' % SEED
        torchrun_nodes(lambda n: env, 1, ['--standalone', '--nproc_per_node=%d' % w,
                                          '--monitor_interval=0.2', '--log_dir=%s/logs' % out,
                                          READER, out, 3 if w == 2 else 2],
                       tmp_path, 'one%d' % i)
        check_claims(d, ref, claims_of(out), layout, count)
    assert not mounts_under(tmp_path)


# ---------------------------------------------------------------------------
# fstab, mount -t fuse.zephon, systemd, install

def unshared(script, tmp):
    """Run a shell script as root in a private mount namespace where /usr/local/bin holds
    only a `zephon` link to the build under test: mount(8) clears PATH, so mount.fuse3's
    shell finds `zephon` only on the default PATH, which is where `meson install` puts it.
    Nothing changes on the host."""
    if os.geteuid() != 0:
        pytest.skip('mount(8) with an fstab line needs root')
    bindir = tmp / 'usr-local-bin'
    bindir.mkdir()
    (bindir / 'zephon').symlink_to(ZEPHON)
    full = 'set -eu\nmount --bind %s /usr/local/bin\n%s' % (shlex.quote(str(bindir)), script)
    p = subprocess.run(['unshare', '--mount', '--propagation', 'private', 'sh', '-c', full],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode(errors='replace')


def test_fstab_line_and_mount_t_fuse_zephon(ds, tmp_path):
    d, ref = ds
    mp, mp2 = tmp_path / 'fstab-mnt', tmp_path / 'mnt-t'
    mp.mkdir()
    mp2.mkdir()
    j1, j2 = tmp_path / 'fstab.sqlite', tmp_path / 'mount-t.sqlite'
    fstab = tmp_path / 'fstab'
    # the line mountscripts/README.md documents, fstab-only keys included
    fstab.write_text('%s %s fuse.zephon world_size=2,global_batch=4,seed=%d,journal=%s,'
                     'noauto,nofail,_netdev,x-systemd.requires=network-online.target 0 0\n'
                     % (d, mp, SEED, j1))
    q = lambda p: shlex.quote(str(p))
    rc, out, err = unshared(f'''
trap 'umount {q(mp)} 2>/dev/null || true; umount {q(mp2)} 2>/dev/null || true' EXIT
mount -T {q(fstab)} {q(mp)}
grep " {mp} " /proc/self/mountinfo
cat {q(mp)}/rank/1/next > {q(tmp_path / 'fstab-next')}
cat {q(mp)}/status > {q(tmp_path / 'fstab-status')}
umount {q(mp)}
mount -t fuse.zephon {q(d)} {q(mp2)} -o world_size=2,global_batch=4,ranks=1,seed={SEED},journal={q(j2)}
cat {q(mp2)}/rank/1/next {q(mp2)}/rank/1/next > {q(tmp_path / 'mount-t-next')}
ls {q(mp2)}/rank
umount {q(mp2)}
if mount -t fuse.zephon {q(d)} {q(mp2)} -o world_size=3,global_batch=4 2>{q(tmp_path / 'bad.err')}; then
    echo "mounted with an invalid layout"; exit 1
fi
''', tmp_path)
    assert rc == 0, (out, err)
    assert ' - fuse.zephon ' in out, out         # the mount's type, as fstab says
    assert read_all(tmp_path / 'fstab-next') == batch(d, 'world_size=2,global_batch=4,seed=%d' % SEED, 1, 0, 0)
    st = json.loads(read_all(tmp_path / 'fstab-status'))
    assert (st['world_size'], st['global_batch'], st['journal']) == (2, 4, str(j1))
    assert read_all(tmp_path / 'mount-t-next') == (
        batch(d, 'world_size=2,global_batch=4,seed=%d' % SEED, 1, 0) +
        batch(d, 'world_size=2,global_batch=4,seed=%d' % SEED, 1, 1))
    assert out.split()[-1] == '1', out           # ranks=1: only rank 1 exists
    assert 'multiple of world_size' in (tmp_path / 'bad.err').read_text(), \
        (tmp_path / 'bad.err').read_text()
    assert not mounted(mp) and not mounted(mp2)


UNIT = SCRIPTS / 'zephon@.service'


def unit_commands(text):
    """[(key, command line)] of the [Service] section, in order."""
    cmds, section = [], None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith('['):
            section = line
        elif section == '[Service]' and line.startswith('Exec'):
            key, _, val = line.partition('=')
            cmds.append((key, val))
    return cmds


def run_unit_line(key, conf, **kw):
    """Run the unit's `key` Exec line as systemd would for instance demo whose
    /etc/zephon/demo.conf is `conf`: its words expanded from conf, and conf's variables in
    its environment (EnvironmentFile)."""
    words = {k: systemd_words(v, conf, 'demo') for k, v in unit_commands(UNIT.read_text())}
    return subprocess.run(words[key][1], env=dict(os.environ, **conf), **kw)


def systemd_words(cmd, env, instance):
    """The argv systemd runs for one Exec line: a leading '-' (ignore failure), %i,
    ${VAR} (one word), $$ (a literal $); quoting as in systemd.service(5)."""
    ignore = cmd.startswith('-')
    cmd = cmd.lstrip('-').replace('%i', instance).replace('%I', instance)
    out, i = '', 0
    while i < len(cmd):
        if cmd.startswith('$$', i):
            out, i = out + '$', i + 2
        elif cmd.startswith('${', i):
            j = cmd.index('}', i)
            out, i = out + env[cmd[i + 2:j]], j + 1
        else:
            out, i = out + cmd[i], i + 1
    return ignore, shlex.split(out)


def test_systemd_unit_verifies(tmp_path):
    if not shutil.which('systemd-analyze'):
        pytest.fail('systemd-analyze is missing: mountscripts/deps test installs systemd')
    # verify needs ExecStart's program to exist: point it at the build under test
    text = UNIT.read_text().replace('/usr/local/bin/zephon', ZEPHON)
    (tmp_path / 'zephon@.service').write_text(text)
    p = subprocess.run(['systemd-analyze', 'verify', str(tmp_path / 'zephon@demo.service')],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.returncode == 0 and not p.stdout.strip(), p.stdout.decode()
    # the check can fail: an unknown key and a missing program are reported
    (tmp_path / 'bad').mkdir()
    (tmp_path / 'bad' / 'zephon@.service').write_text(
        text.replace(ZEPHON, '/nonexistent/zephon').replace('[Service]', '[Service]\nBogus=1'))
    p = subprocess.run(['systemd-analyze', 'verify', str(tmp_path / 'bad' / 'zephon@demo.service')],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.returncode != 0 and b'Bogus' in p.stdout, p.stdout.decode()


def test_systemd_unit_commands_mount_and_unmount(ds, tmp_path):
    """The unit's Exec lines, run as systemd would run them (with the variables of an
    /etc/zephon/<instance>.conf): ExecStart mounts in the foreground, ExecStartPost returns
    once the mount answers, ExecStop unmounts and the mount process exits 0."""
    d, ref = ds
    text = UNIT.read_text()
    conf = (SCRIPTS / 'zephon.conf.example').read_text()
    keys = [l.split('=')[0] for l in conf.splitlines() if l and not l.startswith('#')]
    assert keys == ['ZEPHON_DATASET', 'ZEPHON_MOUNT', 'ZEPHON_OPTIONS'], keys
    mp = tmp_path / 'unit-mnt' / 'demo'
    env = dict(ZEPHON_DATASET=str(d), ZEPHON_MOUNT=str(mp),
               ZEPHON_OPTIONS='world_size=2,global_batch=4,seed=%d,journal=%s' % (
                   SEED, tmp_path / 'unit.sqlite'))
    assert 'EnvironmentFile=/etc/zephon/%i.conf' in text
    cmds = unit_commands(text)
    assert [k for k, _ in cmds] == ['ExecStartPre', 'ExecStart', 'ExecStartPost', 'ExecStop',
                                    'ExecStopPost']
    words = {k: systemd_words(v, env, 'demo') for k, v in cmds}
    assert words['ExecStart'][1][:2] == ['/usr/local/bin/zephon', 'mount'] and '-f' in words['ExecStart'][1]
    start = [ZEPHON] + words['ExecStart'][1][1:]
    # systemd gives every Exec line the EnvironmentFile's variables
    subprocess.run(words['ExecStartPre'][1], check=True, env=dict(os.environ, **env))
    errf = open(tmp_path / 'unit.stderr', 'wb')
    proc = subprocess.Popen(start, stdout=subprocess.DEVNULL, stderr=errf)
    errf.close()
    try:
        subprocess.run(words['ExecStartPost'][1], check=True, timeout=90)
        assert read_all(mp / 'rank' / '0' / 'next') == batch(
            d, 'world_size=2,global_batch=4,seed=%d' % SEED, 0, 0, 0)
        subprocess.run(words['ExecStop'][1], check=True)
        assert proc.wait(timeout=30) == 0
        assert not mounted(mp)
        ignore, post = words['ExecStopPost']
        assert ignore                         # fails (nothing to detach) after a clean stop
        assert subprocess.run(post, stderr=subprocess.DEVNULL).returncode != 0
    finally:
        if proc.poll() is None:
            unmount(mp)
            proc.wait(timeout=30)
    log = (tmp_path / 'unit.stderr').read_text(errors='replace')
    sanitizers.scan(log)
    # a mount that cannot come up makes ExecStartPost fail, not hang (bounded wait)
    assert 'did not come up within 60 s' in text


def test_install_into_destdir(tmp_path):
    build = pathlib.Path(ZEPHON).resolve().parents[1]
    if not (build / 'build.ninja').is_file():
        pytest.skip('ZEPHON=%s is not in a meson build directory' % ZEPHON)
    dest = tmp_path / 'dest'
    p = subprocess.run([str(SCRIPTS / 'install'), '--no-build', str(build)],
                       env=dict(os.environ, DESTDIR=str(dest)),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr.decode()
    prefix = json.loads(subprocess.run(['meson', 'introspect', str(build), '--buildoptions'],
                                       stdout=subprocess.PIPE, check=True).stdout)
    prefix = next(o['value'] for o in prefix if o['name'] == 'prefix')
    bindir = dest / prefix.lstrip('/') / 'bin'
    for name in ('zephon', 'zephon-node', 'slurm-zephon.sh', 'torchrun-zephon.sh'):
        assert os.access(bindir / name, os.X_OK), name
    v = subprocess.run([str(bindir / 'zephon'), '--version'], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    assert v.returncode == 0 and v.stdout.startswith(b'zephon '), v.stdout
    unit = (dest / 'etc/systemd/system/zephon@.service').read_text()
    assert 'ExecStart=%s/bin/zephon mount ' % prefix in unit
    assert (dest / 'etc/zephon/zephon.conf.example').is_file()
    # the installed launchers find each other (slurm-zephon.sh and zephon-node side by side)
    e = dict(os.environ, ZEPHON_JOURNAL_DIR=str(tmp_path / 'j'))
    p = subprocess.run([str(bindir / 'slurm-zephon.sh'), 'resume-point'], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.decode().strip() == 'samples:0@0', p.stderr.decode()


def test_quickstart_runs_twice(tmp_path):
    """The README's quickstart command, against the build under test, in a temp demo dir:
    green twice in a row (idempotent), both checks print "identical", nothing left mounted.
    It says how to put zephon on the shell's PATH when it is not there (the README's
    commands call it bare), and says nothing of it when it is."""
    # the README's block is this script, bare: what runs here is what it says
    assert doc_block('README.md', 'quickstart').split() == ['./mountscripts/quickstart']
    if not pathlib.Path('/usr/share/wordnet/data.noun').is_file():
        pytest.fail('wordnet-base is missing: mountscripts/deps build installs it')
    build = pathlib.Path(ZEPHON).resolve().parents[1]
    if not (build / 'build.ninja').is_file():
        pytest.skip('ZEPHON=%s is not in a meson build directory' % ZEPHON)
    env = dict(os.environ, ZEPHON_BUILD=str(build), ZEPHON_DEMO=str(tmp_path / 'demo'))
    path = [d for d in env.get('PATH', '').split(os.pathsep)
            if d and not os.path.isfile(os.path.join(d, 'zephon'))]
    hint = 'zephon is not on your shell\'s PATH: export PATH="%s/fs:$PATH"' % build
    for i in range(2):
        # first without any zephon on PATH, then with this build's
        env['PATH'] = os.pathsep.join(([str(build / 'fs')] if i else []) + path)
        p = subprocess.run([str(SCRIPTS / 'quickstart')], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=900)
        out = p.stdout.decode(errors='replace')
        assert p.returncode == 0, out
        assert out.count('   identical: ') == 2, out
        assert 'samples       117659' in out, out
        assert 'samples:48@3' in out and '== 7/7 done' in out, out
        assert not mounts_under(tmp_path), out
        assert (hint in out) == (i == 0), out[-1500:]


# ---------------------------------------------------------------------------
# launcher bugs: a leftover ZEPHON_RESUME, another job's mount, a stale mount, a failing
# resume point, and the papercuts around them

def one_node_env(tmp, name, d, **kw):
    """One node of 2 ranks, global_batch 4, micro_batch 1: zephon-node's variables."""
    return base_env(tmp, name, ZEPHON_DATASET=d, ZEPHON_NNODES=1, ZEPHON_NODE=0,
                    ZEPHON_RANKS_PER_NODE=2,
                    ZEPHON_OPTIONS='global_batch=4,micro_batch=1,seed=%d' % SEED, **kw)


def node_mp(env, n=0):
    return pathlib.Path(env['ZEPHON_MOUNT'].replace('%n', str(n)))


def consume(env, micros, log):
    """Mount node 0 with zephon-node, read `micros` micro-batches on each of its 2 ranks,
    unmount; returns the journals' resume point."""
    env = dict(env, ZEPHON_RESUME=sh([NODE, 'resume-point'], env)[1].strip())
    sh([NODE, 'mount'], env)
    mp = node_mp(env)
    try:
        for r in (0, 1):
            read_claims(mp, r, micros, log)
    finally:
        sh([NODE, 'umount'], env)
        if mounted(mp):
            unmount(mp)
    env.pop('ZEPHON_RESUME')
    return sh([NODE, 'resume-point'], env)[1].strip()


def test_resume_point_ignores_a_leftover_zephon_resume(ds, tmp_path):
    """`export ZEPHON_RESUME=$(zephon-node resume-point)` in the shell of the last job must
    not hand that value back to the next one: resume-point reads the journals and says
    the set value differs."""
    d, _ = ds
    env = one_node_env(tmp_path, 'left', d)
    consume(env, 2, tmp_path / 'first.jsonl')
    point = consume(env, 2, tmp_path / 'second.jsonl')
    assert point == 'samples:8@2', point
    stale = 'samples:4@1'                      # what the shell kept from the first job
    rc, out, err = sh([NODE, 'resume-point'], dict(env, ZEPHON_RESUME=stale))
    assert out.strip() == point, (out, err)
    assert stale in err and point in err and 'probably left' in err, err
    # the same value: nothing to say
    rc, out, err = sh([NODE, 'resume-point'], dict(env, ZEPHON_RESUME=point))
    assert out.strip() == point and not err.strip(), (out, err)
    # ZEPHON_RESUME_OVERRIDE is for the launchers' --allow-override only
    rc, out, err = sh([NODE, 'resume-point'],
                      dict(env, ZEPHON_RESUME=stale, ZEPHON_RESUME_OVERRIDE=1))
    assert out.strip() == point, (out, err)


def test_launchers_refuse_a_leftover_zephon_resume(ds, tmp_path):
    """sbatch passes the submitting shell's environment on, so a ZEPHON_RESUME left there by
    the manual recipe reaches the next job unasked. `resume-point --allow-override` (the
    launchers) takes a set value only when it is the journals' point or when
    ZEPHON_RESUME_OVERRIDE=1 says it is meant; otherwise the job stops before mounting,
    naming both values and both ways out. Multi-node torchrun, which only receives the
    value, takes it as it is."""
    d, _ = ds
    env = one_node_env(tmp_path, 'left', d, ZEPHON_TORCHRUN='true')
    consume(env, 2, tmp_path / 'first.jsonl')
    point = consume(env, 2, tmp_path / 'second.jsonl')
    assert point == 'samples:8@2', point
    stale = 'samples:4@1'
    forced = dict(env, ZEPHON_RESUME=stale, ZEPHON_RESUME_OVERRIDE=1)

    # zephon-node: a different value is refused, an equal one used, an intended one used
    rc, out, err = sh([NODE, 'resume-point', '--allow-override'], dict(env, ZEPHON_RESUME=stale),
                      check=False)
    assert rc != 0 and not out.strip(), (rc, out, err)
    assert 'ZEPHON_RESUME=%s is set but the journals in' % stale in err and point in err, err
    assert 'unset ZEPHON_RESUME' in err and 'ZEPHON_RESUME_OVERRIDE=1' in err, err
    rc, out, err = sh([NODE, 'resume-point', '--allow-override'], dict(env, ZEPHON_RESUME=point))
    assert out.strip() == point and "the journals' point too" in err, (out, err)
    rc, out, err = sh([NODE, 'resume-point', '--allow-override'], forced)
    assert out.strip() == stale, (out, err)
    assert "using ZEPHON_RESUME=%s (ZEPHON_RESUME_OVERRIDE=1), not the journals' point %s" % (
        stale, point) in err, err
    rc, out, err = sh([NODE, 'resume-point', '--allow-override'],
                      dict(forced, ZEPHON_RESUME_OVERRIDE='yes'), check=False)
    assert rc != 0 and not out.strip() and 'ZEPHON_RESUME_OVERRIDE=yes' in err, (out, err)

    # single-node torchrun: refused before it mounts; with the override it runs from there
    tr = [TORCHRUN, '--standalone', '--nproc_per_node=2', 'x.py']
    rc, _, err = sh(tr, dict(env, ZEPHON_RESUME=stale), check=False)
    assert rc != 0 and 'ZEPHON_RESUME_OVERRIDE=1' in err and 'resume=' not in err, err
    assert not mounts_under(tmp_path)
    assert sh([NODE, 'resume-point'], env)[1].strip() == point      # nothing was recorded
    rc, _, err = sh(tr, forced)
    assert "not the journals' point %s" % point in err and 'resume=%s' % stale in err, err
    # (that mount recorded a layout starting at the override: the journals say so now)
    point = sh([NODE, 'resume-point'], env)[1].strip()
    assert point == stale, point
    rc, _, err = sh(tr, dict(env, ZEPHON_RESUME=point))
    assert 'resume=%s' % point in err, err

    # the SLURM batch step: the same
    job = dict(SLURM_JOB_ID=21, SLURM_JOB_NUM_NODES=1, SLURM_NNODES=1, SLURM_NTASKS_PER_NODE=2,
               SLURM_NTASKS=2, SLURM_NODEID=0, SLURM_PROCID=0, SLURM_LOCALID=0)
    senv = dict(env, ZEPHON_RESUME='samples:0@0', **{k: str(v) for k, v in job.items()})
    for k in ('ZEPHON_NNODES', 'ZEPHON_NODE', 'ZEPHON_RANKS_PER_NODE'):
        del senv[k]
    rc, _, err = sh([SLURM, 'true'], senv, check=False, timeout=60)
    assert rc != 0 and 'the journals in' in err and point in err, err
    assert 'ZEPHON_RESUME_OVERRIDE=1' in err and 'resume=' not in err, err
    assert not mounts_under(tmp_path)
    rc, _, err = sh([SLURM, 'true'], dict(senv, ZEPHON_RESUME_OVERRIDE=1), timeout=60)
    assert "not the journals' point %s" % point in err and 'resume=samples:0@0,' in err, err
    assert not mounts_under(tmp_path)

    # multi-node torchrun only receives the value: it must not compare (the other nodes'
    # mounts may be writing the journals already)
    rc, _, err = sh([TORCHRUN, '--nnodes=2', '--node_rank=0', '--nproc_per_node=2', 'x.py'],
                    dict(env, ZEPHON_RESUME=stale))
    assert 'using ZEPHON_RESUME=%s from the environment' % stale in err, err
    assert 'resume=%s' % stale in err, err
    assert not mounts_under(tmp_path)


def zephon_daemons(mp):
    """Pids of the zephon processes serving mp (their command line names the mountpoint)."""
    pids = []
    for p in pathlib.Path('/proc').iterdir():
        try:
            argv = (p / 'cmdline').read_bytes().split(b'\0')
        except OSError:
            continue
        if (p.name.isdigit() and os.path.basename(argv[0]) == b'zephon' and b'mount' in argv
                and str(mp).encode() in argv):
            pids.append(int(p.name))
    return pids


def running(pid):
    """Whether pid is a process that has not exited (a zombie waiting for init has)."""
    try:
        stat = pathlib.Path('/proc/%d/stat' % pid).read_text()
    except OSError:
        return False
    return stat[stat.rindex(')') + 2] != 'Z'


def end_daemons(pids):
    """SIGCONT, then SIGKILL whatever has not exited within 10 s; wait until all have."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        deadline = time.time() + 10
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        while time.time() < deadline and any(running(p) for p in pids):
            time.sleep(0.1)
    assert not any(running(p) for p in pids), pids


# What torchrun-zephon.sh runs as "torchrun": stops the daemon of $ZEPHON_MOUNT and
# records its pid, then returns, so the script's cleanup meets a mount that does not answer.
STOPPER = """#!%s
import os, pathlib, signal, sys
mp = os.environ['ZEPHON_MOUNT'].encode()
for p in pathlib.Path('/proc').iterdir():
    try:
        argv = (p / 'cmdline').read_bytes().split(b'\\0')
    except OSError:
        continue
    if p.name.isdigit() and os.path.basename(argv[0]) == b'zephon' and mp in argv:
        with open(sys.argv[1], 'a') as f:
            f.write(p.name + '\\n')
        os.kill(int(p.name), signal.SIGSTOP)
""" % PY


def sh_bounded(args, env, timeout):
    """sh(check=False) for a command that may block on a mount: its output goes to files (a
    reader blocked on the mount would hold a pipe open, and sh's own timeout would wait for
    it), and on timeout its whole session is killed, so a hang fails the test."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([str(a) for a in args], env=strenv(env), stdout=out, stderr=err,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = 'timed out after %ds' % timeout
        out.seek(0)
        err.seek(0)
        out, err = out.read().decode(), err.read().decode(errors='replace')
    sanitizers.scan(err)
    return rc, out, err


def test_umount_and_wait_do_not_hang_on_a_stopped_daemon(ds, tmp_path):
    """A daemon that is alive but does not answer (SIGSTOP) blocks every read of its mount.
    zephon-node wait reports it as not up and fails within its timeout; zephon-node umount
    unmounts it (a mount nobody can use), as it did before it read /status to tell another
    job's mount from this node's; so the launchers' cleanup traps do not hang."""
    d, _ = ds
    # (conftest's mounted() is not for here: its realpath() stats the mount, which blocks)
    env = one_node_env(tmp_path, 'stop', d, ZEPHON_RESUME='samples:0@0', ZEPHON_MOUNT_TIMEOUT=2)
    mp = node_mp(env)
    pids = []
    try:
        sh([NODE, 'mount'], env)
        pids = zephon_daemons(mp)
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGSTOP)
        t0 = time.time()
        rc, _, err = sh_bounded([NODE, 'wait'], env, 30)
        assert rc == 1 and 'is mounted but its daemon did not answer' in err, (rc, err)
        assert 'Killed' not in err, err
        assert time.time() - t0 < 15, err
        rc, _, err = sh_bounded([NODE, 'umount'], env, 30)
        assert rc == 0 and 'does not answer' in err, (rc, err)
        assert str(mp) not in mounts_under(tmp_path)
        end_daemons(pids)

        # torchrun-zephon.sh's cleanup trap, end to end
        stopper = tmp_path / 'stopper'
        stopper.write_text(STOPPER)
        stopper.chmod(0o755)
        pidfile = tmp_path / 'stopped.pid'
        tenv = dict(env, ZEPHON_TORCHRUN='%s %s' % (stopper, pidfile))
        del tenv['ZEPHON_RESUME']
        rc, _, err = sh_bounded([TORCHRUN, '--standalone', '--nproc_per_node=2', 'x.py'],
                                tenv, 30)
        pids = [int(l) for l in pidfile.read_text().split()]
        assert len(pids) == 1, pids
        assert rc == 0 and 'does not answer' in err, (rc, err)
        assert str(mp) not in mounts_under(tmp_path)
    finally:
        if str(mp) in mounts_under(tmp_path):
            unmount(mp)
        end_daemons(pids)
    assert not mounts_under(tmp_path)


def test_mount_failure_leaves_another_jobs_mount_alone(ds, tmp_path):
    """Job A's mount is live at ZEPHON_MOUNT; job B (its own journals, the same mountpoint)
    fails to mount through every launcher, and A's mount stays up and readable."""
    d, _ = ds
    a = one_node_env(tmp_path, 'jobA', d, ZEPHON_RESUME='samples:0@0')
    b = dict(one_node_env(tmp_path, 'jobB', d, ZEPHON_TORCHRUN='true'),
             ZEPHON_MOUNT=a['ZEPHON_MOUNT'])
    mp = node_mp(a)
    sh([NODE, 'mount'], a)
    try:
        def a_is_up():
            assert mounted(mp) and status(mp)['journal'].startswith(a['ZEPHON_JOURNAL_DIR'])
        rc, _, err = sh([TORCHRUN, '--standalone', '--nproc_per_node=2', 'x.py'], b, check=False)
        assert rc != 0 and 'already mounted' in err, err
        a_is_up()
        job = dict(SLURM_JOB_ID=31, SLURM_JOB_NUM_NODES=1, SLURM_NNODES=1,
                   SLURM_NTASKS_PER_NODE=2, SLURM_NTASKS=2, SLURM_NODEID=0, SLURM_PROCID=0,
                   SLURM_LOCALID=0)
        senv = dict(b, **{k: str(v) for k, v in job.items()})
        for k in ('ZEPHON_NNODES', 'ZEPHON_NODE', 'ZEPHON_RANKS_PER_NODE'):
            del senv[k]
        rc, _, err = sh([SLURM, 'true'], senv, check=False, timeout=60)
        assert rc != 0 and 'mount of another job' in err, err
        a_is_up()
        # zephon-node itself: B's umount refuses A's mount
        rc, _, err = sh([NODE, 'umount'], b, check=False)
        assert rc != 0 and 'not unmounting' in err, err
        a_is_up()
        # the systemd unit: its start refuses the live mount, its ExecStopPost (which also
        # runs after a failed start) does not detach it
        conf = dict(ZEPHON_DATASET=str(d), ZEPHON_MOUNT=str(mp), ZEPHON_OPTIONS='world_size=1')
        p = run_unit_line('ExecStartPre', conf, stderr=subprocess.PIPE)
        assert p.returncode != 0 and b'already mounted' in p.stderr, p.stderr
        run_unit_line('ExecStopPost', conf)
        a_is_up()
        assert read_all(mp / 'rank' / '0' / 'next')
    finally:
        node_umount(a, mp)
    assert not mounts_under(tmp_path)


def test_node_mount_over_a_stale_mount(ds, tmp_path):
    """After kill -9 the mountpoint is stale (every stat fails with ENOTCONN): zephon-node
    mount leaves it to zephon, which clears it and mounts; so does the systemd unit."""
    d, _ = ds
    env = one_node_env(tmp_path, 'stale', d, ZEPHON_RESUME='samples:0@0')
    mp = node_mp(env)
    for attempt in ('zephon-node', 'unit'):
        p = subprocess.Popen([str(NODE), 'mount', '-f'], env=strenv(env),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            sh([NODE, 'wait'], env)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)
        assert mounted(mp)
        with pytest.raises(OSError):
            os.stat(mp)
        try:
            if attempt == 'unit':
                p = run_unit_line('ExecStartPre', dict(ZEPHON_DATASET=str(d),
                                                       ZEPHON_MOUNT=str(mp),
                                                       ZEPHON_OPTIONS='world_size=1'),
                                  stderr=subprocess.PIPE)
                assert p.returncode == 0, p.stderr
            rc, _, err = sh([NODE, 'mount'], env)
            assert 'cleared a stale mount' in err, err
            assert status(mp)['world_size'] == 2
        finally:
            node_umount(env, mp)
    assert not mounts_under(tmp_path)


def test_slurm_script_stops_when_the_resume_point_fails(ds, tmp_path):
    """A corrupt journal: the batch script stops at once with the journal's error and a
    non-zero status, instead of mounting with an empty resume point and waiting."""
    d, _ = ds
    job = dict(SLURM_JOB_ID=41, SLURM_JOB_NUM_NODES=2, SLURM_NNODES=2, SLURM_NTASKS_PER_NODE=1,
               SLURM_NTASKS=2, SLURM_NODEID=0, SLURM_PROCID=0, SLURM_LOCALID=0)
    env = base_env(tmp_path, 'corrupt', ZEPHON_DATASET=d,
                   ZEPHON_OPTIONS='global_batch=4,seed=%d' % SEED, **job)
    jd = pathlib.Path(env['ZEPHON_JOURNAL_DIR'])
    jd.mkdir()
    (jd / 'node-5.sqlite').write_bytes(b'not a database, ' * 512)
    rc, out, err = sh([NODE, 'resume-point'], env, check=False)
    assert rc != 0 and not out.strip(), (out, err)
    t0 = time.time()
    rc, _, err = sh([SLURM, 'true'], env, check=False, timeout=25)
    assert rc != 0 and 'node-5.sqlite' in err, err
    assert 'resume=,' not in err and 'ZEPHON_RESUME is not set' not in err, err
    assert time.time() - t0 < 20, err
    # a set ZEPHON_RESUME that the journals cannot confirm: refused unless meant
    rc, out, err = sh([NODE, 'resume-point', '--allow-override'],
                      dict(env, ZEPHON_RESUME='samples:8@2'), check=False)
    assert rc != 0 and not out.strip() and 'cannot be read to confirm it' in err, (out, err)
    assert 'ZEPHON_RESUME_OVERRIDE=1' in err, err
    rc, out, err = sh([NODE, 'resume-point', '--allow-override'],
                      dict(env, ZEPHON_RESUME='samples:8@2', ZEPHON_RESUME_OVERRIDE=1))
    assert out.strip() == 'samples:8@2' and 'could not be compared' in err, (out, err)
    assert not mounts_under(tmp_path)


def test_launcher_papercuts(ds, tmp_path):
    d, _ = ds
    env = one_node_env(tmp_path, 'cuts', d, ZEPHON_RESUME='samples:0@0')
    # decimals with leading zeros are not octal
    out = sh([NODE, 'options'], dict(env, ZEPHON_NNODES='08', ZEPHON_NODE='07'))[1]
    assert 'world_size=16,ranks=14-15,' in out and 'node-7.sqlite' in out, out
    # spaces in ZEPHON_OPTIONS are refused by the script, not inside zephon
    rc, _, err = sh([NODE, 'options'], dict(env, ZEPHON_OPTIONS=' global_batch=12, seed=1'),
                    check=False)
    assert rc != 0 and 'white space' in err, err
    # a journal directory that does not exist: the first run, but say so (a typo?)
    rc, out, err = sh([NODE, 'resume-point'], dict(env, ZEPHON_JOURNAL_DIR=str(tmp_path / 'typo')))
    assert out.strip() == 'samples:0@0' and 'does not exist' in err, (out, err)
    # the unit refuses an empty ZEPHON_OPTIONS before zephon sees -o ""
    p = run_unit_line('ExecStartPre', dict(ZEPHON_DATASET=str(d),
                                           ZEPHON_MOUNT=str(tmp_path / 'u'), ZEPHON_OPTIONS=''),
                      stderr=subprocess.PIPE)
    assert p.returncode != 0 and b'ZEPHON_OPTIONS is empty in /etc/zephon/demo.conf' in p.stderr, p.stderr


def test_torchrun_script_mounts_the_dp_degree(ds, tmp_path):
    """With tensor/pipeline/context parallelism the mount serves DP ranks, not processes:
    ZEPHON_DP_DEGREE=2 on a node of 4 processes mounts world_size 2, ranks 0-1; a DP
    degree that does not tile the nodes is refused before anything is mounted."""
    d, _ = ds
    fake = tmp_path / 'fake-torchrun'         # stands in for torchrun: records the mount
    fake.write_text('#!/bin/sh\ncat "$ZEPHON_MOUNT/status" > "%s"\n'
                    'echo "$ZEPHON_DP_DEGREE $ZEPHON_DP_RANKS_PER_NODE" >> "%s"\n'
                    % (tmp_path / 'status.json', tmp_path / 'dp'))
    fake.chmod(0o755)
    env = base_env(tmp_path, 'dp', ZEPHON_DATASET=d, ZEPHON_TORCHRUN=fake,
                   ZEPHON_OPTIONS='global_batch=4', ZEPHON_DP_DEGREE=2)
    rc, _, err = sh([TORCHRUN, '--standalone', '--nproc_per_node=4', 'x.py'], env)
    assert 'ranks 0-1 at %s (data-parallel degree 2)' % (tmp_path / 'dp-node0') in err, err
    st = json.loads((tmp_path / 'status.json').read_text())
    assert (st['world_size'], st['ranks']) == (2, '0-1')
    assert (tmp_path / 'dp').read_text().split() == ['2', '2']
    assert not mounts_under(tmp_path)
    env.pop('ZEPHON_DP_DEGREE')
    rc, _, err = sh([TORCHRUN, '--standalone', '--nproc_per_node=2', 'x.py'], env)
    assert 'ZEPHON_DP_DEGREE is not set: every process is a data-parallel rank (world_size=2)' in err
    for dp, extra, why in (('3', {}, 'ZEPHON_DP_DEGREE=3 is not a multiple of --nnodes=2'),
                           ('x', {}, 'ZEPHON_DP_DEGREE=x: give the job'),
                           ('4', {'ZEPHON_DP_RANKS_PER_NODE': '3'}, 'ZEPHON_DP_RANKS_PER_NODE=3 x --nnodes=2 is not')):
        rc, _, err = sh([TORCHRUN, '--nnodes=2', '--node_rank=0', '--nproc_per_node=2', 'x.py'],
                        dict(env, ZEPHON_DP_DEGREE=dp, ZEPHON_RESUME='samples:0@0', **extra),
                        check=False)
        assert rc == 2 and why in err, (dp, err)
    assert not mounts_under(tmp_path)


def test_node_umount_returns_once_the_journal_is_closed(ds, tmp_path):
    """`zephon-node umount` returns only when the daemon has closed its journal: a file of
    the mount held open makes fusermount3 -u fail and the lazy unmount keep the daemon
    serving it; umount waits (the -wal still there) until the file is closed, then
    returns with no -wal and no daemon left. With ZEPHON_UMOUNT_TIMEOUT it gives up
    saying why."""
    d, _ = ds
    env = one_node_env(tmp_path, 'um', d, ZEPHON_RESUME='samples:0@0')
    journal = pathlib.Path(env['ZEPHON_JOURNAL_DIR']) / 'node-0.sqlite'
    wal = pathlib.Path(str(journal) + '-wal')
    for timeout in ('1', None):
        sh([NODE, 'mount'], env)
        mp = node_mp(env)
        daemons = zephon_daemons(mp)
        assert len(daemons) == 1
        held = open(mp / 'rank' / '0' / 'next', 'rb')
        try:
            held.read()
            e = dict(env, ZEPHON_UMOUNT_TIMEOUT=timeout) if timeout else env
            p = subprocess.Popen([str(NODE), 'umount'], env=strenv(e), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            if timeout:
                _, err = p.communicate(timeout=60)
                assert p.returncode == 1 and 'has not closed the journal' in err, err
            else:
                with pytest.raises(subprocess.TimeoutExpired):
                    p.wait(timeout=1.5)
                assert wal.exists() and running(daemons[0])
        finally:
            held.close()
        if timeout:
            end_daemons(daemons)
            continue
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert not wal.exists() and not running(daemons[0])
        assert not mounted(mp)


def test_slurm_script_mounts_the_dp_degree(ds, tmp_path):
    """2 nodes x 4 tasks with ZEPHON_DP_DEGREE=4 (e.g. tensor parallelism 2): each node's
    mount serves 2 DP ranks of world_size 4, not 4 of 8; the step gets the DP degree and
    ranks per node. A degree that does not tile the nodes, or a ZEPHON_RANKS_PER_NODE that
    contradicts it, is refused before anything is mounted."""
    d, _ = ds
    job = dict(SLURM_JOB_ID=21, SLURM_JOB_NUM_NODES=2, SLURM_NNODES=2, SLURM_NTASKS_PER_NODE=4,
               SLURM_NTASKS=8, SLURM_NODEID=0, SLURM_PROCID=0, SLURM_LOCALID=0)
    env = base_env(tmp_path, 'tp', ZEPHON_DATASET=d, ZEPHON_DP_DEGREE=4,
                   ZEPHON_OPTIONS='global_batch=8,seed=%d' % SEED, **job)
    step = tmp_path / 'step.sh'         # the job's step: records both nodes' mounts
    step.write_text('#!/bin/bash\nfor n in 0 1; do cat "${ZEPHON_MOUNT//%%n/$n}/status" > '
                    '"%s/status-$n.json"; done\necho "$ZEPHON_DP_DEGREE $ZEPHON_DP_RANKS_PER_NODE"'
                    ' > "%s/dp"\n' % (tmp_path, tmp_path))
    step.chmod(0o755)
    rc, _, err = sh([SLURM, step], env)
    assert '2 nodes x 2 ranks (data-parallel degree 4)' in err, err
    for n, ranks in ((0, '0-1'), (1, '2-3')):
        st = json.loads((tmp_path / ('status-%d.json' % n)).read_text())
        assert (st['world_size'], st['ranks'], st['global_batch']) == (4, ranks, 8), st
    assert (tmp_path / 'dp').read_text().split() == ['4', '2']
    assert not mounts_under(tmp_path)
    for extra, why in (({'ZEPHON_DP_DEGREE': 3}, 'ZEPHON_DP_DEGREE=3 is not a multiple of the job\'s 2 nodes'),
                       ({'ZEPHON_DP_DEGREE': 'x'}, 'ZEPHON_DP_DEGREE=x: give the job'),
                       ({'ZEPHON_RANKS_PER_NODE': 4}, 'ZEPHON_RANKS_PER_NODE=4 contradicts ZEPHON_DP_DEGREE=4'),
                       ({'ZEPHON_DP_RANKS_PER_NODE': 3}, 'ZEPHON_DP_RANKS_PER_NODE=3 x the job\'s 2 nodes is not')):
        rc, _, err = sh([SLURM, step], dict(env, **extra), check=False)
        assert rc == 2 and why in err, (extra, err)
    assert not mounts_under(tmp_path)


def test_launchers_reuse_only_this_nodes_own_stream(ds, tmp_path):
    """A live mount at ZEPHON_MOUNT (a crashed run's leftover) of node 0 of 2: zephon-node
    mount reuses it when it is this node's very stream and layout (prints "reused";
    torchrun-zephon.sh then leaves it mounted at its end), refuses it naming both sides
    when any of it differs, and a foreground mount (slurm-zephon.sh's) never reuses it.
    On one node torchrun-zephon.sh stops earlier: the resume point cannot be read from a
    journal a live mount holds."""
    d, _ = ds
    env = base_env(tmp_path, 'reuse', ZEPHON_DATASET=d, ZEPHON_NNODES=2, ZEPHON_NODE=0,
                   ZEPHON_RANKS_PER_NODE=2, ZEPHON_RESUME='samples:0@0',
                   ZEPHON_OPTIONS='global_batch=4,micro_batch=1,seed=%d' % SEED)
    mp = node_mp(env)
    journal = pathlib.Path(env['ZEPHON_JOURNAL_DIR']) / 'node-0.sqlite'
    copy = tmp_path / 'copy'
    shutil.copytree(d, copy)
    sh([NODE, 'mount'], env)
    try:
        rc, out, err = sh([NODE, 'mount'], env)
        assert out.strip() == 'reused' and 'reusing the live mount' in err, (out, err)
        rc, _, err = sh([TORCHRUN, '--nnodes=2', '--node_rank=0', '--nproc_per_node=2',
                         'x.py'], dict(env, ZEPHON_TORCHRUN='true'))
        assert 'reusing the live mount' in err, err
        assert mounted(mp) and status(mp)['seed'] == SEED       # not unmounted
        for change, part in (
                (dict(ZEPHON_OPTIONS='global_batch=4,micro_batch=1,seed=%d' % (SEED + 1)),
                 'seed %d there, %d asked' % (SEED, SEED + 1)),
                (dict(ZEPHON_OPTIONS='global_batch=8,micro_batch=1,seed=%d' % SEED),
                 'global_batch 4 there, 8 asked'),
                (dict(ZEPHON_OPTIONS='global_batch=8,seed=%d' % SEED),
                 'micro_batch 1 there, 2 asked'),
                (dict(ZEPHON_RANKS_PER_NODE=1), 'world_size 4 there, 2 asked'),
                (dict(ZEPHON_NODE=1), 'ranks 0-1 there, 2-3 asked; journal %s there, %s asked'
                 % (journal, journal.parent / 'node-1.sqlite')),
                (dict(ZEPHON_RESUME='samples:4@1'), 'start_samples 0 there, 4 asked'),
                (dict(ZEPHON_DATASET=str(copy)), 'dataset %s there, %s asked' % (d, copy)),
                (dict(ZEPHON_OPTIONS='global_batch=4,micro_batch=1,seed=%d,validation=0.25'
                      % SEED), 'validation (none) there, 1/4 asked')):
            if 'ZEPHON_NODE' in change:
                change['ZEPHON_MOUNT'] = str(mp)
            rc, out, err = sh([NODE, 'mount'], dict(env, **change), check=False)
            assert rc != 0 and part in err, (change, err)
            assert out == ''
            assert 'fusermount3 -u %s' % mp in err, err
        rc, _, err = sh([NODE, 'mount', '-f'], env, check=False)
        assert rc == 1 and 'a foreground mount cannot reuse it' in err, err
        one = dict(env, ZEPHON_NNODES=1, ZEPHON_TORCHRUN='true', ZEPHON_MOUNT=str(mp),
                   ZEPHON_JOURNAL_DIR=env['ZEPHON_JOURNAL_DIR'])
        one.pop('ZEPHON_RESUME')
        rc, _, err = sh([TORCHRUN, '--standalone', '--nproc_per_node=2', 'x.py'], one,
                        check=False)
        assert rc != 0, err
        assert mounted(mp) and status(mp)['seed'] == SEED
    finally:
        node_umount(env, mp)
    assert not mounts_under(tmp_path)


def test_launchers_compare_a_mixtures_weights_and_split(tmp_path):
    """A live mount of a mixture is reused only with the weights= and validation split
    asked, compared as the mount serves them (integers, a fraction: `zephon mount --check`
    prints both), so 0.5/0.5 is 1:1 and 0.25 is 1/4."""
    srcs = {}
    for name in ('web', 'code'):
        write_jsonl(tmp_path / (name + '.jsonl'), 40)
        srcs[name] = pack(tmp_path / name, [tmp_path / (name + '.jsonl')])
    mix = tmp_path / 'mix.json'
    mix.write_text(json.dumps({'sources': [{'name': n, 'dataset': str(p), 'weight': 1}
                                           for n, p in srcs.items()]}))
    opts = 'global_batch=4,seed=%d,validation=0.25' % SEED
    env = base_env(tmp_path, 'mix', ZEPHON_DATASET=mix, ZEPHON_NNODES=1, ZEPHON_NODE=0,
                   ZEPHON_RANKS_PER_NODE=2, ZEPHON_RESUME='samples:0@0',
                   ZEPHON_OPTIONS=opts + ',weights=web:0.5+code:0.5')
    mp = node_mp(env)
    p = run('mount', mix, tmp_path / 'unused', '-o', 'world_size=2,' + opts +
            ',weights=web:0.5+code:0.5', '--check')
    assert p.stdout.decode().splitlines() == ['weights=1,1', 'validation=1/4'], p.stdout
    sh([NODE, 'mount'], env)
    try:
        rc, out, err = sh([NODE, 'mount'], dict(env, ZEPHON_OPTIONS=opts.replace('0.25', '1/4')
                                                 + ',weights=web:1+code:1'))
        assert out.strip() == 'reused', (out, err)
        for change, part in (
                (opts + ',weights=web:0.75+code:0.25', 'weights 1,1 there, 3,1 asked'),
                (opts.replace('0.25', '0.5'), 'validation 1/4 there, 1/2 asked')):
            rc, out, err = sh([NODE, 'mount'], dict(env, ZEPHON_OPTIONS=change), check=False)
            assert rc != 0 and part in err and out == '', (change, err)
    finally:
        node_umount(env, mp)
    assert not mounts_under(tmp_path)


def test_wait_refuses_a_mount_of_another_layout(ds, tmp_path):
    """`zephon-node wait` (what slurm-zephon.sh runs before the job's step) takes a mount
    for this node's only when it is its stream and layout: a leftover with this node's
    journal but another global batch is refused, naming both."""
    d, _ = ds
    env = one_node_env(tmp_path, 'wl', d, ZEPHON_RESUME='samples:0@0')
    mp = node_mp(env)
    sh([NODE, 'mount'], env)
    try:
        sh([NODE, 'wait'], env)
        rc, _, err = sh([NODE, 'wait'], dict(env, ZEPHON_OPTIONS='global_batch=8,seed=%d' % SEED),
                        check=False)
        assert rc == 1 and 'global_batch 4 there, 8 asked' in err, err
    finally:
        node_umount(env, mp)
    assert not mounts_under(tmp_path)
