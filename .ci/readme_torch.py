"""README.md's PyTorch example as a pip user runs it (.ci/newcomer-pip, in a fresh Debian
12 root, with the venv docs/install.md makes: the wheel and its torch extra, nothing else).

    . ~/venv/bin/activate && python .ci/readme_torch.py IDX WORKDIR

README.md's block tagged `pytorch` (tests/lint/doc_blocks.py), with only the
dataset, mountpoint and journal paths and the sizes line replaced (the replacements of
tests/python/test_readme.py; each must match the README, so a changed snippet fails here
rather than going untested), run with torchrun at 2 processes to its end (checkpoints at
steps 3 and 6), then resumed from the step-3 checkpoint at 3 processes: the model at step 6
must be the 2-process run's, within 1e-4 relative (the same samples in each step, the DP
degree only regroups the gradient's sums). The dataset is IDX (a Megatron .idx) packed by
the wheel's `zephon pack`. No ZEPHON, no PYTHONPATH: the package runs its own executable.
"""
import os
import pathlib
import shutil
import subprocess
import sys

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

import zephon

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'tests'))
from lint.doc_blocks import doc_block  # noqa: E402  (tests/lint/doc_blocks.py)

SIZES = ('SEQ, MICRO, GLOBAL, STEPS, SAVE, VOCAB = 2048, 4, 96, 100, 50, 50304',
         'SEQ, MICRO, GLOBAL, STEPS, SAVE, VOCAB = 16, 2, 12, 6, 3, 50304')


def snippet():
    return doc_block('README.md', 'pytorch')


def script(work, ds):
    code = snippet()
    for old, new in [('"/data/ds"', repr(str(ds))), ('"/tmp/z"', repr(str(work / 'z'))),
                     ('/shared/j/', str(work / 'j') + '/'), SIZES]:
        if old not in code:
            sys.exit('readme_torch: the README snippet no longer has %r' % old)
        code = code.replace(old, new)
    (work / 'j').mkdir(exist_ok=True)
    (work / 'train.py').write_text(code)


def torchrun(nproc, work):
    env = {k: v for k, v in os.environ.items()
           if k not in ('ZEPHON', 'PYTHONPATH', 'RANK', 'WORLD_SIZE', 'LOCAL_RANK',
                        'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')}
    env['OMP_NUM_THREADS'] = '1'
    print('readme_torch: torchrun --nproc_per_node=%d train.py in %s' % (nproc, work), flush=True)
    # README: `torchrun --nproc_per_node=N train.py`; --standalone: a free port of its own
    subprocess.run(['torchrun', '--standalone', '--nproc_per_node=%d' % nproc, 'train.py'],
                   cwd=work, env=env, check=True, timeout=900)


def model(ckpt):
    out = ckpt.parent / (ckpt.name + '.pt')
    dcp_to_torch_save(str(ckpt), str(out))
    return torch.load(str(out), weights_only=False)['model']


def main():
    idx, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    exe = zephon.find_executable()
    site = pathlib.Path(zephon.__file__).parent
    if 'ZEPHON' in os.environ or pathlib.Path(exe) != site / '_bin' / 'zephon':
        sys.exit('readme_torch: %s is not the wheel\'s executable (%s)' % (exe, site))
    print('readme_torch: zephon %s, executable %s' % (zephon.__version__, exe), flush=True)
    work.mkdir(parents=True)
    ds = work / 'ds'
    # the snippet's `zephon pack ... (once)`, at the test's sequence length
    subprocess.run(['zephon', 'pack', '--format', 'tokens', '--seq-len', '16', '--overlap', '1',
                    str(idx), '-o', str(ds)], check=True)
    two = work / 'dp2'
    two.mkdir()
    script(two, ds)
    torchrun(2, two)
    assert sorted(os.listdir(two / 'ckpt')) == ['step-3', 'step-6'], os.listdir(two / 'ckpt')
    assert not os.path.ismount(two / 'z')            # local rank 0 unmounted it
    # the 2-process job stopped after its step-3 checkpoint, resumed at 3 processes
    three = work / 'resumed'
    shutil.copytree(two, three)
    shutil.rmtree(three / 'ckpt' / 'step-6')
    script(three, ds)
    torchrun(3, three)
    want, got = model(two / 'ckpt' / 'step-6'), model(three / 'ckpt' / 'step-6')
    assert set(got) == set(want) and got
    for k, v in want.items():
        torch.testing.assert_close(got[k], v, rtol=1e-4, atol=1e-6)
    start = model(two / 'ckpt' / 'step-3')
    assert any(not torch.equal(want[k], start[k]) for k in want)      # it did train
    print('readme_torch: resumed at 3 processes from step 3, the step-6 model equals the '
          '2-process run\'s (%d tensors)' % len(want), flush=True)


if __name__ == '__main__':
    main()
