"""Chat samples for ``zephon pack --tokenizer TOK --chat`` (docs/fine-tuning.md).

Each record is a conversation: a list of ``{"role", "content"}`` messages (the field
``--messages-field``, default ``messages``), or a prompt and a response (``--prompt-field``
and ``--response-field``, which become ``[user, assistant]`` as TorchTitan's
``sft_debugmodel`` maps ``question`` and ``answer``). It becomes one document of tokens and
a label mask, token for token and mask for mask what TorchTitan main's ``ChatProcessor``
makes of a ``[user, assistant]`` pair (``torchtitan/hf_datasets/text_datasets.py``), with
the tokenizer as its ``HuggingFaceTokenizer`` loads it (``components/tokenizer.py``):

- the chat template is the tokenizer folder's ``chat_template.jinja``, else the
  ``chat_template`` of its ``tokenizer_config.json``, and none at all without that config
  (a ``tokenizer.json`` alone, or a folder without a template, is refused);
- it is rendered in a sandboxed Jinja environment (``trim_blocks``, ``lstrip_blocks``, the
  ``loopcontrols`` extension, ``raise_exception``, ``strftime_now`` and a ``tojson`` that
  keeps non-ASCII text) with ``messages`` and nothing else, or with
  ``add_generation_prompt=True`` too: a template's ``{{ bos_token }}`` renders empty;
- the whole conversation's text loses its trailing newlines (``rstrip("\\n")``) and is
  encoded with BOS in front (unless the tokenizer's post-processor puts it there) and no
  EOS; EOS is appended when the last token is not EOS already;
- the prompt is the messages before the assistant's turn rendered with
  ``add_generation_prompt=True`` and encoded the same way; its token count is where the
  trained labels start: every token from there on is trained, those before are not.

Beyond TorchTitan (which takes exactly ``[user, assistant]``): a ``system`` turn first,
and any number of ``user``/``assistant`` turns after it, alternating, ending with the
assistant's. Each assistant turn ``j`` trains the tokens from the end of its prompt
(``messages[:j]`` with ``add_generation_prompt=True``) to the end of the conversation up to
and with it (``messages[:j + 1]`` rendered, newlines stripped from its end), the last turn
to the end (its EOS included); everything else is masked. For ``[user, assistant]`` that is
exactly TorchTitan's rule.

TorchTitan masks by the prompt's token count without checking that those tokens are the
conversation's first ones (its ``TODO(data-chat-loss-boundary)``): where a merge across the
boundary makes them differ, its mask is off. Each such sample is found and reported
(``W`` record, counted in ``zephon info`` as ``prompt_mismatch``), then dropped
(``--prompt-mismatch drop``, the default) or kept with TorchTitan's mask
(``--prompt-mismatch keep``). Bad records (no messages, a wrong role order, content that is
not a string, an empty response) are refused naming the file and line or row, or skipped
with ``--skip-bad``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Iterator

from .pack_text import (
    INSTALL,
    InputError,
    LineReader,
    SkipRecord,
    TokenizerSpec,
    _ColumnReader,
    _pyarrow,
    _surrogate_error,
    _utf8_error,
)

#: The chat template file that takes priority over tokenizer_config.json's (TorchTitan's
#: HuggingFaceTokenizer.CHAT_TEMPLATE_FILE, after transformers).
TEMPLATE_FILE = "chat_template.jinja"
#: Roles a conversation may hold (the first may be system).
ROLES = ("system", "user", "assistant")


@dataclass
class ChatOptions:
    """What ``--chat`` reads and does with a prompt that is not a prefix."""

    messages_field: str = "messages"
    prompt_field: str | None = None
    response_field: str | None = None
    mismatch: str = "drop"           # or "keep": TorchTitan's mask, counted
    max_context: int | None = None   # samples longer are dropped by the packer, unchecked

    @property
    def form(self) -> str:
        """``messages`` or ``prompt-response`` (the catalog's meta ``chat``)."""
        return "prompt-response" if self.prompt_field else "messages"


# --------------------------------------------------------------------------- template

def template_path(tokenizer: str) -> tuple[str | None, str | None]:
    """(the template's text, the file it came from) as TorchTitan main's
    HuggingFaceTokenizer finds it for the folder ``tokenizer``: with a
    ``tokenizer_config.json``, its ``chat_template.jinja`` first, else the config's
    ``chat_template``; without the config, none. (None, None) when there is none; raises
    InputError for a config or template that cannot be read."""
    if not os.path.isdir(tokenizer):
        return None, None
    cfg = os.path.join(tokenizer, "tokenizer_config.json")
    if not os.path.isfile(cfg):
        return None, None
    jinja = os.path.join(tokenizer, TEMPLATE_FILE)
    if os.path.exists(jinja):
        try:
            with open(jinja, encoding="utf-8") as f:
                return f.read(), jinja
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"{jinja}: cannot read the chat template: {e}")
    try:
        with open(cfg, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{cfg}: not a tokenizer_config.json: {e}")
    t = config.get("chat_template") if isinstance(config, dict) else None
    if t is None:
        return None, None
    if not isinstance(t, str):
        raise InputError(f"{cfg}: chat_template is a {type(t).__name__}, not one template "
                         "(TorchTitan reads a string); write the one to use into "
                         f"{TEMPLATE_FILE} beside it")
    return t, cfg


class ChatTemplate:
    """A chat template compiled as TorchTitan main's ``BaseTokenizer.set_chat_template``
    compiles it, and rendered as its ``apply_chat_template`` renders it."""

    def __init__(self, text: str, where: str) -> None:
        try:
            import jinja2
            import jinja2.ext
            import jinja2.sandbox
        except ImportError:
            raise InputError(f"--chat needs the Python package 'jinja2' (chat templates): "
                             f"{INSTALL}")
        self.where = where
        self._error = jinja2.TemplateError

        def raise_exception(msg: str) -> None:
            raise jinja2.exceptions.TemplateError(msg)

        def strftime_now(fmt: str) -> str:
            from datetime import datetime
            return datetime.now().strftime(fmt)

        def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None,
                   separators: Any = None, sort_keys: bool = False) -> str:
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                              separators=separators, sort_keys=sort_keys)

        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
        env.filters["tojson"] = tojson
        try:
            self._t = env.from_string(text)
        except jinja2.TemplateError as e:
            raise InputError(f"{where}: the chat template does not compile: {e}")

    def render(self, messages: list[dict[str, Any]], generation: bool = False) -> str:
        """The template over ``messages``; ``generation`` passes
        ``add_generation_prompt=True`` (otherwise it is not passed at all, as
        TorchTitan's ChatProcessor does). Raises the template's TemplateError."""
        if generation:
            return self._t.render(messages=messages, add_generation_prompt=True)
        return self._t.render(messages=messages)


