"""Sidecars of official infini-gram indexes: our suffix order and short-context cache beside
files that are never written to.

An official index read in place orders its suffixes by bytes (its table); the smoothed
InfiniGramLM, count-of-counts and `difference()` walk our order (by token id, end of document
last). A sidecar, built once into a separate directory, holds per official shard our
``sa.bin`` over the same positions, ``unigram.bin`` and the precomputed short-context
distributions ``ntdcache.bin``; the shard then reads its tokens and document offsets from the
official files and everything else from the sidecar (native/src/index.c, ig_open_official_at).

Layout: ``SIDE/sidecar.json`` (what it was built from: a fingerprint of every official file,
token width, vocabulary size) and ``SIDE/shard_00000/`` ... one directory per official shard.
It is built into a fresh directory beside SIDE and renamed into place when complete, so an
interrupted build leaves no half-written sidecar. A sidecar whose fingerprint no longer matches
the official files is refused (`StaleSidecarError`), never used.

Example:
    >>> prepare_sidecar("v4_pileval_llama", "pileval_side", vocab_size=32000)   # doctest: +SKIP
    >>> InfiniGramIndex.open("v4_pileval_llama", vocab_size=32000, cache_dir="pileval_side")  # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from .._core import format as fmt
from .._core import official
from .._core.errors import IndexFormatError
from .._core.index_files import IndexDir
from .._core.native import check, err_buffer, ffi, lib
from .._core.official_shards import TOKEN_DTYPES, write_shards_from_official
from .._core.shard_writer import ShardWriter
from .._version import __version__

SIDECAR_FILE = "sidecar.json"
SIDECAR_FORMAT = "infinigram-hf-official-sidecar"
SIDECAR_VERSION = 1
_PROBE = 1 << 16  # bytes hashed at each end of each official file
_CHUNK = 1 << 22  # tokens handed to the writer per call


class StaleSidecarError(IndexFormatError):
    """A sidecar built from other official files (or another vocabulary) than those opened."""


def _file_fingerprint(root: IndexDir, name: str) -> dict[str, Any]:
    """Size and a hash of the first and last 64 KiB: changes whenever the official indexer
    rebuilds the file, yet survives copying (unlike mtimes), and costs two reads."""
    fd, st = root.open_file(name)
    try:
        h = hashlib.sha256()
        h.update(os.pread(fd, min(_PROBE, st.st_size), 0))
        if st.st_size > _PROBE:
            h.update(os.pread(fd, _PROBE, max(_PROBE, st.st_size - _PROBE)))
    finally:
        os.close(fd)
    return {"size": st.st_size, "sha256_ends": h.hexdigest()}


def fingerprint(root: IndexDir, layout: official.OfficialLayout, token_width: int, vocab_size: int) -> dict[str, Any]:
    """What a sidecar of this official directory depends on."""
    return {
        "token_width": token_width,
        "vocab_size": vocab_size,
        "shards": [{"suffix": s, "files": {k + s: _file_fingerprint(root, k + s) for k in ("tokenized", "offset", "table")}}
                   for s in layout.suffixes],
    }


def read_sidecar(side: Path, root: IndexDir, layout: official.OfficialLayout, token_width: int,
                 vocab_size: int) -> Optional[list[str]]:
    """The shard directory names of the sidecar at `side` when it matches the official files
    (None when there is no sidecar there); StaleSidecarError naming what differs otherwise."""
    path = side / SIDECAR_FILE
    if not side.exists() or (side.is_dir() and not any(side.iterdir())):
        return None
    try:
        with IndexDir.open_root(side) as sroot:
            raw = sroot.read_file(SIDECAR_FILE, 1 << 20)
    except IndexFormatError:
        raw = None
    if raw is None:
        raise IndexFormatError(f"{path}: missing; {side} is not a sidecar (prepare one into a new directory)")
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        raise IndexFormatError(f"{path}: not JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != SIDECAR_FORMAT or meta.get("version") != SIDECAR_VERSION:
        raise IndexFormatError(f"{path}: not a version-{SIDECAR_VERSION} sidecar of an official index")
    want = fingerprint(root, layout, token_width, vocab_size)
    have = meta.get("built_from")
    if have != want:
        raise StaleSidecarError(f"{side}: a stale sidecar: {_difference(have, want)} than when it was prepared from "
                                f"{meta.get('official_dir')}; prepare it again (infinigram-hf prepare "
                                f"{layout.path} --out {side} --overwrite)")
    dirs = meta.get("shard_dirs")
    if not isinstance(dirs, list) or len(dirs) != len(layout.suffixes) or \
            dirs != [fmt.shard_dir_name(i) for i in range(len(dirs))]:
        raise IndexFormatError(f"{path}: shard_dirs do not list one directory per official shard")
    return dirs


def _difference(have: Any, want: dict[str, Any]) -> str:
    if not isinstance(have, dict):
        return "no fingerprint: other files"
    for key in ("token_width", "vocab_size"):
        if have.get(key) != want[key]:
            return f"{key} is {want[key]}, not {have.get(key)},"
    hs = have.get("shards") or []
    if [s.get("suffix") for s in hs if isinstance(s, dict)] != [s["suffix"] for s in want["shards"]]:
        return "the official shards differ"
    for h, w in zip(hs, want["shards"]):
        for name, fp in w["files"].items():
            if (h.get("files") or {}).get(name) != fp:
                return f"{name} differs (size or content)"
    return "the official files differ"


def _add_shard(writer: ShardWriter, path: Path, suffix: str, width: int, bar: Any) -> None:
    """Hand the documents of one official shard to the writer, a few million tokens at a time
    (the separator before each document dropped: the writer puts one after each)."""
    stream = np.memmap(path / f"tokenized{suffix}", dtype=TOKEN_DTYPES[width], mode="r")
    seps = np.fromfile(path / f"offset{suffix}", dtype="<u8").astype(np.int64) // width
    ends = np.append(seps[1:], len(stream))
    i, n = 0, len(seps)
    while i < n:
        j = min(n, max(i + 1, int(np.searchsorted(seps, seps[i] + _CHUNK, side="left"))))
        seg = np.asarray(stream[seps[i]:ends[j - 1]])
        at = seps[i:j] - seps[i]
        ids = np.delete(seg, at)
        writer.add(ids, np.append(at - np.arange(j - i), len(ids)))
        bar.update(len(seg))
        i = j


def _check_official(root: IndexDir, layout: official.OfficialLayout, width: int, vocab: int) -> None:
    """Open the official shards in the C core once: it checks the offsets, the table's order
    and that every token id is within the vocabulary, with an error naming the file."""
    n = len(layout.suffixes)
    names = [ffi.new("char[]", os.fsencode(root.path)) for _ in range(n)]
    sfx = [ffi.new("char[]", x.encode()) for x in layout.suffixes]
    out, err = ffi.new("ig_index **"), err_buffer()
    check(lib.ig_open_mixed_at(out, ffi.new("int[]", [root.fd] * n), ffi.new("char *[]", names),
                               ffi.new("char *[]", sfx), n, width, vocab, err, len(err)), err)
    lib.ig_close(out[0])


def prepare_sidecar(official_dir: Union[str, os.PathLike], out: Union[str, os.PathLike], *,
                    vocab_size: Optional[int] = None, eos_token_id: Optional[int] = None, tokenizer: Any = None,
                    token_width: Optional[int] = None, overwrite: bool = False, progress: bool = True,
                    ntd_cache_min_cost: int = 2048) -> Path:
    """Build the sidecar of the official index at `official_dir` into the directory `out` (see the
    module docstring); nothing is written into `official_dir`. An existing sidecar at `out` is
    kept when it matches the files, and rebuilt only with `overwrite`. Returns `out`."""
    src, out = Path(official_dir), Path(out)
    if not official.looks_official(src):
        raise ValueError(f"{src}: not an official infini-gram index directory (tokenized.*, table.*, offset.*)")
    real_src, real_out = src.resolve(), out.resolve()
    if real_out == real_src or real_src in real_out.parents:
        raise ValueError(f"out={out}: a sidecar is never written inside the official directory {src}")
    with IndexDir.open_root(src) as root:
        layout = official.detect(root)
        width, vocab, _ = official.resolve_vocab(layout, token_width, vocab_size, eos_token_id, tokenizer)
        _check_official(root, layout, width, vocab)
        if out.exists():
            try:
                if read_sidecar(out, root, layout, width, vocab) is not None and not overwrite:
                    return out
            except IndexFormatError:
                if not overwrite:
                    raise
                if not (out / SIDECAR_FILE).is_file():
                    raise ValueError(f"out={out}: holds files but no {SIDECAR_FILE}; overwrite= only replaces "
                                     f"a sidecar") from None
        built_from = fingerprint(root, layout, width, vocab)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.preparing-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()

    def fill(writer: ShardWriter, shard_dir: Path, suffix: str, bar: Any) -> None:
        _add_shard(writer, src, suffix, width, bar)

    def then(shards: list) -> None:
        meta = {"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "official_dir": str(real_src),
                "built_from": built_from, "shard_dirs": [d.name for d, _ in shards],
                "ntd_cache_min_cost": ntd_cache_min_cost, "package_version": __version__}
        (tmp / SIDECAR_FILE).write_text(json.dumps(meta, indent=1) + "\n")
        _publish(tmp, out, overwrite)

    write_shards_from_official(layout, width, tmp, fill, then, token_width=width, vocab_size=vocab,
                               ntd_cache_min_cost=ntd_cache_min_cost, progress=progress, desc="sidecar",
                               drop=("tokens.bin", "docs.bin"))  # (the official files hold these)
    return out


def _publish(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished sidecar into place. When another process published one meanwhile,
    theirs is kept (it was built from the same checked files)."""
    if out.exists() and overwrite:
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.rename(tmp, out)
    except OSError:
        if not (out / SIDECAR_FILE).is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
