"""README.md's TorchTitan blocks run as written (docs/torchtitan.md holds the same two), on
the TorchTitan of this venv (0.3.0, or git main under run-titan-main): its config function, and its walk-through (the debug model's
tokenizer fetched, raw text packed with it, mount, `python3 -m zephon.recipes` with the
trainer's options, unmount) up to the torchrun line, which needs 8 GPUs; /tmp/ in the
commands becomes the test's own directory, the text that of ../shared/data, and the `git
clone` of TorchTitan a link at the same place to the same tokenizer files of
../shared/data (b5bcd76's tests/assets/tokenizer, ../shared/data/README.md): no network.
The walk-through meets none of the first hour's papercuts: no warning of a missing assets
folder, the trainer's step equal to the mount's. Also the dry run's refusals."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import DATA
from lint.doc_blocks import doc_block  # tests/lint/doc_blocks.py
from titan_helpers import FLAT, ROOT, ZEPHON, documents, pack_tokens
from zephon.recipes import zephon_config
from zephon.torchtitan import ZephonDataLoader

# what the walk-through names, as this machine has it
TOKENIZER = DATA / 'tokenizer' / 'torchtitan-test'
TEXT = DATA / 'text' / 'tinyshakespeare.txt'


def test_the_torchtitan_page_holds_the_same_blocks():
    """docs/torchtitan.md shows the config function and the walk-through this file runs,
    unchanged."""
    assert (doc_block('docs/torchtitan.md', 'torchtitan-config') ==
            doc_block('README.md', 'torchtitan-config'))
    assert (doc_block('docs/torchtitan.md', 'torchtitan-walk-through') ==
            doc_block('README.md', 'torchtitan-walk-through'))


def commands(block):
    """The shell lines of a block, continuation lines joined, comments kept."""
    return block.replace('\\\n', ' ').strip().splitlines()


def env_with_tools():
    """PATH with this zephon and this venv's python3 first; no ZEPHON_MOUNT of the caller."""
    env = dict(os.environ, PATH=os.pathsep.join([str(pathlib.Path(ZEPHON).parent),
                                                 str(pathlib.Path(sys.executable).parent),
                                                 os.environ.get('PATH', '')]))
    env.pop('ZEPHON_MOUNT', None)
    return env


def test_the_config_function_block():
    code = doc_block('README.md', 'torchtitan-config')
    ns = {}
    exec(code, ns)
    config = ns['my_config']()
    assert isinstance(config.dataloader, ZephonDataLoader.Config)
    assert config.dataloader.mount == '/tmp/z' and config.dataloader.eod_token is None
    # told the trainer's sizes (and at every parse: a zephon_config class)
    assert config.dataloader.trainer is not None
    assert type(config) is zephon_config(type(config))