def load_template(tokenizer: str) -> tuple[ChatTemplate, str | None]:
    """The chat template of the tokenizer folder and the path of chat_template.jinja when
    it came from there (its bytes join the tokenizer's sha256). InputError without one."""
    text, where = template_path(tokenizer)
    if text is None or where is None:
        why = ("a tokenizer.json alone has no chat template: give the folder with its "
               "tokenizer_config.json" if not os.path.isdir(tokenizer) else
               f"{tokenizer} has no {TEMPLATE_FILE}, and its tokenizer_config.json no "
               "chat_template" if os.path.isfile(os.path.join(tokenizer,
                                                               "tokenizer_config.json"))
               else f"{tokenizer} has no tokenizer_config.json, without which TorchTitan "
               "loads no chat template")
        raise InputError(f"--chat needs the tokenizer's chat template: {why}; add one (a "
                         f"{TEMPLATE_FILE} in the folder, as TorchTitan reads it)")
    return ChatTemplate(text, where), where if where.endswith(TEMPLATE_FILE) else None


# --------------------------------------------------------------------------- records

def check_messages(msgs: Any, where: str) -> SkipRecord | None:
    """Why ``msgs`` is not a conversation Zephon trains, or None: a non-empty list of
    objects with a string ``role`` and string ``content``; an optional ``system`` first,
    then ``user`` and ``assistant`` alternating, from a user's to an assistant's; no
    assistant turn empty."""
    if not isinstance(msgs, list) or not msgs:
        what = "an empty list" if isinstance(msgs, list) else (
            "null" if msgs is None else f"a {type(msgs).__name__}")
        return SkipRecord(f"{where}: no messages ({what}, not a list of "
                          "{role, content} objects)")
    expect = ["system", "user"]
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            return SkipRecord(f"{where}: message {i} is not an object with a role and a "
                              "content")
        role, content = m["role"], m["content"]
        if not isinstance(role, str) or role not in ROLES:
            return SkipRecord(f"{where}: message {i} has role {role!r}; roles are system "
                              "(first only), user and assistant")
        if not isinstance(content, str):
            what = "null" if content is None else type(content).__name__
            return SkipRecord(f"{where}: message {i} ({role}) has content that is {what}, "
                              "not a string")
        if role not in expect:
            return SkipRecord(f"{where}: message {i} is {role}'s, but {' or '.join(expect)} "
                              "comes here: a conversation is an optional system message, "
                              "then user and assistant turns alternating")
        if role == "assistant" and not content.strip():
            return SkipRecord(f"{where}: message {i} is an empty response (the assistant's "
                              "content has no text to train)")
        bad = _surrogate_error(content, f"{where}: message {i}")
        if bad:
            return bad
        expect = ["assistant"] if role == "user" else ["user"]
    if msgs[-1]["role"] != "assistant":
        return SkipRecord(f"{where}: the conversation ends with a {msgs[-1]['role']} "
                          "message; it must end with the assistant's response")
    return None


