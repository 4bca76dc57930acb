#!/usr/bin/python3
"""Pack throughput and compression ratio: every file of ../shared/data and a 100 MB JSONL.

usage: tests/bench/bench_pack.py [--zephon build/fs/zephon] [--runs 3] [--mb 100]
                                 [--work /tmp/zephon-bench-pack] [--threads N]

For each input: `zephon pack` --runs times into a fresh directory; prints the median wall
time, input MB/s (input bytes as read: compressed bytes for .zst), raw/stored ratio, and
the same with --compress none and --threads 1 for the 100 MB JSONL (the cost of
validation alone, and of one core). CPU seconds (user + system of the pack) are printed
beside wall seconds: on a shared, loaded machine they say more than the wall clock. The 100 MB JSONL is tests/bench/make_jsonl.py's
(WordNet glosses and Common Crawl text, ~1-2 KB records). A benchmark: it prints, it
never fails on a number.
"""
import argparse
import json
import resource
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT.parent / 'shared' / 'data'
MEG = 'megatron/meg-gpt2-openwebtext_text_document'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--zephon', default=str(ROOT / 'build' / 'fs' / 'zephon'))
    ap.add_argument('--runs', type=int, default=3)
    ap.add_argument('--mb', type=int, default=100)
    ap.add_argument('--work', default='/tmp/zephon-bench-pack')
    ap.add_argument('--threads', default=None)
    a = ap.parse_args()
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    big = work / ('corpus-%dmb.jsonl' % a.mb)
    if not big.exists():
        subprocess.run([sys.executable, str(ROOT / 'tests/bench/make_jsonl.py'), str(big),
                        '--mb', str(a.mb), '--data', str(DATA)], check=True)
    cases = [
        ('dolma jsonl', [DATA / 'jsonl/cc_en_head-0091.jsonl'], []),
        ('pile jsonl.zst', [DATA / 'jsonl/blns.jsonl.zst'], []),
        ('webdataset tar', [DATA / 'wds/tendata.tar'], []),
        ('tinyshakespeare', [DATA / 'text/tinyshakespeare.txt'], []),
        ('megatron L=1024', [DATA / (MEG + '.idx')], ['--seq-len', '1024']),
        ('megatron none', [DATA / (MEG + '.idx')], ['--seq-len', '1024', '--compress', 'none']),
        ('%d MB jsonl' % a.mb, [big], []),
        ('%d MB jsonl none' % a.mb, [big], ['--compress', 'none']),
        ('%d MB jsonl 1 thread' % a.mb, [big], ['--threads', '1']),
    ]
    print('%-22s %10s %9s %9s %9s %8s %8s' % ('input', 'input MB', 'wall s', 'cpu s', 'MB/s',
                                                'ratio', 'samples'))
    for name, inputs, opts in cases:
        if a.threads and '--threads' not in opts:
            opts = opts + ['--threads', a.threads]
        times, cpus = [], []
        for _ in range(a.runs):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = work / 'ds'
            shutil.rmtree(out, ignore_errors=True)
            t = time.monotonic()
            subprocess.run([a.zephon, 'pack', '-q', *map(str, inputs), '-o', str(out), *opts],
                           check=True)
            times.append(time.monotonic() - t)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        info = json.loads(subprocess.run([a.zephon, 'info', '--json', str(out)], check=True,
                                         stdout=subprocess.PIPE).stdout)
        in_mb = sum(s['size'] for s in info['sources']) / 1e6
        sec = statistics.median(times)
        print('%-22s %10.2f %9.3f %9.3f %9.1f %7.2fx %8d' % (
            name, in_mb, sec, statistics.median(cpus), in_mb / sec,
            info['raw_bytes'] / info['stored_bytes'], info['samples']), flush=True)
        shutil.rmtree(work / 'ds', ignore_errors=True)


if __name__ == '__main__':
    main()