def test_the_walk_through_runs_up_to_the_gpu_job(tmp_path):
    for f in (TOKENIZER, TEXT):
        if not f.exists():
            pytest.skip('shared data %s is absent' % f)
    walk = doc_block('README.md', 'torchtitan-walk-through')
    clone = 'git clone --depth 1 https://github.com/pytorch/torchtitan /tmp/torchtitan'
    assert commands(walk)[0].startswith(clone + ' '), commands(walk)[0]
    assert '--tokenizer /tmp/torchtitan/tests/assets/tokenizer ' in commands(walk)[1]
    cmds = [c.replace('/tmp/', '%s/' % tmp_path)
            .replace('tinyshakespeare.txt', str(TEXT)) for c in commands(walk)]
    assets = tmp_path / 'torchtitan' / 'tests' / 'assets'
    cmds[0] = 'mkdir -p %s && ln -s %s %s' % (assets, TOKENIZER, assets / 'tokenizer')
    (gpu,) = [c for c in cmds if 'torchrun' in c]
    (check,) = [c for c in cmds if '-m zephon.recipes' in c]
    # the check is given the GPU job's own trainer options
    trainer_opts = gpu.split('-m torchtitan.train', 1)[1].split('#')[0].split()
    assert check.split('-m zephon.recipes', 1)[1].split() == trainer_opts
    env = env_with_tools()
    outs = []
    try:
        for c in cmds:
            if c is gpu:
                continue
            p = subprocess.run(['bash', '-c', c], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=600)
            assert p.returncode == 0, (c, p.stdout[-5000:])
            outs.append(p.stdout)
    finally:
        subprocess.run(['fusermount3', '-uz', str(tmp_path / 'z')], stderr=subprocess.DEVNULL)
    out = '\n'.join(outs)
    shape = (8 * 2048,) if FLAT else (8, 2048)      # the micro-batch of llama3_debugmodel
    for r in range(8):
        assert re.search(r'^dp_rank %d of 8: 2 batches of %s int64, token ids up to (\d+),'
                         % (r, re.escape(str(shape))), out, re.M), out[-3000:]
    assert max(int(t) for t in re.findall(r'token ids up to (\d+)', out)) < 2048
    assert 'model vocabulary 2048' in out and 'dry run passed' in out, out[-3000:]
    # no papercut: the model's assets are the data's tokenizer (no warning of a missing
    # folder), and the trainer's step is the mount's
    assert 'does not exist' not in out, out[-3000:]
    assert 'hf_assets_path %s' % (assets / 'tokenizer') in out, out[-3000:]
    assert ('trainer step: global batch 64 samples (%s), micro-batches of 8 samples, 1 per '
            "DP rank: the mount's global_batch 64" % (
                'training.num_tokens_per_microbatch_per_dp_rank 16384 x data-parallel degree '
                '8 = 131072 tokens, in samples of 2048 tokens' if FLAT else
                'training.local_batch_size 8 x data-parallel degree 8')) in out, out[-3000:]
    assert not os.path.ismount(tmp_path / 'z')


def dry_run(args, env=None):
    return subprocess.run([sys.executable, '-m', 'zephon.recipes', '--module', 'zephon.recipes',
                           '--config', 'llama3_debugmodel_zephon', *map(str, args)],
                          env=env or env_with_tools(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)


def test_the_dry_run_refuses_what_the_trainer_could_not_read(tmp_path, mounts):
    seq = ['--training.max_context_length', 16,
           '--training.num_tokens_per_microbatch_per_dp_rank', 32] if FLAT else \
          ['--training.seq_len', 16, '--training.local_batch_size', 2]
    # token ids up to 2999: not below the debug model's vocabulary of 2048
    big = mounts(pack_tokens(tmp_path / 'big', documents(5000, 3000), 16), world_size=2,
                 global_batch=4)
    p = dry_run(['--dataloader.mount', big.path, *seq])
    # the loader itself refuses (its vocab_size is the model's, from the recipe)
    assert p.returncode == 1 and 'ValueError' in p.stderr and \
        "holds token id 2999, but the model's vocabulary has 2048 ids" in p.stderr, p.stderr
    assert 'dry run passed' not in p.stdout
    small = mounts(pack_tokens(tmp_path / 'small', documents(5000, 2000), 16), world_size=2,
                   global_batch=4, journal=tmp_path / 'j2.sqlite')
    p = dry_run(['--dataloader.mount', small.path, *seq])
    assert p.returncode == 0 and 'dry run passed' in p.stdout, p.stdout + p.stderr
    # a DP degree other than the mount's: the loader's refusal, said
    p = dry_run(['--dp', 4, '--dataloader.mount', small.path, *seq])
    assert p.returncode == 1 and 'ValueError' in p.stderr and 'world_size=2' in p.stderr, p.stderr
    # nothing mounted there
    p = dry_run(['--dataloader.mount', tmp_path / 'nothing', *seq])
    assert p.returncode == 1 and 'is it mounted?' in p.stderr, p.stderr
    # a global batch other than the mount's (4): the trainer's, said, with both fixes
    p = dry_run(['--dataloader.mount', small.path, *seq, *(
        ['--training.num_tokens_per_train_step', 8 * 16] if FLAT else
        ['--training.global_batch_size', 8])])
    assert p.returncode == 1 and "ValueError: the trainer's global batch is 8 samples" in \
        p.stderr and "the mount's global_batch is 4" in p.stderr and \
        'remount with world_size=2,global_batch=8' in p.stderr, p.stderr
    assert 'dry run passed' not in p.stdout
