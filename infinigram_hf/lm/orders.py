"""Mixing several orders (issue 20): besides the ∞-gram estimate of the longest matched suffix
(length L), the n-gram estimates of shorter suffixes of the same context -- its "levels".

A level is named by how its suffix length follows from L:

    "L-1"  one token shorter than the longest match
    "L/2"  half of it, rounded down
    "k"    (a positive integer) exactly k tokens, e.g. "1": the bigram estimate

A level exists for a context when its length m satisfies 0 <= m < L (a suffix no shorter than the
longest match would be the ∞-gram itself, or unseen); its estimate is count(suffix + y) /
count(suffix), m = 0 being the unigram. Every shorter suffix of a matched one occurs, so an
existing level always has a distribution. Torch-free: the processor and token_scores build on it.

Example:
    >>> level_lengths(("L-1", "L/2", "1"), np.array([0, 1, 5]))
    array([[-1, -1, -1],
           [ 0,  0, -1],
           [ 4,  2,  1]])
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

DEFAULT_LEVELS = ("L-1", "L/2", "1")
_CHUNK = 4096  # positions per batched query (bounds the gathered prompts)


def check_levels(names: Any) -> tuple:
    """The level names as a tuple; ValueError naming what is wrong."""
    if isinstance(names, str):
        names = (names,)
    names = tuple(names)
    bad = [n for n in names if not (isinstance(n, str) and (n in ("L-1", "L/2") or (n.isdigit() and int(n) > 0)))]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(f"levels must be distinct names, each 'L-1', 'L/2' or a positive integer as a string "
                         f"(e.g. {list(DEFAULT_LEVELS)}), got {list(names)!r}")
    return names


def level_lengths(levels: Sequence[str], suffix_len: np.ndarray) -> np.ndarray:
    """(positions, levels) suffix length of every level for contexts whose longest match has
    `suffix_len` tokens; -1 where the level does not exist (its length would not be below L)."""
    lens = np.asarray(suffix_len, dtype=np.int64)
    out = np.empty((len(lens), len(levels)), dtype=np.int64)
    for j, name in enumerate(levels):
        m = lens - 1 if name == "L-1" else (lens // 2 if name == "L/2" else np.full_like(lens, int(name)))
        out[:, j] = np.where((m >= 0) & (m < lens), m, -1)
    return out


def gather_suffixes(seq: np.ndarray, pos: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The contexts seq[pos[i] - lengths[i]:pos[i]] as one flat array and its offsets (the CSR
    batch form of the index's batched queries), in one gather: no Python loop per position."""
    lengths = np.asarray(lengths, dtype=np.int64)
    offs = np.zeros(len(pos) + 1, np.int64)
    offs[1:] = np.cumsum(lengths)
    flat = np.asarray(seq)[np.repeat(np.asarray(pos) - lengths - offs[:-1], lengths) + np.arange(offs[-1])]
    return flat.astype(np.int64, copy=False), offs


def level_scores(index: Any, seq: np.ndarray, suffix_len: np.ndarray, levels: Sequence[str]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For every position t of `seq` (context seq[:t], longest match suffix_len[t]): (P_m(seq[t]),
    count of the level's suffix) per level, each (positions, levels) float64; 0 and 0 where a
    level does not exist. Batched: one fixed-n query per level and chunk of positions."""
    seq = np.asarray(seq, dtype=np.int64)
    n = len(seq)
    lengths = level_lengths(levels, suffix_len)
    prob, count = np.zeros((n, len(levels))), np.zeros((n, len(levels)))
    for j in range(len(levels)):
        for lo in range(0, n, _CHUNK):
            pos = np.arange(lo, min(n, lo + _CHUNK))
            m = lengths[pos, j]
            pos, m = pos[m >= 0], m[m >= 0]
            if not len(pos):
                continue
            flat, offs = gather_suffixes(seq, pos, m)
            r = index.infgram_prob_batch(flat, seq[pos], infinite=False, offsets=offs)
            c = r.prompt_counts.astype(np.float64)
            count[pos, j] = c
            prob[pos, j] = np.divide(r.counts.astype(np.float64), c, out=np.zeros(len(c)), where=c > 0)
    return prob, count
