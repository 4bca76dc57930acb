#!/usr/bin/env python3
"""No file of core/ or fs/ over 800 lines, no C function over 80 (issue 25, part 2).

A function is counted from the line of its name to its closing brace, the way this
tree writes one (../shared/STYLE.md): the name's line, the parameters, "{" and "}" at
column 0. KNOWN lists the files and functions that broke the rule when the check came,
each a debt with an owner: the check fails when a new one breaks it, and when a known one
no longer does (so that the list only shrinks). Prints each finding and exits 1; exits 0
when there is none.

usage: sizes.py [ROOT]   (ROOT: the source tree, default: two levels above this file)
"""

import re
import sys
from pathlib import Path

DIRS = ("core", "fs")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80
# Known exceptions (a debt each): none left. The check fails on any new one.
KNOWN: set = set()
KNOWN_FUNCTIONS: set = set()
# The line of a definition's opening brace: a line that is "{" alone, after a line that
# ends the parameter list.
NAME = re.compile(r"^(?!static\s+const\b)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(", re.M)


def functions(lines):
    """(name, first line, length) of each function definition in a C source's lines."""
    start = None
    for i, line in enumerate(lines):
        if start is None and line == "{":
            # walk back to the line that names the function (column 0, not a comment)
            k = i - 1
            while k >= 0 and (not lines[k] or lines[k][0] in " \t)"):
                k -= 1
            m = NAME.match(lines[k]) if k >= 0 else None
            if m:
                start = (m.group(1), k)
        elif start is not None and line == "}":
            yield start[0], start[1] + 1, i - start[1] + 1
            start = None


def check(root: Path) -> list:
    """The findings under root, as lines of text."""
    found = []
    seen_files, seen_functions = set(), set()
    for d in DIRS:
        for path in sorted((root / d).rglob("*")):
            if path.suffix not in (".c", ".h", ".cc"):
                continue
            rel = path.relative_to(root).as_posix()
            lines = path.read_text(errors="replace").split("\n")
            n = len(lines) - (lines[-1] == "")
            if n > MAX_FILE_LINES:
                seen_files.add(rel)
                if rel not in KNOWN:
                    found.append(f"{rel}: {n} lines (at most {MAX_FILE_LINES})")
            for name, first, length in functions(lines):
                if length > MAX_FUNCTION_LINES:
                    key = f"{rel}:{name}"
                    seen_functions.add(key)
                    if key not in KNOWN_FUNCTIONS:
                        found.append(f"{rel}:{first}: {name}() is {length} lines "
                                     f"(at most {MAX_FUNCTION_LINES})")
    for rel in sorted(set(KNOWN) - seen_files):
        found.append(f"{rel}: no longer over {MAX_FILE_LINES} lines: take it off KNOWN")
    for key in sorted(set(KNOWN_FUNCTIONS) - seen_functions):
        found.append(f"{key}: no longer over {MAX_FUNCTION_LINES} lines: take it off "
                     "KNOWN_FUNCTIONS")
    return found


def self_test() -> None:
    """The counter reads this tree's style: a function of 3 lines and one of 82."""
    body = ["int f(int a,", "      int b)", "{", "}", "", "static void g(void)", "{"]
    body += ["\tx();"] * 80 + ["}"]
    got = list(functions(body))
    assert got == [("f", 1, 4), ("g", 6, 83)], got


def main() -> int:
    self_test()
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    found = check(root)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
