#!/usr/bin/python3
"""Padding of Zephon's global row plan against TorchTitan main's online packer, on the same
chat samples; pack speed and memory.

usage: tests/bench/bench_sft_pack.py [--zephon build/fs/zephon] [--titan-python PY]
                                     [--work /tmp/zephon-bench-sft] [--every K]
                                     [--tokenizer DIR]

Run it with the interpreter of a venv that has TorchTitan's git main (the one
tests/python/run-titan-main uses, e.g. .venv-titan-main/bin/python) and the zephon package;
it runs the Zephon packs with the same interpreter as their front end.

Samples: real chat data made of WordNet 3.0 (Debian's wordnet-base): for every K-th lemma of
index.noun, .verb, .adj and .adv, the question "What are the senses of the <pos> '<lemma>'?"
and the answer "1. <gloss>\\n2. <gloss>..." with the gloss of each of its synsets, in
WordNet's order (from data.<pos> at the offsets the index gives). Answers run from one
gloss to dozens, so lengths have a long tail, as chat data does. Tokenizer: TorchTitan's test
tokenizer (../shared/data/tokenizer/torchtitan-test, with its chat template), as
sft_debugmodel uses it.

For each row length of sft_debugmodel (rows of its max_context_length 2048, and rows of its
num_tokens_per_batch 8 x 2048 = 16384 with documents up to 2048), in one run:
  (a) TorchTitan main's SFT pipeline as its GrainDataLoader builds it for sft_debugmodel:
      SingleDatasetConfig(HuggingFaceRandomAccessSource json, ChatProcessor, the None
      filter) under FirstFitPackingConfig (num_packing_bins 8, its default), seed 42,
      shuffled, one epoch; at DP 1 (one packer sees every sample: its best case) and at
      DP 8 (each rank packs its own shard, as in an 8-GPU run: rows and padding summed);
      padding is the positions of its rows that hold no document (input 0, label -100,
      position 0);
  (b) `zephon pack --tokenizer TOK --chat --seq-len R [--max-context-length 2048]`: its
      catalog's padding (rows x R - the documents' positions); beside it the fewest rows
      any plan can use (the documents' positions / R, rounded up) and their padding.
Both drop the same samples (more than 2048 inputs). Wall seconds, CPU seconds (user +
system of the process tree) and peak RSS (the largest sum of VmRSS over the process tree,
sampled every 50 ms) of each. A benchmark: it prints, it never fails on a number.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORDNET = pathlib.Path('/usr/share/wordnet')


def chat_records(every):
    """(question, answer) records of WordNet's lemmas (see the module)."""
    out = []
    for pos in ('noun', 'verb', 'adj', 'adv'):
        data = open(WORDNET / ('data.' + pos), 'rb')
        with open(WORDNET / ('index.' + pos), encoding='utf-8') as f:
            lines = [x for x in f if not x.startswith('  ')]
        for line in lines[::every]:
            f_ = line.split()
            lemma, n_syn, n_ptr = f_[0], int(f_[2]), int(f_[3])
            offsets = f_[6 + n_ptr:6 + n_ptr + n_syn]
            glosses = []
            for off in offsets:
                data.seek(int(off))
                glosses.append(data.readline().decode('utf-8').split('|', 1)[1].strip())
            out.append({'question': "What are the senses of the %s '%s'?"
                        % (pos, lemma.replace('_', ' ')),
                        'answer': '\n'.join('%d. %s' % (i, g) for i, g in enumerate(glosses, 1))})
        data.close()
    return out


