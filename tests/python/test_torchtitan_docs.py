"""docs/trainer-agreement.md runs as written, on the TorchTitan of this venv (0.3.0, or git
main under run-titan-main): its dry-run transcripts of this version (a command after "$ ",
then lines its output must hold), its config function (`bind`), and its `ZephonLoader`
session (doctest). The mount is the TorchTitan walk-through's (README.md, docs/torchtitan.md) (tinyshakespeare packed with the
debug model's tokenizer from ../shared/data, `world_size=8,global_batch=64`); /tmp/z in
the page becomes the test's mountpoint."""
import doctest
import os
import re
import subprocess
import sys

import pytest
from torchtitan.config import ConfigManager

from conftest import DATA, Mounts
from lint.doc_blocks import doc_block  # tests/lint/doc_blocks.py
from titan_helpers import FLAT, ROOT, ZEPHON, build_as_trainer

PAGE = ROOT / 'docs' / 'trainer-agreement.md'
TOK = DATA / 'tokenizer' / 'torchtitan-test'
TEXT = DATA / 'text' / 'tinyshakespeare.txt'

pytestmark = pytest.mark.skipif(not (TOK / 'tokenizer.json').is_file() or not TEXT.is_file(),
                                reason='shared data %s is absent' % DATA)
MAIN_ONLY = ('num_tokens', 'num_pp_microbatches')
RELEASE_ONLY = ('local_batch_size', 'pipeline_parallel_microbatch_size')


def blocks():
    return re.findall(r'^```(\w*)\n(.*?)^```$', PAGE.read_text(), re.M | re.S)


@pytest.fixture(scope='module')
def mount(tmp_path_factory):
    d = tmp_path_factory.mktemp('docs')
    subprocess.run([ZEPHON, 'pack', '-q', '--tokenizer', str(TOK), '--seq-len', '2048',
                    '--overlap', '1', str(TEXT), '-o', str(d / 'ds')], check=True,
                   env=dict(os.environ, ZEPHON_PYTHON=sys.executable))
    ms = Mounts(d, seed=1)
    yield ms(d / 'ds', world_size=8, global_batch=64).path
    ms.close()


def this_versions(cmd):
    if any(k in cmd for k in MAIN_ONLY):
        return FLAT
    if any(k in cmd for k in RELEASE_ONLY):
        return not FLAT
    return True


def test_the_dry_run_transcripts_of_this_version(mount):
    runs = 0
    for lang, text in blocks():
        if lang or not text.startswith('$ '):
            continue
        cmd, *want = text.rstrip('\n').split('\n')
        if not this_versions(cmd):
            continue
        p = subprocess.run(['bash', '-c', cmd[2:].replace('/tmp/z', mount)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=600, env=dict(os.environ, PATH=os.pathsep.join(
                               [os.path.dirname(sys.executable), os.environ['PATH']])))
        refused = any('ValueError' in w for w in want)
        assert p.returncode == (1 if refused else 0), (cmd, p.stdout[-3000:])
        for w in want:
            assert w in p.stdout, (cmd, w, p.stdout[-3000:])
        assert 'does not exist' not in p.stdout, p.stdout[-3000:]
        runs += 1
    assert runs == 2          # each version has two


def test_the_config_function_with_bind(mount, tmp_path, monkeypatch):
    code = doc_block('docs/trainer-agreement.md', 'bind')
    (tmp_path / 'my_titan_config.py').write_text(code.replace('/tmp/z', mount))
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ['--module', 'my_titan_config', '--config', 'my_config']
    config = ConfigManager().parse_args(args)
    assert config.dataloader.trainer is not None
    assert build_as_trainer(config, 8, 3, None).trainer_step.global_batch == 64
    smaller = (['--training.num_tokens_per_microbatch_per_dp_rank', '8192'] if FLAT else
               ['--training.local_batch_size', '4'])
    config = ConfigManager().parse_args(args + smaller)
    with pytest.raises(ValueError, match="the trainer's global batch is 32 samples"):
        build_as_trainer(config, 8, 3, None)


def test_the_zephon_loader_session(mount):
    session = doc_block('docs/trainer-agreement.md', 'session')
    test = doctest.DocTestParser().get_doctest(session.replace('/tmp/z', mount), {},
                                               'trainer-agreement.md', str(PAGE), 0)
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert runner.failures == 0 and runner.tries == 3
