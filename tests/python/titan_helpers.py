"""Helpers of the TorchTitan tests (test_torchtitan*.py): token datasets, the reference
stream computed by `zephon batch`, torchrun (gloo, CPU) launches of the workers beside
this file, and what differs between the TorchTitan versions the tests run against.

The same tests run against the released TorchTitan 0.3.0 (the project venv) and against its
git main (the venv of tests/python/requirements-titan-main.txt, run by
tests/python/run-titan-main): zephon.torchtitan.CONTRACT says which one this process has,
and the helpers below build the data loader with the keyword arguments, and parse the
command line, of that version's trainer.

Environment: ZEPHON, the zephon executable under test (default build/fs/zephon).
"""
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import torch

from zephon.torchtitan import CONTRACT, REPEAT_FIELD  # noqa: F401 (REPEAT_FIELD for the tests)
from zexe import ZEPHON, zrun  # noqa: F401 (one copy, with conftest.py's sanitizer scan)

if CONTRACT == 'data.loader':             # TorchTitan's git main
    from torchtitan.components.data.loader import BaseDataLoader as TitanBaseDataLoader
else:                                      # 0.3.0
    from torchtitan.components.dataloader import BaseDataLoader as TitanBaseDataLoader
# main's trainer asks for 1-D batches of num_tokens_per_batch tokens; 0.3.0's for
# [local_batch_size, seq_len]
FLAT = CONTRACT == 'data.loader'

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EOD = 0                                # end-of-document token of the synthetic datasets


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


def trainer_kwargs(seq, micro):
    """The keyword arguments this TorchTitan's trainer builds its data loader with (besides
    dp_world_size, dp_rank, tokenizer), for micro-batches of micro samples of seq input
    tokens (trainer.py: main passes max_context_length and num_tokens_per_batch, 0.3.0
    seq_len, local_batch_size and snapshot_every_n_steps)."""
    if FLAT:
        return dict(max_context_length=seq, num_tokens_per_batch=micro * seq)
    return dict(seq_len=seq, local_batch_size=micro, snapshot_every_n_steps=None)


def trainer_cli(seq, micro, global_batch=None):
    """This TorchTitan's command-line options for the same shapes (and a global batch of
    global_batch samples)."""
    if FLAT:
        args = ['--training.max_context_length', seq,
                '--training.num_tokens_per_microbatch_per_dp_rank', micro * seq]
        if global_batch:
            args += ['--training.num_tokens_per_train_step', global_batch * seq]
    else:
        args = ['--training.seq_len', seq, '--training.local_batch_size', micro]
        if global_batch:
            args += ['--training.global_batch_size', global_batch]
    return [str(a) for a in args]


def pp_cli(degree, n):
    """This TorchTitan's options for pipeline parallelism of ``degree`` stages: main's
    ``num_pp_microbatches`` n (per DP rank and accumulation step), 0.3.0's
    ``pipeline_parallel_microbatch_size`` n (samples; its local batch is split into them).
    CUDA graphs off: both refuse them with pipeline parallelism."""
    args = ['--training.disable_cuda_graphs', '--parallelism.pipeline_parallel_degree', degree]
    args += ['--parallelism.num_pp_microbatches' if FLAT else
             '--parallelism.pipeline_parallel_microbatch_size', n]
    return [str(a) for a in args]


def build_as_trainer(config, dp, dp_rank, tokenizer):
    """config.dataloader built as this TorchTitan's trainer builds it from its Trainer.Config
    (the sizes from config.training; 0.3.0's trainer builds it with micro-batches of
    pipeline_parallel_microbatch_size samples under pipeline parallelism)."""
    t, p = config.training, config.parallelism
    if FLAT:
        kw = dict(max_context_length=t.max_context_length,
                  num_tokens_per_batch=t.num_tokens_per_microbatch_per_dp_rank)
    else:
        pp = p.pipeline_parallel_degree > 1
        kw = dict(seq_len=t.seq_len, snapshot_every_n_steps=config.checkpoint.interval,
                  local_batch_size=p.pipeline_parallel_microbatch_size if pp else
                  t.local_batch_size)
    return config.dataloader.build(dp_world_size=dp, dp_rank=dp_rank, tokenizer=tokenizer, **kw)


def rows(batch, seq):
    """A TorchTitan batch ({"input", "positions"}, labels) as three [micro, seq] tensors
    (main's 1-D batches hold the samples one after the other)."""
    inp, labels = batch
    return (inp['input'].reshape(-1, seq), inp['positions'].reshape(-1, seq),
            labels.reshape(-1, seq))


def windows_of(batch, seq, eod_token=None):
    """The stored windows (seq + 1 tokens, --overlap 1) of a batch: input plus last label.
    With ``eod_token``, the loader masks the label after each EOD (IGNORE_INDEX), so the
    last token of a window that ends its input with an EOD is IGNORE_INDEX here (compare
    with :func:`masked_windows` of the stored ones)."""
    from torchtitan.components.loss import IGNORE_INDEX
    x, _, labels = rows(batch, seq)
    after_eod = x == eod_token if eod_token is not None else torch.zeros_like(x, dtype=torch.bool)
    assert torch.equal(labels == IGNORE_INDEX, after_eod)
    assert torch.equal(torch.where(after_eod[:, :-1], x[:, 1:], labels[:, :-1]), x[:, 1:])
    return torch.cat([x, labels[:, -1:]], 1)


def masked_windows(windows, eod_token):
    """Stored windows [n, seq + 1] as :func:`windows_of` gives them back from a loader
    that knows ``eod_token``: the last token IGNORE_INDEX where the one before is an EOD."""
    from torchtitan.components.loss import IGNORE_INDEX
    out = np.array(windows, copy=True)
    out[out[:, -2] == eod_token, -1] = IGNORE_INDEX
    return out
