"""Blocks of the user's pages that no other test runs, run here as written
(tests/lint/doc_blocks.py fails on a ```sh or ```python block that no test reads):

- README.md's install blocks: each line is a line of docs/install.md's block that
  .ci/newcomer runs on a fresh Debian 12 (the pip user's `fresh`, the source build's
  `build`), in the same order, so the README says nothing those runs do not do;
- docs/packing.md's first pack: the commands in a shell, in a temp folder;
- docs/journal.md's restart: four ranks, then two, through one journal;
- docs/mixtures.md's spec and mount command: the spec with its two datasets made (web/
  beside it, /data/code here), mounted as written (the mount point made here), and the
  weights it serves.
"""
import json
import os
import subprocess

from conftest import ZEPHON, pack, read_all, unmount, mounted
from lint.doc_blocks import doc_block  # tests/lint/doc_blocks.py


def lines(block):
    return [ln for ln in block.strip().split('\n') if ln.strip()]


def in_order(part, whole):
    """Whether every line of part is a line of whole, in the same order."""
    it = iter(whole)
    return all(any(ln == w for w in it) for ln in part)


def test_the_readme_install_blocks_are_the_ones_newcomer_runs():
    pairs = [(doc_block('README.md', 'install-wheel'), doc_block('docs/install.md', 'fresh')),
             (doc_block('README.md', 'install-source'), doc_block('docs/install.md', 'build'))]
    for readme, install in pairs:
        part, whole = lines(readme), lines(install)
        assert len(part) >= 4 and in_order(part, whole), (part, whole)
    # and the check itself refuses a line newcomer does not run, or one out of order
    assert not in_order(['pip install zephon'], ['pip install .'])
    assert not in_order(['b', 'a'], ['a', 'b'])


def shell(block, cwd, env=None):
    """The block's commands in one bash -e, zephon of the build under test on PATH."""
    env = dict(os.environ if env is None else env)
    env['PATH'] = '%s:%s' % (os.path.dirname(os.path.abspath(ZEPHON)), env.get('PATH', ''))
    p = subprocess.run(['bash', '-ec', block], cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:]
    return p.stdout


def test_the_packing_page_first_pack(tmp_path):
    out = shell(doc_block('docs/packing.md', 'first-pack'), tmp_path)
    info = json.loads(subprocess.run([ZEPHON, 'info', str(tmp_path / 'ds'), '--json'],
                                     stdout=subprocess.PIPE, check=True).stdout)
    assert info['samples'] == 1000, info
    assert 'samples' in out and '1000' in out.replace(',', ''), out


def test_the_journal_page_restart(tmp_path):
    out = shell(doc_block('docs/journal.md', 'restart'), tmp_path)
    got = out.splitlines()
    assert 'samples:16@1' in got and '1 16' in got, out
    assert not mounted(tmp_path / 'mnt')


def test_the_mixtures_page_spec_and_mount(tmp_path):
    spec = doc_block('docs/mixtures.md', 'spec')
    mount = doc_block('docs/mixtures.md', 'mount').strip()
    assert '"/data/code"' in spec and '"web/"' in spec and '/mnt/z' in mount
    for name in ('web', 'code'):
        src = tmp_path / ('%s.jsonl' % name)
        src.write_text(''.join('{"src": "%s", "i": %d}\n' % (name, i) for i in range(100)))
        pack(tmp_path / name, [src])
    (tmp_path / 'mix.json').write_text(spec.replace('/data/code', str(tmp_path / 'code')))
    mp = tmp_path / 'z'
    mp.mkdir()
    shell(mount.replace('/mnt/z', str(mp)), tmp_path)
    try:
        st = json.loads(read_all(mp / 'status'))
        weights = {s['name']: s['weight'] for s in st['mixture']['sources']}
        # 0.7 and 0.3 as the smallest integers in the same ratios
        assert weights == {'web': 7, 'code': 3}, st['mixture']
        # step 0 of every rank: 512 samples, 7/10 of them web's (358.4: 358 or 359)
        step = b''.join(read_all(mp / 'rank' / str(r) / 'step' / '0') for r in range(8))
        srcs = [json.loads(ln)['src'] for ln in step.decode().splitlines()]
        assert len(srcs) == 512 and srcs.count('web') in (358, 359), srcs.count('web')
    finally:
        unmount(mp)
    assert not mounted(mp)
