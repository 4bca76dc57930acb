"""Datasets in object storage (docs/object-storage.md), against a real S3-compatible server:
SeaweedFS (tests/s3/server.py, built once per machine by tests/s3/weed-build, which
./tests/run calls). Asserted: an s3:// dataset serves the same bytes as its local copy
through several layouts and remounts, a mixture of s3:// sources too; a warm node cache
fetches nothing it has, two mounts share one; wrong credentials, a missing bucket or
prefix, an unusable cache folder are refused at mount with a clear message; an object
replaced under a live mount and a server that stops answering fail reads with EIO, never
with wrong bytes; cached bytes that went bad are fetched again; the cache's cap evicts
datasets no mount uses.
"""
import errno
import json
import os
import pathlib
import shutil
import sys
import threading
import time

import pytest

from conftest import Mount, pack, read_all, run, write_jsonl, write_tokens
from lint.doc_blocks import doc_block  # tests/lint/doc_blocks.py

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / 's3'))
import server as s3server  # noqa: E402  (tests/s3/server.py)

BUCKET = 'zephon-tests'


@pytest.fixture(scope='module')
def s3(tmp_path_factory):
    """A SeaweedFS server for the module; os.environ points zephon at it."""
    if not s3server.weed_binary():
        pytest.skip('no SeaweedFS binary: tests/s3/weed-build makes it (./tests/run does)')
    srv = s3server.WeedServer(tmp_path_factory.mktemp('weed')).start()
    saved, env = dict(os.environ), srv.env()
    os.environ.clear()
    os.environ.update(env)
    try:
        yield srv
    finally:
        os.environ.clear()
        os.environ.update(saved)
        srv.stop()


@pytest.fixture(scope='module')
def data(s3, tmp_path_factory):
    """Local datasets and their uploads: tokens (raw, 3 shards), JSONL (zstd, 3 shards)."""
    d = tmp_path_factory.mktemp('s3data')
    write_tokens(d / 'tok.bin', 64 * 1500, 'uint16')
    tok = pack(d / 'tok', [d / 'tok.bin'], '--format', 'tokens', '--seq-len', '64',
               '--dtype', 'uint16', '--compress', 'none', '--shard-size', '64K')
    write_jsonl(d / 'in.jsonl', 600, 120)
    js = pack(d / 'js', [d / 'in.jsonl'], '--shard-size', '16K')
    urls = {}
    for name, local in (('tok', tok), ('js', js)):
        urls[name] = 's3://%s/sets/%s' % (BUCKET, name)
        run('upload', local, urls[name], '--create-bucket')
    return {'tok': tok, 'js': js, 'urls': urls, 'dir': d}


def status(m):
    return json.loads(read_all(m.path('status')))


def history(dataset, tmp, name, extra=''):
    """Three mounts of dataset with one journal, each its own layout; every byte read
    (claims of next, in order, and a pure step/ file), as a list."""
    out = []
    j = tmp / (name + '.journal.sqlite')
    opts = 'seed=3,journal=%s%s' % (j, extra)
    plan = [('world_size=2,global_batch=8,micro_batch=2', 2, 2),
            ('world_size=4,global_batch=8,micro_batch=1', 4, 2),
            ('world_size=1,global_batch=4', 1, 3)]
    for k, (layout, ranks, reads) in enumerate(plan):
        with Mount(dataset, tmp / ('%s-mnt%d' % (name, k)), layout + ',' + opts) as m:
            for _ in range(reads):
                for r in range(ranks):
                    out.append(read_all(m.path('rank', r, 'next')))
            out.append(read_all(m.path('rank', 0, 'step', 5)))
    return out


def test_info_and_verify_read_the_url(data):
    for name in ('tok', 'js'):
        local = json.loads(run('info', data[name], '--json').stdout)
        remote = json.loads(run('info', data['urls'][name], '--json').stdout)
        assert remote['fingerprint'] == local['fingerprint']
        assert remote['samples'] == local['samples'] and remote['shards'] == local['shards'] > 1
    assert run('verify', data['urls']['js']).returncode == 0


def test_same_bytes_as_local_through_layouts_and_remounts(data, tmp_path):
    for name in ('tok', 'js'):
        cache = tmp_path / ('cache-' + name)
        local = history(data[name], tmp_path, name + '-local')
        remote = history(data['urls'][name], tmp_path, name + '-s3', ',cache=%s' % cache)
        assert len(local) == len(remote) == 4 + 1 + 8 + 1 + 3 + 1
        assert remote == local, name


