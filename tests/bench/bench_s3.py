"""Object storage (issue 35): Zephon reading an s3:// token dataset through a remote link,
beside the link's own capacity and MosaicML Streaming reading the same tokens from the same
server, in one run. Not part of ./tests/run; never fails on a timing. Run it with
tests/bench/s3-run (which makes the venv: numpy, boto3, mosaicml-streaming, pinned).

The link: SeaweedFS (tests/s3/server.py) behind tests/bench/s3proxy (20 ms per request,
20 ms more per new connection, one 400 Mbit/s token bucket over every response body).
Each phase reads through it, from a cold node cache (a fresh folder), with 1 and 4 ranks
(one process each), batches of 8 x 2049 tokens:
  link      parallel ranged GETs (boto3, 16 threads x 8 MiB; and 64 threads x one sample
            each: the request-rate ceiling of server, proxy and client at sample size)
  zephon    zephon mount s3://... (cold cache), each rank np.load()s rank/<r>/next
  streaming StreamingDataset(remote=s3://..., its own local cache), shuffled, the same
            batch size, one process per rank
  warm      the zephon mount again on the warm cache, beside a mount of the local copy
Per phase: tokens/s over a window of --seconds after each rank's first batch, the first
batch after the mount (or loader construction), bytes the server sent (SeaweedFS's
per-bucket counter) against the bytes of the samples consumed, CPU seconds per GB of
tokens delivered (every process of the phase: ranks and the zephon daemon).
Prints a table and writes s3.json into --out.
"""
import argparse
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / 's3'))
import server as s3server  # noqa: E402

SEQ = 2049
MB = 8
ITEM = 4                      # uint32 tokens (a 128K vocabulary needs more than 16 bits)
SAMPLE = SEQ * ITEM


