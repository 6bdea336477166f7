"""Sources as Ray Datasets of tokenized documents.

Whatever the source, the result has one row per document, in the source's order: `ids` (the
token ids as bytes of the index's token width) and `meta` (the document's metadata as JSON, or
None). Tokenization runs in Ray Data tasks on the cluster's CPUs; the tokenizer travels once,
through the object store, and is unpickled once per worker process.

Files are read by the same code as the single-machine build (build/sources.py), a task per group
of files, so documents, their order and their metadata are those of `build_index` on one
machine. Parquet files (which the single-machine build does not read) go through
`ray.data.read_parquet`.
"""
from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .._core import tokenization as tk
from ..build import sources
from ._ray import require_ray

_TOKENIZERS: Dict[str, Any] = {}  # per worker process: object ref -> tokenizer


def _tokenizer(box: List[Any]) -> Any:
    ref = box[0]
    if ref is None:
        return None
    key = ref.hex()
    if key not in _TOKENIZERS:
        _TOKENIZERS.clear()  # (one build at a time per worker: keep only the current tokenizer)
        _TOKENIZERS[key] = require_ray().get(ref)
    return _TOKENIZERS[key]


def encode(tok: Any, texts: Sequence[str], dtype: np.dtype) -> List[bytes]:
    """Texts -> token ids as bytes of `dtype` (a byte tokenizer's ids are the UTF-8 bytes)."""
    if isinstance(tok, tk.ByteTokenizer):
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8).astype(dtype).tobytes() for t in texts]
    return [np.asarray(ids, dtype=np.int64).astype(dtype).tobytes() for ids in tk.encode_texts(tok, texts)]


def _ids_bytes(seqs: Sequence[Any], dtype: np.dtype, vocab_size: int, first: int) -> List[bytes]:
    out = []
    for i, s in enumerate(seqs):
        arr = np.asarray(s)
        if arr.size and (not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0 or arr.max() >= vocab_size):
            raise ValueError(f"document {first + i}: token ids must be integers in [0, {vocab_size})")
        if arr.ndim != 1:
            raise ValueError(f"document {first + i}: token ids must form a flat sequence")
        out.append(arr.astype(dtype).tobytes())
    return out


def _rows(tok: Any, batch: sources.Batch, dtype: np.dtype, vocab_size: int) -> Dict[str, list]:
    if batch.ids is not None:
        ids = _ids_bytes(batch.ids, dtype, vocab_size, 0)
    elif tok is None:
        raise ValueError("text documents need a tokenizer (tokenizer=None means bytes; do not pass vocab_size)")
    else:
        ids = encode(tok, batch.texts or [], dtype)
    metas = [None if m is None else json.dumps(m, sort_keys=True) for m in batch.metadata]
    return {"ids": ids, "meta": metas}


def tokenize_files(rows: Dict[str, np.ndarray], *, tok_box: List[Any], dtype: str, vocab_size: int,
                   text_column: str, metadata_columns: Sequence[str]) -> Dict[str, list]:
    """Ray Data task: read a group of files as build_index does and tokenize their documents."""
    tok = _tokenizer(tok_box)
    out: Dict[str, list] = {"ids": [], "meta": []}
    paths = [Path(p) for p in rows["path"]]
    for b in sources.iter_batches(paths, text_column=text_column, metadata_columns=metadata_columns,
                                  batch_size=1 << 30):
        part = _rows(tok, b, np.dtype(dtype), vocab_size)
        out["ids"] += part["ids"]
        out["meta"] += part["meta"]
    return out


def tokenize_rows(rows: Dict[str, np.ndarray], *, tok_box: List[Any], dtype: str, vocab_size: int,
                  text_column: str, metadata_columns: Sequence[str]) -> Dict[str, list]:
    """Ray Data task: a batch of table rows (a text or `input_ids` column) -> tokenized rows."""
    tok = _tokenizer(tok_box)
    use_ids = text_column not in rows and "input_ids" in rows
    n = len(rows["input_ids" if use_ids else text_column])
    metas = sources._pick_meta(rows, metadata_columns, n)
    if use_ids:
        batch = sources.Batch(ids=list(rows["input_ids"]), metadata=metas)
    else:
        batch = sources.Batch(texts=[t if isinstance(t, str) else "" for t in rows[text_column]], metadata=metas)
    return _rows(tok, batch, np.dtype(dtype), vocab_size)


def is_paths(source: Any) -> bool:
    if isinstance(source, (str, os.PathLike)):
        return True
    # (a list of str is a list of texts, as for the single-machine build; files go as Paths)
    return isinstance(source, (list, tuple)) and bool(source) and all(
        isinstance(s, os.PathLike) and not isinstance(s, str) for s in source)


def expand_sources(source: Any) -> List[Path]:
    """Paths, directories and globs -> the files, in the single-machine build's order."""
    items = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    paths: List[Path] = []
    for item in items:
        text = os.fspath(item)
        if glob.has_magic(text):
            found = sorted(glob.glob(text, recursive=True))
            if not found:
                raise FileNotFoundError(f"no corpus file matches {text!r}")
            paths += [Path(f) for f in found]
        else:
            paths.append(Path(text))
    return sources._expand_paths(paths)


def has_file_metadata(source: Any) -> bool:
    """Whether the single-machine build would keep per-document metadata for file sources."""
    return is_paths(source)


def tokenized_dataset(source: Any, tok_ref: Any, *, dtype: np.dtype, vocab_size: int, text_column: str,
                      metadata_columns: Sequence[str], batch_size: int, files_per_task: int = 1) -> Any:
    """The source as a Ray Dataset of rows {ids, meta}, tokenized on the cluster."""
    ray = require_ray()
    kw = dict(tok_box=[tok_ref], dtype=np.dtype(dtype).str, vocab_size=int(vocab_size), text_column=text_column,
              metadata_columns=list(metadata_columns))
    if is_paths(source):
        files = expand_sources(source)
        if not files:
            raise ValueError(f"no corpus files in {source!r}")
        parquet = [f for f in files if f.suffix == ".parquet"]
        if parquet and len(parquet) != len(files):
            raise ValueError("a source mixes parquet files with other files; build them separately")
        if parquet:
            ds = ray.data.read_parquet([str(f) for f in parquet])
            return ds.map_batches(tokenize_rows, batch_size=batch_size, fn_kwargs=kw, batch_format="numpy")
        ds = ray.data.from_items([{"path": str(f)} for f in files], override_num_blocks=len(files))
        return ds.map_batches(tokenize_files, batch_size=files_per_task, fn_kwargs=kw, batch_format="numpy")
    if isinstance(source, ray.data.Dataset):
        ds = source
    elif sources._is_dataset(source):
        ds = ray.data.from_huggingface(source)
    elif isinstance(source, (list, tuple)):
        items = list(source)
        if items and all(isinstance(t, str) for t in items):
            ds = ray.data.from_items([{text_column: t} for t in items])
        else:  # (token ids already in this process: converted here, checked against the vocabulary
            # by the shard writer)
            return ray.data.from_items([{"ids": b, "meta": None}
                                        for b in _ids_bytes(items, np.dtype(dtype), np.iinfo(np.dtype(dtype)).max, 0)])
    else:
        raise ValueError(f"unsupported source for a distributed build: {type(source).__name__} (a ray.data.Dataset, "
                         "a datasets dataset, a list of texts, or paths/globs of .txt/.jsonl/.parquet files)")
    return ds.map_batches(tokenize_rows, batch_size=batch_size, fn_kwargs=kw, batch_format="numpy")
