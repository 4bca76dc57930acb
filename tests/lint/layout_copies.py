#!/usr/bin/env python3
"""No copy of a layout rule outside core/order/layout.c (issue 37).

struct layout is opaque (core/order/layout.h): a file that reads one of its fields does
not compile, so the compiler finds every copy of a rule written on the fields. What it
cannot see, this check does, in every C file of core/ and fs/ but the rules' homes:

  value     one of the five values a layout is made of (world_size, global_batch,
            micro_batch, start_step, start_samples: a getter's result, or a field of
            that name of any struct) next to an arithmetic operator
  alias     a local that took one of those values, then used in arithmetic in the same
            function (b = layout_global_batch(l); ... g += b, or mul_sat(k, b))
  rank      a rank times something (rank * share: where a rank's slice starts)
  walk      one function dividing X by Y and taking X % Y (the walk of a run's bytes by
            share, core/serve/run.c's), outside core/order, whose own gsn -> (epoch,
            position) is that shape
  opaque    a struct layout's fields by hand: its opaque_ array named, or an initializer
            that fills it ({ { w, b, ... } } compiles where { w, b, ... } does not); only
            { { 0 } }, a layout never made, is allowed

Comments and string literals are not read. The self-test (run first, every time) feeds
each rule the copies the issue found in the tree before this check came, and clean code
that must pass, so the check cannot pass by matching nothing.

usage: layout_copies.py [ROOT]   (ROOT: the source tree, default: two levels above this
file). Prints each finding and exits 1; exits 0 when there is none.
"""

import re
import sys
from pathlib import Path

DIRS = ("core", "fs")
# the homes of the rules: nothing in them is a copy
HOMES = {"core/order/layout.c", "core/order/layout.h", "core/serve/run.c"}
# walk: the order's own gsn -> (epoch, position) and the mixture's interleave are that shape
WALK_FREE = ("core/order/",)

VALUES = r"(?:world_size|global_batch|micro_batch|start_step|start_samples)"
# a layout value: a getter's result, or a field of that name
VALUE = (r"(?:\blayout_" + VALUES + r"\s*\([^()]*\)"
         r"|(?:\.|->)\s*" + VALUES + r"\b)")
# an arithmetic operator, but not a +/- 1 (the last rank, W - 1, is an index, not a rule)
OP = r"(?:[-+](?![-+=>]|\s*1\b)|[*/%](?!=)|[-+*/%]=)"
# a rank times something (where a rank's slice starts): `rank *` where it is not a
# pointer's declaration (a type before it), `* rank` after an operand
RULES = {
    "value": [re.compile(VALUE + r"\s*" + OP),
              re.compile(r"(?:[-+](?![-+=>])|[*/%]|[-+*/%]=)\s*(?:\(\s*)?[\w.>-]*?" + VALUE)],
    "rank": [re.compile(r"(?<![\w*])(?<!struct )\brank\s*\*\s*(?=[\w(])"),
             re.compile(r"[\w)\]]\s*\*\s*rank\b(?!\s*[,;)=])")],
}
DECL = re.compile(r"^\s*(?:(?:static|const|struct|unsigned|signed|volatile)\s+)*\w+\s*\**\s*\w")
OPAQUE = [re.compile(r"\bopaque_\b"),
          re.compile(r"\(struct layout\)\s*\{\s*\{(?!\s*0\s*\}\s*\})"),
          re.compile(r"\bstruct layout\s+\w+(?:\[\w*\])?\s*=\s*\{\s*\{(?!\s*0\s*\}\s*\})")]
ALIAS = re.compile(r"\b(\w+)\s*=\s*(?:&?\w+(?:(?:->|\.)\w+)*)?" + VALUE + r"\s*[;,)]")
# X / Y with Y not a constant (a bit index's k / 64, a time's s / 60, a row's planes
# seq_len / ROW_PLANES are no share walk)
DIVMOD = re.compile(r"(\(?[\w.>-]+(?:\s*\+\s*[\w.>-]+)?\)?)\s*/\s*"
                    r"(?!\d)(?![A-Z_][A-Z0-9_]*\b)([\w.>-]+)")


