"""docs/fine-tuning.md runs as written, on the TorchTitan of this venv (0.3.0, or git main
under run-titan-main): its walk-through (chat samples made of WordNet's verbs, packed with
the debug model's tokenizer, info, mount, the `python3 -m zephon.recipes` dry run of
sft_debugmodel_zephon, unmount) up to the torchrun line, which needs 8 GPUs, and its Python
block while the mount is up; /tmp/ in the commands becomes the test's own directory and the
tokenizer that of ../shared/data. README.md's `fine-tuning` block's commands are lines of the
walk-through (so they run here too). Also what the page says the pack prints."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from rows_helpers import TOK, WORDNET
from lint.doc_blocks import doc_block  # tests/lint/doc_blocks.py
from titan_helpers import ROOT, ZEPHON

DOC = ROOT / 'docs' / 'fine-tuning.md'


def blocks(text):
    return re.findall(r'^```(\w*)\n(.*?)^```$', text, re.M | re.S)


def env_with_tools():
    """PATH with this zephon and this venv's python3 first; no ZEPHON_MOUNT of the caller."""
    env = dict(os.environ, PATH=os.pathsep.join([str(pathlib.Path(ZEPHON).parent),
                                                 str(pathlib.Path(sys.executable).parent),
                                                 os.environ.get('PATH', '')]))
    env.pop('ZEPHON_MOUNT', None)
    env.pop('ZEPHON_PYTHON', None)
    return env


def readme_commands():
    return doc_block('README.md', 'fine-tuning').strip().splitlines()


def test_the_walk_through_runs_up_to_the_gpu_job(tmp_path):
    if not (TOK / 'tokenizer.json').is_file() or not (WORDNET / 'data.verb').is_file():
        pytest.skip('shared data %s or %s is absent' % (TOK, WORDNET))
    text = DOC.read_text()
    walk = doc_block('docs/fine-tuning.md', 'walk-through')
    code = doc_block('docs/fine-tuning.md', 'rows')
    lines = walk.strip().splitlines()
    for c in readme_commands():
        assert c in lines, 'README command not in the walk-through: %s' % c

    def here(c):
        return (c.replace('/tmp/', '%s/' % tmp_path)
                .replace('torchtitan/tests/assets/tokenizer', str(TOK)))
    cmds = [here(c) for c in lines]
    (gpu,) = [c for c in cmds if 'torchrun' in c]
    (check,) = [c for c in cmds if '-m zephon.recipes' in c]
    (umount,) = [c for c in cmds if c.startswith('fusermount3')]
    # the check is given the GPU job's own trainer options
    assert check.split('-m zephon.recipes', 1)[1].split() == \
        gpu.split('-m torchtitan.train', 1)[1].split()
    env = env_with_tools()
    outs = {}
    (tmp_path / 'ft').mkdir()
    try:
        for c in cmds:
            if c in (gpu, umount):
                continue
            p = subprocess.run(['bash', '-c', c], cwd=tmp_path / 'ft', env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=600)
            assert p.returncode == 0, (c, p.stdout[-5000:])
            outs[c] = p.stdout
        # the Python block, while the mount is up
        p = subprocess.run([sys.executable, '-c', here(code)], env=env, cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stdout[-5000:]
        assert re.search(r'^\d+% of the positions are trained$', p.stdout, re.M), p.stdout
    finally:
        p = subprocess.run(['bash', '-c', umount], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout
    pack = next(o for c, o in outs.items() if ' pack ' in c)
    assert '13767 documents' in pack and '672 rows of 2048 positions, 0.47% padding' in pack
    assert 'The pack reports 13,767 documents in 672 rows of 2,048 positions, 0.47%' in text
    sample = next(o for c, o in outs.items() if '--sample 0' in c)
    shown = [b for lang, b in blocks(text) if b.startswith('sample 0:')][0]
    for line in shown.splitlines():
        if line.strip() != '...':
            assert line in sample, line
    dry = next(o for c, o in outs.items() if '-m zephon.recipes' in c)
    assert 'dry run passed' in dry and 'dp_rank 7 of 8' in dry