def test_mixture_of_s3_sources(data, tmp_path):
    spec = {'sources': [{'name': 'tok', 'dataset': str(data['tok']), 'weight': 0.5},
                        {'name': 'tok2', 'dataset': str(data['tok']), 'weight': 0.5}]}
    (tmp_path / 'local.json').write_text(json.dumps(spec))
    spec['sources'][1]['dataset'] = data['urls']['tok']
    (tmp_path / 's3.json').write_text(json.dumps(spec))
    a = history(tmp_path / 'local.json', tmp_path, 'mix-local')
    b = history(tmp_path / 's3.json', tmp_path, 'mix-s3', ',cache=%s' % (tmp_path / 'c'))
    assert a == b


def test_warm_cache_fetches_nothing_and_two_mounts_share_it(data, tmp_path, mount):
    url, cache = data['urls']['tok'], tmp_path / 'cache'
    opts = 'world_size=2,global_batch=8,seed=5,readahead=0,prefetch=0,cache=%s' % cache
    ref = []
    with Mount(data['tok'], tmp_path / 'ref', opts.split(',cache')[0] + ',journal=%s' %
               (tmp_path / 'ref.sqlite')) as m:
        ref = [read_all(m.path('rank', r, 'next')) for _ in range(6) for r in (0, 1)]
    # two mounts of one cache at once, each from its own journal: the same bytes
    a = mount(url, opts + ',journal=%s' % (tmp_path / 'a.sqlite'), name='a')
    b = mount(url, opts + ',journal=%s' % (tmp_path / 'b.sqlite'), name='b')
    got = {}

    def reader(m, key):
        got[key] = [read_all(m.path('rank', r, 'next')) for _ in range(6) for r in (0, 1)]
    ts = [threading.Thread(target=reader, args=(m, k)) for m, k in ((a, 'a'), (b, 'b'))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got['a'] == ref and got['b'] == ref
    fa, fb = status(a)['fetch'], status(b)['fetch']
    assert fa['samples_fetched'] + fb['samples_fetched'] >= 48
    a.stop()
    b.stop()
    # a third mount on the warm cache: no byte of a sample, index or catalog fetched
    c = mount(url, opts + ',journal=%s' % (tmp_path / 'c.sqlite'), name='c')
    again = [read_all(c.path('rank', r, 'next')) for _ in range(6) for r in (0, 1)]
    f = status(c)['fetch']
    assert again == ref
    # the probes alone: the catalog's first byte, a HEAD of each shard and index
    shards = json.loads(run('info', data['tok'], '--json').stdout)['shards']
    assert f['samples_fetched'] == 0 and f['bytes'] == 1, f
    assert f['cache_hits'] >= 48 and f['requests'] == 2 * shards + 1, f
    metrics = read_all(c.path('metrics')).decode()
    assert 'zephon_fetch_requests_total %d\n' % (2 * shards + 1) in metrics
    assert 'zephon_cache_hits_total' in metrics


def check(url, opts, env=None):
    """zephon mount URL MP --check: (exit status, stderr)."""
    p = run('mount', url, '/nonexistent-mountpoint', '--check', '-o', opts, check=False,
            env=env)
    return p.returncode, p.stderr


def test_bad_credentials_bucket_prefix_and_cache_are_refused(data, s3, tmp_path):
    url, c = data['urls']['tok'], 'cache=%s' % (tmp_path / 'cache')
    rc, err = check(url, c, s3.env(AWS_SECRET_ACCESS_KEY='wrong-secret-do-not-print'))
    assert rc == 2 and 'access denied' in err and 'SignatureDoesNotMatch' in err, err
    assert 'wrong-secret' not in err
    rc, err = check(url, c, s3.env(AWS_ACCESS_KEY_ID='nobody'))
    assert rc == 2 and 'InvalidAccessKeyId' in err, err
    env = s3.env(HOME=str(tmp_path))
    del env['AWS_ACCESS_KEY_ID'], env['AWS_SECRET_ACCESS_KEY']
    rc, err = check(url, c, env)
    assert rc == 2 and 'no S3 credentials' in err, err
    rc, err = check('s3://no-such-bucket-here/sets/tok', c)
    assert rc == 2 and 'NoSuchBucket' in err, err
    rc, err = check('s3://%s/sets/none' % BUCKET, c)
    assert rc == 2 and 'not a zephon dataset' in err, err
    rc, err = check('s3://A_B/x', c)
    assert rc == 2 and 'bucket name' in err, err
    (tmp_path / 'file').write_text('')
    rc, err = check(url, 'cache=%s' % (tmp_path / 'file'))
    assert rc != 0 and 'cache' in err and 'Not a directory' in err, err
    rc, err = check(url, 'cache=/proc/zephon-cache')
    assert rc != 0 and 'cache /proc/zephon-cache' in err, err


def test_credentials_from_a_profile_file(data, s3, tmp_path):
    (tmp_path / 'credentials').write_text(
        '[other]\naws_access_key_id = x\naws_secret_access_key = y\n'
        '[ci]\naws_access_key_id = %s\naws_secret_access_key = %s\n' %
        (s3server.ACCESS_KEY, s3server.SECRET_KEY))
    env = s3.env(AWS_PROFILE='ci', AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / 'credentials'),
                 ZEPHON_CACHE_DIR=str(tmp_path / 'cache'))
    del env['AWS_ACCESS_KEY_ID'], env['AWS_SECRET_ACCESS_KEY']
    info = json.loads(run('info', data['urls']['js'], '--json', env=env).stdout)
    assert info['samples'] == 600


