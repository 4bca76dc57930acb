"""Addressing by gsn (/rank/<r>/at/<G> and from/<G>), `checkpoint samples:G@S`, and pack
--overlap 1."""
import errno
import io
import json

import numpy as np
import pytest

from conftest import Mount, pack, read_all, run, write_tokens


@pytest.fixture
def overlapping(tmp_path):
    arr = write_tokens(tmp_path / 't.bin', 1000)
    ds = pack(tmp_path / 'ds', [tmp_path / 't.bin'], '--format', 'bin', '--dtype', 'uint16',
              '--seq-len', 10, '--overlap', 1, '--compress', 'none')
    return ds, arr


def test_pack_overlap_makes_windows_of_l_plus_1(overlapping, tmp_path):
    ds, arr = overlapping
    info = json.loads(run('info', '--json', ds).stdout)
    assert (info['seq_len'], info['overlap'], info['samples']) == (11, 1, 99)
    assert 'overlap       1 token' in run('info', ds).stdout.decode()
    got = np.frombuffer(run('batch', ds, '-o', 'world_size=1,global_batch=99,shuffle=none,'
                            'format=bin', '--rank', 0, '--step', 0).stdout, dtype='<u2')
    want = np.stack([arr[10 * k:10 * k + 11] for k in range(99)])
    assert np.array_equal(got.reshape(99, 11), want)
    plain = pack(tmp_path / 'plain', [tmp_path / 't.bin'], '--format', 'bin', '--dtype',
                 'uint16', '--seq-len', 10)
    assert json.loads(run('info', '--json', plain).stdout)['overlap'] == 0
    for bad, why in (('2', '--overlap takes 0 or 1'),):
        p = run('pack', '--format', 'bin', '--dtype', 'uint16', '--seq-len', 10, '--overlap',
                bad, tmp_path / 't.bin', '-o', tmp_path / 'bad', check=False)
        assert p.returncode == 2 and why in p.stderr, p.stderr
    (tmp_path / 'l.txt').write_text('a\nb\n')
    p = run('pack', '--overlap', 1, tmp_path / 'l.txt', '-o', tmp_path / 'bad', check=False)
    assert p.returncode != 0 and '--overlap applies to token inputs only' in p.stderr, p.stderr
    assert not (tmp_path / 'bad').exists()


def test_at_is_the_share_of_the_step_from_any_gsn(overlapping, tmp_path):
    ds, _ = overlapping
    opts = 'world_size=2,global_batch=8,micro_batch=2,seed=3'
    with Mount(ds, tmp_path / 'mnt', '%s,journal=%s' % (opts, tmp_path / 'j.sqlite')) as m:
        st = json.loads(read_all(m.path('status')))
        assert (st['dtype'], st['seq_len'], st['overlap']) == ('uint16', 11, 1)
        assert read_all(m.path('rank', 1, 'at', 24)) == read_all(m.path('rank', 1, 'step', 3))
        for g in (5, 13):        # no step of this layout starts there
            want = run('batch', ds, '-o', '%s,resume=samples:%d@0' % (opts, g),
                       '--rank', 0, '--step', 0).stdout
            assert read_all(m.path('rank', 0, 'at', g)) == want
        st = json.loads(read_all(m.path('status')))
        # pure reads claim nothing; consumed_samples is the reads' (rank 0 read the share
        # from gsn 13 last: it reads on at 21; rank 1 at 32)
        assert st['counters']['claims'] == 0 and st['cursors']['0'] == {'step': 0, 'micro': 0}
        assert (st['progress']['consumed_samples_from'], st['consumed_samples']) == ('reads', 21)
        with pytest.raises(FileNotFoundError):
            read_all(m.path('rank', 0, 'at', '05'))       # one spelling per number
        with pytest.raises(FileNotFoundError):
            read_all(m.path('rank', 0, 'at', 2 ** 40))
        with open(m.path('control'), 'w') as f:
            f.write('checkpoint samples:37@4\n')
        for bad in ('checkpoint samples:x@4', 'checkpoint samples:37', 'checkpoint samples:37@4 x',
                    'checkpoint samples:037@4'):
            with pytest.raises(OSError) as e:
                with open(m.path('control'), 'w') as f:
                    f.write(bad + '\n')
            assert e.value.errno == errno.EINVAL, bad
    assert run('journal', 'resume-point', tmp_path / 'j.sqlite').stdout.decode().strip() == \
        'samples:37@4'


def test_at_ends_with_a_finite_stream(overlapping, tmp_path):
    ds, _ = overlapping
    opts = 'world_size=1,global_batch=9,epochs=1,journal=%s' % (tmp_path / 'j.sqlite')
    with Mount(ds, tmp_path / 'mnt', opts) as m:     # 99 samples: the last full step at 90
        assert len(read_all(m.path('rank', 0, 'at', 90))) > 0
        with pytest.raises(FileNotFoundError):
            read_all(m.path('rank', 0, 'at', 91))


def test_from_is_the_shares_of_every_step_back_to_back(overlapping, tmp_path):
    """/rank/<r>/from/<G>: at/<G>, at/<G+B>, ... in one file, for loaders that read many
    steps per read: any offset, reads across shares, the size of the stream's end."""
    ds, _ = overlapping
    opts = 'world_size=2,global_batch=8,micro_batch=2,seed=3,epochs=2,format=npy'
    with Mount(ds, tmp_path / 'mnt', '%s,journal=%s' % (opts, tmp_path / 'j.sqlite')) as m:
        assert 'from' in [p.name for p in m.path('rank', 0).iterdir()]
        share = len(read_all(m.path('rank', 1, 'at', 5)))
        f = m.path('rank', 1, 'from', 5)
        steps = (2 * 99 - 5) // 8
        assert f.stat().st_size == steps * share
        data = b''
        with open(f, 'rb', buffering=0) as fh:
            while True:
                chunk = fh.read(3 * share + 17)   # reads that end inside a share
                if not chunk:
                    break
                data += chunk
        want = b''.join(read_all(m.path('rank', 1, 'at', 5 + 8 * k)) for k in range(steps))
        assert data == want
        with open(m.path('rank', 0, 'from', 0), 'rb', buffering=0) as fh:
            fh.seek(4 * share + 7)
            got = fh.read(share)
        assert got == (read_all(m.path('rank', 0, 'at', 32))[7:] +
                       read_all(m.path('rank', 0, 'at', 40))[:7])
        # the same bytes as np.load of each share
        arr = np.load(io.BytesIO(data[:share]))
        assert arr.shape == (4, 11)
        assert not m.path('rank', 0, 'from', 2 * 99 - 7).exists()   # no full step left
        assert not m.path('rank', 2, 'from', 0).exists()             # rank 2 not served
        assert read_all(m.path('status'))                             # claims nothing
        st = json.loads(read_all(m.path('status')))
        assert st['counters']['claims'] == 0
    lines_ds = tmp_path / 'l'
    (tmp_path / 'l.txt').write_text(''.join('line %d\n' % k for k in range(20)))
    pack(lines_ds, [tmp_path / 'l.txt'])
    with Mount(lines_ds, tmp_path / 'mnt2', 'global_batch=4,journal=%s' % (
            tmp_path / 'j2.sqlite')) as m:
        # lines batches differ in size: no from/ (read at/ or step/)
        assert not m.path('rank', 0, 'from').exists()
        assert 'from' not in [p.name for p in m.path('rank', 0).iterdir()]
