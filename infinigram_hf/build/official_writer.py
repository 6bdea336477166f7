"""Writing a shard in the official infini-gram (2.6.0) layout, which its engine serves: the
target of ``infinigram-hf convert --to official`` and the way tests make official indexes
without the official package (its indexer's tables were checked byte for byte against this).

The table is the suffix array of the shard's token positions ordered by the little-endian
bytes from there to the end of the file (memcmp; a proper prefix first), i.e. by byte-swapped
ids, each pointer a byte offset in ceil(log2(file bytes) / 8) bytes. It is sorted here by prefix
doubling in numpy: O(n log n) per doubling, about 50 bytes of memory per token, so this writer
is meant for shards up to some tens of millions of tokens.

Example:
    >>> write_official_shard(Path("out"), ".0", [[1, 2], [3]], token_width=2)  # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

SEPARATORS = {1: 0xFF, 2: 0xFFFF, 4: 0xFFFFFFFF}
_DTYPES = {1: "<u1", 2: "<u2", 4: "<u4"}


def pointer_width(num_bytes: int) -> int:
    """The official indexer's pointer width for a token file of num_bytes bytes."""
    return max(1, math.ceil(math.log2(max(num_bytes, 2)) / 8))


def token_stream(docs: Iterable[Sequence[int]], token_width: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens with a separator before each document, u64 byte offset of each separator)."""
    sep = SEPARATORS[token_width]
    parts, offsets, pos = [], [], 0
    for d in docs:
        arr = np.asarray(d, dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= sep):
            raise ValueError(f"token ids must be in [0, {sep}) for {token_width}-byte tokens")
        offsets.append(pos * token_width)
        parts.append(np.array([sep], dtype=np.int64))
        parts.append(arr)
        pos += 1 + arr.size
    stream = np.concatenate(parts).astype(_DTYPES[token_width]) if parts else np.zeros(0, _DTYPES[token_width])
    return stream, np.asarray(offsets, dtype="<u8")


def bytewise_suffix_array(stream: np.ndarray) -> np.ndarray:
    """Positions of `stream` ordered by the little-endian bytes of their suffixes (a suffix
    that is a prefix of another first): prefix doubling over byte-swapped ids."""
    n = stream.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    keys = stream.byteswap().astype(np.int64)  # (memcmp of little-endian bytes = big-endian value)
    rank = np.unique(keys, return_inverse=True)[1].astype(np.int64).reshape(-1) + 1  # 0: past the end
    sa = np.argsort(rank, kind="stable")
    k = 1
    while True:
        second = np.zeros(n, dtype=np.int64)
        if k < n:
            second[: n - k] = rank[k:]
        sa = np.lexsort((second, rank))
        r1, r2 = rank[sa], second[sa]
        new = np.empty(n, dtype=np.int64)
        new[sa] = np.cumsum(np.concatenate(([1], (r1[1:] != r1[:-1]) | (r2[1:] != r2[:-1]))))
        rank = new
        if rank[sa[-1]] == n or k >= n:
            return sa
        k *= 2


def _write(path: Path, data: bytes | np.ndarray) -> None:
    with open(path, "xb") as f:  # (never over an existing file)
        f.write(data if isinstance(data, bytes) else data.tobytes())


def write_official_shard(out_dir: Path, suffix: str, docs: Sequence[Sequence[int]], token_width: int,
                         metadata: Optional[Sequence[Any]] = None) -> None:
    """Write tokenized/table/offset{suffix} (and metadata/metaoff{suffix} when metadata is given:
    one record per document, a dict written as one JSON line, str/bytes verbatim) into out_dir."""
    out_dir = Path(out_dir)
    stream, offsets = token_stream(docs, token_width)
    if stream.size == 0:
        raise ValueError("an official shard needs at least one document")
    _write(out_dir / f"tokenized{suffix}", stream)
    _write(out_dir / f"offset{suffix}", offsets)
    ratio = pointer_width(stream.size * token_width)
    ptrs = (bytewise_suffix_array(stream) * token_width).astype("<u8")
    _write(out_dir / f"table{suffix}", np.ascontiguousarray(ptrs.view(np.uint8).reshape(-1, 8)[:, :ratio]))
    if metadata is not None:
        if len(metadata) != len(offsets):
            raise ValueError(f"metadata has {len(metadata)} records for {len(offsets)} documents")
        lines = [_record(m) for m in metadata]
        moff = np.concatenate([[0], np.cumsum([len(x) for x in lines])[:-1]]).astype("<u8") if lines else \
            np.zeros(0, "<u8")
        _write(out_dir / f"metadata{suffix}", b"".join(lines))
        _write(out_dir / f"metaoff{suffix}", moff)


def _record(m: Any) -> bytes:
    if isinstance(m, bytes):
        return m if m.endswith(b"\n") else m + b"\n"
    if isinstance(m, str):
        return (m if m.endswith("\n") else m + "\n").encode("utf-8")
    return (json.dumps(m) + "\n").encode("utf-8")


def write_official_index(out_dir: os.PathLike, shards: Sequence[Sequence[Sequence[int]]], token_width: int,
                         metadata: Optional[Sequence[Sequence[Any]]] = None) -> Path:
    """An official index of the given shards (lists of documents) in a new directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=False)
    for s, docs in enumerate(shards):
        write_official_shard(out, f".{s}", docs, token_width, None if metadata is None else metadata[s])
    return out
