"""Small frozen result types returned by index queries."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np


@dataclass(frozen=True)
class ProbResult:
    """P(token | context) = count / prompt_count, for the context suffix of length suffix_len."""

    prob: float
    count: int
    prompt_count: int
    suffix_len: int
    sparse: bool

    @property
    def effective_n(self) -> int:
        """n of the n-gram used: the matched context length plus the token itself."""
        return self.suffix_len + 1


@dataclass(frozen=True)
class NextTokenDistribution:
    """Exact next-token distribution: token ids (increasing), their counts and probabilities.

    An occurrence that ends its document is counted under the separator id, so that
    ``counts.sum() == total`` always holds.
    """

    token_ids: np.ndarray
    counts: np.ndarray
    probs: np.ndarray
    total: int
    suffix_len: int
    sparse: bool
    approximate: bool = False

    @property
    def effective_n(self) -> int:
        return self.suffix_len + 1

    def as_dict(self) -> dict[int, int]:
        """{token_id: count}."""
        return dict(zip(self.token_ids.tolist(), self.counts.tolist()))

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class FindResult:
    """Suffix-array ranges [lo, hi) of an n-gram, one per shard."""

    count: int
    lo: np.ndarray
    hi: np.ndarray


@dataclass(frozen=True)
class ScoreResult:
    """Dense ∞-gram scoring of a sequence: entry i is about ids[i] given ids[:i]."""

    probs: np.ndarray        # float64: count / prompt_count (0 where prompt_count is 0)
    counts: np.ndarray       # uint64: cnt(suffix + token)
    prompt_counts: np.ndarray  # uint64: cnt(suffix)
    suffix_len: np.ndarray   # int64: matched context length
    sparse: np.ndarray       # bool

    @property
    def effective_n(self) -> np.ndarray:
        return self.suffix_len + 1

    def __len__(self) -> int:
        return len(self.probs)


@dataclass(frozen=True)
class Document:
    """A document of the index: its global id, token ids and metadata (a dict, maybe empty)."""

    doc_id: int
    token_ids: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)
    shard: int = 0
    text: Optional[str] = None
