#!/usr/bin/env python3
"""Every command and code block of the user's pages is run by a test, as written.

    doc_blocks.py ROOT          lint the checkout at ROOT (exit 1 on a finding)
    doc_blocks.py --self-test   check the rule on planted pages

and, imported by the tests, `doc_block(page, tag)`: the text of a page's tagged block.

A block is tagged by the line `<!-- test: TAG -->` right before its opening fence (the
syntax of .ci/docblocks, which prints a page's tagged ```sh blocks for the shell tests).
The rule, over README.md and docs/*.md:
- every ```sh and ```python block carries a tag: those are what a user pastes, so a test
  runs each (a block no test runs goes stale unseen). A block with no info string or
  another one (```text, ```json) is an output, a synopsis, a tree or a diagram, and may go
  untagged; a tagged one of those is run (or compared) by its test all the same;
- a tag is used once per page;
- some test names the tagged block: a file of tests/, .ci/ or mountscripts/ holds the call
  `doc_block('PAGE', 'TAG')` (PAGE relative to the checkout, as written here) or the
  command `docblocks PAGE TAG` (.ci/docblocks, PAGE ending in the page's path). A tag no
  test names is a finding, as is a name of a tag that no page has.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TAG = re.compile(r'<!-- test: ([\w-]+) -->')
RUN = ('sh', 'python')


def blocks(text):
    """(tag or None, info string, first line number, body) of each fenced block."""
    lines = text.split('\n')
    out, i = [], 0
    while i < len(lines):
        s = lines[i].strip()
        m = re.fullmatch(r'(`{3,})\s*([\w+-]*)\s*', s)
        if m:
            fence, indent = m.group(1), len(lines[i]) - len(lines[i].lstrip())
            prev = TAG.fullmatch(lines[i - 1].strip()) if i else None
            j = i + 1
            while j < len(lines) and not (lines[j].strip().startswith(fence) and
                                          not lines[j].strip().lstrip('`')):
                j += 1
            if j == len(lines):
                raise ValueError('the block at line %d is not closed' % (i + 1))
            # a fence indented in a list item: its lines lose that indentation, no more
            body = [ln[min(indent, len(ln) - len(ln.lstrip(' '))):] for ln in lines[i + 1:j]]
            out.append((prev.group(1) if prev else None, m.group(2), i + 1,
                        '\n'.join(body) + '\n'))
            i = j
        i += 1
    return out


def doc_block(page, tag, root=ROOT):
    """The body of the block of `page` (a path relative to the checkout: 'README.md',
    'docs/packing.md') tagged `tag`, its fences and their indentation left out."""
    found = [b for t, _, _, b in blocks((root / page).read_text()) if t == tag]
    if len(found) != 1:
        raise LookupError('%s has %d blocks tagged <!-- test: %s -->; a test reads one'
                          % (page, len(found), tag))
    return found[0]


def pages(root):
    return [root / 'README.md'] + sorted((root / 'docs').glob('*.md'))


def named(root):
    """{(page, tag): [files]} of every doc_block call and docblocks command of the tests."""
    out = {}
    call = re.compile(r'''doc_block\(\s*['"]([\w./-]+\.md)['"]\s*,\s*['"]([\w-]+)['"]''')
    cmd = re.compile(r'docblocks\s+\S*?((?:docs/)?[\w.-]+\.md)\s+([\w-]+)')
    for d in ('tests', '.ci', 'mountscripts'):
        for f in sorted((root / d).rglob('*')):
            if not f.is_file() or f.name == 'doc_blocks.py' or f.suffix in ('.md', '.png'):
                continue
            try:
                text = f.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            for m in list(call.finditer(text)) + list(cmd.finditer(text)):
                out.setdefault((m.group(1), m.group(2)), []).append(f)
    return out


def lint(root, say=print):
    root = root.resolve()
    calls = named(root)
    tags, bad = set(), []
    for page in pages(root):
        name = page.relative_to(root).as_posix()
        try:
            found = blocks(page.read_text())
        except ValueError as e:
            bad.append('%s: %s' % (name, e))
            continue
        seen = set()
        for tag, info, line, _ in found:
            if tag is None:
                if info in RUN:
                    bad.append('%s:%d: a ```%s block with no <!-- test: TAG --> line: no '
                               'test runs it (tests/lint/doc_blocks.py says how)'
                               % (name, line, info))
                continue
            if tag in seen:
                bad.append('%s:%d: the tag %s is used twice in the page' % (name, line, tag))
            seen.add(tag)
            tags.add((name, tag))
            if (name, tag) not in calls:
                bad.append("%s:%d: no test names the block tagged %s: doc_block('%s', '%s') "
                           "in a test of tests/ or .ci/" % (name, line, tag, name, tag))
    for (name, tag), files in sorted(calls.items()):
        if (name, tag) not in tags:
            bad.append('%s: reads a block tagged %s of %s, which has none'
                       % (files[0].relative_to(root), tag, name))
    for m in bad:
        say(m)
    return len(bad)


def self_test():
    import tempfile
    page = ('# P\n\n<!-- test: run -->\n```sh\necho hi\n  indented\n```\n\n```\n$ out\n```\n\n'
            '1. a step:\n   <!-- test: shown -->\n   ```text\n   indented\n     more\n   ```\n')
    got = blocks(page)
    assert [(t, i, n) for t, i, n, _ in got] == [('run', 'sh', 4), (None, '', 9),
                                                  ('shown', 'text', 15)], got
    assert got[0][3] == 'echo hi\n  indented\n'
    assert got[2][3] == 'indented\n  more\n'
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        for sub in ('docs', 'tests', '.ci', 'mountscripts'):
            (root / sub).mkdir()
        (root / 'README.md').write_text(page)
        (root / 'docs' / 'a.md').write_text('# A\n\n<!-- test: fresh -->\n```sh\nls\n```\n')
        (root / 'tests' / 't.py').write_text(
            "doc_block('README.md', 'run')\ndoc_block(\n  'README.md', \"shown\")\n")
        (root / '.ci' / 'c').write_text('block=$(python3 x/.ci/docblocks x/docs/a.md fresh)\n')
        assert lint(root) == 0
        assert doc_block('README.md', 'shown', root) == 'indented\n  more\n'
        assert doc_block('docs/a.md', 'fresh', root) == 'ls\n'
        plants = [
            ('README.md', page + '\n```python\nimport os\n```\n'),          # untagged python
            ('README.md', page + '\n<!-- test: run -->\n```text\nx\n```\n'),  # tag twice
            ('README.md', page + '\n<!-- test: other -->\n```sh\nx\n```\n'),  # named by none
            ('docs/a.md', '# A\n'),                                # a named tag gone
        ]
        for name, text in plants:
            old = (root / name).read_text()
            (root / name).write_text(text)
            assert lint(root, lambda m: None) == 1, name
            (root / name).write_text(old)
        try:
            doc_block('README.md', 'missing', root)
        except LookupError as e:
            assert 'has 0 blocks tagged' in str(e)
        else:
            raise AssertionError('doc_block found a missing tag')
    print('doc_blocks: self-test passed')


def main():
    if sys.argv[1:] == ['--self-test']:
        self_test()
        return
    if len(sys.argv) != 2:
        sys.exit('usage: doc_blocks.py ROOT | --self-test')
    if lint(pathlib.Path(sys.argv[1])):
        sys.exit(1)


if __name__ == '__main__':
    main()