def claims(m, n):
    """n claims of rank 0's next: (bytes or None, errno or 0) each."""
    out = []
    for _ in range(n):
        try:
            out.append((read_all(m.path('rank', 0, 'next')), 0))
        except OSError as e:
            out.append((None, e.errno))
    return out


def local_claims(ds, tmp, opts, n):
    with Mount(ds, tmp / 'local', opts + ',journal=%s' % (tmp / 'local.sqlite')) as m:
        return [read_all(m.path('rank', 0, 'next')) for _ in range(n)]


def test_object_replaced_under_a_mount_fails_reads_never_mixes(data, tmp_path, mount):
    # a copy of its own, then shard 0 replaced by other bytes of the same size
    url = 's3://%s/changed/tok' % BUCKET
    run('upload', data['tok'], url)
    opts = 'world_size=1,global_batch=4,seed=9,readahead=0,prefetch=1'
    ref = local_claims(data['tok'], tmp_path, opts, 40)
    m = mount(url, opts + ',cache=%s,journal=%s' % (tmp_path / 'c', tmp_path / 'j.sqlite'),
              allow_errors=True)
    assert claims(m, 2) == [(ref[0], 0), (ref[1], 0)]
    bad = tmp_path / 'bad'
    shutil.copytree(data['tok'], bad)
    shard = bad / 'shard-00000.raw'
    raw = bytearray(shard.read_bytes())
    raw[:] = bytes(b ^ 0x5A for b in raw)
    shard.write_bytes(bytes(raw))
    run('upload', bad, url)
    got = claims(m, 38)
    eio = [e for _, e in got if e]
    assert eio and set(eio) == {errno.EIO}, eio
    # what was served is what was packed: a claim that failed is served again after it
    served = [b for b, e in got if not e]
    assert all(b in ref for b in served)
    m.stop(check=False)
    assert 'changed' in m.stderr_text and 'changed/tok/shard-00000.raw' in m.stderr_text


def test_server_that_stops_answering_fails_reads_in_bounded_time(data, s3, tmp_path, mount):
    url = data['urls']['js']
    opts = 'world_size=1,global_batch=4,seed=2,readahead=0,prefetch=1,s3_timeout=3'
    m = mount(url, opts + ',cache=%s,journal=%s' % (tmp_path / 'c', tmp_path / 'j.sqlite'),
              allow_errors=True)
    first = claims(m, 1)
    assert first[0][1] == 0
    s3.pause()
    try:
        t = time.monotonic()
        got = claims(m, 3)
        took = time.monotonic() - t
    finally:
        s3.resume()
    assert any(e == errno.EIO for _, e in got), got
    assert took < 60, took
    f = status(m)['fetch']
    assert f['errors'] >= 1 and 'gave up' in f['last_error'], f
    assert 'secret' not in json.dumps(f)
    ok = claims(m, 2)  # the server is back: reads go on
    assert all(e == 0 for _, e in ok), ok


def test_cached_bytes_gone_bad_are_fetched_again(data, tmp_path):
    url, cache = data['urls']['tok'], tmp_path / 'cache'
    opts = 'world_size=1,global_batch=8,seed=4,readahead=0,prefetch=0,cache=%s' % cache
    ref = local_claims(data['tok'], tmp_path, opts.split(',cache')[0], 5)
    with Mount(url, tmp_path / 'a', opts + ',journal=%s' % (tmp_path / 'a.sqlite')) as m:
        assert [read_all(m.path('rank', 0, 'next')) for _ in range(5)] == ref
    for f in cache.glob('ds/*/*.data'):  # every cached sample's bytes damaged
        f.write_bytes(b'\x01' * f.stat().st_size)
    with Mount(url, tmp_path / 'b', opts + ',journal=%s' % (tmp_path / 'b.sqlite')) as m:
        assert [read_all(m.path('rank', 0, 'next')) for _ in range(5)] == ref
        f = status(m)['fetch']
    assert f['cache_bad'] == 40 and f['samples_fetched'] == 40, f


