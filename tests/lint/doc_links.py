#!/usr/bin/env python3
"""Every link of the user's pages resolves, and the README links every docs page.

    doc_links.py ROOT          lint the checkout at ROOT (exit 1 on a finding)
    doc_links.py --self-test   check the rule on planted pages

The pages: README.md and docs/*.md. A link is Markdown's inline form, `[text](target)` or
`![alt](target)`, in prose (fenced blocks and `inline code` are skipped). Targets with a
scheme (`https:`, `mailto:`) are not fetched. Every other target is a path relative to the
page, optionally with `#anchor`, or `#anchor` alone for the page itself:
- the path must exist in the checkout (a file or a folder), and stay inside it;
- an anchor must be the slug of a heading of the target, a Markdown file, by GitHub's
  rule: the heading's text lowercased, inline code's backticks and every character that is
  not a letter, digit, space, `-` or `_` dropped, spaces made `-`; a repeated slug gets
  `-1`, `-2`, ... in page order.
And every docs/*.md is the target of a link in README.md (so a page no one can find from
the start fails), and README.md has at most MAX_README lines: it is what a user reads to
start, in about ten minutes; a topic's detail goes to its page in docs/.
"""
import pathlib
import re
import sys

MAX_README = 300
LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')


def prose(text):
    """The text with fenced blocks and inline code blanked, line breaks kept."""
    return re.sub(r'(`+)(.+?)\1', lambda m: re.sub(r'[^\n]', ' ', m.group(0)),
                  prose_keep_code(text), flags=re.S)


def slug(heading):
    """GitHub's anchor of a heading's text."""
    s = heading.strip().lower().replace('`', '')
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')


def anchors(text):
    """Every anchor of a Markdown page's headings (ATX `#` headings outside fences)."""
    seen, out = {}, set()
    for line in prose_keep_code(text).split('\n'):
        m = re.match(r' {0,3}#{1,6}\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else '%s-%d' % (s, n))
    return out


def prose_keep_code(text):
    """The text with fenced blocks blanked (inline code kept: headings hold it)."""
    out, fence = [], None
    for line in text.split('\n'):
        s = line.strip()
        if fence:
            if s.startswith(fence) and not s[len(fence):].strip():
                fence = None
            out.append('')
            continue
        m = re.match(r'(`{3,}|~{3,})', s)
        if m:
            fence = m.group(1)
            out.append('')
            continue
        out.append(line)
    return '\n'.join(out)


def links(text):
    """(line, target) of each inline link of the page's prose."""
    clean = prose(text)
    return [(clean.count('\n', 0, m.start()) + 1, m.group(1)) for m in LINK.finditer(clean)]


def check_page(root, page):
    """Messages for the page's links that do not resolve."""
    out = []
    name = page.relative_to(root).as_posix()
    for n, target in links(page.read_text()):
        if re.match(r'[a-zA-Z][a-zA-Z0-9+.-]*:', target):
            continue
        path, _, anchor = target.partition('#')
        dest = (page.parent / path).resolve() if path else page
        try:
            dest.relative_to(root.resolve())
        except ValueError:
            out.append('%s:%d: %s leaves the checkout' % (name, n, target))
            continue
        if not dest.exists():
            out.append('%s:%d: %s: no such file' % (name, n, target))
            continue
        if anchor:
            if dest.suffix != '.md' or dest.is_dir():
                out.append('%s:%d: %s: an anchor into a file that is not Markdown'
                           % (name, n, target))
            elif anchor not in anchors(dest.read_text()):
                out.append('%s:%d: %s: %s has no heading whose anchor is #%s'
                           % (name, n, target, dest.relative_to(root.resolve()), anchor))
    return out


def lint(root, say=print):
    root = root.resolve()
    pages = [root / 'README.md'] + sorted((root / 'docs').glob('*.md'))
    out = []
    for page in pages:
        out += check_page(root, page)
    linked = set()
    for _, target in links((root / 'README.md').read_text()):
        path = target.partition('#')[0]
        if path and not re.match(r'[a-zA-Z][a-zA-Z0-9+.-]*:', path):
            linked.add((root / path).resolve())
    for page in pages[1:]:
        if page not in linked:
            out.append('README.md: links no %s: every docs page is linked from the README'
                       % page.relative_to(root))
    n = len((root / 'README.md').read_text().splitlines())
    if n > MAX_README:
        out.append('README.md: %d lines, over %d: move detail to the topic\'s page in docs/'
                   % (n, MAX_README))
    for m in out:
        say(m)
    return len(out)


def self_test():
    assert slug('PyTorch: `import zephon`') == 'pytorch-import-zephon'
    assert slug('Datasets in object storage: `s3://`') == 'datasets-in-object-storage-s3'
    assert slug('8. Guarantees') == '8-guarantees'
    assert slug('B5 with delivered positions') == 'b5-with-delivered-positions'
    assert anchors('# A\n## A\n```\n# not\n```\n### `b` c\n') == {'a', 'a-1', 'b-c'}
    assert links('[a](x.md) `[b](y.md)` ![i](p.png "t")\n```\n[c](z.md)\n```\n') == \
        [(1, 'x.md'), (1, 'p.png')]
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        (root / 'docs').mkdir()
        (root / 'docs' / 'a.md').write_text('# Page A\n\n## Two words\n\n[up](../README.md#zephon)\n')
        good = '# Zephon\n\n[a](docs/a.md), [b](docs/a.md#two-words), [s](#zephon), [w](https://x)\n'
        (root / 'README.md').write_text(good)
        assert lint(root) == 0
        for bad in ('[x](docs/missing.md)', '[x](docs/a.md#one-word)', '[x](#nope)',
                    '[x](../outside.md)'):
            (root / 'README.md').write_text(good + bad + '\n')
            assert lint(root, lambda m: None) == 1, bad
        (root / 'README.md').write_text(good + '\n' * MAX_README)
        assert lint(root, lambda m: None) == 1
        (root / 'README.md').write_text(good)
        (root / 'docs' / 'b.md').write_text('# B\n')      # linked from nowhere
        said = []
        assert lint(root, said.append) == 1 and 'docs/b.md' in said[0], said
    print('doc_links: self-test passed')


def main():
    if sys.argv[1:] == ['--self-test']:
        self_test()
        return
    if len(sys.argv) != 2:
        sys.exit('usage: doc_links.py ROOT | --self-test')
    if lint(pathlib.Path(sys.argv[1])):
        sys.exit(1)


if __name__ == '__main__':
    main()
