#!/usr/bin/python3
"""Peak memory of `zephon pack --tokenizer` (the packer and its Python front end) on JSONL
of large documents, against the front end of a baseline tree, in one run (B-tok-mem).

usage: tests/bench/bench_pack_memory.py INPUT.jsonl [--zephon build/fs/zephon]
           [--python PY] [--tokenizer DIR] [--seq-len 2048] [--work DIR]
           [--baseline-pythonpath DIR] [--rounds 1]

INPUT: tests/bench/make_big_docs.py's corpus (1 GB, documents up to 50 MB, for the
docs/packing.md's figure). Tokenizer: TorchTitan's test tokenizer (../shared/data/tokenizer/
torchtitan-test: 2,020 ids, ~3 UTF-8 bytes per token, the heaviest per byte of text).
Each round packs INPUT once with this tree's front end (python/ beside this script) and,
with --baseline-pythonpath, once with the `zephon` package found there (e.g. `git archive
<commit> python | tar -x -C DIR` gives DIR/python), the same packer and options.

Memory: every 50 ms, /proc/<pid>/status of the packer (`zephon pack`) and of its front
end (`python3 -m zephon.pack_text`, the packer's child): VmHWM, the kernel's high-water
mark of each process's resident set, which no sampling gap can miss (the last reading
before the process exits is its peak), and the sum of both VmRSS at the same instant (the
largest such sum is the peak of the pair observed together; the sum of the two VmHWM
bounds it from above). Also the wall and CPU seconds (user + system of both, from
wait4). A benchmark: it prints, it never fails on a number.
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT.parent / 'shared' / 'data'
MIB = 1 << 20


def status_kib(pid, key):
    try:
        with open('/proc/%d/status' % pid) as f:
            for line in f:
                if line.startswith(key + ':'):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def children(pid):
    try:
        with open('/proc/%d/task/%d/children' % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


class Watch:
    """VmHWM of the packer and of its python child, and the largest VmRSS sum."""

    def __init__(self, pid):
        self.pid, self.front = pid, None
        self.hwm = {'pack': 0, 'front': 0}
        self.both = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.wait(0.05):
            if self.front is None:
                for c in children(self.pid):
                    try:
                        with open('/proc/%d/cmdline' % c, 'rb') as f:
                            if b'zephon.pack_text' in f.read():
                                self.front = c
                    except OSError:
                        pass
            rss = 0
            for who, pid in (('pack', self.pid), ('front', self.front)):
                if pid is None:
                    continue
                h = status_kib(pid, 'VmHWM')
                if h is not None:
                    self.hwm[who] = max(self.hwm[who], h)
                rss += status_kib(pid, 'VmRSS') or 0
            self.both = max(self.both, rss)

    def stop(self):
        self._stop.set()
        self._t.join()


def pack(zephon, python, pythonpath, tok, seq_len, inp, out):
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, ZEPHON_PYTHON=python, PYTHONPATH=pythonpath)
    t0 = time.monotonic()
    p = subprocess.Popen([zephon, 'pack', '-q', '--tokenizer', str(tok), '--seq-len',
                          str(seq_len), '--overlap', '1', str(inp), '-o', str(out)], env=env,
                         stderr=subprocess.PIPE)
    w = Watch(p.pid)
    _, status, ru = os.wait4(p.pid, 0)
    w.stop()
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors='replace')
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        sys.exit('pack failed (%d): %s' % (p.returncode, err[-2000:]))
    # ru covers the packer and its waited-for children (the front end)
    return dict(wall=wall, cpu=ru.ru_utime + ru.ru_stime, pack=w.hwm['pack'] * 1024,
                front=w.hwm['front'] * 1024, both=w.both * 1024)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('input')
    ap.add_argument('--zephon', default=str(ROOT / 'build' / 'fs' / 'zephon'))
    ap.add_argument('--python', default=sys.executable)
    ap.add_argument('--tokenizer', default=str(DATA / 'tokenizer' / 'torchtitan-test'))
    ap.add_argument('--seq-len', type=int, default=2048)
    ap.add_argument('--work', default='/tmp/zephon-bench-packmem')
    ap.add_argument('--baseline-pythonpath')
    ap.add_argument('--rounds', type=int, default=1)
    a = ap.parse_args()
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    size = os.path.getsize(a.input)
    runs = [('this tree', str(ROOT / 'python'))]
    if a.baseline_pythonpath:
        runs.append(('baseline', a.baseline_pythonpath))
    print('input %s: %.1f MB; tokenizer %s; --seq-len %d' % (a.input, size / 1e6, a.tokenizer,
                                                            a.seq_len))
    print('| front end | round | seconds | CPU s | MB/s | packer VmHWM | front end VmHWM '
          '| sum of both VmHWM | largest VmRSS sum |')
    print('|---|---|---|---|---|---|---|---|---|')
    for r in range(a.rounds):
        for name, pp in runs:
            m = pack(a.zephon, a.python, pp, a.tokenizer, a.seq_len, a.input, work / 'ds')
            print('| %s | %d | %.1f | %.1f | %.1f | %d MiB | %d MiB | %d MiB | %d MiB |'
                  % (name, r + 1, m['wall'], m['cpu'], size / 1e6 / m['wall'], m['pack'] // MIB,
                     m['front'] // MIB, (m['pack'] + m['front']) // MIB, m['both'] // MIB),
                  flush=True)
    shutil.rmtree(work / 'ds', ignore_errors=True)


if __name__ == '__main__':
    main()
