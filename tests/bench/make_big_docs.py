#!/usr/bin/python3
"""Build the JSONL corpus of benchmark B-tok-mem: documents from a few hundred bytes to 50 MB.

Text comes from public sources already on the machine (never copied into the repo):
tinyshakespeare (../shared/data/text/tinyshakespeare.txt), Dolma's Common Crawl sample
(../shared/data/jsonl/cc_en_head-0091.jsonl, `text` key, non-ASCII included) and WordNet's
glosses (/usr/share/wordnet/data.*, Debian's wordnet-base). A document is random paragraphs
of them joined by blank lines until it reaches its size; one in four documents over 1 MB
has its newlines turned into spaces (one line of text: no line breaks to cut at).

Sizes: --big documents of exactly --max-mb MB first (the largest documents, the case the
memory bound is about), then sizes drawn log-uniformly from [200 B, --max-mb MB] until the
file holds --mb MB. Each record is {"id": i, "text": ...} (UTF-8, not \\u-escaped), one
per line. Deterministic: the same arguments give the same bytes (random.Random(seed)).

usage: make_big_docs.py OUT.jsonl [--mb 1024] [--max-mb 50] [--big 4] [--seed 11]
                        [--data ../shared/data]
"""
import argparse
import json
import math
import pathlib
import random

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORDNET = ['/usr/share/wordnet/data.' + p for p in ('noun', 'verb', 'adj', 'adv')]


def paragraphs(data):
    """The pool of paragraphs: tinyshakespeare's speeches, Common Crawl's paragraphs and
    runs of 20 WordNet glosses."""
    out = [p for p in (data / 'text' / 'tinyshakespeare.txt').read_text().split('\n\n') if p]
    with open(data / 'jsonl' / 'cc_en_head-0091.jsonl', encoding='utf-8') as f:
        for line in f:
            out += [p for p in json.loads(line)['text'].split('\n\n') if p.strip()]
    glosses = []
    for path in WORDNET:
        try:
            with open(path, encoding='utf-8', errors='replace') as f:
                glosses += [ln.split('| ', 1)[1].strip() for ln in f
                            if not ln.startswith('  ') and '| ' in ln]
        except OSError:
            pass                      # without wordnet-base: the other two sources
    out += ['; '.join(glosses[i:i + 20]) + '.' for i in range(0, len(glosses), 20)]
    return out


def document(rng, pool, size, one_line):
    parts, n = [], 0
    while n < size:
        p = pool[rng.randrange(len(pool))]
        parts.append(p)
        n += len(p.encode('utf-8')) + 2
    text = '\n\n'.join(parts)
    if one_line:
        text = text.replace('\n', ' ')
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('out')
    ap.add_argument('--mb', type=float, default=1024)
    ap.add_argument('--max-mb', type=float, default=50)
    ap.add_argument('--big', type=int, default=4)
    ap.add_argument('--seed', type=int, default=11)
    ap.add_argument('--data', default=str(ROOT.parent / 'shared' / 'data'))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    pool = paragraphs(pathlib.Path(a.data))
    target, biggest = int(a.mb * 1e6), int(a.max_mb * 1e6)
    written = docs = largest = 0
    with open(a.out, 'w', encoding='utf-8') as f:
        while written < target:
            if docs < a.big:
                size = biggest
            else:
                size = int(math.exp(rng.uniform(math.log(200), math.log(biggest))))
                size = max(200, min(size, target - written))
            text = document(rng, pool, size, size > 1e6 and rng.random() < 0.25)
            # the largest documents exactly max-mb MB of JSON text, as the bound says
            text = text.encode('utf-8')[:size].decode('utf-8', errors='ignore')
            line = json.dumps({'id': docs, 'text': text}, ensure_ascii=False) + '\n'
            f.write(line)
            written += len(line.encode('utf-8'))
            largest = max(largest, len(text.encode('utf-8')))
            docs += 1
    print('%s: %d documents, %.1f MB, the largest %.1f MB of text'
          % (a.out, docs, written / 1e6, largest / 1e6))


if __name__ == '__main__':
    main()
