#!/usr/bin/env python3
"""No circles between the files of core/ and fs/ (issue 25, part 4).

A module is a source file with the header of the same stem: core/order/order.c and
core/order/order.h are module "core/order/order". A header without a source file of its own
(core/journal/journal.h, core/pack/pack_int.h, fs/cmd.h) is a contract that several files
implement: including it is no edge, and what its users call through it counts as a
call. Module A uses module B when a file of A includes B's header, or A's source names
(calls, or takes the address of) a function that B's source, and no other, defines
with external linkage. Every module must
stand above what it uses: the graph of "uses" has no cycle. Prints each cycle found
(one strongly connected component per line) and exits 1; exits 0 when there is none.

The folders of core/ stand in layers too, in the order of core/meson.build's
core_folders (util, remote, order, journal, dataset, pack, serve): a module may use modules of
its own folder and of the folders before it, never of one after it. Each such use is
printed as "upward: A uses B" and fails the check.

usage: circles.py [ROOT]   (ROOT: the source tree, default: two levels above this file)
"""

import re
import sys
import tempfile
from pathlib import Path

DIRS = ("core", "fs")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A function definition in this tree's style: return type and name at column 0, the
# parameter list, then "{" on a line of its own (see ../shared/STYLE.md).
DEFINITION = re.compile(r"^(?!static\b|typedef\b|struct\b[^(]*\{|extern\b)"
                        r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{]*?\)\s*\n\{", re.M)
NAME = re.compile(r"\b([A-Za-z_]\w*)\b")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# Names that are no function whatever they spell: tags (struct journal_cursor) and
# members (x.run, p->err).
NOT_A_FUNCTION = re.compile(r"\b(?:struct|enum|union)\s+\w+|(?:\.|->)\s*\w+")
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"' r"|'(?:\\.|[^'\\\n])*'")


def strip(text: str) -> str:
    """text without comments and string or character literals."""
    return STRING.sub('""', COMMENT.sub(" ", text))


def modules(root: Path) -> dict[str, list[Path]]:
    """Module name -> its files: every .c and .cc of DIRS, and the .h of the same stem."""
    out: dict[str, list[Path]] = {}
    for d in DIRS:
        for f in sorted((root / d).rglob("*")):
            if f.suffix in (".c", ".cc"):
                out.setdefault(module_of(root, f), []).append(f)
        for f in sorted((root / d).rglob("*.h")):
            if module_of(root, f) in out:
                out[module_of(root, f)].append(f)
    return out


def module_of(root: Path, f: Path) -> str:
    """A file's module: its path from root without the suffix (core/order/order)."""
    return f.relative_to(root).with_suffix("").as_posix()


def graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules it uses (includes or calls), itself left out."""
    mods = modules(root)
    header_of = {f.name: m for m, files in mods.items() for f in files if f.suffix == ".h"}
    text = {f: strip(f.read_text(errors="replace")) for files in mods.values() for f in files}
    defined: dict[str, set[str]] = {}
    for m, files in mods.items():
        for f in files:
            if f.suffix != ".h":
                for name in DEFINITION.findall(text[f]):
                    defined.setdefault(name, set()).add(m)
    uses: dict[str, set[str]] = {m: set() for m in mods}
    for m, files in mods.items():
        for f in files:
            raw = f.read_text(errors="replace")
            for inc in INCLUDE.findall(raw):
                if Path(inc).name in header_of:
                    uses[m].add(header_of[Path(inc).name])
            if f.suffix == ".h":
                continue  # a header declares; only a .c file calls
            # a call, or a function taken by its name (a table of handlers): either
            # way the file needs the function's module
            for name in set(NAME.findall(NOT_A_FUNCTION.sub(" ", text[f]))):
                owners = defined.get(name, set())
                if len(owners) == 1:
                    uses[m] |= owners
        uses[m].discard(m)
    return uses


def cycles(uses: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(uses[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(uses):
        if v not in index:
            visit(v)
    return sorted(out)


FOLDERS = re.compile(r"^core_folders\s*=\s*\[([^\]]*)\]", re.M)


def folders(root: Path) -> list[str]:
    """The folders of core/ from the lowest to the highest (core/meson.build)."""
    m = FOLDERS.search((root / "core" / "meson.build").read_text())
    return re.findall(r"'([^']+)'", m.group(1)) if m else []


def upward(uses: dict[str, set[str]], order: list[str]) -> list[tuple[str, str]]:
    """The uses (a, b) of core/ in which b's folder stands after a's in order."""
    def rank(m: str) -> int:
        parts = m.split("/")
        return order.index(parts[1]) if len(parts) > 2 and parts[1] in order else -1
    return sorted((a, b) for a, bs in uses.items() for b in bs
                  if a.startswith("core/") and b.startswith("core/") and rank(a) < rank(b))


def self_test() -> None:
    """The detector finds a circle of calls, one through a header and one through a
    table of handlers, and none in a tree that stands in layers; raises AssertionError
    otherwise (so that a detector that finds nothing cannot pass)."""
    files = {
        "core/low.c": '#include "low.h"\nint low_f(void)\n{\n\treturn 0;\n}\n',
        "core/low.h": "int low_f(void);\n",
        "core/mid.c": '#include "low.h"\nint mid_f(void)\n{\n\treturn low_f();\n}\n',
        "core/top.c": ("int mid_f(void);\nint top_f(void)\n{\n"
                       "\treturn mid_f(); /* low_f( in a comment */\n}\n"),
        "core/api.h": "int low_f(void);\n",
    }
    circles = {
        "core/low.c": '#include "low.h"\n#include "top.h"\nint low_f(void)\n{\n\treturn 0;\n}\n',
        "core/top.h": "int top_f(void);\n",
        "fs/main.c": ("int cmd_a(int);\nstatic int (*run[])(int) = { cmd_a };\n"
                      "void die(void)\n{\n}\nint main(void)\n{\n\treturn run[0](0);\n}\n"),
        "fs/cmd_a.c": "void die(void);\nint cmd_a(int x)\n{\n\tdie();\n\treturn x;\n}\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for d in DIRS:
            (root / d).mkdir()
        for name, text in files.items():
            (root / name).write_text(text)
        assert cycles(graph(root)) == [], "a layered tree read as a circle"
        for name, text in circles.items():
            (root / name).write_text(text)
        found = cycles(graph(root))
        assert found == [["core/low", "core/mid", "core/top"], ["fs/cmd_a", "fs/main"]], found
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, text in {"core/util/low.c": '#include "high.h"\nint low_f(void)\n{\n'
                                             '\treturn high_f();\n}\n',
                           "core/serve/high.c": "int high_f(void)\n{\n\treturn 0;\n}\n",
                           "core/serve/high.h": "int high_f(void);\n"}.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        (root / "fs").mkdir()
        found_up = upward(graph(root), ["util", "serve"])
        assert found_up == [("core/util/low", "core/serve/high")], found_up


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    self_test()
    uses = graph(root)
    if not uses:
        print(f"circles.py: no source files under {root}", file=sys.stderr)
        return 2
    found = cycles(uses)
    for comp in found:
        why = "; ".join(f"{a} uses {', '.join(sorted(uses[a] & set(comp)))}" for a in comp)
        print(f"circle: {' <-> '.join(comp)} ({why})")
    order = folders(root)
    if not order:
        print(f"circles.py: no core_folders in {root}/core/meson.build", file=sys.stderr)
        return 2
    up = upward(uses, order)
    for a, b in up:
        print(f"upward: {a} uses {b} (core_folders: {', '.join(order)})")
    return 1 if found or up else 0


if __name__ == "__main__":
    sys.exit(main())
