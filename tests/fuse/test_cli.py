"""The zephon executable's command line: help, version, unknown commands."""
from conftest import run

COMMANDS = ['pack', 'info', 'verify', 'upload', 'batch', 'journal', 'mount']


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


def test_batch_names_what_is_wrong_with_a_number(tmp_path):
    """A number with a space around it is refused saying so (the option parser of the
    shell or of a launcher easily leaves one)."""
    from conftest import pack, write_jsonl
    write_jsonl(tmp_path / 'in.jsonl', 10)
    ds = pack(tmp_path / 'ds', [tmp_path / 'in.jsonl'])
    p = run('batch', ds, '-o', 'world_size=1', '--rank', '0 ', '--step', '0', check=False)
    assert p.returncode == 2, p.stderr
    assert ("batch: --rank wants a non-negative whole number, not '0 ': it ends with a "
            "space; remove it") in p.stderr, p.stderr


def test_batch_refuses_watch_fd(tmp_path):
    """watch_fd= ties a mount to its launcher; zephon batch serves no mount and says so."""
    from conftest import pack, write_jsonl
    write_jsonl(tmp_path / 'in.jsonl', 10)
    ds = pack(tmp_path / 'ds', [tmp_path / 'in.jsonl'])
    p = run('batch', ds, '-o', 'world_size=1,watch_fd=0', '--rank', '0', '--step', '0',
            check=False)
    assert p.returncode == 2, p.stderr
    assert "watch_fd= is a mount's option; zephon batch serves no mount" in p.stderr, p.stderr
