"""The official infini-gram (2.6.0) on-disk layout: recognising a directory, pairing its shard
files, and reading its document metadata. The C core serves the shards in place
(``ig_open_mixed_at``, native/src/official.c); nothing here writes into the directory.

Layout (per shard suffix ``s``, e.g. ``.0``, or none for one unsuffixed shard):
``tokenized{s}`` (tokens, a separator before each document), ``table{s}`` (suffix array of byte
offsets), ``offset{s}`` (u64 byte offset of each document's separator), optionally
``metadata{s}`` / ``metaoff{s}`` (one record per document, and u64 offsets of the records).
The files hold no token width, vocabulary or eos id: the caller gives them.

Example:
    >>> layout = detect(Path("v4_pileval_llama"))  # doctest: +SKIP
    >>> layout.suffixes, layout.token_width
    (['.0', '.1'], 2)
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .errors import IndexFormatError, InfiniGramError
from .index_files import IndexDir, read_exactly

_KINDS = ("tokenized", "table", "offset", "metadata", "metaoff")
_NAME = re.compile(r"^(tokenized|table|offset|metadata|metaoff)(\..+)?$")
SEPARATORS = {1: 0xFF, 2: 0xFFFF, 4: 0xFFFFFFFF}


@dataclass
class OfficialLayout:
    """The shards of one official index directory, in the official engine's order."""
    path: Path
    suffixes: list[str]          # one per shard: tokenized{suffix} ...
    has_metadata: bool
    token_width: Optional[int]   # inferred from the file sizes, or None when ambiguous
    tokenized_sizes: list[int]
    table_sizes: list[int]


