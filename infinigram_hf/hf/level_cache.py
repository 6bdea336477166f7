"""The levels' distributions a processor mixing several orders needs, cached by suffix.

A level's estimate depends on its suffix's tokens alone (`infinigram_hf.lm.orders`), and short
suffixes repeat all the time: the bigram level's suffix is one token, and "L − 1" of a context
matched by one token is the empty suffix, the unigram (the whole vocabulary). So they are kept
by their tokens, ready to mix: tokens with end-of-document already moved to the EOS id and
probabilities. A hit costs a dictionary lookup; the index's cache (`SuffixCache`, keyed by
decoding state) would first find the suffix's state, a binary search and a few numpy calls per
level, and then its entries would go through the end-of-document handling again every step.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from ..lm.orders import gather_suffixes

_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0)


class LevelDistributions:
    """Distributions of suffixes of a batch's rows, by the suffixes' tokens (LRU).

    Args:
        query: `(values, offsets) -> BatchNextTokenDistributions`: the fixed-n distributions of a
            batch of contexts given flat (uint32 ids, int64 offsets), e.g. the index's
            `infgram_ntd_batch(values, offsets=offsets, infinite=False)`.
        entries: `(d, n) -> (row, token, count, total)` with end-of-document handled (the
            processor's `_entries`).
        max_items: suffixes kept (0: none, every call queries).
        max_entries: entries kept over all suffixes (16 bytes each; the default, 2^21, is 32 MiB:
            the unigram alone is the vocabulary).
    """

    def __init__(self, query: Callable[[np.ndarray, np.ndarray], Any],
                 entries: Callable[[Any, int], tuple], max_items: int = 4096, max_entries: int = 1 << 21):
        self._query = query
        self._entries = entries
        self.max_items = int(max_items)
        self.max_entries = int(max_entries)
        self._items: OrderedDict = OrderedDict()  # suffix bytes -> (tokens, probabilities, count)
        self._held = 0  # entries in _items
        self.stats = {"hits": 0, "queried": 0}

    def gather(self, rows: np.ndarray, sel: np.ndarray, lengths: np.ndarray) -> tuple:
        """The distributions of rows[sel[i]]'s last lengths[i] tokens as (row, token, P) entries
        (row = the row in `rows`) and each suffix's count (the distribution's total, 0 for none).
        rows: (batch, width) int64 ids."""
        width = rows.shape[1]
        keys = [rows[r, width - m:].tobytes() if m else b"" for r, m in zip(sel.tolist(), lengths.tolist())]
        got = [self._items.get(k) for k in keys]
        missing = [i for i, g in enumerate(got) if g is None]
        self.stats["hits"] += len(keys) - len(missing)
        self.stats["queried"] += len(missing)
        for i, k in enumerate(keys):
            if got[i] is not None:
                self._items.move_to_end(k)
        if missing:
            for i, item in zip(missing, self._fetch(rows[sel[missing]], lengths[missing])):
                got[i] = item
                if self.max_items and keys[i] not in self._items:
                    self._items[keys[i]] = item
                    self._held += len(item[0])
            while self._items and (len(self._items) > self.max_items or self._held > self.max_entries):
                self._held -= len(self._items.popitem(last=False)[1][0])
        sizes = [len(g[0]) for g in got]
        row_of = np.repeat(sel, sizes) if got else _EMPTY_I
        tok = np.concatenate([g[0] for g in got]) if got else _EMPTY_I
        p = np.concatenate([g[1] for g in got]) if got else _EMPTY_F
        return row_of, tok, p, np.array([g[2] for g in got], dtype=np.float64)

    def _fetch(self, rows: np.ndarray, lengths: np.ndarray) -> list:
        """(tokens, probabilities, count) of each row's last lengths[i] tokens: one batched query.
        (The rows' arrays are views of the batch's: a kept row keeps its batch's arrays alive.)"""
        # each row's suffix ends where the row does in the flattened batch
        flat, offsets = gather_suffixes(rows.reshape(-1), np.arange(1, len(rows) + 1) * rows.shape[1], lengths)
        r, t, c, tot = self._entries(self._query(flat, offsets), len(rows))
        p = c / np.maximum(tot, 1.0)[r]
        bounds = np.searchsorted(r, np.arange(len(rows) + 1)).tolist()  # (entries come row by row)
        return [(t[a:b], p[a:b], total) for a, b, total in zip(bounds[:-1], bounds[1:], tot.tolist())]


__all__ = ["LevelDistributions"]
