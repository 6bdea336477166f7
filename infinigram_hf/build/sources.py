"""Corpus sources for building: datasets, files, strings or token ids, streamed in batches.

Every source becomes an iterator of `Batch`es (texts or token-id sequences, plus per-document
metadata), so nothing holds the whole corpus in memory.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Sequence

import numpy as np

TEXT_SUFFIXES = (".txt", ".py", ".c", ".h", ".md")


@dataclass
class Batch:
    texts: Optional[List[str]] = None        # documents as text ...
    ids: Optional[List[Any]] = None          # ... or as token-id sequences
    metadata: List[Optional[dict]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts if self.texts is not None else self.ids or [])


def _is_dataset(source: Any) -> bool:
    mod = type(source).__module__
    return mod.startswith("datasets.") and hasattr(source, "iter")


def _is_dataset_dict(source: Any) -> bool:
    """A datasets.DatasetDict / IterableDatasetDict: a mapping of split names to datasets."""
    return type(source).__module__.startswith("datasets.") and isinstance(source, dict)


def select_split(source: Any, split: Optional[str]) -> Any:
    """The dataset of `split` from a DatasetDict (iterating one gives its split names, which would
    be indexed as 3-token documents); `split=` given for anything else is a ValueError."""
    if _is_dataset_dict(source):
        splits = list(source.keys())
        if split is None:
            raise ValueError(f"source is a DatasetDict with splits {splits}: pass split= (e.g. split={splits[0]!r}) "
                             f"or source[{splits[0]!r}]")
        if split not in source:
            raise ValueError(f"split {split!r} is not in the DatasetDict (splits: {splits})")
        return source[split]
    if split is not None:
        raise ValueError(f"split= applies to a datasets.DatasetDict, not to {type(source).__name__}")
    return source


def _pick_meta(row_batch: dict, columns: Sequence[str], n: int) -> List[Optional[dict]]:
    if not columns:
        return [None] * n
    return [{c: _jsonable(row_batch[c][i]) for c in columns} for i in range(n)]


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def _from_dataset(ds: Any, text_column: str, metadata_columns: Sequence[str], batch_size: int) -> Iterator[Batch]:
    columns = list(getattr(ds, "column_names", None) or [])
    if columns and text_column not in columns and "input_ids" not in columns:
        raise ValueError(f"the dataset has no {text_column!r} column (columns: {columns}); pass text_column=")
    missing = [c for c in metadata_columns if columns and c not in columns]
    if missing:
        raise ValueError(f"metadata columns {missing} are not in the dataset (columns: {columns})")
    use_ids = text_column not in columns and "input_ids" in columns
    for rows in ds.iter(batch_size=batch_size):
        n = len(rows["input_ids" if use_ids else text_column])
        meta = _pick_meta(rows, metadata_columns, n)
        if use_ids:
            yield Batch(ids=list(rows["input_ids"]), metadata=meta)
        else:
            yield Batch(texts=[t if isinstance(t, str) else "" for t in rows[text_column]], metadata=meta)


def _expand_paths(paths: Sequence[Path]) -> List[Path]:
    out: List[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.is_file() and (f.suffix in TEXT_SUFFIXES or f.suffix == ".jsonl")))
        elif p.exists():
            out.append(p)
        else:
            raise FileNotFoundError(f"corpus file not found: {p}")
    return out


def _from_files(paths: Sequence[Path], text_column: str, metadata_columns: Sequence[str], batch_size: int) -> Iterator[Batch]:
    batch = Batch(texts=[])
    for path in _expand_paths(paths):
        if path.suffix == ".jsonl":
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
                    if not isinstance(row, dict) or not isinstance(row.get(text_column), str):
                        raise ValueError(f"{path}:{lineno}: no string field {text_column!r}")
                    batch.texts.append(row[text_column])
                    meta = {c: _jsonable(row.get(c)) for c in metadata_columns} if metadata_columns else None
                    batch.metadata.append(meta)
                    if len(batch) >= batch_size:
                        yield batch
                        batch = Batch(texts=[])
        else:  # one document per text file
            batch.texts.append(path.read_text(encoding="utf-8", errors="replace"))
            batch.metadata.append({"path": str(path)})
            if len(batch) >= batch_size:
                yield batch
                batch = Batch(texts=[])
    if len(batch):
        yield batch


def _from_iterable(items: Iterable[Any], batch_size: int) -> Iterator[Batch]:
    texts: List[str] = []
    ids: List[Any] = []
    for item in items:
        if isinstance(item, str):
            if ids:
                raise ValueError("the source mixes strings and token-id sequences")
            texts.append(item)
        elif isinstance(item, (bytes, bytearray)):
            raise ValueError("documents must be str (or token-id sequences), not bytes")
        else:
            if texts:
                raise ValueError("the source mixes strings and token-id sequences")
            ids.append(item)
        if len(texts) >= batch_size:
            yield Batch(texts=texts, metadata=[None] * len(texts))
            texts = []
        if len(ids) >= batch_size:
            yield Batch(ids=ids, metadata=[None] * len(ids))
            ids = []
    if texts:
        yield Batch(texts=texts, metadata=[None] * len(texts))
    if ids:
        yield Batch(ids=ids, metadata=[None] * len(ids))


def iter_batches(source: Any, *, text_column: str = "text", metadata_columns: Sequence[str] = (),
                 batch_size: int = 1000) -> Iterator[Batch]:
    """Batches of documents from any supported source (see build_index)."""
    if _is_dataset(source):
        return _from_dataset(source, text_column, metadata_columns, batch_size)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise ValueError(
                f"source {str(source)[:80]!r} is not an existing file or directory; to index text "
                "pass a list of strings")
        return _from_files([path], text_column, metadata_columns, batch_size)
    if isinstance(source, np.ndarray) and source.ndim == 2:
        return _from_iterable(iter(source), batch_size)
    if isinstance(source, (list, tuple)) and source and all(isinstance(s, Path) for s in source):
        return _from_files(list(source), text_column, metadata_columns, batch_size)
    if hasattr(source, "__iter__"):
        return _from_iterable(source, batch_size)
    raise ValueError(f"unsupported source type {type(source).__name__}")


def source_paths(source: Any) -> List[Path]:
    """The files and directories a source reads (what a build must never write over): a path,
    a list of paths, a saved dataset's files; [] for sources held in memory."""
    if isinstance(source, (str, os.PathLike)):
        return [Path(source)]
    if isinstance(source, (list, tuple)) and source and all(isinstance(s, Path) for s in source):
        return list(source)
    if _is_dataset(source):
        try:
            return [Path(f["filename"]) for f in (getattr(source, "cache_files", None) or [])]
        except (TypeError, KeyError):
            return []
    return []


def source_length(source: Any) -> Optional[int]:
    """Number of documents when cheaply known (for the progress bar)."""
    try:
        return len(source) if not isinstance(source, (str, os.PathLike)) else None
    except TypeError:
        return None
