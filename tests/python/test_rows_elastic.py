"""The elastic guarantees on a dataset of rows (`zephon pack --chat`, fine-tuning data):
its rows are samples like any other, so the order, the layouts and the journal serve them
unchanged. On real chat data (WordNet question/answer pairs), uncompressed (ZephonLoader
gathers from the shards by ids/<G>) and zstd (it reads from/<G>):

- every data-parallel degree reads the one stream: each step's shares, in rank order, are
  the step of the uninterrupted single-rank stream (`zephon batch`), for W = 1, 2, 3, 4;
- a loader state saved at DP 4, global batch 8 restores at DP 2 / global batch 16 and at
  DP 3 / global batch 12 and continues that stream, nothing repeated or skipped;
- kill -9 of the mount while ranks read `next`: the remount (resume=auto, another world
  size) continues after every batch a reader finished;
- a mixture of two datasets of rows (chat samples, plain documents) reads as the mount's
  step files and `zephon batch` say; a mixture of rows with windows is refused;
- a validation split of rows: the same batches at every DP degree, never trained on, and
  training plus validation are every row once.
"""
import hashlib
import io
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
import torch

import zephon
from conftest import SEED, zrun
from rows_helpers import TOK, info, need_data, pack, wordnet_qa, write_jsonl
from zephon.torch import ZephonLoader, ZephonValidationLoader

L = 128


@pytest.fixture(scope='module', params=['none', 'zstd'])
def ds(request, tmp_path_factory):
    need_data()
    d = tmp_path_factory.mktemp('rows')
    src = write_jsonl(d / 'qa.jsonl', wordnet_qa(500))
    pack(d / 'ds', '--tokenizer', TOK, '--chat', '--prompt-field', 'question',
         '--response-field', 'answer', '--seq-len', L, '--compress', request.param, src)
    return d / 'ds'


def reference(ds, n, gsn=0, **options):
    """Rows [gsn, gsn + n) of the uninterrupted single-rank stream: [n, 3, L]."""
    opts = dict({'world_size': 1, 'global_batch': n, 'seed': SEED, 'format': 'bin',
                 'resume': 'samples:%d@0' % gsn}, **options)
    raw = zrun('batch', ds, '-o', ','.join('%s=%s' % kv for kv in opts.items()),
               '--rank', 0, '--step', 0)
    return np.frombuffer(raw, '<i4').reshape(n, 3, L).astype(np.int64)


def take(loader, n):
    return [next(loader) for _ in range(n)]


def key(row):
    return hashlib.sha1(np.ascontiguousarray(row, dtype='<i4').tobytes()).hexdigest()


