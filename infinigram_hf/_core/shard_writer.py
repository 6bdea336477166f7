"""Thin owner of the C shard writer: documents in (uint8/16/32 ids + offsets), shard files out."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .native import check, err_buffer, ffi, lib, ptr


def shard_peak_bytes(total_len: int, token_width: int) -> int:
    """Memory the C core needs at peak to finish a shard of total_len tokens (separators included)."""
    return int(lib.ig_writer_peak_bytes(total_len, token_width))


class ShardWriter:
    """Collects documents for one shard and writes tokens.bin, sa.bin, docs.bin, unigram.bin."""

    def __init__(self, shard_dir: Path, token_width: int, vocab_size: int, ntd_cache_min_cost: int = 2048):
        self.dir = Path(shard_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        out = ffi.new("ig_writer **")
        err = err_buffer()
        check(lib.ig_writer_new(out, os.fsencode(self.dir), token_width, vocab_size, err, len(err)), err)
        self._w = ffi.gc(out[0], lib.ig_writer_free)
        if isinstance(ntd_cache_min_cost, bool) or not isinstance(ntd_cache_min_cost, int) or ntd_cache_min_cost < 0:
            raise ValueError(f"ntd_cache_min_cost must be an int >= 0 (0 = off), got {ntd_cache_min_cost!r}")
        lib.ig_writer_set_ntd_cache(self._w, ntd_cache_min_cost)

    def add(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        """Append documents: document i is ids[offsets[i]:offsets[i+1]]."""
        ids = np.ascontiguousarray(ids)
        if ids.dtype not in (np.uint8, np.uint16, np.uint32):  # the C side takes 1-, 2- or 4-byte ids
            ids = ids.astype(np.uint32)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if len(offsets) < 2:
            return
        if offsets[0] < 0 or offsets[-1] > len(ids):
            raise ValueError("document offsets point outside the token array")
        err = err_buffer()
        check(lib.ig_writer_add_docs_w(self._w, ptr(ids, "void"), ids.dtype.itemsize, ptr(offsets, "int64_t"),
                                       len(offsets) - 1, err, len(err)), err)

    def add_part(self, ids: np.ndarray, end: bool) -> None:
        """Append ids to the document being added in parts (the first call starts it; `end`
        ends it): a long document goes in without being held whole. Until it is ended, add()
        and finish() refuse and total_len does not count its separator."""
        ids = np.ascontiguousarray(ids)
        if ids.dtype not in (np.uint8, np.uint16, np.uint32):
            ids = ids.astype(np.uint32)
        err = err_buffer()
        check(lib.ig_writer_add_part_w(self._w, ptr(ids, "void") if len(ids) else ffi.NULL, ids.dtype.itemsize,
                                       len(ids), int(bool(end)), err, len(err)), err)

    @property
    def total_len(self) -> int:
        """Tokens held so far, one separator per document included."""
        return int(lib.ig_writer_total_len(self._w))

    @property
    def num_docs(self) -> int:
        return int(lib.ig_writer_num_docs(self._w))

    def finish(self) -> dict:
        """Build the suffix array and write the files; returns the shard's meta entry."""
        n_docs, total = self.num_docs, self.total_len
        err = err_buffer()
        rc = lib.ig_writer_finish(self._w, err, len(err))
        self.release()
        check(rc, err)
        sa_width = 1
        while sa_width < 8 and (max(total, 1) - 1) >> (8 * sa_width):
            sa_width += 1
        return {"dir": self.dir.name, "num_tokens": total - n_docs, "num_docs": n_docs,
                "total_len": total, "sa_width": sa_width}

    def release(self) -> None:
        """Free the collected tokens now rather than at garbage collection."""
        if self._w is not None:
            w, self._w = self._w, None
            ffi.release(w)
