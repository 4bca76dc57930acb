"""ZephonLoader's gather from the shard files by sample id (``/rank/<r>/ids/<G>``, the
mount's order; ``direct``) against its read of ``from/<G>``: the same bytes over several
steps, layouts, formats, a resume and a mixture; ``ids/`` is the order of ``at/``;
compressed datasets fall back to ``from/``."""
import json
import os
import pathlib

import numpy as np
import pytest
import torch

from zephon.torch import ZephonLoader

from conftest import IDX, SEQ, zrun

WINDOW = SEQ + 1


def take(loader, n):
    return [next(loader) for _ in range(n)]


def both(m, rank, world, **kw):
    """A loader that gathers by ids and one that reads from/, for rank."""
    a = ZephonLoader(m.path, dp_rank=rank, dp_world_size=world, direct=True, **kw)
    b = ZephonLoader(m.path, dp_rank=rank, dp_world_size=world, direct=False, **kw)
    assert a.direct and not b.direct
    return a, b


@pytest.mark.parametrize('fmt', ['npy', 'bin'])
@pytest.mark.parametrize('world,batch,micro', [(1, 8, 8), (2, 8, 2), (4, 16, 1)])
def test_ids_path_serves_the_bytes_of_from(tokens, mounts, fmt, world, batch, micro):
    m = mounts(tokens, world_size=world, global_batch=batch, micro_batch=micro, format=fmt)
    steps = 7          # past the first blocks of reads (1, then 4 shares)
    per_step = batch // world // micro
    for rank in range(world):
        a, b = both(m, rank, world)
        got, want = take(a, steps * per_step), take(b, steps * per_step)
        for k, (x, y) in enumerate(zip(got, want)):
            assert x.dtype == y.dtype == torch.int64 and torch.equal(x, y), (rank, k)
        # a resume inside a step (micro-batch 1), loaded by both paths, from either's state
        a, b = both(m, rank, world, micro_batch=1)
        take(a, 3 * (batch // world) + 1)
        state = a.state_dict()
        c, d = both(m, rank, world, micro_batch=1)
        c.load_state_dict(state)
        d.load_state_dict(state)
        for k, (x, y) in enumerate(zip(take(c, 20), take(d, 20))):
            assert torch.equal(x, y), (rank, 'resumed', k)


def test_ids_file_is_the_order_of_at(tokens, mounts):
    m = mounts(tokens, world_size=2, global_batch=8, micro_batch=2, format='bin', epochs=1)
    st = m.status()
    [shard] = st['shards']
    assert shard['first'] == 0 and os.path.isabs(shard['path'])
    tokens_of = np.memmap(shard['path'], dtype='<u2', mode='r').reshape(-1, WINDOW)
    assert tokens_of.shape[0] == shard['samples']
    base = pathlib.Path(m.path) / 'rank' / '1'
    ids = np.fromfile(base / 'ids' / '24', dtype='<u8')
    assert ids.size == (shard['samples'] - 24) // 8 * 4   # every full step from gsn 24
    for k in range(3):                                    # at/<24 + 8k> holds those ids
        at = np.fromfile(base / 'at' / str(24 + 8 * k), dtype='<u2').reshape(4, WINDOW)
        assert np.array_equal(tokens_of[ids[4 * k:4 * k + 4]], at), k
    with pytest.raises(FileNotFoundError):                # no step past the stream
        open(base / 'ids' / str(shard['samples'] // 8 * 8), 'rb')
    assert not (pathlib.Path(m.path) / 'rank' / '2' / 'ids' / '0').exists()   # no rank 2


def test_reads_of_ids_are_progress(tokens, mounts):
    m = mounts(tokens, world_size=2, global_batch=8, micro_batch=2)
    loaders = [ZephonLoader(m.path, dp_rank=r, dp_world_size=2) for r in range(2)]
    assert all(ld.direct for ld in loaders)
    for _ in range(5):
        for ld in loaders:
            take(ld, 2)
    st = m.status()
    # blocks of 1 and 4 steps: exactly the 5 steps taken, as reads of from/ count
    assert (st['progress']['consumed_samples_from'], st['consumed_samples']) == ('reads', 40)


def test_mixture_gathers_across_sources(tmp_path, mounts):
    ids_pos, srcs = 0, []
    for name, size in (('a', 249), ('b', 124)):
        raw = tmp_path / (name + '.bin')
        np.arange(ids_pos, ids_pos + size * 4, dtype='<u2').tofile(str(raw))
        ids_pos += size * 4
        zrun('pack', '--format', 'bin', '--dtype', 'uint16', '--seq-len', 3,
             '--compress', 'none', '--shard-size', '256', raw, '-o', tmp_path / name)
        srcs.append({'name': name, 'dataset': name, 'weight': 1})
    spec = tmp_path / 'mix.json'
    spec.write_text(json.dumps({'sources': srcs}))
    m = mounts(spec, world_size=2, global_batch=8, micro_batch=4)
    assert len(m.status()['shards']) > 2                  # several shards of two sources
    for rank in range(2):
        a, b = both(m, rank, 2)
        for k, (x, y) in enumerate(zip(take(a, 40), take(b, 40))):
            assert torch.equal(x, y), (rank, k)


def test_compressed_dataset_reads_from(tmp_path, mounts):
    if not IDX.is_file():
        pytest.skip('shared data file %s is absent' % IDX)
    zrun('pack', '--format', 'tokens', '--seq-len', SEQ, '--compress', 'zstd', IDX,
         '-o', tmp_path / 'z')
    m = mounts(tmp_path / 'z', world_size=1, global_batch=4)
    assert m.status()['shards'] is None and not (pathlib.Path(m.path) / 'rank' / '0' / 'ids').exists()
    assert not ZephonLoader(m.path, dp_rank=0, dp_world_size=1).direct
    with pytest.raises(ValueError, match='serves no sample ids'):
        ZephonLoader(m.path, dp_rank=0, dp_world_size=1, direct=True)


def test_unmappable_shard_falls_back_or_refuses(tokens, mounts, tmp_path, monkeypatch):
    m = mounts(tokens, world_size=1, global_batch=4)
    st = m.status()
    st['shards'] = [dict(st['shards'][0], path=str(tmp_path / 'gone.raw'))]
    monkeypatch.setattr('zephon.torch.read_status', lambda path: st)
    with pytest.warns(RuntimeWarning, match='cannot be mapped'):
        assert not ZephonLoader(m.path, dp_rank=0, dp_world_size=1).direct
    with pytest.raises(OSError):
        ZephonLoader(m.path, dp_rank=0, dp_world_size=1, direct=True)
    short = tmp_path / 'short.raw'                        # a shard cut under the mount
    short.write_bytes(b'\0' * 100)
    ident = os.stat(short)                              # the same file, only shorter
    st['shards'] = [dict(st['shards'][0], path=str(short), dev=ident.st_dev, ino=ident.st_ino)]
    with pytest.raises(OSError, match='shorter than its'):
        ZephonLoader(m.path, dp_rank=0, dp_world_size=1, direct=True)


def test_a_shard_packed_again_in_place_is_not_mapped(tmp_path, mounts):
    """The mount keeps serving the files it opened; a shard file replaced at its path since
    (a pack --force in place, a copy renamed over it) is another file (/status dev, ino):
    direct=None warns and reads from/, the mount's bytes; direct=True refuses."""
    src = tmp_path / 'tok.npy'
    np.save(src, np.random.default_rng(3).integers(1, 5000, 40 * WINDOW, dtype=np.uint16))
    zrun('pack', '--format', 'tokens', '--seq-len', SEQ, '--overlap', 1, '--compress', 'none',
         src, '-o', tmp_path / 'ds')
    m = mounts(tmp_path / 'ds', world_size=1, global_batch=4)
    shard = pathlib.Path(m.status()['shards'][0]['path'])
    want = take(ZephonLoader(m.path, dp_rank=0, dp_world_size=1, direct=True), 3)
    other = shard.with_name(shard.name + '.new')
    other.write_bytes(bytes(len(shard.read_bytes())))    # zeros where the tokens were
    os.replace(other, shard)
    with pytest.warns(RuntimeWarning, match='not the file the mount serves'):
        loader = ZephonLoader(m.path, dp_rank=0, dp_world_size=1)
    assert not loader.direct
    got = take(loader, 3)
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    with pytest.raises(OSError, match='not the file the mount serves'):
        ZephonLoader(m.path, dp_rank=0, dp_world_size=1, direct=True)
