"""Exact combination of per-shard-group answers (pure numpy; no Ray).

What the C core does over the shards of one process (native/src/query.c), done over groups:
counts add up; the ∞-gram's suffix is the longest that occurs in any group (a suffix occurs in
the union iff it occurs in some group, and every shorter suffix occurs where it does); next-token
distributions add up token by token; a context is sparse iff all its occurrences, over every
group, continue with one and the same token.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

NO_TOKEN = -1  # a group where the context does not occur, or is not sparse


def cut_rows(values: np.ndarray, offsets: np.ndarray, keep: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The last keep[i] values of every row i (the suffixes the groups are asked about)."""
    keep = np.asarray(keep, dtype=np.int64)
    ends = offsets[1:]
    starts = ends - keep
    new_offsets = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(keep, out=new_offsets[1:])
    idx = np.repeat(starts - new_offsets[:-1], keep) + np.arange(int(new_offsets[-1]), dtype=np.int64)
    return values[idx], new_offsets


def combine_sparse(prompt_counts: Sequence[np.ndarray], sparse_tokens: Sequence[np.ndarray]) -> np.ndarray:
    """Per row: sparse over the union, from each group's context count and its single next token
    (NO_TOKEN where that group's occurrences do not all continue alike)."""
    pc = np.stack([np.asarray(p, dtype=np.uint64) for p in prompt_counts])
    st = np.stack([np.asarray(s, dtype=np.int64) for s in sparse_tokens])
    present = pc > 0
    any_present = present.any(axis=0)
    first = np.where(present, st, np.iinfo(np.int64).max).min(axis=0)
    same = np.where(present, (st == first) & (st != NO_TOKEN), True).all(axis=0)
    return any_present & same


def merge_ntd(parts: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]], n_rows: int
              ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR next-token distributions (offsets, token ids, counts) of several groups for the same
    rows -> one CSR of the summed counts, ids increasing in every row."""
    rows = np.concatenate([np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(o)) for o, _, _ in parts])
    toks = np.concatenate([t.astype(np.int64) for _, t, _ in parts])
    cnts = np.concatenate([c.astype(np.uint64) for _, _, c in parts])
    if len(toks) == 0:
        return np.zeros(n_rows + 1, dtype=np.int64), np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.uint64)
    key = rows * (1 << 33) + toks
    uniq, inverse = np.unique(key, return_inverse=True)
    summed = np.zeros(len(uniq), dtype=np.uint64)
    np.add.at(summed, inverse, cnts)
    out_rows = uniq >> 33
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(out_rows, minlength=n_rows), out=offsets[1:])
    return offsets, (uniq & ((1 << 33) - 1)).astype(np.uint32), summed
