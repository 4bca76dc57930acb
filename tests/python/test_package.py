"""The package as pip installs it (tests/python/run installs the wheel mountscripts/wheel
builds from this tree, --no-repair): the zephon executable inside it, the order in which the
package finds an executable (zephon=, ZEPHON, its own, PATH), the `zephon` command and
`python -m zephon`, the launchers installed beside them, one version everywhere, and what
a mount says when the host lacks FUSE (docs/install.md)."""
import importlib.metadata
import os
import pathlib
import subprocess
import sys

import pytest

import zephon
from conftest import DATA, ZEPHON, zrun
from zephon import _exe

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent        # the venv's scripts, where pip put the commands
PKG = pathlib.Path(zephon.__file__).parent
APT = 'sudo apt-get install fuse3'


def env(**kw):
    """This environment without ZEPHON (the suite's override) and ZEPHON_PYTHON, plus kw."""
    e = {k: v for k, v in os.environ.items() if k not in ('ZEPHON', 'ZEPHON_PYTHON')}
    e.update({k: str(v) for k, v in kw.items()})
    return e


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120, **kw)


def is_mounted(path):
    with open('/proc/self/mountinfo') as f:
        return any(line.split()[4] == str(path) for line in f)


@pytest.fixture
def lines(tmp_path):
    """A small lines dataset (made by the executable under test)."""
    src = tmp_path / 'lines.txt'
    src.write_text(''.join('sample %d\n' % i for i in range(64)))
    zrun('pack', '--format', 'lines', src, '-o', tmp_path / 'ds')
    return tmp_path / 'ds'


def test_the_installed_package_holds_the_executable_every_module_and_the_launchers():
    assert PKG != ROOT / 'python' / 'zephon', 'the suite must test the installed package'
    assert _exe.packaged_executable() == str(PKG / '_bin' / 'zephon')
    # meson.build installs the whole folder: a module added to python/zephon is in the wheel
    src = {p.name for p in (ROOT / 'python' / 'zephon').iterdir()
           if p.is_file() and p.suffix != '.pyc'}
    assert src and src <= {p.name for p in PKG.iterdir()}
    for script in ('zephon', 'zephon-node', 'slurm-zephon.sh', 'torchrun-zephon.sh'):
        assert os.access(BIN / script, os.X_OK), script
    record = {str(f) for f in importlib.metadata.distribution('zephon').files}
    assert 'zephon/_bin/zephon' in record and 'zephon/__main__.py' in record


def test_one_version_in_the_metadata_the_package_and_the_executables():
    v = zephon.__version__
    assert importlib.metadata.version('zephon') == v       # meson.build's project version
    for exe in (_exe.packaged_executable(), ZEPHON):
        out = run([exe, '--version']).stdout
        assert out.splitlines()[0].split() == ['zephon', v], (exe, out)


def test_the_lookup_order(tmp_path, monkeypatch):
    own = _exe.packaged_executable()
    on_path = tmp_path / 'bin' / 'zephon'                   # a zephon first on PATH
    on_path.parent.mkdir()
    on_path.write_text('#!/bin/sh\nexit 0\n')
    on_path.chmod(0o755)
    monkeypatch.setenv('PATH', '%s%s%s' % (on_path.parent, os.pathsep, os.environ['PATH']))
    # 1. an explicit path; 2. ZEPHON (conftest: the build under test)
    assert zephon.find_executable(own) == own
    assert zephon.find_executable() == os.path.abspath(ZEPHON)
    monkeypatch.setenv('ZEPHON', str(tmp_path / 'gone'))
    with pytest.raises(zephon.ZephonError, match='ZEPHON=.*gone is not an executable file'):
        zephon.find_executable()
    # 3. without ZEPHON: the package's own, before PATH
    monkeypatch.delenv('ZEPHON')
    assert zephon.find_executable() == own
    # 4. the package used from the source tree (no _bin): PATH; then nothing
    code = 'import zephon; print(zephon.__file__); print(zephon.find_executable())'
    p = run([sys.executable, '-c', code], env=env(PYTHONPATH=ROOT / 'python'))
    assert p.stdout.split() == [str(ROOT / 'python' / 'zephon' / '__init__.py'), str(on_path)]
    empty = tmp_path / 'empty'
    empty.mkdir()
    p = run([sys.executable, '-c', code], env=env(PYTHONPATH=ROOT / 'python', PATH=empty))
    assert p.returncode == 1
    assert 'cannot find the zephon executable: this zephon package has none' in p.stderr


@pytest.mark.parametrize('cmd', [[BIN / 'zephon'], [sys.executable, '-m', 'zephon']],
                         ids=['zephon', 'python -m zephon'])
def test_the_zephon_command_runs_the_packaged_executable(cmd, tmp_path):
    own = _exe.packaged_executable()
    # its output and exit status are the executable's own, with the arguments as given
    for args in (['--version'], ['info', tmp_path / 'nope']):
        want = run([own, *args])
        got = run([*cmd, *args], env=env())
        assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout,
                                                            want.stderr)
    assert want.returncode != 0 and 'nope' in want.stderr
    # exec'd in the same process (a signal, a service manager's pid reach zephon itself);
    # ZEPHON comes first, as for zephon.find_executable
    probe = tmp_path / 'probe'
    probe.write_text('#!/bin/sh\necho "$$ $ZEPHON_PYTHON $*"\n')
    probe.chmod(0o755)
    p = subprocess.Popen([*map(str, cmd), 'a', 'b c'], env=env(ZEPHON=probe),
                         stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=60)
    # and `zephon pack --tokenizer` gets this interpreter (the venv's) for its front end
    pid, python, args = out.split(' ', 2)
    assert (p.returncode, int(pid), args) == (0, p.pid, 'a b c\n')
    assert os.path.samefile(python, sys.executable), python
    p = subprocess.Popen([*map(str, cmd), 'x'], env=env(ZEPHON=probe, ZEPHON_PYTHON='/py'),
                         stdout=subprocess.PIPE, text=True)
    assert p.communicate(timeout=60)[0] == '%d /py x\n' % p.pid


