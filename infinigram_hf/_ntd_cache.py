"""P_∞ rows for the logits processor, cached by matched suffix.

A context's ∞-gram distribution depends only on its longest suffix that occurs in the corpus, so
the cache is keyed by that suffix (its token bytes): many contexts share one entry (all contexts
ending in an unseen token share the unigram), and nothing in it depends on which calls came
before, so assisted decoding's rejected drafts cannot leave wrong entries behind.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from .index import InfiniGramIndex


@dataclass(frozen=True)
class NtdEntry:
    """P_∞ over the tokens it gives mass to, ready for a scatter into a row of scores."""

    token_ids: np.ndarray      # int64, distinct; end-of-document already mapped to EOS
    probs: np.ndarray          # float64, sums to 1 (or empty)
    token_tensor: torch.Tensor  # token_ids as a torch long tensor
    log_probs: torch.Tensor    # log(probs), float32
    effective_n: int
    sparse: bool


class NtdCache:
    """LRU cache of `NtdEntry` by matched suffix.

    Example:
        >>> cache = NtdCache(index, eos_token_id=0)                   # doctest: +SKIP
        >>> cache.lookup(np.array([12, 7], dtype=np.uint32)).probs     # doctest: +SKIP
    """

    def __init__(self, index: InfiniGramIndex, eos_token_id: Optional[int], max_entries: int = 4096):
        if max_entries < 1:
            raise ValueError(f"cache_size must be >= 1, got {max_entries}")
        self.index = index
        self.eos_token_id = eos_token_id
        self.max_entries = int(max_entries)
        self._entries: "OrderedDict[bytes, NtdEntry]" = OrderedDict()
        self.hits = 0
        self.misses = 0

    def lookup(self, context: np.ndarray) -> NtdEntry:
        """The entry for a context (uint32 ids, all < the index's vocab size)."""
        k = self.index.infgram_suffix_len(context) if len(context) else 0
        suffix = context[len(context) - k:]
        key = suffix.tobytes()
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return entry
        self.misses += 1
        entry = self._build(suffix)
        self._entries[key] = entry
        if len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return entry

    def _build(self, suffix: np.ndarray) -> NtdEntry:
        dist = self.index.ngram_ntd(suffix)
        toks = dist.token_ids.astype(np.int64)
        counts = dist.counts.astype(np.float64)
        sep = self.index.separator_id
        if len(toks) and toks[-1] == sep:  # the separator is the largest id, so it comes last
            if self.eos_token_id is None:
                toks, counts = toks[:-1], counts[:-1]
            else:
                toks = toks.copy()
                toks[-1] = self.eos_token_id
                if (toks[:-1] == self.eos_token_id).any():  # EOS also occurs as a real token: merge
                    keep = np.flatnonzero(toks[:-1] == self.eos_token_id)[0]
                    counts = counts.copy()
                    counts[keep] += counts[-1]
                    toks, counts = toks[:-1], counts[:-1]
        total = counts.sum()
        probs = counts / total if total > 0 else counts
        if total <= 0:
            toks = toks[:0]
            probs = probs[:0]
        with np.errstate(divide="ignore"):
            logp = np.log(probs)
        return NtdEntry(token_ids=toks, probs=probs, token_tensor=torch.from_numpy(toks),
                        log_probs=torch.from_numpy(logp.astype(np.float32)),
                        effective_n=len(suffix) + 1, sparse=bool(dist.sparse))
