#!/usr/bin/python3
"""Zephon's benchmarks B1-B6, each against its baseline in the same run.

Run through tests/bench/run, which builds build-bench/ (release) first. Scratch data
(generated inputs, packed datasets, mount points) lives in $ZEPHON_BENCH_DIR
(default /tmp/zephon-bench) and is reused between runs; --fresh rebuilds it.

Prints a table: measured value, the baseline measured in the same run, their ratio, the
target, and pass/miss. Entries whose pieces are not built yet print "n/a (...)".
Never fails on a timing: the exit status is 0 unless the harness itself breaks.
Results also go to $ZEPHON_BENCH_DIR/results.json (for RESULTS.md).
"""
import argparse
import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PY = '/usr/bin/python3'
MiB = 1 << 20


def drop_page_cache(directory):
    """Evict the clean page-cache pages of every file in directory
    (posix_fadvise POSIX_FADV_DONTNEED; nothing is written, other files keep theirs)."""
    for f in pathlib.Path(directory).iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class NotBuilt(Exception):
    """A piece the benchmark needs is missing: the row prints n/a with the reason."""


class Bench:
    def __init__(self, a):
        self.a = a
        self.build = pathlib.Path(a.build)
        self.work = pathlib.Path(a.work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.zephon = self.build / 'fs' / 'zephon'
        self.fuse_static = self.build / 'tests' / 'fuse_static'
        self.readloop_exe = self.build / 'tests' / 'readloop'
        self.rows = []
        self.raw = {}
        self.secs = a.seconds

    # ---------------------------------------------------------------- helpers
    def log(self, msg):
        print('  .. ' + msg, file=sys.stderr, flush=True)

    def run(self, cmd, check=True, timeout=3600, env=None):
        p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout, env=env)
        out, err = p.stdout.decode(errors='replace'), p.stderr.decode(errors='replace')
        if 'not built yet' in err:
            raise NotBuilt('%s not built yet' % ' '.join(map(str, cmd[1:2])))
        if check and p.returncode != 0:
            raise RuntimeError('%s failed (%d): %s' % (' '.join(map(str, cmd)),
                                                       p.returncode, err.strip()[-2000:]))
        return p.returncode, out, err

    def readloop(self, paths, bs='1M', first=None, expect=None, lines=False, seconds=None,
                 pause_us=0, repeat=None):
        cmd = [self.readloop_exe, '-b', bs, '-t', seconds or self.secs, '-w', 3,
               '-p', pause_us]
        if first:
            cmd += ['-f', first]
        if expect is not None:
            cmd += ['-e', expect]
        if lines:
            cmd += ['-l']
        runs = []
        for _ in range(repeat or self.a.repeat):  # best of R: the machine is shared and noisy
            _, out, _ = self.run(cmd + list(paths))
            runs.append(json.loads(out))
        if first:  # a latency measurement: the run with the lowest p99
            return min(runs, key=lambda d: d['first_p99_us'])
        return max(runs, key=lambda d: d['bytes_per_s'])

    @contextlib.contextmanager
    def mounted(self, cmd, mnt, ready):
        """Run a FUSE daemon in the foreground; yield once `ready` exists; always unmount."""
        mnt = pathlib.Path(mnt)
        if os.path.ismount(mnt):
            subprocess.run(['fusermount3', '-uz', str(mnt)])
        mnt.mkdir(parents=True, exist_ok=True)
        errf = open(self.work / ('daemon-%s.log' % mnt.name), 'w+')
        # Each daemon in a session of its own, as a mount daemon runs (zephon mount
        # without -f, fuse_daemonize, a systemd unit). With the scheduler's autogroups
        # (kernel.sched_autogroup_enabled=1) a session shares the CPUs with other sessions
        # as one: a daemon left in the readers' session splits their share with them.
        p = subprocess.Popen([str(c) for c in cmd], stdout=errf, stderr=errf,
                             start_new_session=True)
        try:
            deadline = time.time() + 30
            while not os.path.exists(ready):
                if p.poll() is not None:
                    errf.seek(0)
                    msg = errf.read()
                    if 'not built yet' in msg:
                        raise NotBuilt('mount not built yet')
                    raise RuntimeError('daemon exited (%d): %s' % (p.returncode, msg[-2000:]))
                if time.time() > deadline:
                    raise RuntimeError('mount did not come up in 30 s')
                time.sleep(0.02)
            yield p
        finally:
            if os.path.ismount(mnt):
                subprocess.run(['fusermount3', '-u', str(mnt)], stderr=subprocess.DEVNULL)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                subprocess.run(['fusermount3', '-uz', str(mnt)], stderr=subprocess.DEVNULL)
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=10)
            errf.seek(0)
            tail = errf.read()
            errf.close()
            if re.search(r'ERROR: (Address|Leak|Undefined)Sanitizer|runtime error', tail):
                raise RuntimeError('daemon reported a sanitizer error:\n' + tail[-3000:])

    def mount_zephon(self, ds, name, opts):
        mnt = self.work / ('mnt-' + name)
        journal = self.work / ('journal-%s.sqlite' % name)
        for suffix in ('', '-wal', '-shm'):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(journal) + suffix)
        o = 'journal=%s,resume=fresh,%s' % (journal, opts)
        return self.mounted([self.zephon, 'mount', ds, mnt, '-f', '-o', o], mnt,
                            mnt / 'status'), mnt

    def row(self, bid, what, measured, baseline, ratio, target, ok):
        self.rows.append((bid, what, measured, baseline, ratio, target, ok))

    def na(self, bid, what, target, why):
        self.rows.append((bid, what, 'n/a (%s)' % why, '', '', target, None))

    # ---------------------------------------------------------------- inputs
    def jsonl(self, mb=None):
        """The corpus of B2 and B6 (--jsonl-mb MB), or a larger one of mb MB for B6."""
        path = self.work / ('b2.jsonl' if mb is None else 'b6-%dmb.jsonl' % mb)
        if not path.exists():
            mb = self.a.jsonl_mb if mb is None else mb
            self.log('generating %s (%s MB of ~1-2 KB JSONL records)' % (path, mb))
            self.run([PY, HERE / 'make_jsonl.py', path, '--mb', mb, '--seed', 7 if mb == self.a.jsonl_mb else 8])
        return path

    def tokens(self):
        """A random uint16 token stream: 64 Ki samples of 2048 tokens (256 MiB)."""
        path = self.work / 'tokens-u16.bin'
        if not path.exists():
            self.log('generating %s' % path)
            self.run([PY, '-c', 'import numpy as np, sys; np.random.default_rng(1).integers('
                      '0, 50257, size=65536 * 2048, dtype=np.uint16).tofile(sys.argv[1])',
                      path])
        return path

    def pack(self, name, inputs, *opts):
        """Pack once into work/ds-NAME (cached); returns (dir, seconds or None if cached)."""
        out = self.work / ('ds-' + name)
        if out.exists():
            return out, None
        t0 = time.perf_counter()
        self.run([self.zephon, 'pack', *inputs, '-o', out, '-q', *opts])
        return out, time.perf_counter() - t0

    def interleaved(self, named, **kw):
        """The readloop on each of several lists of files in turn, --repeat rounds; the
        best run of each. In alternation, so that a noisy minute of this shared machine
        falls on all of them alike and their ratios hold."""
        runs = {k: [] for k in named}
        for _ in range(self.a.repeat):
            for k, paths in named.items():
                runs[k].append(self.readloop(paths, repeat=1, **kw))
        return {k: max(v, key=lambda d: d['bytes_per_s']) for k, v in runs.items()}

    # ---------------------------------------------------------------- B1 / B4
    def b1_b4(self):
        target1 = ">= 0.8x (a') and >= 2 GB/s"
        res = {}
        try:
            ds, _ = self.pack('tokens-raw', [self.tokens()], '--dtype', 'uint16',
                              '--seq-len', '2048', '--compress', 'none')
            shard = max(ds.glob('shard-*.raw'), key=lambda f: f.stat().st_size)
        except NotBuilt:
            ds = shard = None
        for size, label in ((MiB, '1 MiB'), (4 * MiB, '4 MiB')):
            # (a) static FUSE buffer, (b) page-cached file, same loop, same sizes
            mnt = self.work / 'mnt-static'
            cmd = [self.fuse_static, mnt, '-f', '-o', 'size=%d,files=4' % size]
            with self.mounted(cmd, mnt, mnt / '0'):
                a1 = self.readloop([mnt / '0'], expect=size)
                a4 = self.readloop([mnt / str(i) for i in range(4)], expect=size)
                if size == MiB:  # the transport's own open->first byte, for B4
                    four = [mnt / str(i) for i in range(4)]
                    a_lat = self.readloop(four, first='4096', expect=size)
                    a_paced = self.readloop(four, first='4096', expect=size, pause_us=20000)
                    self.raw['B4 static'] = {'flat': a_lat, 'paced': a_paced}
            # (a') the same transport serving windows of the dataset's own shard, i.e.
            # the same page-cache pages Zephon's batches come from, is measured with
            # Zephon below: (a) serves one buffer of the batch size again and again,
            # which never leaves the caches
            a2 = None
            pc = []
            for i in range(4):
                f = self.work / ('pagecache-%d-%d' % (size, i))
                if not f.exists() or f.stat().st_size != size:
                    f.write_bytes(os.urandom(size))
                pc.append(f)
            b1 = self.readloop(pc[:1], expect=size)
            b4 = self.readloop(pc, expect=size)
            res[label] = {'static_1': a1, 'static_4': a4, 'static_dataset_pages_1': a2,
                          'pagecache_1': b1, 'pagecache_4': b4}
            self.raw.setdefault('B1', {})[label] = res[label]
            try:
                if not ds:
                    raise NotBuilt('zephon not built yet')
                m = size // (2048 * 2)
                b1_opts = 'world_size=4,global_batch=%d,micro_batch=%d,format=bin' % (4 * m, m)
                ctx, zm = self.mount_zephon(ds, 'b1', b1_opts)
                with ctx:
                    nexts = [zm / 'rank' / str(r) / 'next' for r in range(4)]
                    # one reader of Zephon, (a) and (a'), and Zephon's 4 ranks, in
                    # alternation: the targets are ratios between them
                    with contextlib.ExitStack() as st:
                        ma, ms = self.work / 'mnt-static-a', self.work / 'mnt-static-src'
                        st.enter_context(self.mounted(
                            [self.fuse_static, ma, '-f', '-o', 'size=%d,files=1' % size],
                            ma, ma / '0'))
                        st.enter_context(self.mounted(
                            [self.fuse_static, ms, '-f', '-o',
                             'size=%d,files=1,source=%s' % (size, shard)], ms, ms / '0'))
                        one = self.interleaved({'a': [ma / '0'], "a'": [ms / '0'],
                                                'zephon': nexts[:1], 'zephon 4': nexts},
                                               expect=size)
                    a1, a2, z1, z4 = one['a'], one["a'"], one['zephon'], one['zephon 4']
                    res[label].update(static_1=a1, static_dataset_pages_1=a2)
                    lat = paced = lat_64 = None
                    if size == MiB:
                        lat = self.readloop(nexts, first='4096', expect=size)
                        paced = self.readloop(nexts, first='4096', expect=size,
                                              pause_us=20000)
                if size == MiB:
                    # the same with 64 request threads, the default before claims
                    # moved to offload threads: 64 threads sharing the CPUs had the long
                    # tail (RESULTS.md, "B4: request threads")
                    ctx, zm = self.mount_zephon(ds, 'b1', b1_opts + ',max_threads=64')
                    with ctx:
                        lat_64 = self.readloop([zm / 'rank' / str(r) / 'next'
                                                  for r in range(4)], first='4096',
                                                 expect=size)
            except NotBuilt as e:
                for w in ('one reader', '4 readers'):
                    self.na('B1', 'next %s, %s' % (label, w), target1 if w == 'one reader'
                            else '>= 1.2x one reader', e)
                if size == MiB:
                    self.na('B4', 'open->first byte p50/p99, 4 ranks', 'p99 < 2 ms', e)
                self.row('B1', 'static FUSE (a) %s 1r / 4r' % label,
                         '%.2f / %.2f GB/s' % (a1['bytes_per_s'] / 1e9, a4['bytes_per_s'] / 1e9),
                         'page cache (b) %.2f / %.2f GB/s' % (b1['bytes_per_s'] / 1e9,
                                                              b4['bytes_per_s'] / 1e9),
                         '%.2f' % (a1['bytes_per_s'] / b1['bytes_per_s']), 'calibration', None)
                continue
            res[label].update(zephon_1=z1, zephon_4=z4)
            r_a = z1['bytes_per_s'] / a1['bytes_per_s']
            r_a2 = z1['bytes_per_s'] / a2['bytes_per_s']
            self.row('B1', 'next %s, one reader' % label,
                     '%.2f GB/s' % (z1['bytes_per_s'] / 1e9),
                     "(a) %.2f, (a') %.2f, (b) %.2f GB/s" % (
                         a1['bytes_per_s'] / 1e9, a2['bytes_per_s'] / 1e9,
                         b1['bytes_per_s'] / 1e9),
                     "%.2f (a), %.2f (a'), %.2f (b)" % (
                         r_a, r_a2, z1['bytes_per_s'] / b1['bytes_per_s']),
                     target1, r_a2 >= 0.8 and z1['bytes_per_s'] >= 2e9)
            r4 = z4['bytes_per_s'] / z1['bytes_per_s']
            self.row('B1', 'next %s, 4 ranks' % label,
                     '%.2f GB/s' % (z4['bytes_per_s'] / 1e9),
                     '(a) %.2f GB/s, (b) %.2f GB/s' % (a4['bytes_per_s'] / 1e9,
                                                      b4['bytes_per_s'] / 1e9),
                     '%.2fx one reader; %.2f (a)' % (r4, z4['bytes_per_s'] / a4['bytes_per_s']),
                     '>= 1.2x one reader', r4 >= 1.2)
            for key, what, d, target in (
                    ('B4', 'open->first byte (4 KiB), 4 ranks, 1 MiB batches', lat,
                     'p99 < 2 ms'),
                    ('B4 max_threads=64', 'same, max_threads=64 (the default before '
                     'offload threads)', lat_64, '')):
                if d:
                    self.raw[key] = d
                    self.row('B4', what, 'p50 %.0f us, p99 %.0f us' % (
                        d['first_p50_us'], d['first_p99_us']),
                             'static FUSE p50 %.0f / p99 %.0f us' % (a_lat['first_p50_us'],
                                                                     a_lat['first_p99_us']),
                             '', target or '(earlier default)', d['first_p99_us'] < 2000 if target else None)
            if paced:
                self.raw['B4 paced'] = paced
                self.row('B4', 'same, each rank pausing 20 ms between batches',
                         'p50 %.0f us, p99 %.0f us' % (paced['first_p50_us'],
                                                     paced['first_p99_us']),
                         'static FUSE p50 %.0f / p99 %.0f us' % (a_paced['first_p50_us'],
                                                                 a_paced['first_p99_us']),
                         '', '(hand-over of a prefetched batch)', None)

    # ---------------------------------------------------------------- B2
    def b2(self):
        src = self.jsonl()
        base = {}
        for w in (0, 2):
            runs = []
            for _ in range(self.a.repeat):
                _, out, _ = self.run([PY, HERE / 'dataloader_baseline.py', src, '--workers',
                                      w, '--seconds', self.secs])
                runs.append(json.loads(out))
            base[w] = max(runs, key=lambda d: d['records_per_s'])
        best = max(base.values(), key=lambda d: d['records_per_s'])
        self.raw['B2'] = {'dataloader': base}
        bl = 'DataLoader %.0fk/s (w=0), %.0fk/s (w=2)' % (
            base[0]['records_per_s'] / 1e3, base[2]['records_per_s'] / 1e3)
        # The FUSE transport's ceiling for this batch size: a static file of one average
        # lines batch (256 records), read by the same two readers. Records/s can never
        # beat opens/s of this file times 256.
        with open(src, 'rb') as f:
            nrec = sum(1 for _ in f)
        size = int(src.stat().st_size / nrec * 256)
        mnt = self.work / 'mnt-static'
        with self.mounted([self.fuse_static, mnt, '-f', '-o', 'size=%d,files=1' % size], mnt,
                          mnt / '0'):
            c = self.readloop([mnt / '0'], expect=size)
            py = self.lines_reader(mnt / '0', key=lambda d: d['batches'] / d['seconds'])
        py_rps = {k: d['batches'] / d['seconds'] * 256 for k, d in py.items()}
        self.raw['B2']['static_fuse'] = {'size': size, 'readloop': c, 'python': py}
        self.row('B2', 'ceiling: static FUSE file of one batch (%d KB), x256 records' % (
            size // 1000), 'Python %.0fk/s (os.readv: %.0fk/s), C %.0fk/s' % (
                py_rps['file'] / 1e3, py_rps['os'] / 1e3, c['opens_per_s'] * 256 / 1e3),
                 bl, '%.1fx (%.1fx)' % (py_rps['file'] / best['records_per_s'],
                                        py_rps['os'] / best['records_per_s']),
                 'calibration', None)
        for name, opts, target, need in (('compressed', [], '>= 3x', 3.0),
                                         ('uncompressed', ['--compress', 'none'], '>= 10x', 10.0)):
            try:
                ds, _ = self.pack('jsonl-' + name, [src], *opts)
                ctx, zm = self.mount_zephon(ds, 'b2', 'world_size=1,global_batch=256,'
                                            'format=lines')
                with ctx:
                    nxt = zm / 'rank' / '0' / 'next'
                    py = self.lines_reader(nxt, key=lambda d: d['records_per_s'])
                    c = self.readloop([nxt], lines=True)
            except NotBuilt as e:
                self.na('B2', 'records/s, %s' % name, target + ' better baseline', e)
                self.rows[-1] = self.rows[-1][:3] + (bl,) + self.rows[-1][4:]
                continue
            self.raw['B2'][name] = {'python': py, 'readloop': c}
            rps = {k: d['records_per_s'] for k, d in py.items()}
            ratio = max(rps.values()) / best['records_per_s']
            self.row('B2', 'records/s, %s (Python; C reader %.0fk/s)' % (
                name, c['records_per_s'] / 1e3),
                'open().read() %.0fk/s, os.readv %.0fk/s' % (rps['file'] / 1e3, rps['os'] / 1e3),
                bl, '%.1fx' % ratio, target + ' better baseline', ratio >= need)

    def lines_reader(self, path, key):
        """lines_reader.py on path with each way of reading (--read file, os), the best of
        --repeat runs each (by key), alternating so that a noisy minute falls on both."""
        runs = {'file': [], 'os': []}
        for _ in range(self.a.repeat):
            for mode in runs:
                _, out, _ = self.run([PY, HERE / 'lines_reader.py', path, '--seconds',
                                      self.secs, '--read', mode])
                runs[mode].append(json.loads(out))
        return {mode: max(r, key=key) for mode, r in runs.items()}

    # ---------------------------------------------------------------- B3
    def b3(self):
        code = ('import resource, time, torch\n'
                't = time.perf_counter(); p = torch.randperm(10**9); t = time.perf_counter() - t\n'
                'print(t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n')
        _, out, err = self.run(['/usr/bin/time', '-v', PY, '-c', code])
        secs, _ = out.split()
        rss_kib = int(re.search(r'Maximum resident set size \(kbytes\): (\d+)', err).group(1))
        base = float(secs)
        self.raw['B3'] = {'randperm_s': base, 'randperm_peak_rss_kib': rss_kib}
        bl = 'randperm(10^9) %.2f s, peak RSS %.0f MiB' % (base, rss_kib / 1024)
        try:
            res = self.b3_zephon()
        except NotBuilt as e:
            self.na('B3', 'order setup N=10^9: mount->first batch', '< 0.5 s, < 64 MiB, >= 20x', e)
            self.rows[-1] = self.rows[-1][:3] + (bl,) + self.rows[-1][4:]
            return
        self.raw['B3']['zephon'] = res
        for label, key in (('mount->first batch', 'first'),
                           ('mount->first batch, dataset not in the page cache', 'cold'),
                           ('mount->first batch at resume near end of epoch 3', 'resume')):
            s, rss, anon = res[key]
            self.row('B3', 'N=%.0e: %s' % (res['n'], label),
                     '%.3f s, VmHWM %.1f MiB (anon %.1f)' % (s, rss / 1024, anon / 1024),
                     bl, '%.0fx' % (base / s), '< 0.5 s, < 64 MiB, >= 20x',
                     s < 0.5 and rss < 64 * 1024 and base / s >= 20)

    def b3_dataset(self):
        """N uint8 tokens cut into windows of 1: N samples (N * 25 bytes on disk)."""
        n = self.a.b3_n
        ds = self.work / ('ds-b3-%d' % n)
        if ds.exists():
            return ds, None
        need = n * 26 + (2 << 30)
        free = shutil.disk_usage(self.work).free
        if free - need < 10e9:  # leave 10 GB to the machine's other users
            raise NotBuilt('B3 needs %.0f GB free in %s, has %.0f GB' % (
                need / 1e9, self.work, free / 1e9))
        src = self.work / 'b3-tokens.bin'
        self.log('generating %s (%d random bytes) and packing %d samples' % (src, n, n))
        with open(src, 'wb') as f:
            left = n
            while left:
                k = min(left, 64 << 20)
                f.write(os.urandom(k))
                left -= k
        try:
            out, secs = self.pack('b3-%d' % n, [src], '--dtype', 'uint8', '--seq-len', '1',
                                  '--compress', 'none')
        finally:
            src.unlink()
        return out, secs

    def first_batch(self, ds, opts):
        """Wall time from exec of `zephon mount` to the first byte of /rank/0/next, and
        the daemon's peak RSS (VmHWM) at that point."""
        mnt = self.work / 'mnt-b3'
        mnt.mkdir(parents=True, exist_ok=True)
        journal = self.work / 'journal-b3.sqlite'
        for suffix in ('', '-wal', '-shm'):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(journal) + suffix)
        nxt = mnt / 'rank' / '0' / 'next'
        errf = open(self.work / 'daemon-b3.log', 'w+')
        t0 = time.perf_counter()
        p = subprocess.Popen([str(self.zephon), 'mount', str(ds), str(mnt), '-f', '-o',
                              'journal=%s,%s' % (journal, opts)], stdout=errf, stderr=errf)
        try:
            while True:
                try:
                    with open(nxt, 'rb') as f:
                        first = f.read(1)
                    break
                except (FileNotFoundError, NotADirectoryError):
                    if p.poll() is not None:
                        errf.seek(0)
                        raise RuntimeError('zephon mount exited: ' + errf.read()[-2000:])
                    if time.perf_counter() - t0 > 60:
                        raise RuntimeError('no first batch within 60 s')
                    time.sleep(0.0005)
            secs = time.perf_counter() - t0
            with open('/proc/%d/status' % p.pid) as f:
                st = f.read()
            hwm = int(re.search(r'VmHWM:\s+(\d+)', st).group(1))
            anon = int(re.search(r'RssAnon:\s+(\d+)', st).group(1))
            assert first
        finally:
            subprocess.run(['fusermount3', '-u', str(mnt)], stderr=subprocess.DEVNULL)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                subprocess.run(['fusermount3', '-uz', str(mnt)], stderr=subprocess.DEVNULL)
                p.kill()
                p.wait()
            errf.close()
        return secs, hwm, anon

    def b3_zephon(self):
        n = self.a.b3_n
        ds, pack_secs = self.b3_dataset()
        base = 'world_size=1,global_batch=256,format=bin,shuffle=global,seed=1'
        res = {'n': n, 'pack_s': pack_secs}
        runs = {'first': [], 'resume': [], 'cold': []}
        for _ in range(3):  # best of 3: the machine is shared and noisy
            runs['first'].append(self.first_batch(ds, base + ',resume=fresh'))
            # as on a node that did not pack the dataset, or after a reboot: none of its
            # pages in the page cache. The warm runs' resident index pages come in folios
            # as large as the page cache holds them (after pack's writes, up to 2 MiB),
            # and every touched entry maps its whole folio; cold, they are read as needed.
            drop_page_cache(ds)
            runs['cold'].append(self.first_batch(ds, base + ',resume=fresh'))
            # gsn 4N - 1024: the fourth-last step of epoch 3
            runs['resume'].append(self.first_batch(ds, base + ',resume=samples:%d' % (
                4 * n - 1024)))
        for k, v in runs.items():
            res[k] = min(v)
            res[k + '_all'] = v
        if not self.a.keep_b3:
            shutil.rmtree(ds, ignore_errors=True)
        return res

    # ---------------------------------------------------------------- cold start
    def cold(self):
        """The first batches of a mount whose dataset is not in the page cache (a node that
        did not pack it, or after a reboot), against the same batches with it cached. Not
        one of the targets: what a training job waits for at its start."""
        n = 16
        cases = (('B1', 'tokens-raw', 'format=bin', '1 MiB token batches'),
                 ('B2', 'jsonl-compressed', 'format=lines', 'lines batches of 256 records '
                  '(zstd)'))
        for bid, name, fmt, what in cases:
            ds = self.work / ('ds-' + name)
            label = 'cold start: %s, first batch / first %d' % (what, n)
            if not ds.exists():
                self.na(bid, label, '-', 'run B1 and B2 first: ds-%s is missing' % name)
                continue
            res = {}
            for state in ('cold', 'cached', 'cold', 'cached'):
                if state == 'cold':
                    drop_page_cache(ds)
                ctx, zm = self.mount_zephon(ds, 'cold', 'world_size=1,global_batch=256,' + fmt)
                with ctx:
                    nxt, t0, ts = zm / 'rank' / '0' / 'next', time.perf_counter(), []
                    for _ in range(n):
                        with open(nxt, 'rb') as f:
                            f.read()
                        ts.append(time.perf_counter() - t0)
                res.setdefault(state, []).append((ts[0], ts[-1]))
            cold, cached = min(res['cold']), min(res['cached'])
            self.raw.setdefault('cold', {})[name] = res
            self.row(bid, label, '%.0f ms / %.0f ms' % (cold[0] * 1e3, cold[1] * 1e3),
                     'in the page cache: %.1f ms / %.0f ms' % (cached[0] * 1e3, cached[1] * 1e3),
                     '%.1fx / %.1fx' % (cold[0] / cached[0], cold[1] / cached[1]), '-', None)

    # ---------------------------------------------------------------- B5
    def b5(self):
        exe = self.build / 'tests' / 'bench_journal'
        if not exe.exists():
            self.na('B5', 'journaled claims/s', '>= 50,000/s (sync=normal)',
                    'bench_journal not built yet')
            return
        _, out, err = self.run([exe], timeout=600)
        self.raw['B5'] = out
        rates = {}
        for mode in ('normal', 'full'):
            m = re.search(r'sync=%s\b.*?([\d.]+) claims/s' % mode, out)
            if m:
                rates[mode] = float(m.group(1))
        if 'normal' not in rates:
            self.row('B5', 'journaled claims/s', out.strip().replace('\n', '; ')[:80], '', '',
                     '>= 50,000/s (sync=normal)', None)
            return
        # each claim's delivery durable before the next claim, as a mount's close makes it
        self.row('B5', 'journaled claims/s, durable deliveries, sync=normal / full',
                 '%.0f / %s' % (rates['normal'], '%.0f' % rates['full'] if 'full' in rates
                                else '?'), '', '', '>= 50,000/s (sync=normal)',
                 rates['normal'] >= 50000)

    # ---------------------------------------------------------------- B6
    def b6(self):
        # Twice: on the B2 corpus, and on a corpus 5 times larger. Pack trains its
        # dictionary once (~0.5 s here, single-threaded) before it compresses on every
        # CPU, so the small corpus shows that fixed cost and the large one the rate.
        for src in (self.jsonl(), self.jsonl(5 * self.a.jsonl_mb)):
            self.b6_one(src)

    def b6_one(self, src):
        size = src.stat().st_size
        what = 'pack JSONL (level 3, dictionary), %.0f MB' % (size / 1e6)
        out = self.work / 'b6.jsonl.zst'
        cli = float('inf')
        for _ in range(self.a.repeat):  # best of R
            t0 = time.perf_counter()
            self.run(['zstd', '-3', '-q', '-f', src, '-o', out])
            cli = min(cli, time.perf_counter() - t0)
        cli_ratio = size / out.stat().st_size
        out.unlink()
        raw = self.raw.setdefault('B6', {})[str(src.name)] = {
            'zstd_cli_s': cli, 'zstd_cli_ratio': cli_ratio, 'input_bytes': size}
        bl = 'zstd -3: %.0f MB/s, ratio %.2f' % (size / cli / 1e6, cli_ratio)
        try:
            ds = self.work / 'ds-b6'
            secs = float('inf')
            for _ in range(self.a.repeat):  # best of R
                shutil.rmtree(ds, ignore_errors=True)
                t0 = time.perf_counter()
                self.run([self.zephon, 'pack', src, '-o', ds, '-q', '--level', '3'])
                secs = min(secs, time.perf_counter() - t0)
            _, info, _ = self.run([self.zephon, 'info', '--json', ds])
            info = json.loads(info)
            shutil.rmtree(ds, ignore_errors=True)
        except NotBuilt as e:
            self.na('B6', what, '>= 0.5x CLI speed', e)
            self.rows[-1] = self.rows[-1][:3] + (bl,) + self.rows[-1][4:]
            return
        ratio = info['raw_bytes'] / info['stored_bytes']
        raw.update(pack_s=secs, pack_ratio=ratio)
        speed = size / secs / 1e6
        self.row('B6', what, '%.0f MB/s, ratio %.2f' % (speed, ratio), bl,
                 '%.2fx' % (cli / secs), '>= 0.5x CLI speed', cli / secs >= 0.5)

    # ---------------------------------------------------------------- table
    def table(self):
        head = ('#', 'what', 'measured', 'baseline (same run)', 'ratio', 'target', 'result')
        rows = [head] + [r[:6] + ({True: 'pass', False: 'MISS', None: '-'}[r[6]],)
                         for r in self.rows]
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
        lines = []
        for k, r in enumerate(rows):
            lines.append('  '.join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
            if k == 0:
                lines.append('  '.join('-' * w for w in widths))
        return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description='Zephon benchmarks B1-B6')
    ap.add_argument('--build', default=str(ROOT / 'build-bench'))
    ap.add_argument('--work', default=os.environ.get('ZEPHON_BENCH_DIR', '/tmp/zephon-bench'))
    ap.add_argument('--seconds', type=float, default=3.0, help='per throughput measurement')
    ap.add_argument('--repeat', type=int, default=3,
                    help='run each measurement R times and keep the best (the machine is shared)')
    ap.add_argument('--jsonl-mb', type=float, default=100.0)
    ap.add_argument('--only', default='B1,B2,COLD,B3,B4,B5,B6',
                    help='groups to run (COLD: first batches of a dataset not in the page '
                    'cache; it needs the datasets of B1 and B2)')
    ap.add_argument('--fresh', action='store_true', help='delete cached inputs and datasets')
    ap.add_argument('--b3-n', type=int, default=10**9,
                    help='samples of the B3 dataset (25 bytes each on disk)')
    ap.add_argument('--keep-b3', action='store_true',
                    help='keep the B3 dataset for the next run (it is ~25 GB at 10^9)')
    a = ap.parse_args()
    if a.fresh:
        shutil.rmtree(a.work, ignore_errors=True)
    b = Bench(a)
    load0 = os.getloadavg()
    only = set(a.only.upper().split(','))
    steps = [('B1', b.b1_b4), ('B2', b.b2), ('COLD', b.cold), ('B3', b.b3), ('B5', b.b5),
             ('B6', b.b6)]
    for bid, fn in steps:
        if bid not in only and not (bid == 'B1' and 'B4' in only):
            continue
        print('== %s' % bid, file=sys.stderr, flush=True)
        try:
            fn()
        except NotBuilt as e:
            b.na(bid, '', '', e)
    load1 = os.getloadavg()
    print(b.table())
    # The machine is shared: say how busy it was, since every figure depends on it.
    print('load average (1 min) at start %.2f, at end %.2f, on %d CPUs; best of %d runs of '
          '%.0f s each' % (load0[0], load1[0], os.cpu_count(), a.repeat, a.seconds))
    (pathlib.Path(a.work) / 'results.json').write_text(json.dumps(
        {'rows': b.rows, 'raw': b.raw, 'load': [load0, load1]}, indent=1, default=str))


if __name__ == '__main__':
    main()
