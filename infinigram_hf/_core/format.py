"""The on-disk index layout (docs/FORMAT.md): meta.json, shard directories, document metadata.

The binary shard files (tokens.bin, sa.bin, docs.bin, unigram.bin) are written and validated by
the C core; this module owns the JSON side and the document-metadata files.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import reprlib
import struct
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import numpy as np

from .index_files import IndexDir, read_exactly
from .errors import IndexFormatError, InfiniGramError

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


def _create_new(path: Path, mode: str) -> Any:
    """Open `path` as a new file (an old one of that name is unlinked, never truncated: another
    process may be reading it)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return open(path, mode.replace("w", "x"), **({} if "b" in mode else {"encoding": "utf-8"}))


def write_meta(index_dir: Path, meta: dict[str, Any]) -> None:
    path = Path(index_dir) / META_FILE
    with _create_new(path, "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


_REQUIRED = {
    "format": str, "format_version": int, "vocab_size": int, "token_width": int,
    "separator_id": int, "num_tokens": int, "num_docs": int, "shards": list,
}
_MAX_COUNT = 2**63 - 1  # num_tokens / num_docs: what the C core's uint64 counters and int64 sizes hold
_MAX_TOKEN_ID = 2**32 - 2  # the largest id of a 4-byte vocabulary (2**32 - 1 is its separator)
_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxlong, _SHOWN.maxother, _SHOWN.maxlevel = 60, 24, 60, 2
_SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxtuple = 4


def shown(value: Any) -> str:
    """A value read from an index file, as an error message may echo it: short (a 4,000-digit
    integer or a 16 MB string is cut) and with control characters escaped (repr)."""
    return _SHOWN.repr(value)


@contextlib.contextmanager
def _opened(index_dir: Union[Path, IndexDir]) -> Iterator[IndexDir]:
    if isinstance(index_dir, IndexDir):
        yield index_dir
    else:
        with IndexDir.open_root(index_dir) as d:
            yield d


def read_meta(index_dir: Union[Path, IndexDir]) -> dict[str, Any]:
    """Parse and check meta.json as plain data (no code, no paths outside the index). meta.json is
    opened inside the index directory without following a link (see index_files.py)."""
    with _opened(index_dir) as d:
        path = d.path / META_FILE
        raw = d.read_file(META_FILE, MAX_META_BYTES)
        if raw is None:
            raise IndexFormatError(f"{path}: missing; {d.path} is not an infinigram_hf index")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8 / JSON, ints past the digit limit, deep nesting
        raise IndexFormatError(f"{path}: not valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(meta, dict):
        raise IndexFormatError(f"{path}: expected a JSON object")
    for key, typ in _REQUIRED.items():
        if not isinstance(meta.get(key), typ) or isinstance(meta.get(key), bool):
            raise IndexFormatError(f"{path}: field {key!r} is missing or not a {typ.__name__}")
    if meta["format"] != FORMAT_NAME:
        raise IndexFormatError(f"{path}: format {shown(meta['format'])} is not {FORMAT_NAME!r}")
    if meta["format_version"] != FORMAT_VERSION:
        raise IndexFormatError(
            f"{path}: format version {shown(meta['format_version'])}, this version of infinigram_hf "
            f"reads version {FORMAT_VERSION}")
    if meta["token_width"] not in (1, 2, 4) or meta["separator_id"] != separator_for(meta["token_width"]):
        raise IndexFormatError(f"{path}: token width / separator id are inconsistent")
    if not 1 <= meta["vocab_size"] <= _MAX_TOKEN_ID:
        raise IndexFormatError(f"{path}: vocab_size {shown(meta['vocab_size'])} is not between 1 and {_MAX_TOKEN_ID}")
    for key in ("num_tokens", "num_docs"):
        if not 0 <= meta[key] <= _MAX_COUNT:
            raise IndexFormatError(f"{path}: {key} {shown(meta[key])} is not between 0 and 2**63 - 1")
    eos = meta.get("eos_token_id")
    if eos is not None and (not isinstance(eos, int) or isinstance(eos, bool) or not 0 <= eos <= _MAX_TOKEN_ID):
        raise IndexFormatError(f"{path}: eos_token_id {shown(eos)} is not a token id (an int from 0 to "
                               f"{_MAX_TOKEN_ID}) or null")
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
        self._f = _create_new(self.dir / DOCMETA_FILE, "wb")
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
        with _create_new(self.dir / DOCMETA_INDEX_FILE, "wb") as f:
            f.write(_HEADER.pack(b"IGHF-DMI", FORMAT_VERSION, 8, len(arr), len(arr) - 1, 0))
            f.write(arr.tobytes())
            f.flush()
            os.fsync(f.fileno())
        return len(arr) - 1

    def abort(self) -> None:
        if not self._f.closed:
            self._f.close()


class DocMetadata:
    """Random access to one shard's per-document metadata: docmeta.idx is read (after its size is
    checked: num_docs + 1 offsets), docmeta.jsonl stays open and each line is read with one pread.

    Not locked: InfiniGramIndex reads it only while it holds its C handle (see index._Query), and
    closes it only when the last reference to that handle goes -- a descriptor closed under a
    reader would let it read whatever file took the number next.
    """

    def __init__(self, shard: Union[Path, IndexDir], num_docs: int):
        with _opened(shard) as d:
            self.path = d.path / DOCMETA_FILE
            idx_path = d.path / DOCMETA_INDEX_FILE
            self._fd = -1
            jsonl = d.open_file(DOCMETA_FILE, optional=True)
            try:
                idx = d.open_file(DOCMETA_INDEX_FILE, optional=True)
            except BaseException:
                if jsonl is not None:
                    os.close(jsonl[0])
                raise
        self.available = jsonl is not None and idx is not None
        if not self.available:
            for opened in (jsonl, idx):
                if opened is not None:
                    os.close(opened[0])
            if jsonl is not None or idx is not None:  # one without the other is damage
                missing, present = (idx_path, self.path) if jsonl is not None else (self.path, idx_path)
                raise IndexFormatError(f"{missing}: missing while {present.name} is there; the document "
                                       "metadata is damaged")
            return
        try:
            self.offsets = self._read_offsets(idx[0], idx[1].st_size, idx_path, num_docs)
            size = jsonl[1].st_size
            if self.offsets[-1] != size or np.any(np.diff(self.offsets.astype(np.int64)) < 0):
                raise IndexFormatError(f"{self.path}: does not match {idx_path.name} (size {size})")
        except BaseException:
            os.close(jsonl[0])
            raise
        finally:
            os.close(idx[0])
        self._fd = jsonl[0]

    @staticmethod
    def _read_offsets(fd: int, size: int, idx_path: Path, num_docs: int) -> np.ndarray:
        # the size first: the file is read only when it holds exactly what num_docs asks for
        # (a sparse 8 GiB file was once read whole before being refused)
        want = HEADER_SIZE + 8 * (num_docs + 1)
        if size != want:
            raise IndexFormatError(f"{idx_path}: {size} bytes, expected {want} ({num_docs + 1} offsets for "
                                   f"{num_docs} documents)")
        raw = read_exactly(fd, want, idx_path)
        magic, version, width, count, ndocs, _ = _HEADER.unpack_from(raw)
        if magic != b"IGHF-DMI" or version != FORMAT_VERSION or width != 8:
            raise IndexFormatError(f"{idx_path}: bad header")
        if count != num_docs + 1 or ndocs != num_docs:
            raise IndexFormatError(f"{idx_path}: its header says {shown(count)} offsets for {shown(ndocs)} "
                                   f"documents, expected {num_docs + 1} for {num_docs}")
        return np.frombuffer(raw, dtype="<u8", offset=HEADER_SIZE)

    def get(self, doc: int) -> dict:
        if not self.available:
            return {}
        if self._fd < 0:
            raise InfiniGramError("the index is closed")
        start, end = int(self.offsets[doc]), int(self.offsets[doc + 1])
        line = os.pread(self._fd, end - start, start)  # no shared file position: thread-safe
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # (JSON, UTF-8, ints past the digit limit, deep nesting)
            raise IndexFormatError(f"{self.path}: line {doc + 1} is not valid JSON") from None
        return value if isinstance(value, dict) else {"value": value}

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def official_bytes_per_token(num_tokens: int, vocab_size: int) -> int:
    """The official infini-gram engine's footprint: u16 tokens (u32 above 65535 ids) plus a
    suffix-array pointer of ceil(log2(token bytes) / 8) bytes: 2 + ceil(log2(2N)/8) for u16."""
    width = 2 if vocab_size <= 65535 else 4
    return width + max(1, math.ceil(math.log2(max(width * num_tokens, 2)) / 8))
