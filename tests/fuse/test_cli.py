"""The zephon executable's command line: help, version, unknown commands."""
from conftest import run

COMMANDS = ['pack', 'info', 'verify', 'batch', 'journal', 'mount']


def test_help_lists_every_command():
    p = run('--help')
    out = p.stdout.decode()
    assert out.startswith('usage: zephon')
    for c in COMMANDS:
        assert '\n  %s ' % c in out


def test_version():
    assert run('--version').stdout.decode().startswith('zephon ')


def test_unknown_command_is_a_usage_error():
    p = run('frobnicate', check=False)
    assert p.returncode == 2
    assert "unknown command 'frobnicate'" in p.stderr


def test_no_arguments_is_a_usage_error():
    p = run(check=False)
    assert p.returncode == 2
    assert 'usage: zephon' in p.stderr
