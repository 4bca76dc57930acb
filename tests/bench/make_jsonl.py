#!/usr/bin/python3
"""Build the JSONL corpus of benchmarks B2 and B6: records of ~1-2 KB of real English.

Text comes from two public sources already on the machine (never copied into the repo):
  - WordNet's synset glosses, /usr/share/wordnet/data.{noun,verb,adj,adv} (Debian
    package wordnet-base; the licence header lines starting with two spaces are skipped);
  - Dolma's Common Crawl sample ../shared/data/jsonl/cc_en_head-0091.jsonl (`text` key).
Each record is {"id", "source", "text"}: 4 in 5 records concatenate random WordNet
glosses, 1 in 5 take a random slice of a Common Crawl document, until the record's text
reaches a length drawn uniformly from [900, 1900] bytes, so records are ~1-2 KB of JSON.
Deterministic: the same arguments give the same bytes (random.Random(seed)).

usage: make_jsonl.py OUT.jsonl [--mb 100] [--seed 7] [--data ../shared/data]
"""
import argparse
import json
import os
import pathlib
import random
import sys

WORDNET = ['/usr/share/wordnet/data.' + p for p in ('noun', 'verb', 'adj', 'adv')]


def wordnet_glosses():
    glosses = []
    for path in WORDNET:
        with open(path, encoding='utf-8', errors='replace') as f:
            for line in f:
                if line.startswith('  '):
                    continue  # licence header
                head, sep, gloss = line.partition(' | ')
                if not sep:
                    continue
                words = head.split()
                # data line: offset lex_filenum ss_type w_cnt word lex_id ...
                lemma = words[4].replace('_', ' ') if len(words) > 4 else ''
                glosses.append('%s: %s' % (lemma, gloss.strip()))
    return glosses


def cc_texts(data):
    path = pathlib.Path(data) / 'jsonl' / 'cc_en_head-0091.jsonl'
    with open(path, encoding='utf-8') as f:
        return [json.loads(line)['text'] for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('out')
    ap.add_argument('--mb', type=float, default=100.0, help='output size in MB (10^6 bytes)')
    ap.add_argument('--seed', type=int, default=7)
    here = pathlib.Path(__file__).resolve().parents[3]
    ap.add_argument('--data', default=os.environ.get('ZEPHON_DATA') or str(here / 'shared' / 'data'))
    a = ap.parse_args()

    missing = [p for p in WORDNET if not os.path.exists(p)]
    if missing:
        sys.exit('make_jsonl: %s is missing; install it with: apt-get install wordnet-base'
                 % missing[0])
    glosses = wordnet_glosses()
    docs = [t for t in cc_texts(a.data) if len(t) > 2000]
    rng = random.Random(a.seed)
    target = int(a.mb * 1e6)
    written = 0
    tmp = a.out + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as out:
        i = 0
        while written < target:
            want = rng.randint(900, 1900)
            if rng.random() < 0.8:
                parts, n = [], 0
                while n < want:
                    g = glosses[rng.randrange(len(glosses))]
                    parts.append(g)
                    n += len(g) + 2
                text, source = '. '.join(parts)[:want], 'wordnet'
            else:
                d = docs[rng.randrange(len(docs))]
                start = rng.randrange(0, max(1, len(d) - want))
                text, source = d[start:start + want], 'common-crawl'
            line = json.dumps({'id': 'r%08d' % i, 'source': source, 'text': text},
                              ensure_ascii=False) + '\n'
            out.write(line)
            written += len(line.encode('utf-8'))
            i += 1
    os.replace(tmp, a.out)
    print('%s: %d records, %d bytes' % (a.out, i, written))


if __name__ == '__main__':
    main()
