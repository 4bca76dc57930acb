"""zephon.mount and zephon.node_mount: live inside the block, unmounted after it (also on
an exception), zephon's reason on a failed mount; one process per node mounts, the others
wait for it."""
import os
import subprocess
import sys
import threading

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


def test_find_executable(tmp_path, monkeypatch):
    assert zephon.find_executable() == os.path.abspath(ZEPHON)
    assert zephon.find_executable(ZEPHON) == os.path.abspath(ZEPHON)
    with pytest.raises(zephon.ZephonError, match='is not an executable file'):
        zephon.find_executable(tmp_path / 'nope')
    monkeypatch.delenv('ZEPHON')
    monkeypatch.setenv('PATH', str(tmp_path))
    with pytest.raises(zephon.ZephonError, match='not on PATH; set ZEPHON'):
        zephon.find_executable()


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
    with pytest.raises(ValueError, match='sets world_size= itself'):
        zephon.node_mount(tokens, mp, local_rank=0, world_size=4, **kw)