def looks_official(path: Path) -> bool:
    """True when the directory holds no meta.json but official shard files."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return "meta.json" not in names and any(_NAME.match(n) and n.startswith("tokenized") for n in names)


def detect(root: IndexDir) -> OfficialLayout:
    """Classify the files of an official index directory and pair them into shards. Like the
    official engine, each kind is sorted as strings and shard i takes the i-th of each kind;
    unlike it, a stray or unpaired file is an error naming it instead of a crash."""
    path = root.path
    by_kind: dict[str, dict[str, str]] = {k: {} for k in _KINDS}
    for name in os.listdir(root.fd):
        m = _NAME.match(name)
        if m:
            by_kind[m.group(1)][m.group(2) or ""] = name
    tok = by_kind["tokenized"]
    if not tok:
        raise IndexFormatError(f"{path}: neither meta.json nor official infini-gram files (tokenized.*)")
    suffixes = sorted(tok, key=lambda s: tok[s])  # (the engine sorts full paths as strings)
    for kind in ("table", "offset"):
        if sorted(by_kind[kind]) != sorted(suffixes):
            missing = sorted(set(suffixes) - set(by_kind[kind])) or sorted(set(by_kind[kind]) - set(suffixes))
            raise IndexFormatError(f"{path / (kind + (missing[0] if missing else ''))}: the {kind} files do not pair with "
                                   f"the tokenized files ({', '.join(tok[s] for s in suffixes)})")
    meta, moff = by_kind["metadata"], by_kind["metaoff"]
    if meta or moff:
        if sorted(meta) != sorted(suffixes) or sorted(moff) != sorted(suffixes):
            raise IndexFormatError(f"{path}: metadata/metaoff files must exist for every shard or for none")
    tsizes, asizes = [], []
    for s in suffixes:
        tsizes.append(_size(root, "tokenized" + s))
        asizes.append(_size(root, "table" + s))
    return OfficialLayout(path, suffixes, bool(meta), _infer_width(root, suffixes, tsizes, asizes), tsizes, asizes)


def _size(root: IndexDir, name: str) -> int:
    fd, st = root.open_file(name)
    os.close(fd)
    return st.st_size


def _infer_width(root: IndexDir, suffixes: list[str], tsizes: list[int], asizes: list[int]) -> Optional[int]:
    """The token width every shard agrees with: the file starts with a separator of that width
    and the table holds ceil(log2(bytes) / 8) bytes per token (the official indexer's rule)."""
    fits = []
    for w in (1, 2, 4):
        ok = True
        for s, ds, ts in zip(suffixes, tsizes, asizes):
            if ds == 0 or ds % w or ts % (ds // w):
                ok = False
                break
            ratio = ts // (ds // w)
            if ratio != max(1, math.ceil(math.log2(max(ds, 2)) / 8)):
                ok = False
                break
            fd, _ = root.open_file("tokenized" + s)
            try:
                head = os.pread(fd, w, 0)
            finally:
                os.close(fd)
            if head != b"\xff" * w:
                ok = False
                break
        if ok:
            fits.append(w)
    return fits[0] if len(fits) == 1 else None


def resolve_vocab(layout: OfficialLayout, token_width: Optional[int], vocab_size: Optional[int],
                  eos_token_id: Optional[int], tokenizer: Any) -> tuple[int, int, Optional[int]]:
    """(token_width, vocab_size, eos_token_id) from the arguments, the tokenizer and the files,
    with a ValueError naming the argument that is missing or inconsistent."""
    if tokenizer is not None:
        tv = len(tokenizer)
        if vocab_size is not None and vocab_size < tv:
            raise ValueError(f"vocab_size={vocab_size} is smaller than the tokenizer's {tv} ids")
        vocab_size = vocab_size if vocab_size is not None else tv
        if eos_token_id is None:
            eos_token_id = getattr(tokenizer, "eos_token_id", None)
    if vocab_size is None:
        raise ValueError(f"{layout.path} is an official infini-gram index, which does not store its vocabulary: "
                         f"pass vocab_size= (or tokenizer=)")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive int, got {vocab_size!r}")
    if token_width is None:
        token_width = layout.token_width
        if token_width is None:
            raise ValueError(f"{layout.path}: cannot tell the token width from the file sizes; pass token_width= "
                             f"(1 for u8, 2 for u16, 4 for u32: the official token_dtype)")
    if token_width not in SEPARATORS:
        raise ValueError(f"token_width must be 1, 2 or 4, got {token_width!r}")
    if vocab_size > SEPARATORS[token_width]:
        raise ValueError(f"vocab_size={vocab_size} does not fit {token_width}-byte tokens (at most "
                         f"{SEPARATORS[token_width]} ids besides the separator); this index needs token_width="
                         f"{2 if vocab_size <= 0xFFFF else 4} or a smaller vocabulary")
    if eos_token_id is not None and not (0 <= int(eos_token_id) < vocab_size):
        raise ValueError(f"eos_token_id={eos_token_id} is outside the vocabulary (size {vocab_size})")
    return int(token_width), int(vocab_size), None if eos_token_id is None else int(eos_token_id)


def synthetic_meta(layout: OfficialLayout, token_width: int, vocab_size: int, eos_token_id: Optional[int],
                   tokenizer_name: Optional[str]) -> dict[str, Any]:
    """A meta.json-like dict for an official directory (sizes are filled in after open)."""
    return {
        "format": "infini-gram-official",
        "format_version": 4,
        "tokenizer_name": tokenizer_name,
        "vocab_fingerprint": None,
        "eos_token_id": eos_token_id,
        "vocab_size": vocab_size,
        "token_width": token_width,
        "separator_id": SEPARATORS[token_width],
        "num_tokens": None,
        "num_docs": None,
        "official": {"suffixes": layout.suffixes, "metadata": layout.has_metadata},
        "shards": [{"dir": ".", "suffix": s} for s in layout.suffixes],
    }


class OfficialMetadata:
    """Random access to one official shard's document records (metadata{s} at the offsets of
    metaoff{s}). A record that is a JSON object is returned parsed; otherwise {"raw": text}.
    Same contract as format.DocMetadata: read only while the index's handle is held."""

    def __init__(self, root: IndexDir, suffix: str, num_docs: int, present: bool):
        self.available = present
        self._fd = -1
        if not present:
            return
        self.path = root.path / ("metadata" + suffix)
        fd, st = root.open_file("metaoff" + suffix)
        try:
            if st.st_size != 8 * num_docs:
                raise IndexFormatError(f"{root.path / ('metaoff' + suffix)}: {st.st_size} bytes, expected "
                                       f"{8 * num_docs} ({num_docs} documents)")
            offs = np.frombuffer(read_exactly(fd, st.st_size, root.path / ("metaoff" + suffix)), dtype="<u8")
        finally:
            os.close(fd)
        mfd, mst = root.open_file("metadata" + suffix)
        ends = np.append(offs, np.uint64(mst.st_size))
        if len(offs) and (offs[0] != 0 or np.any(np.diff(ends.astype(np.int64)) < 0)):
            os.close(mfd)
            raise IndexFormatError(f"{root.path / ('metaoff' + suffix)}: offsets are not increasing within "
                                   f"{self.path.name} ({mst.st_size} bytes)")
        self.offsets = ends
        self._fd = mfd

    def get(self, doc: int) -> dict:
        if not self.available:
            return {}
        if self._fd < 0:
            raise InfiniGramError("the index is closed")
        start, end = int(self.offsets[doc]), int(self.offsets[doc + 1])
        raw = os.pread(self._fd, end - start, start)
        text = raw.decode("utf-8", errors="replace")
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return {"raw": text}
        return value if isinstance(value, dict) else {"raw": text}

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
