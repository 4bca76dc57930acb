"""The zephon executable under test and `zrun`, for conftest.py and titan_helpers.py
(and the workers that import the latter): one copy, which scans every command's stderr
for sanitizer reports (tests/sanitizers.py: a UBSan report in the ASan build goes to
stderr only).

Environment: ZEPHON, the zephon executable under test (default build/fs/zephon); set
here for the zephon package to find it.
"""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT / 'tests') not in sys.path:
    sys.path.insert(0, str(ROOT / 'tests'))
import sanitizers  # noqa: E402  (tests/sanitizers.py)

ZEPHON = os.environ.get('ZEPHON') or str(ROOT / 'build' / 'fs' / 'zephon')
os.environ['ZEPHON'] = ZEPHON        # what the package finds


def zrun(*args):
    """zephon ARGS; stdout as bytes. Fails the test with zephon's stderr, and on a
    sanitizer report in it."""
    p = subprocess.run([ZEPHON, *map(str, args)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=600)
    sanitizers.scan(p.stderr.decode(errors='replace'), 'zephon %s' % (args,))
    assert p.returncode == 0, ('zephon', args, p.stderr.decode(errors='replace'))
    return p.stdout