def strip(text: str) -> str:
    """text without comments and without the contents of string and char literals
    (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text: str):
    """(first line, body text) of each top-level brace block of stripped C text."""
    depth, start = 0, None
    for i, c in enumerate(text):
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                head = text.rfind("\n", 0, start)
                head = text.rfind(";", 0, start) if head < 0 else head
                yield text.count("\n", 0, start) + 1, text[start:i + 1]


def findings(rel: str, text: str) -> list:
    """The copies in one file's text, as "file:line: rule: text" lines."""
    if rel in HOMES:
        return []
    src = strip(text)
    lines = src.split("\n")
    found = []
    for no, line in enumerate(lines, 1):
        if any(p.search(line) for p in OPAQUE):
            found.append(f"{rel}:{no}: opaque: {line.strip()}")
        for rule, pats in RULES.items():
            if rule == "rank" and DECL.match(line) and "=" not in line:
                continue            # a declaration: uint64_t *rank, struct x *rank_of
            if any(p.search(line) for p in pats):
                found.append(f"{rel}:{no}: {rule}: {line.strip()}")
    for first, body in functions(src):
        blines = body.split("\n")
        aliases = {m.group(1) for m in ALIAS.finditer(body)}
        for k, line in enumerate(blines):
            for a in aliases:
                # in arithmetic, or handed to an arithmetic helper (mul_sat(x, b))
                use = re.compile(r"(?:" + OP + r"\s*\b" + a + r"\b(?!\s*\()|\b" + a + r"\b\s*"
                                 + OP + r"|\b(?:\w*(?:mul|add|sub|div)\w*|__builtin_\w+_overflow)"
                                 r"\([^;]*\b" + a + r"\b)")
                if use.search(line) and not ALIAS.search(line):
                    found.append(f"{rel}:{first + k}: alias ({a}): {line.strip()}")
        if rel.startswith(WALK_FREE):
            continue
        divs = {(m.group(1).strip("() "), m.group(2)) for m in DIVMOD.finditer(body)}
        for x, y in divs:
            mod = re.compile(re.escape(x) + r"\)?\s*%\s*" + re.escape(y) + r"\b")
            for k, line in enumerate(blines):
                if mod.search(line):
                    found.append(f"{rel}:{first + k}: walk ({x} / {y}, {x} % {y}): "
                                 f"{line.strip()}")
    return sorted(set(found))


def check(root: Path) -> list:
    found = []
    for d in DIRS:
        for path in sorted((root / d).rglob("*")):
            if path.suffix in (".c", ".h", ".cc"):
                rel = path.relative_to(root).as_posix()
                found += findings(rel, path.read_text(errors="replace"))
    return found


