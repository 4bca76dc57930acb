"""zephon.mount and zephon.node_mount: live inside the block, unmounted after it (also on
an exception), zephon's reason on a failed mount; one process per node mounts, the others
wait for it."""
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

import zephon
from zephon.mount import format_ranks

from conftest import ZEPHON


def is_mounted(path):
    with open('/proc/self/mountinfo') as f:
        return any(line.split()[4] == str(path) for line in f)


def test_mount_unmounts_after_the_block_and_on_an_exception(tokens, tmp_path):
    mp = tmp_path / 'mnt'
    with zephon.mount(tokens, mp, world_size=2, global_batch=4, seed=1,
                      journal=tmp_path / 'j.sqlite') as m:
        assert is_mounted(mp)
        assert m.status()['world_size'] == 2
        with open(mp / 'rank' / '1' / 'next', 'rb') as f:
            assert f.read()[:6] == b'\x93NUMPY'
    assert not is_mounted(mp)
    with pytest.raises(KeyError):
        with zephon.mount(tokens, mp, world_size=2, seed=1, journal=tmp_path / 'j.sqlite'):
            assert is_mounted(mp)
            raise KeyError('boom')
    assert not is_mounted(mp)
    # the daemon is gone: the journal can be mounted again at once
    with zephon.mount(tokens, mp, world_size=1, seed=1, journal=tmp_path / 'j.sqlite') as m:
        assert m.status()['world_size'] == 1


def test_a_failed_mount_says_why(tokens, tmp_path):
    with pytest.raises(zephon.ZephonError, match=r'global_batch \(4\) must be a multiple of world_size \(3\)'):
        with zephon.mount(tokens, tmp_path / 'mnt', world_size=3, global_batch=4):
            pass
    assert not is_mounted(tmp_path / 'mnt')
    with pytest.raises(ValueError, match='comma or white space'):
        zephon.mount(tokens, tmp_path / 'mnt', journal='/a b')


def test_find_executable(tmp_path):
    assert zephon.find_executable() == os.path.abspath(ZEPHON)
    assert zephon.find_executable(ZEPHON) == os.path.abspath(ZEPHON)
    with pytest.raises(zephon.ZephonError, match='is not an executable file'):
        zephon.find_executable(tmp_path / 'nope')
    # without ZEPHON: the package's own (the installed wheel's), then PATH:
    # tests/python/test_package.py


def test_format_ranks():
    assert format_ranks([5, 0, 1, 2]) == '0-2,5'
    assert format_ranks(range(4, 8)) == '4-7'


def test_node_mount_one_mounts_the_others_wait(tokens, tmp_path):
    mp = tmp_path / 'node'
    kw = dict(dp_degree=4, dp_ranks=[2, 3], global_batch=8, journal=tmp_path / 'j.sqlite',
              timeout=30)
    got = {}

    def waiter():
        try:
            with zephon.node_mount(tokens, mp, local_rank=1, **kw) as w:
                got['status'] = w.status()
        except Exception as e:      # reported below
            got['error'] = e

    t = threading.Thread(target=waiter)
    t.start()                       # waits: nothing is mounted yet
    with zephon.node_mount(tokens, mp, local_rank=0, **kw) as m:
        t.join(30)
        assert not t.is_alive() and 'error' not in got, got
        assert (got['status']['world_size'], got['status']['ranks']) == (4, '2-3')
        assert m.status()['ranks'] == '2-3'
    assert not is_mounted(mp)
    with pytest.raises(zephon.ZephonError, match='no mount of .* answered .* within 0.3 s'):
        zephon.node_mount(tokens, mp, local_rank=1, **dict(kw, timeout=0.3))
    with pytest.raises(TypeError, match="unexpected keyword argument 'world_size'"):
        zephon.node_mount(tokens, mp, local_rank=0, world_size=4, **kw)


# --- A mount is never silently someone else's (issue 24, part 1) ---------------------

def zmount_cli(ds, mp, options):
    """A mount made by the CLI (daemonized), as a leftover of another run would be."""
    os.makedirs(mp, exist_ok=True)
    subprocess.run([ZEPHON, 'mount', str(ds), str(mp), '-o', options], check=True,
                   stderr=subprocess.PIPE)


def fusermount_u(mp):
    if is_mounted(mp):
        subprocess.run(['fusermount3', '-u', str(mp)], check=True)


