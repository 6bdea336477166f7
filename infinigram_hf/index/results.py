"""Small frozen result types returned by index queries."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den as float64, 0 where den is 0 (a context that does not occur)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), 0.0)


@dataclass(frozen=True)
class ProbResult:
    """P(token | context) = count / prompt_count, for the context suffix of length suffix_len."""

    prob: float
    count: int
    prompt_count: int
    suffix_len: int
    sparse: bool

    @classmethod
    def from_counts(cls, count: int, prompt_count: int, suffix_len: int, sparse: Any) -> "ProbResult":
        """The result from raw counts (probabilities computed here)."""
        count, prompt_count = int(count), int(prompt_count)
        return cls(prob=count / prompt_count if prompt_count else 0.0, count=count, prompt_count=prompt_count,
                   suffix_len=int(suffix_len), sparse=bool(sparse))

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

    @classmethod
    def from_counts(cls, token_ids: np.ndarray, counts: np.ndarray, total: int, suffix_len: int, sparse: Any,
                    approximate: Any = False) -> "NextTokenDistribution":
        """The result from raw counts (probabilities computed here)."""
        total = int(total)
        return cls(token_ids=token_ids, counts=counts, probs=counts / total if total else np.zeros(len(counts)),
                   total=total, suffix_len=int(suffix_len), sparse=bool(sparse), approximate=bool(approximate))

    @property
    def effective_n(self) -> int:
        """n of the n-gram used: the matched context length plus the token itself."""
        return self.suffix_len + 1

    @property
    def prompt_count(self) -> int:
        """The context's count, `total` (the name ProbResult uses for it)."""
        return self.total

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
class TokenProbs:
    """Per-token probabilities: entry i is about token i given what comes before it (the
    fields every scoring result shares)."""

    probs: np.ndarray        # float64
    suffix_len: np.ndarray   # int64: matched context length (effective n - 1)
    sparse: np.ndarray       # bool: that context has exactly one distinct continuation

    @property
    def effective_n(self) -> np.ndarray:
        """n of the n-gram used: the matched context length plus the token itself."""
        return self.suffix_len + 1

    def __len__(self) -> int:
        return len(self.probs)


@dataclass(frozen=True)
class CountedProbs(TokenProbs):
    """Per-token ∞-gram probabilities with the counts they come from: probs = counts /
    prompt_counts (0 where prompt_counts is 0)."""

    counts: np.ndarray         # uint64: cnt(suffix + token)
    prompt_counts: np.ndarray  # uint64: cnt(suffix)

    @classmethod
    def from_counts(cls, counts: np.ndarray, prompt_counts: np.ndarray, suffix_len: np.ndarray, sparse: np.ndarray,
                    **more: Any) -> Any:
        """The result from raw counts (probabilities computed here)."""
        return cls(probs=ratio(counts, prompt_counts), counts=counts, prompt_counts=prompt_counts,
                   suffix_len=suffix_len, sparse=sparse.astype(bool), **more)


@dataclass(frozen=True)
class ScoreResult(CountedProbs):
    """Dense ∞-gram scoring of a sequence: entry i is about ids[i] given ids[:i]."""


@dataclass(frozen=True)
class Document:
    """A document of the index: its global id, token ids and metadata (a dict, maybe empty)."""

    doc_id: int
    token_ids: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)
    shard: int = 0
    text: Optional[str] = None


# ---------------------------------------------------------------------------- batches


@dataclass(frozen=True)
class BatchProbResult(CountedProbs):
    """P(tokens[i] | prompt i) for a batch: entry i is what `infgram_prob(prompt_i, token_i)` gives.

    Example:
        >>> r = index.infgram_prob_batch([[5, 6], [7]], tokens=[8, 9])   # doctest: +SKIP
        >>> r.probs, r[0].suffix_len                                      # doctest: +SKIP
    """

    def __getitem__(self, i: int) -> ProbResult:
        return ProbResult(prob=float(self.probs[i]), count=int(self.counts[i]),
                          prompt_count=int(self.prompt_counts[i]), suffix_len=int(self.suffix_len[i]),
                          sparse=bool(self.sparse[i]))


@dataclass(frozen=True)
class BatchNextTokenDistributions:
    """Next-token distributions of a batch as CSR arrays.

    Row i holds ``token_ids[offsets[i]:offsets[i+1]]`` (increasing ids; end-of-document counted
    under the separator id) with ``counts`` over the same slice; per row: ``total`` (count of the
    suffix used, = the row's counts summed), ``suffix_len``, ``sparse`` (one distinct next token)
    and ``approximate`` (sampled because ``max_support`` was given and exceeded). ``rows`` gives
    each entry's row, ready for a scatter into a (batch, vocab) matrix.

    Example:
        >>> d = index.infgram_ntd_batch([[5, 6], [7]])                    # doctest: +SKIP
        >>> d[0].as_dict(), d.probs[d.offsets[1]:d.offsets[2]]            # doctest: +SKIP
    """

    offsets: np.ndarray      # int64, rows + 1
    token_ids: np.ndarray    # uint32
    counts: np.ndarray       # uint64
    total: np.ndarray        # uint64 per row
    suffix_len: np.ndarray   # int64 per row
    sparse: np.ndarray       # bool per row
    approximate: np.ndarray  # bool per row

    def __len__(self) -> int:
        return len(self.total)

    @property
    def prompt_counts(self) -> np.ndarray:
        """Each row's context count, `total` (the name the other batch results use)."""
        return self.total

    @property
    def rows(self) -> np.ndarray:
        """Row index of every entry (int64)."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.offsets))

    @property
    def probs(self) -> np.ndarray:
        """counts / total of their row (float64)."""
        tot = np.repeat(self.total, np.diff(self.offsets)).astype(np.float64)
        return self.counts / np.maximum(tot, 1.0)

    @property
    def effective_n(self) -> np.ndarray:
        """n of the n-gram used: the matched context length plus the token itself."""
        return self.suffix_len + 1

    def __getitem__(self, i: int) -> NextTokenDistribution:
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} out of range for {len(self)} rows")
        i = i % len(self)
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return NextTokenDistribution.from_counts(self.token_ids[a:b], self.counts[a:b], self.total[i],
                                                 self.suffix_len[i], self.sparse[i], self.approximate[i])


@dataclass(frozen=True)
class BatchScoreResult(CountedProbs):
    """Dense scoring of a batch of sequences, flat: sequence i is ``[offsets[i]:offsets[i+1]]`` of
    every array (entry j is about token j given the earlier tokens of its own sequence).

    Example:
        >>> r = index.score_batch([[5, 6, 7], [8, 9]])                     # doctest: +SKIP
        >>> r[1].probs, r.probs[r.offsets[1]:]                              # doctest: +SKIP
    """

    offsets: np.ndarray        # int64, sequences + 1 (into the flat arrays)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> ScoreResult:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sequence {i} out of range for {len(self)} sequences")
        i = i % len(self)
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return ScoreResult(probs=self.probs[a:b], counts=self.counts[a:b], prompt_counts=self.prompt_counts[a:b],
                           suffix_len=self.suffix_len[a:b], sparse=self.sparse[a:b])