def tree_rss(pid):
    """The sum of VmRSS (bytes) of pid and its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open('/proc/%d/status' % p) as f:
                for line in f:
                    if line.startswith('VmRSS:'):
                        total += int(line.split()[1]) * 1024
            with open('/proc/%d/task/%d/children' % (p, p)) as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return total


def measure(cmd, env=None):
    """Run cmd; (wall s, CPU s of it and its children, peak tree RSS bytes, stdout)."""
    t0 = time.monotonic()
    before = os.times()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         text=True)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(p.pid))
            time.sleep(0.05)
    t = threading.Thread(target=sample)
    t.start()
    out, err = p.communicate()
    done.set()
    t.join()
    after = os.times()
    if p.returncode:
        sys.exit('%s failed:\n%s' % (cmd, err[-3000:]))
    cpu = (after.children_user - before.children_user) + (after.children_system -
                                                          before.children_system)
    return time.monotonic() - t0, cpu, peak[0], out


TITAN = r'''
import json, sys
import grain.python as grain
from torchtitan.components.data.dataset import SingleDatasetConfig
from torchtitan.components.data.packing import FirstFitPackingConfig
from torchtitan.components.data.sources import HuggingFaceRandomAccessSource
from torchtitan.components.data.types import DatasetBuildContext, DatasetIterationPolicy
from torchtitan.components.tokenizer import HuggingFaceTokenizer
from torchtitan.hf_datasets.text_datasets import ChatProcessor

data, tok, row, dp = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def process_sample(sample):         # sft_debugmodel's
    return [{"role": "user", "content": sample["question"]},
            {"role": "assistant", "content": sample["answer"]}]

cfg = FirstFitPackingConfig(dataset=SingleDatasetConfig(
    source=HuggingFaceRandomAccessSource.Config(path="json", split="train",
                                                load_dataset_kwargs={"data_files": data}),
    processor=ChatProcessor.Config(messages_fn=process_sample),
    post_filters=(lambda sample: sample is not None,)))
ctx = DatasetBuildContext(tokenizer=HuggingFaceTokenizer(tokenizer_path=tok),
                          max_context_length=2048, num_tokens_per_batch=row,
                          read_options=grain.ReadOptions())
rows = pad = docs = 0
for rank in range(dp):              # each DP rank packs its own shard, as in training
    policy = DatasetIterationPolicy(seed=42, shuffle=True, repeat=False, dp_rank=rank,
                                    dp_world_size=dp, streaming_shuffle_buffer_size=1000)
    for r in cfg.build(context=ctx, dataset_iteration_policy=policy):
        rows += 1
        p = (r.positions == 0) & (r.input_ids == 0) & (r.labels == -100)
        pad += int(p.sum())
        docs += int(((r.positions == 0) & ~p).sum())
print(json.dumps({"rows": rows, "padding": pad, "documents": docs}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--zephon', default=str(ROOT / 'build' / 'fs' / 'zephon'))
    ap.add_argument('--titan-python', default=sys.executable)
    ap.add_argument('--work', default='/tmp/zephon-bench-sft')
    ap.add_argument('--every', type=int, default=3, help='every K-th lemma (3)')
    ap.add_argument('--dp', type=int, nargs='+', default=[1, 8],
                    help="TorchTitan's data-parallel degrees (1 8): each rank packs its shard")
    ap.add_argument('--tokenizer', default=str(ROOT.parent / 'shared' / 'data' / 'tokenizer' /
                                              'torchtitan-test'))
    a = ap.parse_args()
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    recs = chat_records(a.every)
    data = work / 'chat.jsonl'
    with open(data, 'w') as f:
        for r in recs:
            f.write(json.dumps(r) + '\n')
    print('%d chat samples, %.1f MB (%s)' % (len(recs), data.stat().st_size / 1e6, data))
    env = dict(os.environ, ZEPHON_PYTHON=a.titan_python)
    print('%-7s %-34s %9s %9s %8s %8s %8s %9s' % ('row', 'packer', 'rows', 'padding', 'pad %',
                                                   'wall s', 'CPU s', 'peak RSS'))
    for row in (2048, 16384):
        for dp in a.dp:
            tw, tc, tm, out = measure([a.titan_python, '-c', TITAN, str(data), a.tokenizer,
                                       str(row), str(dp)], env=env)
            t = json.loads(out.strip().splitlines()[-1])
            f = t['padding'] / (t['rows'] * row)
            if dp == a.dp[0]:
                tf = f
            print('%-7d %-34s %9d %9d %7.2f%% %8.1f %8.1f %6.0f MiB' % (
                row, 'TorchTitan main FirstFit, DP %d' % dp, t['rows'], t['padding'],
                100 * f, tw, tc, tm / 2**20))
        ds = work / ('ds%d' % row)
        extra = ['--max-context-length', '2048'] if row > 2048 else []
        zw, zc, zm, _ = measure([a.zephon, 'pack', '-q', '--force', '--tokenizer', a.tokenizer,
                                 '--chat', '--prompt-field', 'question', '--response-field',
                                 'answer', '--seq-len', str(row), *extra, str(data), '-o',
                                 str(ds)], env=env)
        i = json.loads(subprocess.run([a.zephon, 'info', str(ds), '--json'], text=True,
                                      stdout=subprocess.PIPE, check=True).stdout)
        zf = i['padding_fraction']
        print('%-7d %-34s %9d %9d %7.2f%% %8.1f %8.1f %6.0f MiB' % (
            row, 'zephon pack --chat (BFD plan)', i['samples'], i['padding'], 100 * zf, zw,
            zc, zm / 2**20))
        need = -(-(i['samples'] * row - i['padding']) // row)
        print('%-7d documents: TorchTitan %d, Zephon %d (%d dropped); padding Zephon / '
              'TorchTitan DP %d = %.3f; fewest rows possible %d, lowest padding %d' % (
                  row, t['documents'], i['documents'], i['documents_dropped'], a.dp[0],
                  zf / tf if tf else float('nan'), need, need * row - (i['samples'] * row -
                                                                       i['padding'])))


if __name__ == '__main__':
    main()
