"""The on-disk index layout (docs/FORMAT.md): meta.json, shard directories, document metadata.

The binary shard files (tokens.bin, sa.bin, docs.bin, unigram.bin) are written and validated by
the C core; this module owns the JSON side and the document-metadata files.
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .errors import IndexFormatError

FORMAT_NAME = "infinigram_hf-index"
FORMAT_VERSION = 1
META_FILE = "meta.json"
DOCMETA_FILE = "docmeta.jsonl"
DOCMETA_INDEX_FILE = "docmeta.idx"
SHARD_FILES = ("tokens.bin", "sa.bin", "docs.bin", "unigram.bin")
HEADER_SIZE = 64
_HEADER = struct.Struct("<8sIIQQQ24x")
MAX_META_BYTES = 16 << 20  # meta.json is small; refuse to parse anything huge


def shard_dir_name(i: int) -> str:
    return f"shard_{i:05d}"


def token_width_for(vocab_size: int) -> int:
    """Smallest width whose largest value (the separator) is not a valid id."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    for width in (1, 2, 4):
        if vocab_size <= (1 << (8 * width)) - 1 - (width == 4):
            return width
    raise ValueError(f"vocab_size {vocab_size} is too large (at most 2**32 - 2)")


def separator_for(width: int) -> int:
    return (1 << (8 * width)) - 1


def write_meta(index_dir: Path, meta: dict[str, Any]) -> None:
    path = Path(index_dir) / META_FILE
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


_REQUIRED = {
    "format": str, "format_version": int, "vocab_size": int, "token_width": int,
    "separator_id": int, "num_tokens": int, "num_docs": int, "shards": list,
}


def read_meta(index_dir: Path) -> dict[str, Any]:
    """Parse and check meta.json as plain data (no code, no paths outside the index)."""
    path = Path(index_dir) / META_FILE
    try:
        size = path.stat().st_size
    except (FileNotFoundError, NotADirectoryError):
        raise IndexFormatError(f"{path}: missing; {index_dir} is not an infinigram_hf index") from None
    if size > MAX_META_BYTES:
        raise IndexFormatError(f"{path}: {size} bytes is too large for index metadata")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8 / JSON, ints past the digit limit, deep nesting
        raise IndexFormatError(f"{path}: not valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    except OSError as exc:  # a directory, unreadable, ...
        raise IndexFormatError(f"{path}: cannot be read ({exc.strerror})") from None
    if not isinstance(meta, dict):
        raise IndexFormatError(f"{path}: expected a JSON object")
    for key, typ in _REQUIRED.items():
        if not isinstance(meta.get(key), typ) or isinstance(meta.get(key), bool):
            raise IndexFormatError(f"{path}: field {key!r} is missing or not a {typ.__name__}")
    if meta["format"] != FORMAT_NAME:
        raise IndexFormatError(f"{path}: format {meta['format']!r} is not {FORMAT_NAME!r}")
    if meta["format_version"] != FORMAT_VERSION:
        raise IndexFormatError(
            f"{path}: format version {meta['format_version']}, this version of infinigram_hf "
            f"reads version {FORMAT_VERSION}")
    if meta["token_width"] not in (1, 2, 4) or meta["separator_id"] != separator_for(meta["token_width"]):
        raise IndexFormatError(f"{path}: token width / separator id are inconsistent")
    for i, shard in enumerate(meta["shards"]):
        if not isinstance(shard, dict) or shard.get("dir") != shard_dir_name(i):
            raise IndexFormatError(f"{path}: shard entry {i} must name directory {shard_dir_name(i)!r}")
    if not meta["shards"]:
        raise IndexFormatError(f"{path}: the index has no shards")
    return meta


# ---------------------------------------------------------------- document metadata

class DocMetaWriter:
    """Streams one JSON line per document, then a u64 offset index with the common header."""

    def __init__(self, shard_dir: Path):
        self.dir = Path(shard_dir)
        self._f = open(self.dir / DOCMETA_FILE, "wb")
        self._offsets = [0]

    def add(self, record: Optional[dict]) -> None:
        line = json.dumps(record or {}, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
        self._f.write(line)
        self._offsets.append(self._offsets[-1] + len(line))

    def close(self) -> int:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        arr = np.asarray(self._offsets, dtype="<u8")
        with open(self.dir / DOCMETA_INDEX_FILE, "wb") as f:
            f.write(_HEADER.pack(b"IGHF-DMI", FORMAT_VERSION, 8, len(arr), len(arr) - 1, 0))
            f.write(arr.tobytes())
            f.flush()
            os.fsync(f.fileno())
        return len(arr) - 1

    def abort(self) -> None:
        if not self._f.closed:
            self._f.close()


class DocMetadata:
    """Random access to one shard's per-document metadata (memory-mapped)."""

    def __init__(self, shard_dir: Path, num_docs: int):
        self.path = Path(shard_dir) / DOCMETA_FILE
        idx_path = Path(shard_dir) / DOCMETA_INDEX_FILE
        self.available = self.path.exists() and idx_path.exists()
        if not self.available:
            if self.path.exists() or idx_path.exists():  # one without the other is damage
                missing, present = (idx_path, self.path) if self.path.exists() else (self.path, idx_path)
                raise IndexFormatError(f"{missing}: missing while {present.name} is there; the document "
                                       "metadata is damaged")
            return
        raw = idx_path.read_bytes()
        if len(raw) < HEADER_SIZE:
            raise IndexFormatError(f"{idx_path}: truncated")
        magic, version, width, count, ndocs, _ = _HEADER.unpack_from(raw)
        if magic != b"IGHF-DMI" or version != FORMAT_VERSION or width != 8:
            raise IndexFormatError(f"{idx_path}: bad header")
        if count != num_docs + 1 or ndocs != num_docs or len(raw) != HEADER_SIZE + 8 * count:
            raise IndexFormatError(f"{idx_path}: holds {count} offsets, expected {num_docs + 1}")
        self.offsets = np.frombuffer(raw, dtype="<u8", offset=HEADER_SIZE)
        size = self.path.stat().st_size
        if self.offsets[-1] != size or np.any(np.diff(self.offsets.astype(np.int64)) < 0):
            raise IndexFormatError(f"{self.path}: does not match {idx_path.name} (size {size})")
        self._fd = os.open(self.path, os.O_RDONLY)

    def get(self, doc: int) -> dict:
        if not self.available:
            return {}
        start, end = int(self.offsets[doc]), int(self.offsets[doc + 1])
        line = os.pread(self._fd, end - start, start)  # no shared file position: thread-safe
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # (JSON, UTF-8, ints past the digit limit, deep nesting)
            raise IndexFormatError(f"{self.path}: line {doc + 1} is not valid JSON") from None
        return value if isinstance(value, dict) else {"value": value}

    def close(self) -> None:
        if self.available and self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
