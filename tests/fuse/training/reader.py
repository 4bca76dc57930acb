"""A stand-in training worker for the launcher tests (no torch): reads micro-batches of its
rank from a Zephon mount and records every claim.

usage: reader.py OUT_DIR MICROS [RANK=MICROS[!] ...]
  RANK       $RANK (torchrun) or $SLURM_PROCID (srun)
  mount      $ZEPHON_MOUNT, with %n replaced by $SLURM_NODEID (several "nodes" on one
             machine share one ZEPHON_MOUNT pattern)
  MICROS     how many opens of rank/RANK/next; RANK=MICROS overrides it for one rank, and
             RANK=MICROS! makes that rank fail (exit 3) after its reads: a crashed worker
Appends one JSON line per claim to OUT_DIR/rank-RANK.jsonl: rank, the claim from
rank/RANK/state (step, micro, gsn, samples) and the bytes read (hex).
"""
import json
import os
import sys


def main():
    out, micros = sys.argv[1], int(sys.argv[2])
    rank = int(os.environ.get('RANK', os.environ.get('SLURM_PROCID', '-1')))
    assert rank >= 0, 'neither RANK nor SLURM_PROCID is set'
    fail = False
    for spec in sys.argv[3:]:
        r, k = spec.split('=')
        if int(r) == rank:
            fail = k.endswith('!')
            micros = int(k.rstrip('!'))
    mp = os.environ['ZEPHON_MOUNT'].replace('%n', os.environ.get('SLURM_NODEID', ''))
    with open(os.path.join(out, 'rank-%d.jsonl' % rank), 'a') as log:
        for _ in range(micros):
            with open(os.path.join(mp, 'rank', str(rank), 'next'), 'rb') as f:
                data = f.read()
            with open(os.path.join(mp, 'rank', str(rank), 'state')) as f:
                last = json.load(f)['last']
            log.write(json.dumps({'rank': rank, 'step': last['step'], 'micro': last['micro'],
                                  'gsn': last['gsn'], 'samples': last['samples'],
                                  'data': data.hex()}) + '\n')
            log.flush()
    if fail:
        sys.exit(3)


if __name__ == '__main__':
    main()
