"""The levels' distributions a processor mixing several orders needs, at every decoding step.

A level's estimate depends on its suffix's tokens alone (`infinigram_hf.lm.orders`): the
fixed-n distribution of the row's last m tokens. All the levels of all the rows of a step are
one flat batch, and the distributions come back as the entries a mixture adds up, end-of-document
already moved to the EOS id: for a local index one C run and one C copy straight from the rows
(`infinigram_hf.index.batch.suffix_probs_batch`, tens of microseconds, no Python per row).

Other indexes (served, routed, a difference) answer through their batched query, a round trip
each: there the distributions are also kept by their suffix's tokens (LRU). Short suffixes
repeat all the time (the bigram level's suffix is one token), so a hit saves the round trip.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import numpy as np

_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0)


class LevelDistributions:
    """Distributions of suffixes of a batch's rows.

    Args:
        probs: `(rows, which, lengths) -> (item, token, P, total)`: the fixed-n distributions
            of the last lengths[i] tokens of rows[which[i]] as entries ready to mix (item = i,
            end-of-document handled) and each suffix's count (`suffix_probs_batch`'s form).
        max_items: suffixes kept by their tokens (0: none, every step queries them all: right
            for a local index, whose query costs less than the bookkeeping).
        max_entries: entries kept over all suffixes (16 bytes each; the default, 2^21, is 32 MiB:
            the unigram alone is the vocabulary).
    """

    def __init__(self, probs: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple], max_items: int = 4096,
                 max_entries: int = 1 << 21):
        self._probs = probs
        self.max_items = int(max_items)
        self.max_entries = int(max_entries)
        self._items: OrderedDict = OrderedDict()  # suffix bytes -> (tokens, probabilities, count)
        self._held = 0  # entries in _items
        self.stats = {"hits": 0, "queried": 0}

    def gather(self, rows: np.ndarray, sel: np.ndarray, lengths: np.ndarray) -> tuple:
        """The distributions of rows[sel[i]]'s last lengths[i] tokens as (i, token, P) entries,
        and each suffix's count (its distribution's total, 0 for none). rows: (batch, width) ids."""
        if not self.max_items:
            self.stats["queried"] += len(sel)
            return self._probs(rows, sel, lengths)
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
            for i, item in zip(missing, self._split(*self._probs(rows, sel[missing], lengths[missing]))):
                got[i] = item
                if keys[i] not in self._items:
                    self._items[keys[i]] = item
                    self._held += len(item[0])
            while self._items and (len(self._items) > self.max_items or self._held > self.max_entries):
                self._held -= len(self._items.popitem(last=False)[1][0])
        sizes = [len(g[0]) for g in got]
        item = np.repeat(np.arange(len(got)), sizes) if got else _EMPTY_I
        tok = np.concatenate([g[0] for g in got]) if got else _EMPTY_I
        p = np.concatenate([g[1] for g in got]) if got else _EMPTY_F
        return item, tok, p, np.array([g[2] for g in got], dtype=np.float64)

    @staticmethod
    def _split(item: np.ndarray, tok: np.ndarray, p: np.ndarray, total: np.ndarray) -> list:
        """(tokens, P, count) per suffix, views of the batch's arrays (entries come item by item)."""
        bounds = np.searchsorted(item, np.arange(len(total) + 1)).tolist()
        return [(tok[a:b], p[a:b], t) for a, b, t in zip(bounds[:-1], bounds[1:], total.tolist())]


__all__ = ["LevelDistributions"]