def sh(*args, env=None, check=True):
    p = subprocess.run([str(a) for a in args], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if check and p.returncode:
        raise RuntimeError('%s: %s' % (' '.join(map(str, args)), p.stderr))
    return p.stdout


def proc_cpu(pid):
    """utime + stime of pid and its threads, seconds (0 when gone)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            v = f.read().rsplit(')', 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf('SC_CLK_TCK')
    except OSError:
        return 0.0


# ---------------------------------------------------------------- one rank (a process)

def rank_main(args):
    """--rank SYSTEM TARGET RANK WORLD SECONDS: build, first batch, 'ready', wait 'go',
    read for SECONDS, print JSON."""
    system, target, rank, world, seconds = args[0], args[1], int(args[2]), int(args[3]), \
        float(args[4])
    import numpy as np
    t0 = time.monotonic()
    if system == 'zephon':
        path = os.path.join(target, 'rank', str(rank), 'next')

        def batches():
            while True:
                yield np.load(path)
    else:
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                          LOCAL_WORLD_SIZE=str(world), NODE_RANK='0', MASTER_ADDR='127.0.0.1')
        from streaming import StreamingDataset
        remote, local = target.split('|')
        ds = StreamingDataset(remote=remote, local=local, batch_size=MB, shuffle=True,
                              shuffle_seed=1, num_canonical_nodes=1)

        def batches():
            it = iter(ds)
            while True:
                yield np.stack([next(it)['tokens'] for _ in range(MB)])
    it = batches()
    b = next(it)
    assert b.shape == (MB, SEQ), b.shape
    first = time.monotonic() - t0
    print('ready', flush=True)
    sys.stdin.readline()
    c0 = resource.getrusage(resource.RUSAGE_SELF)
    t = time.monotonic()
    n = 0
    while time.monotonic() - t < seconds:
        n += next(it).shape[0]
    dt = time.monotonic() - t
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    print(json.dumps({'first_s': first, 'samples': n, 'seconds': dt, 'cpu_s': cpu}),
          flush=True)
    os._exit(0)


def run_ranks(system, target, world, seconds, env, daemon_pid=None):
    """world rank processes of system; their sums. daemon_pid: the zephon daemon, whose
    CPU over the window counts too."""
    ps = [subprocess.Popen([sys.executable, __file__, '--rank', system, target, str(r),
                            str(world), str(seconds)], env=env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True) for r in range(world)]
    for p in ps:
        line = p.stdout.readline()
        if line.strip() != 'ready':
            raise RuntimeError('%s rank did not start: %r' % (system, line))
    d0 = proc_cpu(daemon_pid) if daemon_pid else 0
    for p in ps:
        p.stdin.write('go\n')
        p.stdin.flush()
    res = [json.loads(p.stdout.readline()) for p in ps]
    d1 = proc_cpu(daemon_pid) if daemon_pid else 0
    for p in ps:
        p.wait(timeout=120)
    samples = sum(r['samples'] for r in res)
    secs = max(r['seconds'] for r in res)
    return {'tokens_s': samples * SEQ / secs, 'samples': samples,
            'first_s': max(r['first_s'] for r in res),
            'cpu_s': sum(r['cpu_s'] for r in res) + (d1 - d0), 'daemon_cpu_s': d1 - d0}


# ---------------------------------------------------------------- the link

def link_capacity(endpoint, env, bucket, keys, size, threads, nbytes, seconds):
    """Bytes/s and requests/s of threads parallel ranged GETs of nbytes at random offsets."""
    import boto3
    import random
    from botocore.config import Config
    cl = boto3.client('s3', endpoint_url=endpoint, aws_access_key_id=env['AWS_ACCESS_KEY_ID'],
                      aws_secret_access_key=env['AWS_SECRET_ACCESS_KEY'], region_name='us-east-1',
                      config=Config(s3={'addressing_style': 'path'},
                                    max_pool_connections=threads))
    got = [0, 0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def work(seed):
        rng = random.Random(seed)
        while time.monotonic() < stop:
            key = rng.choice(keys)
            off = rng.randrange(0, size[key] - nbytes)
            body = cl.get_object(Bucket=bucket, Key=key,
                                 Range='bytes=%d-%d' % (off, off + nbytes - 1))['Body'].read()
            with lock:
                got[0] += len(body)
                got[1] += 1
    t = time.monotonic()
    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    dt = time.monotonic() - t
    return got[0] / dt, got[1] / dt


# ---------------------------------------------------------------- setup

def make_tokens(work, gb):
    import numpy as np
    path = work / 'tokens.bin'
    n = int(gb * 1e9) // ITEM
    if not path.exists() or path.stat().st_size != n * ITEM:
        rng = np.random.default_rng(1)
        with open(path, 'wb') as f:
            for k in range(0, n, 1 << 24):
                rng.integers(0, 128000, size=min(1 << 24, n - k), dtype='<u4').tofile(f)
    return path, n


def make_mds(work, tokens, n):
    import numpy as np
    from streaming import MDSWriter
    out = work / 'mds'
    if (out / 'index.json').exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    arr = np.memmap(tokens, dtype='<u4', mode='r')
    with MDSWriter(out=str(out), columns={'tokens': 'ndarray:uint32:%d' % SEQ},
                   compression=None) as w:
        for i in range(n // SEQ):
            w.write({'tokens': np.asarray(arr[i * SEQ:(i + 1) * SEQ])})
    return out


def upload_dir(env, endpoint, bucket, local, prefix):
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config
    cl = boto3.client('s3', endpoint_url=endpoint, aws_access_key_id=env['AWS_ACCESS_KEY_ID'],
                      aws_secret_access_key=env['AWS_SECRET_ACCESS_KEY'], region_name='us-east-1',
                      config=Config(s3={'addressing_style': 'path'}))
    try:
        cl.create_bucket(Bucket=bucket)
    except cl.exceptions.ClientError:
        pass
    for f in sorted(pathlib.Path(local).iterdir()):
        cl.upload_file(str(f), bucket, '%s/%s' % (prefix, f.name),
                       Config=TransferConfig(multipart_threshold=1 << 40))


def mount(zephon, dataset, mp, opts, env):
    mp.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    p = subprocess.Popen([zephon, 'mount', str(dataset), str(mp), '-f', '-o', opts], env=env,
                         stdout=subprocess.DEVNULL, stderr=open(str(mp) + '.log', 'wb'))
    while not (mp / 'status').exists():
        if p.poll() is not None:
            raise RuntimeError('mount failed: ' + open(str(mp) + '.log').read())
        time.sleep(0.005)
    return p, time.monotonic() - t


def unmount(p, mp):
    subprocess.run(['fusermount3', '-u', str(mp)])
    p.wait(timeout=60)


def fetch_status(mp):
    return json.loads((mp / 'status').read_text())['fetch']


# ---------------------------------------------------------------- phases

def zephon_phase(a, s3, proxy_env, url, world, cache, tag, local=None, extra=''):
    mp = a.work / ('mnt-%s-%d' % (tag, world))
    opts = 'world_size=%d,global_batch=%d,micro_batch=%d,format=npy,seed=7,cache=%s,journal=%s' % (
        world, MB * world, MB, cache, a.work / ('j-%s-%d-%f.sqlite' % (tag, world, time.time())))
    opts += extra
    sent0 = s3.metric_bytes_sent('zbench')
    p, mount_s = mount(a.zephon, local or url, mp, opts, proxy_env)
    try:
        r = run_ranks('zephon', str(mp), world, a.seconds, proxy_env, p.pid)
        f = fetch_status(mp) if local is None else None
    finally:
        unmount(p, mp)
    sent = s3.metric_bytes_sent('zbench') - sent0
    r.update(mount_s=mount_s, server_bytes=sent, fetch=f)
    # needed: the samples the ranks consumed, and those the prefetch rings and the read-
    # ahead took for the batches just after (read by no one in the window: counted as
    # fetched, not as needed)
    r['needed_bytes'] = r['samples'] * SAMPLE
    return r


def streaming_phase(a, s3, env, world):
    local = a.work / ('stream-cache-%d-%f' % (world, time.time()))
    env = dict(env, MASTER_PORT=str(s3server.free_ports(1)[0]))
    sent0 = s3.metric_bytes_sent('mbench')
    r = run_ranks('streaming', 's3://mbench/mds|%s' % local, world, a.seconds, env)
    r['server_bytes'] = s3.metric_bytes_sent('mbench') - sent0
    r['needed_bytes'] = r['samples'] * SAMPLE
    shutil.rmtree(local, ignore_errors=True)
    return r


def main():
    if len(sys.argv) > 1 and sys.argv[1] == '--rank':
        return rank_main(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument('--work', type=pathlib.Path,
                    default=pathlib.Path(os.environ.get('ZEPHON_BENCH_DIR', '/tmp')) / 'bench-s3')
    ap.add_argument('--out', type=pathlib.Path, default=HERE)
    ap.add_argument('--gb', type=float, default=2.0)
    ap.add_argument('--seconds', type=float, default=20)
    ap.add_argument('--ranks', default='1,4')
    ap.add_argument('--delay', default='20ms')
    ap.add_argument('--rate', default='400e6')
    ap.add_argument('--zephon', default=str(ROOT / 'build-bench' / 'fs' / 'zephon'))
    ap.add_argument('--skip-streaming', action='store_true')
    ap.add_argument('--skip-link', action='store_true', help='no sample-size GET ceiling')
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    ranks = [int(x) for x in a.ranks.split(',')]
    proxy_bin = a.work / 's3proxy'
    sh('go', 'build', '-o', proxy_bin, HERE / 's3proxy' / 'main.go',
       env=dict(os.environ, GO111MODULE='off', PATH=os.environ['PATH'] + ':/usr/local/go/bin'))
    tokens, n = make_tokens(a.work, a.gb)
    shutil.rmtree(a.work / 'tok', ignore_errors=True)
    sh(a.zephon, 'pack', tokens, '-o', a.work / 'tok', '--format', 'tokens', '--seq-len',
       SEQ, '--dtype', 'uint32', '--compress', 'none')
    mds = None if a.skip_streaming else make_mds(a.work, tokens, n)
    res = {'gb': a.gb, 'seq_len': SEQ, 'micro_batch': MB, 'delay': a.delay, 'rate': a.rate,
           'load': os.getloadavg()}
    shutil.rmtree(a.work / 'weed', ignore_errors=True)
    with s3server.WeedServer(a.work / 'weed') as s3:
        env = s3.env()
        t = time.monotonic()
        sh(a.zephon, 'upload', a.work / 'tok', 's3://zbench/tok', '--create-bucket', env=env)
        res['upload_s'] = time.monotonic() - t
        if mds:
            upload_dir(env, s3.endpoint, 'mbench', mds, 'mds')
        proxy = subprocess.Popen([proxy_bin, '-upstream', s3.endpoint, '-delay', a.delay,
                                  '-rate', a.rate], stdout=subprocess.PIPE, text=True)
        try:
            addr = proxy.stdout.readline().split()[1]
            endpoint = 'http://' + addr
            penv = s3.env(AWS_ENDPOINT_URL=endpoint, S3_ENDPOINT_URL=endpoint)
            cat = json.loads(sh(a.zephon, 'info', a.work / 'tok', '--json'))
            keys = {'tok/shard-%05d.raw' % k: (a.work / 'tok' / ('shard-%05d.raw' % k)).stat().st_size
                    for k in range(cat['shards'])}
            bw, _ = link_capacity(endpoint, env, 'zbench', list(keys), keys, 16, 8 << 20, 10)
            bw_s, rps = link_capacity(endpoint, env, 'zbench', list(keys), keys, 64, SAMPLE, 10)
            res['link'] = {'bytes_s': bw, 'sample_gets_bytes_s': bw_s, 'sample_gets_s': rps}
            print('link: %.1f MB/s (16 x 8 MiB GETs); %.0f GETs/s of %d B (64 in flight)' % (
                bw / 1e6, rps, SAMPLE), flush=True)
            for w in ranks:
                cache = a.work / ('cache-%d' % w)
                shutil.rmtree(cache, ignore_errors=True)
                res['zephon_%d' % w] = zephon_phase(a, s3, penv, 's3://zbench/tok', w, cache, 'cold')
                print('zephon %d: %s' % (w, res['zephon_%d' % w]), flush=True)
                shutil.rmtree(cache, ignore_errors=True)
                res['all_%d' % w] = zephon_phase(a, s3, penv, 's3://zbench/tok', w, cache, 'all',
                                                 extra=',fetch=all')
                print('zephon fetch=all %d: %s' % (w, res['all_%d' % w]), flush=True)
                if mds:
                    res['streaming_%d' % w] = streaming_phase(a, s3, penv, w)
                    print('streaming %d: %s' % (w, res['streaming_%d' % w]), flush=True)
            # warm: the cache of the 1-rank run filled by reading every sample once
            cache = a.work / 'cache-warm'
            shutil.rmtree(cache, ignore_errors=True)
            sh(a.zephon, 'verify', 's3://zbench/tok', env=dict(env, ZEPHON_CACHE_DIR=str(cache)))
            for w in ranks:
                res['warm_%d' % w] = zephon_phase(a, s3, penv, 's3://zbench/tok', w, cache, 'warm')
                res['local_%d' % w] = zephon_phase(a, s3, penv, None, w, cache, 'local',
                                                   local=a.work / 'tok')
                print('warm %d: %s\nlocal %d: %s' % (w, res['warm_%d' % w], w,
                                                     res['local_%d' % w]), flush=True)
        finally:
            proxy.kill()
            proxy.wait()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / 's3.json').write_text(json.dumps(res, indent=1))
    report(res, ranks)


def report(res, ranks):
    link = res['link']['bytes_s']
    print('\n%-14s %12s %8s %10s %9s %10s %8s' % ('system', 'tokens/s', 'x link', 'fetched/',
                                                 'first(s)', 'CPU s/GB', 'x strm'))
    for w in ranks:
        for name in ('zephon', 'all', 'streaming', 'warm', 'local'):
            r = res.get('%s_%d' % (name, w))
            if not r:
                continue
            gb = r['samples'] * SEQ * 8 / 1e9  # int64 tensors, as the peers bench counts
            s = res.get('streaming_%d' % w)
            print('%-14s %12.0f %8.2f %10.2f %9.3f %10.2f %8s' % (
                '%s %d' % (name, w), r['tokens_s'], r['tokens_s'] * ITEM / link,
                r['server_bytes'] / max(r['needed_bytes'], 1), r['first_s'],
                r['cpu_s'] / gb if gb else 0,
                '%.2f' % (r['tokens_s'] / s['tokens_s']) if s and name in ('zephon', 'all')
                else ''))


if __name__ == '__main__':
    main()
