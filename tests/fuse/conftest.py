"""Shared fixtures of Zephon's integration tests (suite `fuse`).

Environment (set by meson, see tests/meson.build):
  ZEPHON       path of the zephon executable under test
  ZEPHON_DATA  ../shared/data (real public files); tests that need it skip without it
"""
import os
import pathlib
import subprocess

import pytest

ZEPHON = os.environ.get('ZEPHON') or str(
    pathlib.Path(__file__).resolve().parents[2] / 'build' / 'fs' / 'zephon')
DATA = pathlib.Path(os.environ.get('ZEPHON_DATA') or
                    pathlib.Path(__file__).resolve().parents[3] / 'shared' / 'data')


def run(*args, check=True, input=None, env=None):
    """Run zephon with args; return the CompletedProcess (bytes stdout, text stderr)."""
    p = subprocess.run([ZEPHON, *map(str, args)], input=input, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError('zephon %s failed (%d): %s' % (
            ' '.join(map(str, args)), p.returncode, p.stderr.decode(errors='replace')))
    p.stderr = p.stderr.decode(errors='replace')
    return p


@pytest.fixture
def data():
    if not DATA.is_dir():
        pytest.skip('shared data folder %s is absent' % DATA)
    return DATA
