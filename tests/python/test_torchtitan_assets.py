"""The recipe's model assets are the data's tokenizer (zephon.recipes.use_data_tokenizer,
zephon.data_tokenizer), on the TorchTitan of this venv (0.3.0, or git main under
run-titan-main): `zephon pack --tokenizer` records the tokenizer's path beside its name and
sha256; the recipe's config sets hf_assets_path to it when its own is no folder (TorchTitan's
debug model names ./tests/assets/tokenizer, its repository's), so TorchTitan's ConfigManager
has nothing to warn about; a folder that moved, or whose files changed since the pack, is
not used, and a RuntimeWarning says which.
"""
import os
import shutil
import subprocess
import sys
import warnings

import pytest
from torchtitan.config import ConfigManager

from conftest import DATA, Mounts
from titan_helpers import ZEPHON, trainer_cli

TOK = DATA / 'tokenizer' / 'torchtitan-test'
SHAKESPEARE = DATA / 'text' / 'tinyshakespeare.txt'
SEQ = 16
WARNING = 'HF assets path ./tests/assets/tokenizer does not exist!'

pytestmark = pytest.mark.skipif(not (TOK / 'tokenizer.json').is_file() or
                                not SHAKESPEARE.is_file(),
                                reason='shared data %s is absent' % DATA)


@pytest.fixture
def mounts(tmp_path):
    ms = Mounts(tmp_path, seed=2)
    yield ms
    ms.close()


def packed(tmp_path, tokenizer):
    """tinyshakespeare packed with `tokenizer`; the dataset."""
    ds = tmp_path / 'ds'
    subprocess.run([ZEPHON, 'pack', '-q', '--tokenizer', str(tokenizer), '--seq-len', str(SEQ),
                    '--overlap', '1', str(SHAKESPEARE), '-o', str(ds), '--force'], check=True,
                   env=dict(os.environ, ZEPHON_PYTHON=sys.executable))
    return ds


def parse(*options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        config = ConfigManager().parse_args([
            '--module', 'zephon.recipes', '--config', 'llama3_debugmodel_zephon',
            *trainer_cli(SEQ, 2, global_batch=4), *map(str, options)])
    # the config is made twice (the config function's, then the command line's): one
    # message, which Python's default filter shows once
    return config, sorted({str(w.message) for w in caught
                           if issubclass(w.category, RuntimeWarning)})


def test_the_data_tokenizer_is_the_models_assets(tmp_path, mounts, monkeypatch):
    m = mounts(packed(tmp_path, TOK), world_size=2, global_batch=4)
    # the mount named on the command line (read after it is parsed) ...
    monkeypatch.delenv('ZEPHON_MOUNT', raising=False)
    config, said = parse('--dataloader.mount', m.path)
    assert config.hf_assets_path == str(TOK.resolve()) and not said
    # ... or by ZEPHON_MOUNT, as the README's TorchTitan walk-through does
    monkeypatch.setenv('ZEPHON_MOUNT', m.path)
    config, said = parse()
    assert config.hf_assets_path == str(TOK.resolve()) and not said
    # a folder of the command line's own is the user's choice
    config, said = parse('--hf_assets_path', tmp_path)
    assert config.hf_assets_path == str(tmp_path) and not said
    # and the dry run says nothing of a missing assets folder
    p = subprocess.run([sys.executable, '-m', 'zephon.recipes', '--module', 'zephon.recipes',
                        '--config', 'llama3_debugmodel_zephon', *trainer_cli(SEQ, 2, 4)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600, env=dict(os.environ, ZEPHON_MOUNT=m.path))
    assert p.returncode == 0, p.stdout[-3000:]
    assert WARNING not in p.stdout and 'does not exist' not in p.stdout, p.stdout[-3000:]
    assert 'hf_assets_path %s' % TOK.resolve() in p.stdout, p.stdout[-3000:]


def test_a_tokenizer_folder_that_moved_or_changed_is_not_used_and_said(tmp_path, mounts,
                                                                      monkeypatch):
    mine = tmp_path / 'my-tokenizer'
    shutil.copytree(TOK, mine)
    m = mounts(packed(tmp_path, mine), world_size=2, global_batch=4)
    monkeypatch.setenv('ZEPHON_MOUNT', m.path)
    config, said = parse()
    assert config.hf_assets_path == str(mine) and not said
    # changed: another tokenizer_config.json than the pack's
    cfg = mine / 'tokenizer_config.json'
    cfg.write_text(cfg.read_text().replace('<|end_of_text|>', '<|eot|>'))
    config, said = parse()
    assert config.hf_assets_path == './tests/assets/tokenizer'
    assert len(said) == 1 and 'was packed with the tokenizer my-tokenizer' in said[0] and \
        'at %s, and the files there changed since' % mine in said[0], said
    # moved
    mine.rename(tmp_path / 'moved')
    config, said = parse()
    assert config.hf_assets_path == './tests/assets/tokenizer'
    assert len(said) == 1 and ('at %s, which is not there any more (moved or deleted' % mine
                               in said[0]) and 'give the folder that holds it now' in said[0]
    assert "hf_assets_path stays './tests/assets/tokenizer'" in said[0], said
