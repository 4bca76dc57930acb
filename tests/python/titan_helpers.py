"""Helpers of the TorchTitan tests (test_torchtitan*.py): token datasets, the reference
stream computed by `zephon batch`, and torchrun (gloo, CPU) launches of the workers beside
this file.

Environment: ZEPHON, the zephon executable under test (default build/fs/zephon).
"""
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ZEPHON = os.environ.get('ZEPHON') or str(ROOT / 'build' / 'fs' / 'zephon')
os.environ['ZEPHON'] = ZEPHON          # what the zephon package finds
EOD = 0                                # end-of-document token of the synthetic datasets


def zrun(*args):
    """zephon ARGS; stdout as bytes. Fails the test with zephon's stderr."""
    p = subprocess.run([ZEPHON, *map(str, args)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=600)
    assert p.returncode == 0, ('zephon', args, p.stderr.decode(errors='replace'))
    return p.stdout


def documents(n_tokens, vocab, seed=1):
    """A uint16 token stream of n_tokens: documents of 5-60 tokens from a simple Markov
    chain over [1, vocab) (so a model can learn it), each followed by EOD."""
    rng = np.random.default_rng(seed)
    out = np.empty(n_tokens, dtype='<u2')
    i, t = 0, 1
    while i < n_tokens:
        n = int(rng.integers(5, 60))
        for _ in range(min(n, n_tokens - i)):
            t = (t * 7 + int(rng.integers(0, 3))) % (vocab - 1) + 1
            out[i] = t
            i += 1
        if i < n_tokens:
            out[i] = EOD
            i += 1
    return out


def pack_tokens(out, tokens, seq_len, overlap=1):
    """Pack a token array (uint16) as a token dataset of windows of seq_len (+1 with
    overlap); returns the dataset path."""
    out = pathlib.Path(out)
    src = out.parent / (out.name + '.bin')
    tokens.astype('<u2').tofile(str(src))
    args = ['pack', '--format', 'tokens', '--dtype', 'uint16', '--seq-len', seq_len,
            '--compress', 'none']
    if overlap:
        args += ['--overlap', overlap]
    zrun(*args, src, '-o', out)
    return out


def reference(ds, gsn, n, window, seed):
    """Samples [gsn, gsn + n) of the uninterrupted single-rank stream: [n, window] int64."""
    raw = zrun('batch', ds, '-o', 'world_size=1,global_batch=%d,seed=%d,format=bin,'
               'resume=samples:%d@0' % (n, seed, gsn), '--rank', 0, '--step', 0)
    return np.frombuffer(raw, dtype='<u2').reshape(n, window).astype(np.int64)


def torchrun(nproc, script, args, log_dir, timeout=600, detach=False):
    """python -m torch.distributed.run --standalone (gloo, CPU) with nproc workers of
    script; returns (returncode, output) or, with detach, the Popen (own session)."""
    log_dir = pathlib.Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join(
        [str(ROOT / 'python'), str(HERE)] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
        env.pop(k, None)
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone',
           '--nproc_per_node=%d' % nproc, '--monitor_interval=0.2', str(HERE / script),
           *map(str, args)]
    out_path = log_dir / 'torchrun.out'
    out = open(out_path, 'ab')
    p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True)
    out.close()
    if detach:
        return p
    try:
        rc = p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return rc, out_path.read_text(errors='replace')