def test_every_world_size_reads_the_one_stream(ds, mounts, tmp_path):
    B, steps = 12, 6
    ref = reference(ds, B * steps)
    for W in (1, 2, 3, 4):
        m = mounts(ds, world_size=W, global_batch=B, journal=tmp_path / ('j%d.sqlite' % W))
        loaders = [ZephonLoader(m.path, dp_rank=r, dp_world_size=W, micro_batch=B // W)
                   for r in range(W)]
        assert loaders[0].row_len == L and loaders[0].direct == (info(ds)['compress'] == 'none')
        got = np.concatenate([torch.cat([next(x) for x in loaders]).numpy()
                              for _ in range(steps)])
        assert got.shape == (B * steps, 3, L)
        assert np.array_equal(got, ref), W
        m.stop()


def test_a_state_restores_at_another_degree_and_batch(ds, mounts, tmp_path):
    m = mounts(ds, world_size=4, global_batch=8, micro_batch=1,
               journal=tmp_path / 'a.sqlite')
    loaders = [ZephonLoader(m.path, dp_rank=r, dp_world_size=4) for r in range(4)]
    for _ in range(3):                          # three steps of 8
        for x in loaders:
            take(x, 2)
    states = [x.state_dict() for x in loaders]
    assert all(s == states[0] for s in states) and states[0]['consumed_samples'] == 24
    m.stop()
    ref = reference(ds, 48, gsn=24)
    for W, B in ((2, 16), (3, 12)):
        m = mounts(ds, world_size=W, global_batch=B, journal=tmp_path / ('b%d.sqlite' % W))
        xs = [ZephonLoader(m.path, dp_rank=r, dp_world_size=W, micro_batch=B // W)
              for r in range(W)]
        for x in xs:
            x.load_state_dict(states[0])
        got = np.concatenate([torch.cat([next(x) for x in xs]).numpy() for _ in range(48 // B)])
        assert np.array_equal(got, ref), (W, B)
        m.stop()


def read_next(path):
    with open(path, 'rb') as f:
        return np.load(io.BytesIO(f.read())).astype(np.int64)


def test_kill_9_of_the_mount_skips_no_finished_batch(ds, tmp_path):
    j = tmp_path / 'j.sqlite'
    ref = reference(ds, 40)
    got = {}
    m = zephon.mount(ds, tmp_path / 'z', world_size=2, global_batch=4, seed=SEED,
                     journal=j).start()
    try:
        for step in range(3):                   # steps 0-2, finished (read and closed)
            for r in range(2):
                got[(step, r)] = read_next(tmp_path / 'z' / 'rank' / str(r) / 'next')
        os.kill(m.pid, signal.SIGKILL)
        deadline = time.time() + 30
        while m._proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
    finally:
        subprocess.run(['fusermount3', '-uz', str(tmp_path / 'z')], stderr=subprocess.DEVNULL)
        m.stop()
    for step in range(3):
        assert np.array_equal(np.concatenate([got[(step, 0)], got[(step, 1)]]),
                              ref[4 * step:4 * step + 4])
    # the journal commits a delivery right after it answers the close (docs/journal.md):
    # a kill between the two serves the last batch each reader finished again, never less
    point = zrun('journal', 'resume-point', j).decode().strip()
    assert point in ('samples:12@3', 'samples:8@2'), point
    gsn, step = (12, 3) if point == 'samples:12@3' else (8, 2)
    # resume=auto at another world size: the next batch starts after the delivered ones
    with zephon.mount(ds, tmp_path / 'z', world_size=1, global_batch=4, seed=SEED,
                      journal=j):
        st = json.loads((tmp_path / 'z' / 'status').read_text())
        assert (st['start_step'], st['start_samples']) == (step, gsn)
        nxt = read_next(tmp_path / 'z' / 'rank' / '0' / 'next')
    assert np.array_equal(nxt, ref[gsn:gsn + 4])


def test_a_mixture_of_datasets_of_rows(ds, mounts, tmp_path):
    glosses = tmp_path / 'g.txt'
    glosses.write_text(''.join(r['answer'] + '\n' for r in wordnet_qa(300)))
    plain = tmp_path / 'plain'
    pack(plain, '--tokenizer', TOK, '--whole-documents', '--seq-len', L, '--format', 'lines',
         glosses)
    spec = tmp_path / 'mix.json'
    spec.write_text(json.dumps({'sources': [{'name': 'chat', 'dataset': str(ds), 'weight': 0.7},
                                            {'name': 'plain', 'dataset': str(plain),
                                             'weight': 0.3}]}))
    m = mounts(spec, world_size=2, global_batch=8)
    st = m.status()
    assert st['layout'] == 'rows' and st['row_len'] == L
    xs = [ZephonLoader(m.path, dp_rank=r, dp_world_size=2, micro_batch=4) for r in range(2)]
    got = np.concatenate([torch.cat([next(x) for x in xs]).numpy() for _ in range(10)])
    assert np.array_equal(got, reference(spec, 80))
    # each row is one of either dataset's, and both are in it
    chat = {key(r) for r in reference(ds, info(ds)['samples'], shuffle='none')}
    plain_rows = {key(r) for r in reference(plain, info(plain)['samples'], shuffle='none')}
    kinds = [key(r) in chat for r in got]
    assert all(key(r) in chat or key(r) in plain_rows for r in got)
    assert 0 < sum(kinds) < len(kinds)
    m.stop()
    # rows and windows are not one batch format
    (tmp_path / 'w.txt').write_text('some text to cut into windows\n' * 40)
    pack(tmp_path / 'win', '--tokenizer', TOK, '--seq-len', L, tmp_path / 'w.txt')
    spec.write_text(json.dumps({'sources': [{'name': 'chat', 'dataset': str(ds), 'weight': 1},
                                            {'name': 'win', 'dataset': str(tmp_path / 'win'),
                                             'weight': 1}]}))
    with pytest.raises(zephon.ZephonError, match='differ in dtype: int32 vs uint16'):
        mounts(spec, world_size=1, global_batch=4)


def test_a_validation_split_of_rows(ds, mounts, tmp_path):
    B = 8
    streams = {}
    for W in (1, 2):
        m = mounts(ds, world_size=W, global_batch=B, validation=0.1,
                   journal=tmp_path / ('v%d.sqlite' % W))
        vs = [ZephonValidationLoader(m.path, dp_rank=r, dp_world_size=W) for r in range(W)]
        per = [list(v) for v in vs]
        streams[W] = np.concatenate([torch.cat([per[r][t] for r in range(W)]).numpy()
                                     for t in range(len(per[0]))])
        m.stop()
    assert np.array_equal(streams[1], streams[2]) and streams[1].shape[1:] == (3, L)
    held = {key(r) for r in streams[1]}
    N = info(ds)['samples']
    m = mounts(ds, world_size=1, global_batch=B, validation=0.1,
               journal=tmp_path / 'train.sqlite')
    st = m.status()
    epoch = N - st['validation']['samples']
    train = [key(r) for b in take(ZephonLoader(m.path, dp_rank=0, dp_world_size=1),
                                  epoch // B) for r in b.numpy()]
    assert not held & set(train)
    assert len(set(train)) == len(train) == epoch // B * B
    everything = {key(r) for r in reference(ds, N, shuffle='none')}
    assert held | set(train) <= everything and len(everything) == N
    # the held-out rows (whole steps of them are read) and the epoch's are all the rows
    assert len(held) == len(streams[1]) == st['validation']['steps'] * B
    assert st['validation']['samples'] + epoch == N
