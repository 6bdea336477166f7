"""Converting between the official infini-gram (2.6.0) layout and ours, both ways.

official -> ours: each official shard becomes one of our shards (the documents streamed from the
memory-mapped token file into the shard writer, one shard in memory at a time); each document's
official metadata record is kept verbatim as ``{"official_record": "<the record>"}``; meta.json
remembers the official token width and shard suffixes (``converted_from``).

ours -> official: each of our shards becomes one official shard (tokenized/offset/table, plus
metadata/metaoff when documents have metadata): records converted from official are written back
verbatim, other metadata as one JSON line. Converting official -> ours -> official gives the
original files byte for byte.

Example:
    >>> official_to_ours("v4_pile_llama", "pile_ours", vocab_size=32000)  # doctest: +SKIP
    >>> ours_to_official("pile_ours", "pile_official")                     # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import numpy as np

from .._core import format as fmt
from .._core import official
from .._core.index_files import IndexDir
from .._core.official_shards import TOKEN_DTYPES, write_shards_from_official
from .._core.progress import progress_bar
from .pipeline import index_meta
from .official_writer import SEPARATORS, write_official_shard
from .publish import check_out_dir, make_build_dir, publish, resolve_out_dir
from .shard_writer import ShardWriter

RECORD_KEY = "official_record"


def _shard_docs(path: Path, suffix: str, width: int) -> Iterator[np.ndarray]:
    """The documents of one official shard, as views of the mapped token file."""
    stream = np.memmap(path / f"tokenized{suffix}", dtype=TOKEN_DTYPES[width], mode="r")
    offs = np.fromfile(path / f"offset{suffix}", dtype="<u8").astype(np.int64) // width
    ends = np.append(offs[1:], len(stream))
    for a, b in zip(offs.tolist(), ends.tolist()):
        yield stream[a + 1:b]


def _records(path: Path, suffix: str, n_docs: int) -> Iterator[Optional[bytes]]:
    if not (path / f"metadata{suffix}").exists():
        yield from (None for _ in range(n_docs))
        return
    data = np.memmap(path / f"metadata{suffix}", dtype=np.uint8, mode="r")
    offs = np.fromfile(path / f"metaoff{suffix}", dtype="<u8").astype(np.int64).tolist() + [len(data)]
    for a, b in zip(offs, offs[1:]):
        yield bytes(data[a:b])


def official_to_ours(src: Union[str, os.PathLike], out_dir: Union[str, os.PathLike], *, vocab_size: Optional[int] = None,
                     token_width: Optional[int] = None, eos_token_id: Optional[int] = None, tokenizer: Any = None,
                     overwrite: bool = False, progress: bool = True, ntd_cache_min_cost: int = 2048) -> Path:
    """Convert the official index at src into our format at out_dir (see the module docstring).
    The official files are only read; the new index is published only once complete."""
    src = Path(src)
    with IndexDir.open_root(src) as root:
        layout = official.detect(root)
    width, vocab, eos = official.resolve_vocab(layout, token_width, vocab_size, eos_token_id, tokenizer)
    if vocab > SEPARATORS[4] - 1 or fmt.token_width_for(vocab) > 4:
        raise ValueError(f"vocab_size={vocab} is too large")
    our_width = fmt.token_width_for(vocab)
    out = resolve_out_dir(out_dir)
    check_out_dir(out, overwrite=overwrite, sources=[src])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_build_dir(out)

    def fill(writer: ShardWriter, shard_dir: Path, suffix: str, bar: Any) -> None:
        metawriter = fmt.DocMetaWriter(shard_dir) if layout.has_metadata else None
        docs = list(_shard_docs(src, suffix, width))
        for doc, rec in zip(docs, _records(src, suffix, len(docs))):
            ids = np.asarray(doc)
            if ids.size and int(ids.max()) >= vocab:
                raise ValueError(f"{src / ('tokenized' + suffix)}: token id {int(ids.max())} is not below "
                                 f"vocab_size={vocab}")
            writer.add(ids, np.array([0, ids.size], dtype=np.int64))
            if metawriter is not None:
                metawriter.add({RECORD_KEY: rec.decode("utf-8", errors="surrogateescape")} if rec is not None else None)
            bar.update(ids.size + 1)
        if metawriter is not None:
            metawriter.close()

    def then(shards: list) -> None:
        meta = index_meta(tokenizer, vocab, our_width, [entry for _, entry in shards], {
            "converted_from": {"format": "infini-gram", "path": str(src), "token_width": width,
                               "suffixes": layout.suffixes, "metadata": layout.has_metadata}})
        meta["eos_token_id"] = eos  # given, the tokenizer's, or none (the official files hold no vocabulary)
        fmt.write_meta(tmp, meta)
        publish(tmp, out, overwrite)

    write_shards_from_official(layout, width, tmp, fill, then, token_width=our_width, vocab_size=vocab,
                               ntd_cache_min_cost=ntd_cache_min_cost, progress=progress, desc="official -> ours")
    return out


def ours_to_official(src: Union[str, os.PathLike], out_dir: Union[str, os.PathLike], *,
                     token_width: Optional[int] = None, progress: bool = True) -> Path:
    """Convert our index at src into the official layout in the new directory out_dir, which the
    official engine loads with ``token_dtype`` = u8/u16/u32 for width 1/2/4. The token width is
    the one the index was converted from, else ours (`token_width` overrides)."""
    from ..index import InfiniGramIndex

    out = Path(out_dir)
    if out.exists():
        raise FileExistsError(f"{out}: exists; convert into a new directory")
    with InfiniGramIndex.open(src) as index:
        origin = (index.meta.get("build") or {}).get("converted_from") or {}
        width = token_width or origin.get("token_width") or index.token_width
        if width not in SEPARATORS or index.vocab_size > SEPARATORS[width]:
            raise ValueError(f"token_width={width!r} cannot hold vocab_size={index.vocab_size}")
        suffixes = origin.get("suffixes") if len(origin.get("suffixes") or []) == index.num_shards else \
            [f".{i}" for i in range(index.num_shards)]
        tmp = out.with_name(out.name + ".converting")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        bar = progress_bar(total=index.num_docs, unit="doc", disable=not progress, desc="ours -> official", dynamic_ncols=True)
        try:
            doc_id = 0
            for shard in range(index.num_shards):
                n = int(index._shard_docs[shard + 1] - index._shard_docs[shard])
                docs, metas = [], []
                for _ in range(n):
                    d = index.get_doc(doc_id)
                    docs.append(d.token_ids)
                    metas.append(d.metadata)
                    doc_id += 1
                    bar.update(1)
                records = None
                if any(metas):
                    records = [m[RECORD_KEY].encode("utf-8", errors="surrogateescape")
                               if set(m) == {RECORD_KEY} else (json.dumps(m) + "\n").encode() for m in metas]
                write_official_shard(tmp, suffixes[shard], docs, width, records)
            os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            bar.close()
    return out
