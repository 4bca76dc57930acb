"""Fixtures of the `python` suite: the zephon package (python/) and its PyTorch loader,
run with the project venv's pytest (tests/run creates it; see tests/meson.build).

Environment: ZEPHON, the zephon executable under test; ZEPHON_DATA, ../shared/data.
"""
import os
import pathlib
import sys

import numpy as np
import pytest

import zephon

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / 'tests'))
import sanitizers  # noqa: E402  (tests/sanitizers.py)
from sanitizers import no_sanitizer_reports, pytest_sessionfinish  # noqa: E402,F401
from zexe import ZEPHON, zrun  # noqa: E402,F401  (one copy, with titan_helpers.py)

# Every process a test starts (mounts, torchrun workers' zephon calls) writes its sanitizer
# reports where the harness reads them: a test after which one appeared fails.
sanitizers.capture()

DATA = pathlib.Path(os.environ.get('ZEPHON_DATA') or ROOT.parent / 'shared' / 'data')
IDX = DATA / 'megatron' / 'meg-gpt2-openwebtext_text_document.idx'
SEQ = 16                             # --seq-len of the token datasets
SEED = 5


def reference(ds, n, window, seed=SEED):
    """The first n samples of the uninterrupted single-rank stream, [n, window] tokens."""
    raw = zrun('batch', ds, '-o', 'world_size=1,global_batch=%d,seed=%d,format=bin' % (n, seed),
               '--rank', 0, '--step', 0)
    return np.frombuffer(raw, dtype='<u2').reshape(n, window).astype(np.int64)


@pytest.fixture(scope='session')
def tokens(tmp_path_factory):
    """A token dataset of the real Megatron files, windows of SEQ + 1 tokens (--overlap 1)."""
    if not IDX.is_file():
        pytest.skip('shared data file %s is absent' % IDX)
    d = tmp_path_factory.mktemp('ds')
    zrun('pack', '--format', 'tokens', '--seq-len', SEQ, '--overlap', 1, '--compress', 'none',
         IDX, '-o', d / 'owt')
    return d / 'owt'


class Mounts:
    """Mounts made by a test: each unmounted at the end, its log checked for sanitizer
    reports."""

    def __init__(self, tmp, seed=SEED):
        self.tmp, self.all, self.n, self.seed = tmp, [], 0, seed

    def __call__(self, ds, **options):
        self.n += 1
        options.setdefault('journal', self.tmp / 'journal.sqlite')
        options.setdefault('seed', self.seed)
        m = zephon.mount(ds, self.tmp / ('mnt%d' % self.n), **options)
        self.all.append(m)
        return m.start()

    def close(self):
        for m in self.all:
            m.stop()
            sanitizers.scan(m.log(), 'zephon mount')


@pytest.fixture
def mounts(tmp_path):
    ms = Mounts(tmp_path)
    yield ms
    ms.close()