def pair_messages(prompt: Any, response: Any, opts: ChatOptions,
                  where: str) -> list[dict[str, Any]] | SkipRecord:
    """[user, assistant] from a prompt and a response field's values, or why not."""
    for name, v in ((opts.prompt_field, prompt), (opts.response_field, response)):
        if not isinstance(v, str):
            what = "null" if v is None else type(v).__name__
            return SkipRecord(f"{where}: field {name!r} is {what}, not a string")
    msgs = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
    return check_messages(msgs, where) or msgs


class ChatJsonlReader(LineReader):
    """Conversations of a JSONL file (any compression pack reads), one per non-blank
    line; the record is the line number."""

    def docs(self) -> Iterator[tuple[int, Any] | SkipRecord]:
        chat = self.opts.chat
        assert chat is not None
        path = self.unit.path
        for n, line in self.lines():
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                rec = json.loads(line)
            except UnicodeDecodeError as e:
                yield _utf8_error(path, str(n), line, e)
                continue
            except ValueError as e:
                yield SkipRecord(f"{where}: invalid JSON: {e}")
                continue
            if not isinstance(rec, dict):
                yield SkipRecord(f"{where}: JSON {type(rec).__name__}, not a record")
                continue
            if chat.prompt_field:
                missing = [f for f in (chat.prompt_field, chat.response_field) if f not in rec]
                if missing:
                    yield SkipRecord(f"{where}: record without a {missing[0]!r} field; pass "
                                     "--prompt-field and --response-field")
                    continue
                item = pair_messages(rec[chat.prompt_field], rec[chat.response_field], chat,
                                     where)
            else:
                if chat.messages_field not in rec:
                    yield SkipRecord(f"{where}: no messages: record without a "
                                     f"{chat.messages_field!r} field; pass --messages-field "
                                     "NAME, or --prompt-field and --response-field")
                    continue
                item = check_messages(rec[chat.messages_field], where) or \
                    rec[chat.messages_field]
            yield item if isinstance(item, SkipRecord) else (n, item)