# The copies the issue found (core/ before the folders, as they were written), each of
# which one rule must report; and code that uses the layout's functions, which none may.
COPIES = {
    "progress: a run's share to its step": ("value", """
void progress_note_run(struct progress *p, uint64_t g0, uint64_t share_bytes, uint64_t off)
{
	uint64_t k0 = off / share_bytes, k1 = (off + n) / share_bytes;

	if (k1 > k0)
		progress_note(p, rank, g0 + (k1 - 1) * p->global_batch, 1, now);
}"""),
    "progress: where a rank's micro-batch starts": ("rank", """
uint64_t progress_step_of(uint64_t rank, uint64_t gsn, uint64_t micro, uint64_t share)
{
	before = rank * share + micro * micro_batch;
	return gsn >= before ? gsn - before : PROGRESS_NO_STEP;
}"""),
    "served: a gsn's step inline": ("alias", """
int served_check_change(const struct served *st, uint64_t g)
{
	b = prev->layout.global_batch;
	off = (g - prev->layout.start_samples) % b;
	return 0;
}"""),
    "served: the step number of a gsn": ("value", """
int f(void)
{
	return prev->layout.start_step + (g - prev->layout.start_samples) / b;
}"""),
    "share: validation steps": ("value", """
uint64_t server_validation_steps(const struct server *s)
{
	return s->cfg.validation.n / s->cfg.layout.global_batch;
}"""),
    "share: steps before the end": ("value", """
int f(void)
{
	steps = s->limit > gsn ? (s->limit - gsn) / s->cfg.layout.global_batch : 0;
}"""),
    "share: gsn + k B without the overflow check": ("value", """
int share_run_ids(struct share_run *r, uint64_t k, uint64_t *ids)
{
	return server_share_ids(r->s, r->rank, r->gsn + k * r->s->cfg.layout.global_batch, ids);
}"""),
    "share: a validation step's gsn": ("value", """
int f(void)
{
	return layout_at(&s->cfg.layout, sh->n * s->cfg.layout.global_batch, l);
}"""),
    "readahead: steps walked by hand": ("alias", """
static uint64_t ahead_ids(struct server *s, uint64_t g, uint64_t end)
{
	uint64_t b = s->cfg.layout.global_batch, share = layout_share(&s->cfg.layout);

	while (g < end) {
		g += b;
	}
	return g;
}"""),
    "readahead: the window's end by hand": ("alias", """
void srv_ahead(struct server *s, uint64_t gsn, uint64_t steps)
{
	uint64_t b = layout_global_batch(&s->cfg.layout), to;

	to = add_sat(gsn, mul_sat(add_sat(steps, s->ahead_steps), b));
}"""),
    "fs/read.c: the byte -> share walk": ("walk", """
void read_ids(struct zmount *z, uint64_t pos, uint64_t end, uint64_t per)
{
	for (uint64_t p = pos; p < end;) {
		uint64_t k = p / per, within = p % per;
		p += per - within;
	}
}"""),
    "share.c: the byte -> share walk": ("walk", """
int share_run_read(struct share_run *r, uint64_t pos)
{
	uint64_t k = pos / r->share, within = pos % r->share;
	return 0;
}"""),
    "a layout's fields by hand": ("opaque", """
int f(void)
{
	struct layout l = { { 2, 8, 2, 0, 0 } };

	return l.opaque_[1] / 2;
}"""),
    "a layout's fields by hand, as a compound literal": ("opaque", """
int f(void)
{
	return layout_share(&(struct layout){ { 2, 8, 2, 0, 0 } });
}"""),
    "a getter's value in arithmetic": ("value", """
int f(const struct layout *l, uint64_t t)
{
	return layout_start_samples(l) + (t - layout_start_step(l)) * 8;
}"""),
}
CLEAN = """
int share_run_ids(struct share_run *r, uint64_t k, uint64_t *ids)
{
	uint64_t g;

	if (layout_gsn_after(&r->s->cfg.layout, r->gsn, k, &g))
		return -EOVERFLOW;
	/* g = gsn + k * global_batch, as "a / b % b" in a string: neither is read */
	printf("rank * share %d", 1);
	return server_share_ids(r->s, r->rank, g, ids);
}

void walk(uint64_t unit, uint64_t pos, uint64_t end)
{
	struct run_piece piece;

	run_piece(unit, pos, end, &piece);
	x = layout_micros_samples(&c->layout, 1) * per_sample;
	n = rankset_index(&s->ranks, rank) * 2 - 1 + ranks;
	CHECK(journal_start(j, &r, &rs, &(struct layout){ { 0 } }, NULL, 0) == -EINVAL);
}
"""


def self_test() -> None:
    for name, (rule, code) in COPIES.items():
        got = findings("core/x.c", code)
        assert any(f": {rule}" in g for g in got), f"self-test: {name} not found ({got})"
    assert not findings("core/x.c", CLEAN), findings("core/x.c", CLEAN)
    assert not findings("core/order/layout.c", COPIES["share: validation steps"][1])


def main() -> int:
    self_test()
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    found = check(root)
    for f in found:
        print(f)
    if found:
        print("a layout rule is copied above; call the function of core/order/layout.h "
              "that owns it (or add one there, overflow-checked)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
