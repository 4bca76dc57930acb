"""The front end of ``zephon pack --tokenizer``: raw text in, token documents out.

``zephon pack --tokenizer PATH ... -o DATASET`` runs ``python3 -m zephon.pack_text``
(``$ZEPHON_PYTHON`` names another interpreter) with its stdout a pipe to the packer, which
stays the one writer of the dataset (windows, shards, catalog, document index). This
module reads the inputs in order, tokenizes their documents with Hugging Face
``tokenizers`` (``encode_batch``: every core, the same ids whatever their number) and
streams them in the format that ``core/pack/pack_text.c`` documents. Memory stays bounded:
at most three batches of about :data:`BATCH_CHARS` characters of text are held, and one of
them encoded, whatever the corpus size and the documents' sizes: a document longer than
:data:`PIECE_CHARS` is encoded in pieces, cut where the tokenizer gives the ids it gives
the whole document (:func:`piece_cuts`), and streamed to the packer piece by piece ('C'
records). A JSONL line longer than :data:`STREAM_BYTES` is not parsed whole: its text is
found in the line's bytes, checked, and decoded part by part (:class:`TextChunks`), and cut
into pieces as it comes (:func:`stream_pieces`), so that the line's bytes and the piece
being cut are all that is held of it. That bound is for tokenizers with a pre-tokenizer:
one without (``spec.prefix`` None) gets every document whole, and so does a text with no
place to cut (no space or line break, :func:`_candidates`) for a whole piece. A text file
(one document) and a Parquet or Arrow row are held whole as read.

Documents are what TorchTitan's ``HuggingFaceTokenizer`` makes of them in its pretraining
datasets, ``encode(text, add_bos=True, add_eos=True)``: the tokenizer's own ids, then BOS
in front and EOS behind unless the tokenizer's post-processor already puts them there.
:func:`load_tokenizer` states the rules (and docs/packing.md, "Raw text to tokens").

Needs ``tokenizers`` (and ``pyarrow`` for Parquet and ``datasets`` folders):
``pip install 'zephon[tokenize]'``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import re
import signal
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from itertools import pairwise
from typing import IO, Any, BinaryIO, Iterable, Iterator

MAGIC = b"ZTOKDOC1"
#: Characters of text per batch handed to ``encode_batch``. The encodings that
#: ``tokenizers`` builds (token strings, offsets, masks, and the normalized copies it
#: works on) take ~200 bytes per character of text with a small vocabulary (TorchTitan's
#: test tokenizer), so this, not the corpus, sets the front end's memory.
BATCH_CHARS = 512 << 10
BATCH_DOCS = 16384
#: A document longer than this is encoded in pieces of about this many characters, cut
#: where the tokenizer's ids do not change (:func:`piece_cuts`): no document, however
#: long, is encoded at once.
PIECE_CHARS = 64 << 10
#: Characters on each side of a cut that :func:`cut_agrees` encodes to check it.
CUT_CHECK_CHARS = 256
#: First bytes of the compressed streams ``zephon pack`` reads (zstd, gzip, xz, bzip2,
#: lz4); lzma-alone starts with its properties byte 0x5d.
COMPRESSED_MAGIC = (b"\x28\xb5\x2f\xfd", b"\x1f\x8b", b"\xfd7zXZ\x00", b"BZh",
                    b"\x04\x22\x4d\x18", b"\x5d\x00\x00")
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
COMPRESSION_SUFFIXES = ("", ".gz", ".zst", ".xz", ".bz2", ".lzma", ".lz4")
DTYPE_MAX = {"uint8": 255, "uint16": 65535, "uint32": 2**32 - 1, "int32": 2**31 - 1}
INSTALL = "pip install 'zephon[tokenize]'"


class InputError(Exception):
    """Bad input or options: the message names the file and the record or row."""


class SkipRecord(InputError):
    """A bad record that ``--skip-bad`` may skip (the others stop the pack)."""


# --------------------------------------------------------------------------- tokenizer

@dataclass
class TokenizerSpec:
    """A loaded tokenizer and the rule of its documents: ``[bos] + ids + [eos]``, each of
    ``bos``/``eos`` only when not None (None where the tokenizer's post-processor puts it
    there already, or the tokenizer has none); ``eod`` is the end-of-document id recorded
    in the dataset."""

    tokenizer: Any
    name: str
    sha256: str
    vocab_size: int
    bos: int | None
    eos: int | None
    eod: int
    bos_id: int | None = None     # the tokenizer's BOS id (whoever adds it)
    eos_id: int | None = None
    path: str = ""                # absolute: the folder or tokenizer.json given
    # what the post-processor puts around a document's ids (encode(text) is prefix +
    # encode(text, add_special_tokens=False) + suffix), for documents encoded in pieces;
    # None: no such split (or no pre-tokenizer): long documents are encoded whole
    prefix: list[int] | None = None
    suffix: list[int] | None = None


def _config_token(config: dict, key: str) -> str | None:
    """A special token of tokenizer_config.json: a string or {"content": ...}."""
    tok = config.get(key)
    if isinstance(tok, dict):
        tok = tok.get("content")
    return tok if isinstance(tok, str) else None


def load_tokenizer(path: str, eod_token: int | None = None,
                   extra: tuple[str, ...] = ()) -> TokenizerSpec:
    """Load ``path`` the way TorchTitan 0.3.0's ``HuggingFaceTokenizer`` does.

    - A folder: ``tokenizer.json`` in it, and ``tokenizer_config.json`` when present: its
      ``bos_token``, ``eos_token`` (and the other standard special tokens and
      ``added_tokens_decoder``) are added to the tokenizer as special tokens, so a literal
      ``<|end_of_text|>`` in a text is that special id, as in TorchTitan. A file: that
      ``tokenizer.json`` alone (a ``tokenizer_config.json`` beside it is not read: name the
      folder for that), so there is no BOS or EOS unless its post-processor adds them.
    - BOS goes in front of every document and EOS behind it, unless
      ``tokenizer.encode("")`` holds them already (the post-processor adds them);
      ``add_bos_token``/``add_eos_token`` of the config do not change it, since
      TorchTitan's pretraining datasets ask for both explicitly.
    - The end-of-document id is EOS. A tokenizer without EOS needs ``eod_token``, which
      is then appended after every document (Megatron's ``--append-eod``); an
      ``eod_token`` other than an EOS is refused.
    - ``sha256`` is over the bytes of ``tokenizer.json``, then those of
      ``tokenizer_config.json`` when it was read, then those of the files ``extra`` names
      (``--chat``: the ``chat_template.jinja`` read).

    Raises :class:`InputError` with the reason (a missing file, a file that does not
    parse, a bad config).
    """
    try:
        from tokenizers import AddedToken, Tokenizer
    except ImportError:
        raise InputError(f"--tokenizer needs the Python package 'tokenizers' in {sys.executable}: "
                         f"{INSTALL} (or set ZEPHON_PYTHON to an interpreter that has it)")
    path = os.path.normpath(path)
    if os.path.isdir(path):
        tok_file = os.path.join(path, "tokenizer.json")
        cfg_path = os.path.join(path, "tokenizer_config.json")
        name = os.path.basename(os.path.abspath(path))
        if not os.path.isfile(tok_file):
            raise InputError(f"{path}: no tokenizer.json in this folder; give a Hugging Face "
                             "tokenizer.json or the folder that holds it")
        cfg_file: str | None = cfg_path if os.path.isfile(cfg_path) else None
    elif os.path.isfile(path):
        tok_file, cfg_file = path, None
        name = os.path.join(os.path.basename(os.path.dirname(os.path.abspath(path))),
                            os.path.basename(path))
    else:
        raise InputError(f"--tokenizer {path}: no such file or folder")
    digest = hashlib.sha256()
    with open(tok_file, "rb") as f:
        raw = f.read()
    digest.update(raw)
    try:
        tok = Tokenizer.from_str(raw.decode("utf-8"))
    except Exception as e:  # tokenizers raises its own Exception type
        raise InputError(f"{tok_file}: not a Hugging Face tokenizer.json that tokenizers "
                         f"can load: {e}")
    bos_tok = eos_tok = None
    if cfg_file:
        with open(cfg_file, "rb") as f:
            craw = f.read()
        digest.update(craw)
        try:
            config = json.loads(craw)
            if not isinstance(config, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            raise InputError(f"{cfg_file}: not a tokenizer_config.json: {e}")
        bos_tok, eos_tok = _config_token(config, "bos_token"), _config_token(config, "eos_token")
        added = []
        for key in ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token",
                    "cls_token", "mask_token"):
            content = _config_token(config, key)
            if content is not None:
                added.append(_added_token(AddedToken, content, config[key]))
        decoder = config.get("added_tokens_decoder") or {}
        if not isinstance(decoder, dict):
            raise InputError(f"{cfg_file}: added_tokens_decoder is not an object")
        for conf in decoder.values():
            if isinstance(conf, dict) and isinstance(conf.get("content"), str):
                added.append(_added_token(AddedToken, conf["content"], conf))
        if added:
            tok.add_special_tokens(added)
    for x in extra:
        with open(x, "rb") as f:
            digest.update(f.read())
    bos_id = tok.token_to_id(bos_tok) if bos_tok is not None else None
    eos_id = tok.token_to_id(eos_tok) if eos_tok is not None else None
    empty = tok.encode("").ids
    bos = bos_id if bos_id is not None and bos_id not in empty else None
    eos = eos_id if eos_id is not None and eos_id not in empty else None
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if eos_id is not None:
        if eod_token is not None and eod_token != eos_id:
            raise InputError(f"--eod-token {eod_token}: the tokenizer's EOS {eos_tok!r} is "
                             f"{eos_id}, which ends every document already; drop "
                             "--eod-token")
        eod = eos_id
    elif eod_token is not None:
        if eod_token >= vocab:
            raise InputError(f"--eod-token {eod_token} is not an id of the tokenizer's "
                             f"vocabulary of {vocab}")
        eod = eos = eod_token
    else:
        why = ("a tokenizer.json alone has none: give the folder with its "
               "tokenizer_config.json" if not cfg_file else
               f"{cfg_file} names no eos_token")
        raise InputError(f"--tokenizer {path}: no end-of-document token ({why}), or pass "
                         "--eod-token ID to append ID after every document")
    prefix, suffix = _special_frame(tok)
    return TokenizerSpec(tok, name, digest.hexdigest(), vocab, bos, eos, eod, bos_id, eos_id,
                         os.path.abspath(path), prefix, suffix)


def _special_frame(tok: Any) -> tuple[list[int] | None, list[int] | None]:
    """(prefix, suffix): the ids the tokenizer's post-processor puts before and after a
    text's own ids; (None, None) where its encodings are not that (or it has no
    pre-tokenizer, so that a document is one "word" and no cut can keep its ids)."""
    if tok.pre_tokenizer is None:
        return None, None
    sample = "Zephon checks\nthe frame."
    full = tok.encode(sample).ids
    bare = tok.encode(sample, add_special_tokens=False).ids
    for i in range(len(full) - len(bare) + 1):
        if full[i:i + len(bare)] == bare and bare:
            prefix, suffix = full[:i], full[i + len(bare):]
            if tok.encode("").ids == prefix + suffix:
                return prefix, suffix
    return None, None


def tokenizer_sha256(path: str) -> str:
    """The ``sha256`` that :func:`load_tokenizer` records for the tokenizer at ``path``
    (a folder: ``tokenizer.json``'s bytes, then ``tokenizer_config.json``'s when it is
    there; a file: its bytes), to check that a tokenizer is still the one a dataset was
    packed with. Raises ``OSError`` where a file is missing or unreadable."""
    files = [path]
    if os.path.isdir(path):
        files = [os.path.join(path, "tokenizer.json")]
        cfg = os.path.join(path, "tokenizer_config.json")
        if os.path.isfile(cfg):
            files.append(cfg)
    digest = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            digest.update(fh.read())
    return digest.hexdigest()


def _added_token(cls: Any, content: str, conf: Any) -> Any:
    """An AddedToken with the attributes the config gives (TorchTitan's defaults)."""
    if isinstance(conf, dict):
        return cls(content, single_word=conf.get("single_word", False),
                   lstrip=conf.get("lstrip", False), rstrip=conf.get("rstrip", False),
                   normalized=conf.get("normalized", True), special=conf.get("special", True))
    return cls(content, special=True)


def choose_dtype(vocab_size: int, dtype: str | None) -> str:
    """uint16 when every id of the vocabulary fits (vocab_size <= 65,536), else uint32; a
    given dtype that cannot hold every id is refused (InputError)."""
    if dtype is None:
        return "uint16" if vocab_size <= 65536 else "uint32"
    if vocab_size - 1 > DTYPE_MAX[dtype]:
        raise InputError(f"--dtype {dtype} holds ids up to {DTYPE_MAX[dtype]} but the "
                         f"tokenizer's vocabulary has {vocab_size} ids; pass --dtype uint32 "
                         "or leave --dtype out")
    return dtype


# --------------------------------------------------------------------------- inputs

@dataclass
class Unit:
    """One input file as packed: a catalog source row."""

    kind: str          # jsonl, lines, text, parquet, arrow
    path: str
    size: int


@dataclass
class Options:
    text_field: str = "text"
    column: str = "text"
    split: str | None = None
    format: str = "auto"
    skip_bad: bool = False
    zephon: str = "zephon"
    chat: Any = None          # --chat: a zephon.pack_chat.ChatOptions


def _kind_by_name(path: str, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    low = path.lower()
    if any(low.endswith(s + c) for s in JSONL_SUFFIXES for c in COMPRESSION_SUFFIXES):
        return "jsonl"
    if low.endswith(".parquet"):
        return "parquet"
    if low.endswith(".arrow"):
        raise InputError(f"{path}: a lone .arrow file; give the folder that datasets' "
                         "save_to_disk wrote (with dataset_info.json and state.json)")
    return "text"


def _walk(root: str) -> list[str]:
    """Regular files under root, recursively, by relative path (bytewise); hidden files
    and folders (.git, .gitattributes, .cache) skipped, symlinks not followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not f.startswith(".") and os.path.isfile(p) and not os.path.islink(p):
                out.append(p)
    return sorted(out, key=lambda p: os.fsencode(os.path.relpath(p, root)))


def _in_split(rel: str, split: str) -> bool:
    """The Hub's layouts: data/train-00000-of-00002.parquet, train/0000.parquet,
    default/train/0000.parquet, train.parquet."""
    parts = rel.split(os.sep)
    base = parts[-1]
    return split in parts[:-1] or any(base.startswith(split + c) for c in "-_.")


def _arrow_units(folder: str, opts: Options) -> list[Unit]:
    dict_folder = os.path.isfile(os.path.join(folder, "dataset_dict.json"))
    if dict_folder:
        with open(os.path.join(folder, "dataset_dict.json")) as f:
            splits = json.load(f).get("splits", [])
        split = opts.split or "train"
        if split not in splits:
            raise InputError(f"{folder}: a datasets DatasetDict without split {split!r} "
                             f"(it has {', '.join(splits) or 'none'}); pass --split")
        folder = os.path.join(folder, split)
    state = os.path.join(folder, "state.json")
    if not (os.path.isfile(state) and os.path.isfile(os.path.join(folder, "dataset_info.json"))):
        raise InputError(f"{folder}: holds .arrow files but is not a Hugging Face datasets "
                         "folder (no dataset_info.json and state.json, as save_to_disk "
                         "writes); give the folder save_to_disk wrote")
    try:
        with open(state) as f:
            st = json.load(f)
        files = [d["filename"] for d in st["_data_files"]]
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"{state}: not a datasets state.json ({e!r})")
    if opts.split and not dict_folder:
        # one split saved alone: a --split that is not its own would pack another one
        own = st.get("_split") if isinstance(st, dict) else None
        if own != opts.split:
            has = (f"of split {own!r} only" if isinstance(own, str) else
                   "of one dataset without a split name")
            raise InputError(f"{folder}: a datasets save_to_disk folder {has} (state.json), "
                             f"not of split {opts.split!r}; drop --split, or give the folder "
                             f"that holds split {opts.split!r}")
    units = []
    for name in files:
        p = os.path.join(folder, name)
        if os.path.sep in os.path.normpath(name) or not os.path.isfile(p):
            raise InputError(f"{state}: names {name!r}, which is not a file of {folder}")
        units.append(Unit("arrow", p, os.path.getsize(p)))
    return units


def plan_inputs(inputs: list[str], opts: Options) -> list[Unit]:
    """The files to read, in order (docs/packing.md, "Raw text to tokens", states the rules)."""
    units: list[Unit] = []
    for inp in inputs:
        if os.path.isdir(inp):
            if (os.path.isfile(os.path.join(inp, "dataset_dict.json")) or
                    os.path.isfile(os.path.join(inp, "dataset_info.json")) or
                    opts.format == "arrow"):
                units += _arrow_units(inp, opts)
                continue
            files = _walk(inp)
            parquet = [p for p in files if p.lower().endswith(".parquet")]
            if opts.format in ("auto", "parquet") and parquet:
                rels = [os.path.relpath(p, inp) for p in parquet]
                want = opts.split or "train"
                chosen = [p for p, r in zip(parquet, rels, strict=True) if _in_split(r, want)]
                if opts.split and not chosen:
                    raise InputError(f"{inp}: no Parquet file of split {opts.split!r}")
                units += [Unit("parquet", p, os.path.getsize(p)) for p in (chosen or parquet)]
                continue
            if opts.format == "auto" and any(p.lower().endswith(".arrow") for p in files):
                units += _arrow_units(inp, opts)  # refuses it, saying why
                continue
            if not files:
                raise InputError(f"{inp}: an empty folder")
            units += [Unit(_kind_by_name(p, opts.format), p, os.path.getsize(p)) for p in files]
        elif os.path.isfile(inp):
            units.append(Unit(_kind_by_name(inp, opts.format), inp, os.path.getsize(inp)))
        else:
            raise InputError(f"{inp}: no such file or folder")
    return units


# --------------------------------------------------------------------------- readers
# Each yields (record, text) per document and keeps unit progress in self.done (bytes).

def _utf8_error(path: str, where: str, data: bytes, e: UnicodeDecodeError,
                offset: int = 0) -> SkipRecord:
    """The record's error for invalid UTF-8 at byte ``offset + e.start`` of the line
    ``data`` (``e`` raised decoding the part of it that starts at ``offset``)."""
    at = offset + e.start
    return SkipRecord(f"{path}:{where}: invalid UTF-8 at byte {at} of the line "
                      f"(0x{data[at]:02x}); the text must be UTF-8")


class Reader:
    def __init__(self, unit: Unit, opts: Options):
        self.unit, self.opts, self.done = unit, opts, 0

    def docs(self) -> Iterator[tuple[int, str | TextChunks] | SkipRecord]:
        raise NotImplementedError


class LineReader(Reader):
    """Lines of a text or JSONL file through zephon's own readers for compressed files
    (``zephon pack --decode-lines``: every compression pack takes, checked to the end);
    plain files directly. Lines end at '\\n'; a '\\r' before it and a UTF-8 BOM at the
    start are dropped, as in ``zephon pack``'s own text inputs."""

    def lines(self) -> Iterator[tuple[int, bytes]]:
        path = self.unit.path
        with open(path, "rb") as f:
            head = f.read(8)
        if any(head.startswith(m) for m in COMPRESSED_MAGIC):
            proc = subprocess.Popen([self.opts.zephon, "pack", "--decode-lines", path],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, errf = proc.stdout, proc.stderr
            assert out is not None and errf is not None     # both PIPE
            try:
                yield from self._split(out, compressed=True)
            finally:
                out.close()
                err = errf.read().decode(errors="replace").strip()
                errf.close()
                rc = proc.wait()
            if rc:
                msg = err.removeprefix("zephon: ") or f"decoding failed (exit {rc})"
                raise InputError(msg)
            self.done = self.unit.size
        else:
            with open(path, "rb", buffering=1 << 20) as f:
                yield from self._split(f, compressed=False)

    #: whether lines() cuts the line break off ("\r\n" or "\n"); JSONL keeps it (JSON
    #: allows it as white space), which saves a copy of every line
    strip = True

    def _split(self, f: IO[bytes], compressed: bool) -> Iterator[tuple[int, bytes]]:
        for n, line in enumerate(f, 1):
            if not compressed:
                self.done += len(line)
                if n == 1 and line.startswith(b"\xef\xbb\xbf"):
                    line = line[3:]
            if self.strip:
                if line.endswith(b"\n"):
                    line = line[:-1]
                if line.endswith(b"\r"):
                    line = line[:-1]
            yield n, line
            del line         # not held while the next one is read (a document may be 50 MB)


class JsonlReader(LineReader):
    """One document per line; a document's line, record and text are let go before the
    next line is read (only the document being read is held). A line longer than
    :data:`STREAM_BYTES` is not parsed whole: its text is found in the line's bytes and
    handed on as :class:`TextChunks` (:func:`_long_record`), so that no decoded copy of a
    long document is ever held whole."""

    strip = False

    def docs(self) -> Iterator[tuple[int, str | TextChunks] | SkipRecord]:
        field_ = self.opts.text_field
        path = self.unit.path
        for n, line in self.lines():
            if not line or line.isspace():
                continue  # blank lines, as pack skips them
            if len(line) > STREAM_BYTES:
                found = _long_record(line, field_, f"{path}:{n}: field {field_!r}")
                if isinstance(found, tuple):
                    yield _utf8_error(path, str(n), line, *found)
                elif isinstance(found, SkipRecord):
                    yield found
                elif found is not None:
                    yield n, found
                if found is not None:
                    del found, line
                    continue
                # anything else (bad JSON, no such field, not a string, ...): parsed
                # whole below, for the same message as any line's
            try:
                rec = json.loads(line)
            except UnicodeDecodeError as e:
                yield _utf8_error(path, str(n), line, e)
                continue
            except ValueError as e:
                yield SkipRecord(f"{path}:{n}: invalid JSON: {e}")
                continue
            del line
            if not isinstance(rec, dict) or field_ not in rec:
                what = "record" if isinstance(rec, dict) else f"JSON {type(rec).__name__}"
                yield SkipRecord(f"{path}:{n}: {what} without a {field_!r} field; pass "
                                 "--text-field NAME")
                continue
            text = rec[field_]
            if not isinstance(text, str):
                yield SkipRecord(f"{path}:{n}: field {field_!r} is "
                                 f"{'null' if text is None else type(text).__name__}, not a "
                                 "string")
                continue
            del rec
            bad = _surrogate_error(text, f"{path}:{n}: field {field_!r}")
            yield bad if bad else (n, text)
            del text


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_error(text: str, where: str, offset: int = 0) -> SkipRecord | None:
    """JSON may spell a lone surrogate (\\ud800), which is no Unicode text: refused.
    (A search, not an encoding: no copy of a long document.) ``offset``: the characters
    of the document before ``text`` (a part of it), for the position in the message."""
    m = None if text.isascii() else _SURROGATE.search(text)
    if m:
        return SkipRecord(f"{where} holds a lone surrogate (\\u{ord(m.group()):04x} at "
                          f"character {offset + m.start()}), which is not Unicode text")
    return None


# -------------------------------------------------------------- long JSONL lines
# A JSON text has no '"' outside its strings, so the string tokens that a regex finds
# one after the other from the line's start are the line's strings, in order; what lies
# between them (white space, punctuation, numbers, literals) gives the nesting depth.

#: A JSONL line longer than this many bytes has its text found in the line's bytes and
#: decoded part by part (:func:`_long_record`), never whole.
STREAM_BYTES = 1 << 20
#: Bytes of a long JSON string decoded at once (:func:`_string_cuts`).
DECODE_BYTES = 1 << 20
#: A string value longer than this many bytes (the text's, or another field's) is left
#: out of the record that is parsed to check the rest of a long line, and checked part by
#: part instead.
LONG_STRING_BYTES = 4096

#: Bytes of a long line searched for quotes at once (:func:`_string_tokens`).
QUOTE_WINDOW = 4 << 20

_ESCAPE = re.compile(rb'\\(?:u[0-9a-fA-F]{4}|.)', re.S)
_HIGH_SURROGATE_ESCAPE = re.compile(rb'\\u[dD][89abAB][0-9a-fA-F]{2}')
_JSON_WS = b" \t\r\n"
_OBJECT_START = re.compile(rb'[ \t\r\n]*\{')


class TextChunks:
    """The text of a long JSONL record: the string at ``line[cuts[0]:cuts[-1]]`` (between
    its quotes), decoded part by part, ``cuts[i]:cuts[i + 1]`` at a time, each part a
    ``str``; their concatenation is what ``json.loads`` gives for the whole string.
    ``chars``: the text's length. Holds the line's bytes, never the whole text."""

    def __init__(self, line: bytes, cuts: list[int], chars: int):
        self.line, self.cuts, self.chars = line, cuts, chars

    def __iter__(self) -> Iterator[str]:
        for a, b in pairwise(self.cuts):
            yield _decode_part(self.line, a, b)


def _decode_part(line: bytes, a: int, b: int) -> str:
    """The characters that the bytes ``line[a:b]`` of a JSON string's content stand for,
    as ``json.loads(line)`` decodes them (UTF-8 with surrogates let through, then the
    escapes). Raises UnicodeDecodeError (positions relative to ``a``) or ValueError."""
    return str(json.loads('"' + line[a:b].decode("utf-8", "surrogatepass") + '"'))


def _string_cuts(line: bytes, start: int, end: int, size: int | None = None) -> list[int]:
    """Positions ``start = c0 < c1 < ... < cn = end`` that cut the content ``line[start:
    end]`` of a JSON string into parts of about ``size`` bytes (:data:`DECODE_BYTES`) that
    decode one by one to what the whole decodes to: no cut splits an escape, the two
    ``\\u`` escapes of a surrogate pair, or a UTF-8 sequence."""
    size = max(32, size or DECODE_BYTES)
    cuts, s = [start], start
    while end - s > size:
        p = s + size
        q = p
        while q > s + 16 and 0x80 <= line[q] < 0xC0 and p - q < 3:
            q -= 1                     # to the first byte of a UTF-8 sequence
        # escapes, scanned from a point inside none: s, or the start of a run of
        # backslashes (the byte before a run ends an escape or is no part of one)
        t = max(s, q - 16)
        while t > s and line[t - 1] == 0x5C:
            t -= 1
        before = None                  # the last escape that ends by q
        for m in _ESCAPE.finditer(line, t, min(end, q + 12)):
            if m.start() >= q:
                break
            if m.end() > q:
                q = m.start()          # not inside an escape
                break
            before = m
        if before and before.end() == q and _HIGH_SURROGATE_ESCAPE.fullmatch(before.group()):
            q = before.start()         # nor between the halves of a surrogate pair
        cuts.append(q)
        s = q
    cuts.append(end)
    return cuts


def _may_hold_surrogates(line: bytes, a: int, b: int) -> bool:
    """Whether the JSON string content ``line[a:b]`` may decode to a surrogate: it holds
    a \\u escape, or the byte 0xED that starts a surrogate's UTF-8 form (which json.loads
    lets through). Two byte searches, faster than searching the decoded text."""
    return line.find(b"\xed", a, b) >= 0 or line.find(b"\\u", a, b) >= 0


def _check_string(line: bytes, start: int, end: int) -> bool:
    """Whether ``line[start:end]`` (a string's content) is what json.loads takes."""
    cuts = _string_cuts(line, start, end)
    try:
        for a, b in pairwise(cuts):
            _decode_part(line, a, b)
    except ValueError:             # UnicodeDecodeError included
        return False
    return True


def _long_record(line: bytes, field_: str, where: str) -> (
        TextChunks | SkipRecord | tuple[UnicodeDecodeError, int] | None):
    """A long JSONL line's text without ``json.loads(line)``, which would hold the whole
    line decoded and the text besides. The text is the value of the last top-level key
    ``field_`` (json.loads keeps the last of duplicate keys), a string token of the line;
    the rest of the line is checked by parsing it with that string, and every other long
    string, taken out (each of those is checked part by part), the text part by part.

    Returns the text (:class:`TextChunks`), once all of it is checked; a SkipRecord
    where it holds a lone surrogate, or (error, offset) where it holds invalid UTF-8 at
    byte ``offset + error.start`` of the line, when that is the record's first fault; or
    None for anything else (invalid JSON, no such field, a value that is not a string),
    which the caller parses whole so that its error is every line's."""
    if not _OBJECT_START.match(line):
        return None
    depth, end = 0, 0
    text: tuple[int, int] | None = None   # the last top-level field_'s string token
    longs: list[tuple[int, int]] = []     # string values to take out: start, end
    limit = 12 * len(field_) + 2          # the longest spelling of field_ as a key
    tokens = _string_tokens(line)
    prev: tuple[int, int, int] | None = None   # the string token before: start, end, depth
    while True:
        m = next(tokens, None)
        s0, e0 = m if m else (len(line), len(line))
        if s0 < 0:
            return None                   # an unterminated string
        gap = line[end:s0]
        if b"\\" in gap:
            return None                   # a backslash outside strings: not JSON
        if prev is not None:              # what the gap after it says the one before is
            a, b, d = prev
            if gap.lstrip(_JSON_WS).startswith(b":"):                  # a key
                if d == 1 and b - a <= limit and _key_equals(line[a:b], field_):
                    text = (s0, e0) if m and gap.strip(_JSON_WS) == b":" else None
            elif b - a - 2 > LONG_STRING_BYTES or text == (a, b):      # a value
                longs.append((a, b))
        if m is None:
            break
        depth += gap.count(b"{") + gap.count(b"[") - gap.count(b"}") - gap.count(b"]")
        prev, end = (s0, e0, depth), e0
    del gap
    if text is None:
        return None
    # the rest of the record, its long strings as "" (keys are never taken out)
    parts, at = [], 0
    for s0, e0 in longs:
        parts += [line[at:s0], b'""']
        at = e0
    parts.append(line[at:])
    try:
        rec = json.loads(b"".join(parts))
    except ValueError:
        return None
    del parts
    if not isinstance(rec, dict) or rec.get(field_) != "":
        return None
    del rec
    for s0, e0 in longs:
        if (s0, e0) != text and not _check_string(line, s0 + 1, e0 - 1):
            return None
    cuts = _string_cuts(line, text[0] + 1, text[1] - 1)
    chars, lone = 0, None
    for a, b in pairwise(cuts):
        try:
            part = _decode_part(line, a, b)
        except UnicodeDecodeError as e:
            return e, a
        except ValueError:
            return None                 # a bad escape: parsed whole, for its message
        if lone is None and _may_hold_surrogates(line, a, b):
            lone = _surrogate_error(part, where, chars)
        chars += len(part)
    return lone if lone is not None else TextChunks(line, cuts, chars)


def _string_tokens(line: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each JSON string token of ``line`` (its quotes included), in order,
    as a JSON parser reads them from the line's start; (-1, -1) last where a string is not
    closed. A '"' closes a string unless an odd number of backslashes comes before it.
    The quotes are found by numpy a window at a time, and those with one backslash before
    them and no other before that (all but the closing one, in a text's string) are
    passed over there: a loop over each quote would take longer than the parsing."""
    import numpy as np

    view = np.frombuffer(line, dtype=np.uint8)
    start = -1                                  # the open string's quote
    for x in range(0, len(line), QUOTE_WINDOW):
        q = np.flatnonzero(view[x:x + QUOTE_WINDOW] == 0x22) + x
        # (q >= 1: a line starts with '{' or white space; view[0] is no backslash)
        esc = (view[q - 1] == 0x5C) & (view[np.maximum(q - 2, 0)] != 0x5C)
        for j in q[~esc].tolist():
            if start < 0:
                start = j                       # outside strings a '"' opens one
                continue
            k = j                               # the backslashes before it: k..j
            while line[k - 1] == 0x5C:          # stops at the opening quote at the latest
                k -= 1
            if not (j - k) & 1:
                yield start, j + 1
                start = -1
    if start >= 0:
        yield -1, -1


def _key_equals(token: bytes, key: str) -> bool:
    """Whether the JSON string token (quotes included) spells ``key``."""
    try:
        return bool(json.loads(token) == key)
    except ValueError:
        return False


class LinesReader(LineReader):
    def docs(self) -> Iterator[tuple[int, str] | SkipRecord]:
        for n, line in self.lines():
            if not line:
                continue
            try:
                yield n, line.decode("utf-8")
            except UnicodeDecodeError as e:
                yield _utf8_error(self.unit.path, str(n), line, e)


class TextReader(Reader):
    """One document per file: its bytes as they are (CRLF kept, a final newline kept), a
    UTF-8 BOM dropped."""

    def docs(self) -> Iterator[tuple[int, str] | SkipRecord]:
        path = self.unit.path
        with open(path, "rb") as f:
            data = f.read()
        self.done = len(data)
        if any(data.startswith(m) for m in COMPRESSED_MAGIC[:5]):
            raise InputError(f"{path}: compressed; a text file is read as it is: decompress "
                             "it, or pack it with --format lines (one document per line) "
                             "or as JSONL")
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        try:
            yield 0, data.decode("utf-8")
        except UnicodeDecodeError as e:
            yield SkipRecord(f"{path}: invalid UTF-8 at byte {e.start} (0x{data[e.start]:02x}); "
                             "the text must be UTF-8")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise InputError(f"Parquet and datasets inputs need the Python package 'pyarrow' in "
                         f"{sys.executable}: {INSTALL}")
    return pyarrow


class _ColumnReader(Reader):
    def _check_column(self, schema: Any) -> None:
        pa = _pyarrow()
        col = self.opts.column
        if col not in schema.names:
            raise InputError(f"{self.unit.path}: no column {col!r} (columns: "
                             f"{', '.join(schema.names)}); pass --column NAME")
        t = schema.field(col).type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise InputError(f"{self.unit.path}: column {col!r} is {t}, not a string column")

    def _rows(self, arr: Any, first: int) -> Iterator[tuple[int, str] | SkipRecord]:
        try:
            values = arr.to_pylist()
        except UnicodeDecodeError:
            values = None
        for i in range(len(arr)):
            v = values[i] if values is not None else None
            if values is None:
                try:
                    v = arr[i].as_py()
                except UnicodeDecodeError as e:
                    yield SkipRecord(f"{self.unit.path}: row {first + i}: invalid UTF-8 in "
                                     f"column {self.opts.column!r} ({e.reason})")
                    continue
            if v is None:
                yield SkipRecord(f"{self.unit.path}: row {first + i}: column "
                                 f"{self.opts.column!r} is null, not a string")
                continue
            yield first + i, v


class ParquetReader(_ColumnReader):
    """Row group by row group; rows are numbered from 0 in each file."""

    def docs(self) -> Iterator[tuple[int, str] | SkipRecord]:
        pa = _pyarrow()
        path = self.unit.path
        try:
            pf = pa.parquet.ParquetFile(path)
        except (pa.ArrowException, OSError) as e:
            raise InputError(f"{path}: not a Parquet file, or a corrupt one: {e}")
        self._check_column(pf.schema_arrow)
        row = 0
        md = pf.metadata
        for g in range(pf.num_row_groups):
            try:
                table = pf.read_row_group(g, columns=[self.opts.column])
                arr = table.column(self.opts.column).combine_chunks()
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"{path}: row group {g} (rows {row}-"
                                 f"{row + md.row_group(g).num_rows - 1}) is corrupt: {e}")
            del table
            yield from self._rows(arr, row)
            row += len(arr)
            self.done += md.row_group(g).total_byte_size
        self.done = self.unit.size


class ArrowReader(_ColumnReader):
    """An Arrow IPC file of a save_to_disk folder (the streaming format datasets writes,
    or the file format), batch by batch, memory-mapped; rows numbered from 0."""

    def docs(self) -> Iterator[tuple[int, str] | SkipRecord]:
        pa = _pyarrow()
        path = self.unit.path
        try:
            src = pa.memory_map(path)
            try:
                reader = pa.ipc.open_stream(src)
                batches = iter(reader)
            except pa.ArrowInvalid:
                reader = pa.ipc.open_file(src)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        except (pa.ArrowException, OSError) as e:
            raise InputError(f"{path}: not an Arrow IPC file, or a corrupt one: {e}")
        self._check_column(reader.schema)
        row = 0
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                break
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"{path}: corrupt after row {row}: {e}")
            arr = batch.column(self.opts.column)
            yield from self._rows(arr, row)
            row += len(arr)
            self.done = min(src.tell(), self.unit.size)
        self.done = self.unit.size


READERS = {"jsonl": JsonlReader, "lines": LinesReader, "text": TextReader,
           "parquet": ParquetReader, "arrow": ArrowReader}


# --------------------------------------------------------------------------- stream

@dataclass
class Batch:
    """Items of one input: whole documents, or pieces of one (a document longer than
    PIECE_CHARS); a document's pieces may run over several batches."""

    unit: int
    records: list[int] = field(default_factory=list)
    texts: list[Any] = field(default_factory=list)     # str, or a conversation (--chat)
    starts: list[bool] = field(default_factory=list)   # the item begins its document
    ends: list[bool] = field(default_factory=list)     # the item ends its document
    done: int = 0

    def add(self, record: int, text: Any, start: bool = True, end: bool = True) -> None:
        self.records.append(record)
        self.texts.append(text)
        self.starts.append(start)
        self.ends.append(end)


class Writer:
    """The records of core/pack/pack_text.c's stream, on a binary file."""

    def __init__(self, out: BinaryIO):
        self.out = out

    def _text(self, tag: bytes, s: str) -> None:
        b = s.encode("utf-8", errors="replace")[:65536]
        self.out.write(tag + struct.pack("<I", len(b)) + b)

    def header(self, fields: dict[str, Any]) -> None:
        self.out.write(MAGIC)
        self._text(b"", "".join(f"{k}={v}\n" for k, v in fields.items() if v is not None))

    def input(self, unit: Unit) -> None:
        self._text(b"I", f"{unit.kind}\t{unit.path}")
        self.out.write(struct.pack("<Q", unit.size))

    def batch(self, records: Any, lens: Any, ids: Any, masks: Any = None) -> None:
        self.out.write(b"B" + struct.pack("<IQ", len(lens), len(ids)))
        self.out.write(records.tobytes())
        self.out.write(lens.tobytes())
        self.out.write(ids.tobytes())
        if masks is not None:
            self.out.write(masks.tobytes())

    def mismatch(self, msg: str) -> None:
        self._text(b"W", msg)

    def cont(self, ids: Any) -> None:
        """The first tokens of a document that the next 'B' record's first one ends."""
        self.out.write(b"C" + struct.pack("<Q", len(ids)))
        self.out.write(ids.tobytes())

    def progress(self, done: int) -> None:
        self.out.write(b"P" + struct.pack("<Q", done))

    def skipped(self, msg: str) -> None:
        self._text(b"S", msg)

    def error(self, msg: str) -> None:
        self._text(b"X", msg)

    def end(self) -> None:
        self.out.write(b"Z")
        self.out.flush()


def cut_agrees(spec: TokenizerSpec, text: str, c: int) -> bool:
    """Whether cutting ``text`` at ``c`` keeps the tokenizer's ids: the text around the
    cut (:data:`CUT_CHECK_CHARS` on each side) encodes to the ids of its two sides, one
    after the other."""
    a, b = max(0, c - CUT_CHECK_CHARS), min(len(text), c + CUT_CHECK_CHARS)
    whole, left, right = spec.tokenizer.encode_batch_fast(
        [text[a:b], text[a:c], text[c:b]], add_special_tokens=False)
    return bool(whole.ids == left.ids + right.ids)


def _candidates(text: str, lo: int, hi: int) -> Iterator[int]:
    """Cut positions in (lo, hi], from hi down: first after a line break and before a
    character that is not a space (a pre-tokenizer's regex ends a piece there, whatever
    came before), then before a space that follows a character that is not one (pieces
    such as " word" start there)."""
    c = hi
    while (i := text.rfind("\n", lo, c)) >= 0:
        c = i
        if lo < i + 1 < len(text) and not text[i + 1].isspace():
            yield i + 1
    c = hi
    while (i := text.rfind(" ", lo, c)) >= 0:
        c = i
        if lo < i < len(text) and not text[i - 1].isspace():
            yield i


def piece_cuts(spec: TokenizerSpec, text: str, size: int = PIECE_CHARS,
               tries: int = 16) -> list[int]:
    """Where to cut ``text`` into pieces of at most about ``size`` characters whose ids,
    one after the other, are the ids of the whole text (without special tokens): at a
    candidate (:func:`_candidates`) in the second half of each piece that
    :func:`cut_agrees` accepts, trying ``tries`` of them; where none is accepted the piece
    grows by ``size`` and the search goes on. [] for a tokenizer that cannot be cut
    (:func:`_special_frame`) or a text of at most ``size`` characters."""
    cuts: list[int] = []
    if spec.prefix is None or len(text) <= size:
        return cuts
    start, hi = 0, size
    while len(text) - start > size and hi < len(text):
        for k, c in enumerate(_candidates(text, start + size // 2, hi)):
            if k >= tries:
                break
            if cut_agrees(spec, text, c):
                cuts.append(c)
                start, hi = c, c + size
                break
        else:
            hi += size                   # no cut here: a longer piece
    return cuts


def stream_pieces(spec: TokenizerSpec, chunks: Iterable[str], size: int = PIECE_CHARS,
                  tries: int = 16) -> Iterator[str]:
    """The pieces of the text that ``chunks`` make one after the other, cut where
    :func:`piece_cuts` cuts the whole text (the same pieces, for any text and any
    chunks), holding no more of the text than the piece being cut, the
    :data:`CUT_CHECK_CHARS` around its cut, and a chunk. A cut is looked for once the
    text is known to :data:`CUT_CHECK_CHARS` past the candidates (or to its end), which
    is all that :func:`piece_cuts` reads of it, so its choice is the same. For a
    tokenizer that can be cut (``spec.prefix`` is not None)."""
    assert spec.prefix is not None
    it = iter(chunks)
    buf, base = "", 0                  # buf is the text from character base on
    start, hi = 0, size                # as in piece_cuts
    ended = False
    while True:
        while not ended and base + len(buf) <= hi + CUT_CHECK_CHARS:
            chunk = next(it, None)
            if chunk is None:
                ended = True
                break
            keep = max(base, start - CUT_CHECK_CHARS)    # all that cut_agrees reads
            buf = buf[keep - base:] + chunk
            base = keep
            del chunk
        total = base + len(buf)        # the text's length, once ended
        if ended and not (total - start > size and hi < total):
            break
        for k, c in enumerate(_candidates(buf, start - base + size // 2, hi - base)):
            if k >= tries:
                break
            if cut_agrees(spec, buf, c):
                yield buf[start - base:c]
                start, hi = base + c, base + c + size
                break
        else:
            hi += size                   # no cut here: a longer piece
    yield buf[start - base:]


def encode_batch(spec: TokenizerSpec, texts: list[str], starts: list[bool] | None = None,
                 ends: list[bool] | None = None) -> tuple[Any, Any]:
    """(lens, ids) of the batch's items: uint32 arrays, ids concatenated. Each item is a
    whole document, ``[bos] + tokenizer ids + [eos]`` (see load_tokenizer), or a piece of
    one (``starts[i]``/``ends[i]`` False where it does not start/end its document):
    its ids without special tokens, with what the document has in front (``[bos] +
    prefix``) when it starts it, and behind (``suffix + [eos]``) when it ends it."""
    import numpy as np

    n = len(texts)
    starts = starts or [True] * n
    ends = ends or [True] * n
    whole = [i for i in range(n) if starts[i] and ends[i]]
    parts = [i for i in range(n) if not (starts[i] and ends[i])]
    encode = getattr(spec.tokenizer, "encode_batch_fast", spec.tokenizer.encode_batch)
    idlists: list[list[int]] = [[] for _ in range(n)]
    for i, e in zip(whole, encode([texts[i] for i in whole]), strict=True):
        idlists[i] = e.ids
    if parts:
        assert spec.prefix is not None and spec.suffix is not None   # piece_cuts' rule
        for i, e in zip(parts, encode([texts[i] for i in parts], add_special_tokens=False),
                        strict=True):
            idlists[i] = (spec.prefix if starts[i] else []) + e.ids + \
                (spec.suffix if ends[i] else [])
    lens = np.fromiter((len(x) + (spec.bos is not None and starts[i]) +
                        (spec.eos is not None and ends[i]) for i, x in enumerate(idlists)),
                       dtype="<u4", count=n)
    ids = np.empty(int(lens.sum(dtype=np.uint64)), dtype="<u4")
    pos = 0
    for i, x in enumerate(idlists):
        if spec.bos is not None and starts[i]:
            ids[pos] = spec.bos
            pos += 1
        k = len(x)
        ids[pos:pos + k] = x
        pos += k
        if spec.eos is not None and ends[i]:
            ids[pos] = spec.eos
            pos += 1
    return lens, ids


def send_batch(w: Writer, b: Batch, lens: Any, ids: Any) -> None:
    """The batch's items as the packer's records: the documents it ends in one 'B' (the
    first of them begun by 'C' records of earlier batches where b.starts[0] is False),
    then a 'C' with the ids of the document it begins and does not end."""
    import numpy as np

    ends = [i for i, e in enumerate(b.ends) if e]
    cut = ends[-1] + 1 if ends else 0
    if ends:
        first = 0
        doc_lens, records = [], []
        for i in ends:
            doc_lens.append(int(lens[first:i + 1].sum()))
            records.append(b.records[i])
            first = i + 1
        ntok = int(lens[:cut].sum())
        w.batch(np.asarray(records, dtype="<u8"), np.asarray(doc_lens, dtype="<u4"),
                ids[:ntok])
    if cut < len(lens):
        w.cont(ids[int(lens[:cut].sum()):])


def run(args: argparse.Namespace, out: BinaryIO) -> int:
    """Pack-side work: plan, load, stream. 0, or 1 after an 'X' record."""
    w = Writer(out)
    opts = Options(text_field=args.text_field, column=args.column, split=args.split,
                   format=args.format, skip_bad=args.skip_bad, zephon=args.zephon)
    template = None
    head: dict[str, Any] = {}
    try:
        extra: tuple[str, ...] = ()
        if args.chat:
            from . import pack_chat
            opts.chat = pack_chat.ChatOptions(
                messages_field=args.messages_field or "messages",
                prompt_field=args.prompt_field, response_field=args.response_field,
                mismatch=args.prompt_mismatch, max_context=args.max_context_length)
            template, jinja = pack_chat.load_template(os.path.normpath(args.tokenizer))
            extra = (jinja,) if jinja else ()
            head = {"masks": 1, "chat": opts.chat.form, "prompt_mismatch": opts.chat.mismatch}
        spec = load_tokenizer(args.tokenizer, args.eod_token, extra)
        if args.chat and spec.eos_id is None:
            raise InputError("--chat needs a tokenizer with an EOS token (TorchTitan's "
                             "ChatProcessor refuses one without): its tokenizer_config.json "
                             "names no eos_token")
        dtype = choose_dtype(spec.vocab_size, args.dtype)
        units = plan_inputs(args.inputs, opts)
        if args.chat:
            for u in units:
                pack_chat.chat_reader(u.kind)
    except InputError as e:
        w.header({"error": str(e).replace("\n", " ")})
        out.flush()
        return 1
    w.header({"dtype": dtype, "eod": spec.eod, "bos": spec.bos, "vocab_size": spec.vocab_size,
              "tokenizer": spec.name, "tokenizer_sha256": spec.sha256,
              # where it was (zephon.recipes sets the model's hf_assets_path from it); a
              # path the header's lines cannot carry is not recorded
              "tokenizer_path": None if "\n" in spec.path else spec.path,
              "input_bytes": sum(u.size for u in units), **head})
    q: queue.Queue = queue.Queue(maxsize=2)

    def produce() -> None:
        try:
            read_batches(units, opts, q.put, spec)
        except BaseException as e:  # handed to the main thread, which reports it
            q.put(("error", e))

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    while True:
        item = q.get()
        if item is None:
            break
        if isinstance(item, tuple):
            kind, val = item
            if kind == "input":
                w.input(units[val])
            elif kind == "skip":
                w.skipped(val)
            else:
                if isinstance(val, InputError):
                    w.error(str(val))
                    out.flush()
                    return 1
                raise val
            continue
        # the bytes first: the packer redraws its bar when the batch is in
        w.progress(item.done)
        if item.texts and template is not None:
            try:
                chat_batch(w, spec, template, units[item.unit], item, opts)
            except InputError as e:
                w.error(str(e))
                out.flush()
                return 1
        elif item.texts:
            lens, ids = encode_batch(spec, item.texts, item.starts, item.ends)
            send_batch(w, item, lens, ids)
    w.end()
    return 0


def chat_batch(w: Writer, spec: TokenizerSpec, template: Any, unit: Unit, item: Batch,
               opts: Options) -> None:
    """A batch of conversations (--chat) tokenized with their masks onto w, each sample
    whose prompt is not a prefix reported; a conversation the template refuses is a bad
    record (InputError, or skipped with --skip-bad)."""
    import numpy as np

    from .pack_chat import encode_chat

    sep = ": row " if unit.kind in ("parquet", "arrow") else ":"
    where = [f"{unit.path}{sep}{r}" for r in item.records]
    enc = encode_chat(spec, template, item.texts, where, opts.chat)
    for bad in enc.bad:
        if not opts.skip_bad:
            raise bad
        w.skipped(f"{bad}; skipped")
    for msg in enc.warnings:
        w.mismatch(msg)
    if enc.keep:
        records = np.asarray([item.records[c] for c in enc.keep], dtype="<u8")
        w.batch(records, enc.lens, enc.ids, enc.masks)


def read_batches(units: list[Unit], opts: Options, put: Any,
                 spec: TokenizerSpec | None = None) -> None:
    """Every document of every unit, in order, as Batches (never spanning units), with
    ("input", k) before unit k's and ("skip", msg) for each bad record skipped
    (--skip-bad), passed to put; then None. A document longer than PIECE_CHARS is cut
    into pieces (:func:`piece_cuts`, with ``spec``'s tokenizer). Batch boundaries and
    cuts depend on the data alone, never on timing or cores, so the output is the same on
    any machine. A bad record without --skip-bad raises its SkipRecord."""
    for k, unit in enumerate(units):
        put(("input", k))
        if opts.chat is not None:
            from .pack_chat import chat_reader
            reader = chat_reader(unit.kind)(unit, opts)
        else:
            reader = READERS[unit.kind](unit, opts)
        b, chars = Batch(k), 0
        for item in reader.docs():
            if isinstance(item, SkipRecord):
                if not opts.skip_bad:
                    raise item
                put(("skip", f"{item}; skipped"))
                continue
            rec, text = item
            if opts.chat is not None or not isinstance(text, (str, TextChunks)):
                # a conversation (--chat), whole: it counts its messages' text
                b.add(rec, text)
                chars += len(text) if isinstance(text, str) else sum(len(m["content"])
                                                                     for m in text)
                if chars >= BATCH_CHARS or len(b.texts) >= BATCH_DOCS:
                    b.done = reader.done
                    put(b)
                    b, chars = Batch(k), 0
                continue
            for piece, first, last in _pieces(spec, text):
                b.add(rec, piece, first, last)
                chars += len(piece)
                if chars >= BATCH_CHARS or len(b.texts) >= BATCH_DOCS:
                    b.done = reader.done
                    put(b)
                    b, chars = Batch(k), 0
                del piece
            del text, item
        b.done = unit.size
        put(b)
    put(None)


def _pieces(spec: TokenizerSpec | None, text: str | TextChunks) -> Iterator[tuple[str, bool,
                                                                                bool]]:
    """A document's pieces (:func:`piece_cuts`), each with whether it is its first and
    its last. Text that comes in chunks (a long JSONL record) is cut as it comes
    (:func:`stream_pieces`), except for a tokenizer that cannot be cut, which gets the
    text whole."""
    if isinstance(text, TextChunks):
        if spec is None or spec.prefix is None:
            text = "".join(text)
        else:
            pieces = stream_pieces(spec, text, PIECE_CHARS)
            del text
            piece = next(pieces)
            first = True
            for after in pieces:       # one piece behind: the last is known to be last
                yield piece, first, False
                piece, first = after, False
                del after
            yield piece, first, True
            return
    bounds = [0, *(piece_cuts(spec, text, PIECE_CHARS) if spec else []), len(text)]
    last = len(bounds) - 2
    for j in range(last + 1):
        yield (text if last == 0 else text[bounds[j]:bounds[j + 1]]), j == 0, j == last


def main(argv: list[str] | None = None) -> int:
    """``python -m zephon.pack_text``: what ``zephon pack --tokenizer`` runs."""
    # an interrupted pack: the packer removes its work; this process just ends
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(prog="zephon pack --tokenizer", description=__doc__)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--zephon", default="zephon")
    ap.add_argument("--text-field", default="text")
    ap.add_argument("--column", default="text")
    ap.add_argument("--split", default=None)
    ap.add_argument("--format", default="auto",
                    choices=["auto", "jsonl", "lines", "text", "parquet", "arrow"])
    ap.add_argument("--dtype", default=None, choices=sorted(DTYPE_MAX))
    ap.add_argument("--eod-token", type=int, default=None)
    ap.add_argument("--skip-bad", action="store_true")
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--messages-field", default=None)
    ap.add_argument("--prompt-field", default=None)
    ap.add_argument("--response-field", default=None)
    ap.add_argument("--prompt-mismatch", default="drop", choices=["drop", "keep"])
    ap.add_argument("--max-context-length", type=int, default=None)
    ap.add_argument("inputs", nargs="+")
    args = ap.parse_args(argv)
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the stream
    return run(args, out)


if __name__ == "__main__":
    # run as zephon.pack_text, the module zephon.pack_chat imports (not a second copy of
    # it named __main__, whose InputError and SkipRecord would be other classes)
    from zephon.pack_text import main as _main
    sys.exit(_main())