class ChatColumnReader(_ColumnReader):
    """Conversations of a Parquet file (row group by row group) or of the Arrow files of a
    datasets folder: a list<struct<role, content>> column, or two string columns; the
    record is the row (from 0)."""

    def _columns(self) -> list[str]:
        chat = self.opts.chat
        assert chat is not None
        if chat.prompt_field:
            assert chat.response_field is not None
            return [chat.prompt_field, chat.response_field]
        return [chat.messages_field]

    def _check(self, schema: Any) -> None:
        pa = _pyarrow()
        chat = self.opts.chat
        assert chat is not None
        for col in self._columns():
            if col not in schema.names:
                flag = "--messages-field" if col == chat.messages_field else \
                    "--prompt-field and --response-field"
                raise InputError(f"{self.unit.path}: no column {col!r} (columns: "
                                 f"{', '.join(schema.names)}); pass {flag}")
            t = schema.field(col).type
            ok = (pa.types.is_list(t) or pa.types.is_large_list(t)) if not chat.prompt_field \
                else (pa.types.is_string(t) or pa.types.is_large_string(t))
            if not ok:
                want = "a list of {role, content}" if not chat.prompt_field else "a string"
                raise InputError(f"{self.unit.path}: column {col!r} is {t}, not {want} column")

    def _items(self, table: Any, first: int) -> Iterator[tuple[int, Any] | SkipRecord]:
        chat = self.opts.chat
        assert chat is not None
        cols = [table.column(c).to_pylist() for c in self._columns()]
        for i in range(len(cols[0])):
            where = f"{self.unit.path}: row {first + i}"
            if chat.prompt_field:
                item = pair_messages(cols[0][i], cols[1][i], chat, where)
            else:
                item = check_messages(cols[0][i], where) or cols[0][i]
            yield item if isinstance(item, SkipRecord) else (first + i, item)

    def docs(self) -> Iterator[tuple[int, Any] | SkipRecord]:
        pa = _pyarrow()
        path = self.unit.path
        if self.unit.kind == "parquet":
            try:
                pf = pa.parquet.ParquetFile(path)
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"{path}: not a Parquet file, or a corrupt one: {e}")
            self._check(pf.schema_arrow)
            row = 0
            for g in range(pf.num_row_groups):
                try:
                    table = pf.read_row_group(g, columns=self._columns())
                except (pa.ArrowException, OSError) as e:
                    raise InputError(f"{path}: row group {g} is corrupt: {e}")
                yield from self._items(table, row)
                row += table.num_rows
                self.done += pf.metadata.row_group(g).total_byte_size
        else:
            try:
                src = pa.memory_map(path)
                try:
                    reader = pa.ipc.open_stream(src)
                    batches: Iterator[Any] = iter(reader)
                except pa.ArrowInvalid:
                    freader = pa.ipc.open_file(src)
                    reader = freader
                    batches = (freader.get_batch(i) for i in range(freader.num_record_batches))
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"{path}: not an Arrow IPC file, or a corrupt one: {e}")
            self._check(reader.schema)
            row = 0
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                except (pa.ArrowException, OSError) as e:
                    raise InputError(f"{path}: corrupt after row {row}: {e}")
                yield from self._items(batch, row)
                row += batch.num_rows
                self.done = min(src.tell(), self.unit.size)
        self.done = self.unit.size


def chat_reader(kind: str) -> type:
    """The reader of chat records for an input of ``kind``; InputError for text files."""
    if kind == "jsonl":
        return ChatJsonlReader
    if kind in ("parquet", "arrow"):
        return ChatColumnReader
    raise InputError("--chat reads records (JSONL, Parquet, datasets folders); a "
                     f"{'text file' if kind == 'text' else 'file of lines'} holds no "
                     "conversations")


# --------------------------------------------------------------------------- tokens

