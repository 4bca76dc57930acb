#!/usr/bin/env python3
"""No history in the user's pages: README.md and docs/*.md state what is.

    doc_history.py ROOT          lint the pages of the checkout at ROOT (exit 1 on a finding)
    doc_history.py --self-test   check the rule on planted text

A user reads what Zephon does, not how it came to do it: "X was slow, now it is fast",
"since issue 27", "datasets packed before --overlap" date the page and leave the reader to
work out what holds today. The pages are README.md and every docs/*.md but
docs/architecture.md, which is for contributors (where a file came from is its business).

The rule, on prose only (fenced blocks and `inline code` are skipped: they quote commands,
outputs and other projects' messages, such as TorchTitan's "not supported yet"):
- always history, whatever the context: "was", "were", "since" (as a conjunction of cause
  it reads as history too: write "as" or "because"), "no longer" (but "no longer than",
  a comparison of lengths), "used to" (write "serves to" for a purpose), "previously",
  "formerly", "anymore", "now" (a statement of what is needs no "now"), "not yet",
  "until recently", "at the time", "these days";
- history in these phrases only: "earlier", "older" or "previous" before "version(s)",
  "release(s)", "build(s)", "schema(s)" or "reader(s)"; "before it existed" and "before
  it was" (a version before a feature); "new in".
"before" and "after" alone order events in time ("journaled before open() returns",
"the step before it") and are not history. ALLOW lists the exact sentences' fragments a
page may keep where a listed word is not history (each entry says why).
"""
import pathlib
import re
import sys

ALWAYS = ['was', 'were', 'since', 'used to', 'previously', 'formerly',
          'anymore', 'now', 'not yet', 'until recently', 'at the time', 'these days']
PHRASES = [r'no\s+longer(?!\s+than)',       # "no longer than L": a length, not history
           r'(?:earlier|older|previous)\s+(?:versions?|releases?|builds?|schemas?|readers?)',
           r'before\s+it\s+(?:existed|was)', r'new\s+in']
PATTERN = re.compile(r'(?<![\w-])(?:%s)(?![\w-])' % '|'.join(
    [r'\s+'.join(map(re.escape, w.split())) for w in ALWAYS] + PHRASES), re.I)
# (page, fragment): a fragment of a page's prose in which a match is not history, and why
ALLOW = [
    # a duration `zephon top` shows (the `seconds_since_read` of /status), not history
    ('docs/operations.md', 'seconds since its last read'),
]


def pages(root):
    """The user-facing pages, relative to root."""
    docs = sorted(p for p in (root / 'docs').glob('*.md') if p.name != 'architecture.md')
    return [root / 'README.md'] + docs


def prose(text):
    """The text with fenced blocks and inline code blanked (newlines kept, so line numbers
    hold)."""
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
    text = '\n'.join(out)
    # inline code spans (a run of n backticks to the next run of n), may span lines
    return re.sub(r'(`+)(.+?)\1', lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text,
                  flags=re.S)


def findings(name, text, allow=()):
    """(line, word, the line) of each history word of the page's prose not allowed."""
    clean = prose(text)
    lines = text.split('\n')
    flat = ' '.join(clean.split()).lower()     # the prose, whitespace runs made one space
    frags = [f.lower() for p, f in allow if p == name]
    out = []
    for m in PATTERN.finditer(clean):
        before = clean[:m.start()]
        pos = len(' '.join(before.split())) + (1 if before.strip() and before[-1].isspace()
                                               else 0)
        if any(i <= pos < i + len(f) for f in frags for i in spans(flat, f)):
            continue
        n = clean.count('\n', 0, m.start())
        out.append((n + 1, m.group(0), lines[n].strip()))
    return out


def spans(text, frag):
    """Where frag starts in text, each time."""
    i = text.find(frag)
    while i >= 0:
        yield i
        i = text.find(frag, i + 1)


def lint(root, say=print):
    bad = 0
    for page in pages(root):
        name = page.relative_to(root).as_posix()
        for n, word, line in findings(name, page.read_text(), ALLOW):
            say('%s:%d: "%s" tells history; state what is (tests/lint/doc_history.py '
                  'says the rule): %s' % (name, n, word, line))
            bad += 1
    return bad


def self_test():
    cases = [
        ('A batch was served twice.', ['was']),
        ('Datasets packed before it existed read as 0.', ['before it existed']),
        ('It is now fast; it used to be slow and is no longer so.', ['now', 'used to', 'no longer']),
        ('Since the mount reads ahead, it is fast.', ['Since']),
        ('Journals of earlier versions\n(schema 1) and older readers.', ['earlier versions', 'older readers']),
        ('The claim is journaled before open() returns; the step before it.', []),
        ('Use `now` and `was` in code; `--since` too.', []),
        ('```\nit was here\n```\nnothing', []),
        ('nowhere, snow, wasm, knowhow, non-was-word', []),
        ('It has not yet been run.', ['not yet']),
        ('Each no longer than L; it is no longer slow.', ['no longer']),
    ]
    for text, want in cases:
        got = [w for _, w, _ in findings('x.md', text)]
        assert got == want, (text, got, want)
    # an allowed fragment hides its match on that page only, not elsewhere
    allow = [('x.md', 'as it was written')]
    assert findings('x.md', 'Read as it was written.', allow) == []
    assert [w for _, w, _ in findings('y.md', 'Read as it was written.', allow)] == ['was']
    assert [w for _, w, _ in findings('x.md', 'It was bad. Read as it was written.', allow)] \
        == ['was']
    # line numbers count the page's lines
    assert findings('x.md', 'a\n\nb was\n')[0][0] == 3
    # a planted page fails the lint, a clean one passes
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        (root / 'docs').mkdir()
        (root / 'README.md').write_text('Zephon serves files.\n')
        (root / 'docs' / 'architecture.md').write_text('This file was split.\n')
        assert lint(root) == 0
        (root / 'docs' / 'x.md').write_text('It was slow.\n')
        said = []
        assert lint(root, said.append) == 1 and 'docs/x.md:1: "was"' in said[0], said
    print('doc_history: self-test passed')


def main():
    if sys.argv[1:] == ['--self-test']:
        self_test()
        return
    if len(sys.argv) != 2:
        sys.exit('usage: doc_history.py ROOT | --self-test')
    if lint(pathlib.Path(sys.argv[1])):
        sys.exit(1)


if __name__ == '__main__':
    main()