def wait_until(pred, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_live_mount_of_another_stream_is_refused_and_left_alone(tokens, tmp_path):
    """The issue's repro: a mount of world_size 1, seed 1, journal j1 is live; asking for
    world_size 2, seed 5, journal j2 there raises, naming both sides and what to do, and
    leaves the live mount as it was."""
    mp, j1, j2 = tmp_path / 'mnt', tmp_path / 'j1.sqlite', tmp_path / 'j2.sqlite'
    zmount_cli(tokens, mp, 'world_size=1,seed=1,journal=%s' % j1)
    try:
        with pytest.raises(zephon.ZephonError) as e:
            with zephon.mount(tokens, mp, world_size=2, seed=5, journal=j2):
                pass
        msg = str(e.value)
        for part in ('world_size 1 there, 2 asked', 'seed 1 there, 5 asked',
                     'journal %s there, %s asked' % (j1, j2), 'fusermount3 -u %s' % mp,
                     'another mountpoint'):
            assert part in msg, msg
        assert not j2.exists()
        st = zephon.read_status(mp)          # still there, still the same
        assert (st['world_size'], st['seed'], st['journal']) == (1, 1, str(j1))
        # each compared key on its own
        for kw, part in [(dict(global_batch=2), 'global_batch 1 there, 2 asked'),
                         (dict(micro_batch=2, global_batch=2), 'global_batch 1 there'),
                         (dict(shuffle='none'), 'shuffle global there, none asked'),
                         (dict(epochs=2), 'epochs 0 there, 2 asked'),
                         (dict(validation=0.1), 'validation none there, 1/10 asked'),
                         (dict(weights=[1]), 'weights= applies to a mixture spec only'),
                         (dict(resume='samples:8@8'), 'start_samples 0 there, 8 asked')]:
            opts = dict(dict(world_size=1, seed=1, journal=j1), **kw)
            with pytest.raises(zephon.ZephonError, match=part.replace('(', r'\(')):
                zephon.mount(tokens, mp, **opts).start()
        other = tmp_path / 'other'
        shutil.copytree(tokens, other)          # the same bytes under another path
        with pytest.raises(zephon.ZephonError, match='dataset .* there, .*other asked'):
            zephon.mount(other, mp, world_size=1, seed=1, journal=j1).start()
    finally:
        fusermount_u(mp)


def test_the_same_stream_is_reused_and_not_unmounted(tokens, tmp_path):
    """A leftover mount of the very stream asked (a restarted run) is reused; leaving the
    block does not unmount it, since the block did not make it."""
    mp, j1 = tmp_path / 'mnt', tmp_path / 'j1.sqlite'
    zmount_cli(tokens, mp, 'world_size=2,global_batch=4,micro_batch=1,ranks=0,1,seed=1,'
               'journal=%s,prefetch=1' % j1)
    try:
        # the same stream, written differently: defaults, a relative journal, ranks as a list
        os.chdir(tmp_path)
        with zephon.mount(tokens, mp, world_size=2, global_batch=4, micro_batch=1, seed=1,
                          journal='j1.sqlite') as m:
            assert m.reused and m.pid is None
            assert m.status()['journal'] == str(j1)
        assert is_mounted(mp) and zephon.read_status(mp)['seed'] == 1
        with zephon.node_mount(tokens, mp, local_rank=0, dp_degree=2, dp_ranks=[1, 0],
                               global_batch=4, micro_batch=1, seed=1, journal=j1) as m:
            assert m.reused
        assert is_mounted(mp)
    finally:
        fusermount_u(mp)


def test_the_daemons_error_is_not_lost(tokens, tmp_path):
    """A mount refused for a reason of its own (here: another dataset's journal) raises
    with the daemon's message, also while nothing else is mounted."""
    mp, j = tmp_path / 'mnt', tmp_path / 'j.sqlite'
    with zephon.mount(tokens, mp, world_size=1, seed=1, journal=j):
        pass
    with pytest.raises(zephon.ZephonError, match='cannot mount .*seed'):
        with zephon.mount(tokens, mp, world_size=1, seed=2, journal=j):
            pass
    assert not is_mounted(mp)


LINGER = r'''
import sys, time, zephon
m = zephon.mount(sys.argv[1], sys.argv[2], world_size=1, seed=1, journal=sys.argv[3]).start()
print(m.pid, flush=True)
time.sleep(600)
'''


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open('/proc/%d/stat' % pid) as f:          # a zombie is gone for our purpose
        return f.read().rsplit(')', 1)[1].split()[0] != 'Z'


def test_a_mount_ends_with_the_process_that_made_it_on_kill_9(tokens, tmp_path):
    """kill -9 of the process that called zephon.mount: the daemon sees its watch pipe hang
    up, unmounts, closes its journal (no -wal left) and exits."""
    mp, j = tmp_path / 'mnt', tmp_path / 'j.sqlite'
    p = subprocess.Popen([sys.executable, '-c', LINGER, str(tokens), str(mp), str(j)],
                         stdout=subprocess.PIPE, text=True)
    try:
        daemon = int(p.stdout.readline())
        assert is_mounted(mp) and pid_alive(daemon)
        with open(mp / 'rank' / '0' / 'next', 'rb') as f:
            f.read()
        p.kill()
        p.wait()
        wait_until(lambda: not is_mounted(mp) and not pid_alive(daemon),
                   'the mount outlived the process that made it')
        assert not os.path.exists(str(j) + '-wal')
        # the journal kept the batch read: the next mount starts after it
        with zephon.mount(tokens, mp, world_size=1, seed=1, journal=j) as m:
            assert m.status()['start_samples'] == 1
    finally:
        p.kill()
        fusermount_u(mp)


NODE_RANK0 = r'''
import sys, time, zephon
m = zephon.node_mount(sys.argv[1], sys.argv[2], local_rank=0, dp_degree=3, dp_ranks=[0, 2],
                      global_batch=6, seed=1, journal=sys.argv[3])
print(m.pid, flush=True)
time.sleep(600)
'''


def test_node_mount_lives_while_a_local_rank_uses_it(tokens, tmp_path):
    """dp_ranks=[0, 2] (ranks=0,2 as the CLI takes it). Local rank 0 is killed with -9
    while local rank 1 still holds the mount: it keeps serving rank 1; once rank 1 lets go,
    it ends."""
    mp, j = tmp_path / 'node', tmp_path / 'j.sqlite'
    p = subprocess.Popen([sys.executable, '-c', NODE_RANK0, str(tokens), str(mp), str(j)],
                         stdout=subprocess.PIPE, text=True)
    try:
        w = zephon.node_mount(tokens, mp, local_rank=1, dp_degree=3, dp_ranks=[0, 2],
                              global_batch=6, seed=1, journal=j, timeout=60)
        daemon = int(p.stdout.readline())
        assert w.status()['ranks'] == '0,2'
        p.kill()
        p.wait()
        time.sleep(0.5)
        assert is_mounted(mp) and pid_alive(daemon)
        with open(mp / 'rank' / '2' / 'next', 'rb') as f:
            assert f.read()[:6] == b'\x93NUMPY'
        w.stop()
        wait_until(lambda: not is_mounted(mp) and not pid_alive(daemon),
                   'the mount outlived every local rank')
        assert not os.path.exists(str(j) + '-wal')
    finally:
        p.kill()
        fusermount_u(mp)


def test_every_mount_option_is_a_keyword_of_its_own(tmp_path, monkeypatch):
    """mount, node_mount and Mount name each option of zephon mount -o; the option text
    is mount_options': a rank list written as ranks= takes it, a relative journal made
    absolute, FUSE options passed as they are; an unknown keyword is a TypeError."""
    from zephon.mount import mount_options
    monkeypatch.chdir(tmp_path)
    assert mount_options(world_size=8, ranks=[5, 0, 1, 2], journal='j.sqlite', seed=3,
                         allow_other=True, fuse_options=['noatime', 'fsname=z']) == \
        f'world_size=8,ranks=0-2,5,seed=3,journal={tmp_path}/j.sqlite,allow_other,noatime,fsname=z'
    assert mount_options() == ''
    # readahead: bytes as an int or the option's own text
    assert mount_options(readahead=1 << 20, prefetch=1) == 'prefetch=1,readahead=1048576'
    assert mount_options(readahead='64M') == 'readahead=64M'
    with pytest.raises(ValueError, match='comma or white space'):
        mount_options(resume='step:1 2')
    for fn in (zephon.mount, zephon.Mount):
        with pytest.raises(TypeError, match="unexpected keyword argument 'wordl_size'"):
            fn(tmp_path, tmp_path / 'mnt', wordl_size=2)
    # node_mount's dp_degree and dp_ranks are world_size and ranks: not options of its own
    for kw in (dict(world_size=2), dict(ranks=[0]), dict(wordl_size=2)):
        with pytest.raises(TypeError, match="node_mount.. got an unexpected keyword"):
            zephon.node_mount(tmp_path, tmp_path / 'mnt', dp_degree=2, dp_ranks=[0], **kw)
    with pytest.raises(TypeError, match="mount_options.. got an unexpected keyword"):
        mount_options(rank=[0])
    assert not (tmp_path / 'mnt').exists()


def test_the_options_are_one_typed_definition():
    """mount, Mount and node_mount take the options of one TypedDict (what mypy checks
    a call against), and the option text writes each of them."""
    import inspect

    from zephon.options import OPTION_NAMES, MountOptions, NodeMountOptions
    assert set(MountOptions.__optional_keys__) == set(OPTION_NAMES)
    assert set(MountOptions.__optional_keys__) - set(NodeMountOptions.__optional_keys__) == \
        {'world_size', 'ranks'}
    for fn in (zephon.mount, zephon.Mount.__init__, zephon.node_mount):
        params = inspect.signature(fn).parameters
        assert not set(params) & set(OPTION_NAMES), fn         # none restated
        assert [p.kind for p in params.values()][-1] == inspect.Parameter.VAR_KEYWORD, fn