@dataclass
class Encoded:
    """A batch of conversations as documents: ``lens`` and ``ids`` as
    :func:`zephon.pack_text.encode_batch` makes them, ``masks`` one byte per token (1:
    trained as a label), ``keep`` which conversations they are (a mismatch dropped, or
    one the template refused, is not among them), ``warnings`` (the 'W' messages, one per
    mismatched sample) and ``bad`` (the conversations the template refused, each with
    its reason: refused, or skipped under --skip-bad, by the caller)."""

    lens: Any
    ids: Any
    masks: Any
    keep: list[int]
    warnings: list[str]
    bad: list[SkipRecord]


def _spans(msgs: list[dict[str, Any]]) -> list[tuple[int, int | None]]:
    """(assistant index, next index or None for the last) of each assistant turn."""
    out: list[tuple[int, int | None]] = []
    for j, m in enumerate(msgs):
        if m["role"] == "assistant":
            out.append((j, j + 1 if j + 1 < len(msgs) else None))
    return out


def encode_chat(spec: TokenizerSpec, template: ChatTemplate, convs: list[Any],
                where: list[str], opts: ChatOptions) -> Encoded:
    """Documents and masks of the conversations ``convs`` (``where``: each one's file and
    line or row, for messages): see the module's rules."""
    import numpy as np

    texts: list[str] = []
    # per conversation: its index, its full text's, and (prompt, end) text indexes per turn
    plan: list[tuple[int, int, list[tuple[int, int]]]] = []
    bad: list[SkipRecord] = []
    for c, msgs in enumerate(convs):
        mine: list[str] = []
        try:
            parts = []
            for j, nxt in _spans(msgs):
                mine.append(template.render(msgs[:j], generation=True))
                p = len(texts) + len(mine) - 1
                e = -1
                if nxt is not None:
                    mine.append(template.render(msgs[:nxt]).rstrip("\n"))
                    e = len(texts) + len(mine) - 1
                parts.append((p, e))
            mine.append(template.render(msgs).rstrip("\n"))
        except template._error as err:
            bad.append(SkipRecord(f"{where[c]}: the chat template ({template.where}) refuses "
                                  f"the conversation: {err}"))
            continue
        texts += mine
        plan.append((c, len(texts) - 1, parts))
    encode = getattr(spec.tokenizer, "encode_batch_fast", spec.tokenizer.encode_batch)
    toks = [e.ids for e in encode(texts)]
    if spec.bos is not None:
        toks = [[spec.bos] + t for t in toks]
    out_lens, out_ids, out_masks, keep, warnings = [], [], [], [], []
    for c, fi, parts in plan:
        full = toks[fi]
        if not full or full[-1] != spec.eos_id:
            full = full + [spec.eos_id]
        n = len(full)
        mask = np.zeros(n, dtype=np.uint8)
        prefix = True
        for p, q in parts:
            start = len(toks[p])
            end = n if q < 0 else len(toks[q])
            prefix &= toks[p] == full[:start] and (q < 0 or toks[q] == full[:end])
            mask[min(start, n):min(end, n)] = 1
        too_long = opts.max_context is not None and n - 1 > opts.max_context
        if not prefix and not too_long:
            warnings.append(f"{where[c]}: the prompt's {len(toks[parts[0][0]])} tokens are "
                            "not the first tokens of the whole conversation (a merge across "
                            "the prompt's end): TorchTitan's mask would be off; "
                            + ("dropped (--prompt-mismatch keep keeps it)"
                               if opts.mismatch == "drop" else "kept with TorchTitan's mask"))
            if opts.mismatch == "drop":
                continue
        keep.append(c)
        out_lens.append(n)
        out_ids.append(np.asarray(full, dtype="<u4"))
        out_masks.append(mask)
    if not keep:
        empty = np.empty(0, dtype="<u4")
        return Encoded(np.empty(0, dtype="<u4"), empty, np.empty(0, np.uint8), keep, warnings,
                       bad)
    return Encoded(np.asarray(out_lens, dtype="<u4"), np.concatenate(out_ids),
                   np.concatenate(out_masks), keep, warnings, bad)