def test_cache_cap_evicts_datasets_no_mount_uses(data, tmp_path):
    cache = tmp_path / 'cache'
    opts = 'world_size=1,global_batch=100,seed=1,cache=%s' % cache
    with Mount(data['urls']['js'], tmp_path / 'a', opts + ',journal=%s' %
               (tmp_path / 'a.sqlite')) as m:
        read_all(m.path('rank', 0, 'next'))
        used_js = status(m)['fetch']['cache_used']
    assert len(list(cache.glob('ds/*'))) == 1
    # tok's samples alone fill the cap: the unused js dataset goes, tok stays
    cap = used_js + 60 * 1024
    with Mount(data['urls']['tok'], tmp_path / 'b', opts + ',cache_size=%d,journal=%s' %
               (cap, tmp_path / 'b.sqlite')) as m:
        for _ in range(8):
            read_all(m.path('rank', 0, 'next'))
        f = status(m)['fetch']
    assert f['cache_evicted'] >= used_js // 2 and f['cache_used'] <= cap, f
    assert len(list(cache.glob('ds/*'))) == 1


def run_page(blocks, s3, tmp_path, setup=''):
    """Run the blocks as one bash script (-e: any command that fails fails it) in tmp_path,
    with the server's endpoint and credentials, zephon on PATH and HOME in tmp_path."""
    script = 'set -ex\n' + setup + '\n'.join(blocks)
    env = s3.env(HOME=str(tmp_path), PATH='%s:%s' % (os.path.dirname(os.path.abspath(
        os.environ.get('ZEPHON', 'build/fs/zephon'))), os.environ['PATH']))
    import subprocess
    p = subprocess.run(['bash', '-c', script], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    if (tmp_path / 'mnt').is_dir():
        subprocess.run(['fusermount3', '-uz', str(tmp_path / 'mnt')], stderr=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-5000:]
    return p.stdout


ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_object_storage_page_runs_as_written(s3, tmp_path):
    out = run_page([doc_block('docs/object-storage.md', 'upload'),
                    doc_block('docs/object-storage.md', 'mount'),
                    doc_block('docs/object-storage.md', 'batch')], s3, tmp_path)
    # the mount's first claim of rank 0 and zephon batch's step 0 of rank 0: one batch
    claim = out.split('+ cat mnt/rank/0/next\n')[1].split('+ ')[0]
    assert claim.count('sample ') == 2, out[-3000:]
    assert out.rstrip().endswith(claim.rstrip()), out[-3000:]
    assert "'samples_fetched': " in out and "'requests': " in out


def test_the_readme_section_runs_as_written(s3, tmp_path):
    """README.md's object-storage block as written: upload the dataset `ds` (packed here as
    the object-storage page packs one), mount it from the bucket, read a batch, unmount."""
    setup = ("seq 1 100 | sed 's/^/line /' > lines.txt\n"
             "zephon pack lines.txt --format lines -o ds\nmkdir -p mnt\n")
    out = run_page([doc_block('README.md', 's3')], s3, tmp_path, setup)
    batch = out.split('+ cat mnt/rank/1/next\n')[1].split('+ ')[0]
    assert batch.count('line ') == 2, out[-3000:]


def test_fetch_all_fills_the_cache_in_the_background(data, tmp_path):
    url, cache = data['urls']['js'], tmp_path / 'cache'
    opts = 'world_size=1,global_batch=4,seed=6,readahead=0,prefetch=0,cache=%s' % cache
    ref = local_claims(data['js'], tmp_path, opts.split(',cache')[0], 30)
    stored = json.loads(run('info', data['js'], '--json').stdout)['stored_bytes']
    with Mount(url, tmp_path / 'a', opts + ',fetch=all,journal=%s' % (tmp_path / 'a.sqlite')) as m:
        assert read_all(m.path('rank', 0, 'next')) == ref[0]
        deadline = time.monotonic() + 60
        while status(m)['fetch']['fill_bytes'] + status(m)['fetch']['sample_bytes'] < stored \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        f = status(m)['fetch']
    assert stored <= f['fill_bytes'] + f['sample_bytes'] <= stored + 4 * 600, f
    with Mount(url, tmp_path / 'b', opts + ',journal=%s' % (tmp_path / 'b.sqlite')) as m:
        assert [read_all(m.path('rank', 0, 'next')) for _ in range(30)] == ref
        f = status(m)['fetch']
    assert f['samples_fetched'] == 0 and f['cache_hits'] >= 120, f
    with pytest.raises(AssertionError, match='fetch=most: expected exact or all'):
        Mount(url, tmp_path / 'c', opts + ',fetch=most').start()