def test_zephon_naming_the_command_itself_is_refused(tmp_path):
    p = run([BIN / 'zephon', '--version'], env=env(ZEPHON=BIN / 'zephon'))
    assert p.returncode == 1
    assert 'is this zephon command itself, not the executable' in p.stderr


TOK = DATA / 'tokenizer' / 'torchtitan-test'


@pytest.mark.skipif(not (TOK / 'tokenizer.json').is_file(),
                    reason='shared data %s is absent' % TOK)
def test_the_zephon_command_packs_text_with_its_own_interpreter(tmp_path):
    """`zephon pack --tokenizer` runs `$ZEPHON_PYTHON -m zephon.pack_text`: from the zephon
    command, the venv's interpreter, which has the package and tokenizers, whatever python3
    PATH names (here Debian's, which has neither)."""
    text = tmp_path / 'text.txt'
    text.write_text('The quick brown fox jumps over the lazy dog.\n' * 40)
    p = run([BIN / 'zephon', 'pack', '--tokenizer', TOK, '--seq-len', 8, text,
             '-o', tmp_path / 'ds'], env=env(PATH='/usr/bin:/bin'))
    assert p.returncode == 0, p.stderr
    assert b'samples' in zrun('info', tmp_path / 'ds')


@pytest.mark.parametrize('cmd', [[BIN / 'zephon'], [sys.executable, '-m', 'zephon']],
                         ids=['zephon', 'python -m zephon'])
def test_without_fusermount3_the_zephon_command_says_what_to_install(cmd, lines, tmp_path):
    empty = tmp_path / 'empty'                # a PATH without fusermount3
    empty.mkdir()
    mp = tmp_path / 'mnt'
    mp.mkdir()
    p = run([*cmd, 'mount', lines, mp, '-o', 'world_size=1'], env=env(PATH=empty))
    assert p.returncode == 1
    assert p.stderr == ('zephon: fusermount3 is not installed (not on PATH): FUSE mounts '
                        'need it; on Debian or Ubuntu: %s\n' % APT)
    assert not is_mounted(mp)
    # what mounts nothing runs: mount --check, help
    p = run([*cmd, 'mount', lines, mp, '-o', 'world_size=1', '--check'], env=env(PATH=empty))
    assert p.returncode == 0, p.stderr
    assert 'usage: zephon mount' in run([*cmd, 'mount', '--help'], env=env(PATH=empty)).stdout


def test_without_fusermount3_zephon_mount_says_what_to_install(lines, tmp_path, monkeypatch):
    empty = tmp_path / 'empty'
    empty.mkdir()
    monkeypatch.setenv('PATH', str(empty))
    with pytest.raises(zephon.ZephonError,
                       match=r'^fusermount3 is not installed \(not on PATH\): FUSE mounts '
                             r'need it; on Debian or Ubuntu: sudo apt-get install fuse3$'):
        with zephon.mount(lines, tmp_path / 'mnt'):
            pass
    assert not is_mounted(tmp_path / 'mnt')


def test_without_the_kernels_fuse_zephon_mount_says_so(lines, tmp_path, monkeypatch):
    monkeypatch.setattr(_exe, 'FUSE_DEVICE', str(tmp_path / 'fuse'))
    with pytest.raises(zephon.ZephonError, match=r'/fuse is missing: the kernel.s FUSE is not '
                                                 r'available \(load it: sudo modprobe fuse'):
        zephon.mount(lines, tmp_path / 'mnt').start()
    assert not is_mounted(tmp_path / 'mnt')


def test_the_launchers_beside_the_package_run_its_zephon(tmp_path):
    """zephon-node (and slurm-zephon.sh, torchrun-zephon.sh through it) run the zephon
    installed beside it, before one on PATH; ZEPHON still comes first."""
    other = tmp_path / 'bin' / 'zephon'
    other.parent.mkdir()
    other.write_text('#!/bin/sh\nexit 0\n')
    other.chmod(0o755)
    node = dict(ZEPHON_DATASET=tmp_path / 'ds', ZEPHON_NNODES=1, ZEPHON_NODE=0,
                ZEPHON_RANKS_PER_NODE=2, ZEPHON_RESUME='samples:0@0',
                ZEPHON_JOURNAL_DIR=tmp_path / 'j', ZEPHON_MOUNT=tmp_path / 'mnt',
                PATH='%s:%s' % (other.parent, os.environ['PATH']))
    p = run([BIN / 'zephon-node', 'options'], env=env(**node))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[:2] == [str(BIN / 'zephon'), 'mount']
    p = run([BIN / 'zephon-node', 'options'], env=env(ZEPHON=ZEPHON, **node))
    assert p.stdout.split()[:2] == [ZEPHON, 'mount']
