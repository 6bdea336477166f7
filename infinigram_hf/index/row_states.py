"""The ∞-gram states of a decoding batch's rows, carried from one step to the next.

A logits processor sees the whole batch at every step: row i is the previous step's row i plus
one new token in the usual case. `RowStates` keeps the previous step's rows and their decoding
states; the rows that grew by one token are extended in one C call (ig_state_extend_batch), all
rows' next-token distributions come from one more (ig_ntd_batch_states), and no Python runs per
row. Rows that did not simply grow (the first step, a beam reordered, a draft rejected, a new
document after EOS) are looked up in a `SuffixCache`, which is keyed by context: the answers are
the same either way, only the cost differs.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .results import BatchNextTokenDistributions
from .states import SuffixCache, extend_states, states_ntd


Prev = Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (rows, context starts, states) of a step


def grown_rows(prev: Prev, rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Which rows are the row of the previous step `prev` plus one token, with the same context
    start (a boolean mask; all False on the first step or when the batch's shape changed)."""
    n, width = rows.shape
    if prev is None or width < 1 or prev[0].shape != (n, width - 1):
        return np.zeros(n, dtype=bool)
    return (starts == prev[1]) & (starts < width) & (rows[:, :-1] == prev[0]).all(axis=1)


def state_tails(rows: np.ndarray, starts: np.ndarray, ext: np.ndarray, prev_states: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """What extending rows `ext` by their last token reads: each row's matched suffix and the new
    token (its last ``suffix_len + 1`` ids, within its context), as (uint32 values, offsets)."""
    width = rows.shape[1]
    need = np.minimum(prev_states[:, 0] + 1, width - starts[ext])
    offs = np.zeros(len(ext) + 1, dtype=np.int64)
    np.cumsum(need, out=offs[1:])
    row_of = np.repeat(ext, need)
    col = np.arange(offs[-1], dtype=np.int64) - np.repeat(offs[:-1], need) + np.repeat(width - need, need)
    return np.ascontiguousarray(rows[row_of, col], dtype=np.uint32), offs


class RowStates:
    """Decoding states of the rows of a batch across steps (see the module's docstring).

    Args:
        cache: where rows that did not grow by one token get their states.
    """

    def __init__(self, cache: SuffixCache):
        self.cache = cache
        self.index = cache.index
        # the previous step: (rows, context starts, states), or None
        self._prev: Prev = None
        self.stats = {"extended": 0, "looked_up": 0}  # rows by path, over all steps

    def reset(self) -> None:
        self._prev = None

    def grown_rows(self, rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Which rows are the previous step's same row plus one token, with the same context start
        (a boolean mask; all False on the first step or when the batch's shape changed)."""
        return grown_rows(self._prev, rows, starts)

    def states(self, rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The states of the contexts rows[i, starts[i]:] as an (n, state size) int64 array."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        starts = np.asarray(starts, dtype=np.int64)
        n, width = rows.shape
        out = np.zeros((n, self.index.state_size), dtype=np.int64)
        grown = self.grown_rows(rows, starts)
        ext = np.flatnonzero(grown)
        if len(ext):
            prev_states = self._prev[2][ext]
            values, offs = state_tails(rows, starts, ext, prev_states)
            out[ext] = extend_states(self.index, prev_states, values, offs)
            self.stats["extended"] += len(ext)
        other = np.flatnonzero(~grown)
        if len(other):
            out[other] = self.cache.states(rows[other], lengths=width - starts[other], padding_side="left")
            self.stats["looked_up"] += len(other)
        self._prev = (rows, starts, out)
        return out

    def ntd(self, rows: np.ndarray, starts: np.ndarray) -> BatchNextTokenDistributions:
        """Exact ∞-gram next-token distributions of the contexts rows[i, starts[i]:] (equal to
        ``cache.ntd_batch``'s), in one batched call for all rows."""
        return states_ntd(self.index, self.states(rows, starts), max_support=self.cache.max_support or None)


__all__ = ["RowStates", "grown_rows", "state_tails"]
