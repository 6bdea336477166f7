"""Decontaminate reference data against evaluation data before building an index (paper App. B,
after the Big Friendly Filter): a reference document is dropped when at least `threshold` (80%)
of its n-grams (n = 13) occur in the evaluation texts. Documents are removed whole; a document
shorter than n counts as one n-gram (itself).

Units: "words" (\\w+ runs and single punctuation marks, the default), "whitespace", "chars",
or any tokenizer (an object with .encode, or a callable text -> sequence).

Example:
    >>> deco = Decontaminator(["the quick brown fox jumps over the lazy dog"], n=3)
    >>> kept, report = deco.filter_list(["the quick brown fox", "a b c d e"])
    >>> kept, report.dropped
    (['a b c d e'], 1)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

_WORDS = re.compile(r"\w+|[^\w\s]")


@dataclass
class DecontaminationReport:
    """What a filtering pass saw and dropped (filled while iterating)."""

    n: int
    threshold: float
    total: int = 0
    dropped: int = 0
    dropped_indices: List[int] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return self.total - self.dropped

    @property
    def ratio_dropped(self) -> float:
        return self.dropped / self.total if self.total else 0.0

    def as_dict(self) -> dict:
        return {"n": self.n, "threshold": self.threshold, "total": self.total, "dropped": self.dropped,
                "kept": self.kept, "ratio_dropped": self.ratio_dropped, "dropped_indices": list(self.dropped_indices)}


def _unit_fn(unit: Union[str, Any], lowercase: bool) -> Callable[[str], Sequence[Any]]:
    if unit == "words":
        fn: Callable[[str], Sequence[Any]] = _WORDS.findall
    elif unit == "whitespace":
        fn = str.split
    elif unit == "chars":
        fn = list
    elif hasattr(unit, "encode") and not isinstance(unit, str):
        fn = lambda t: unit.encode(t, add_special_tokens=False) if _accepts_special(unit) else unit.encode(t)  # noqa: E731
    elif callable(unit):
        fn = unit
    else:
        raise ValueError(f"unit must be 'words', 'whitespace', 'chars', a tokenizer or a callable, got {unit!r}")
    return (lambda t: fn(t.lower())) if lowercase else fn


def _accepts_special(tok: Any) -> bool:
    try:
        tok.encode("", add_special_tokens=False)
        return True
    except TypeError:
        return False


class Decontaminator:
    """The n-grams of the evaluation texts, and the test of a reference document against them.

    Args:
        eval_texts: the evaluation set (strings).
        n: n-gram length (13, as BFF and the paper).
        threshold: drop a document when at least this fraction of its n-grams is in the set.
        unit: what an n-gram is made of (see the module docstring).
        lowercase: compare lowercased text (the paper does for the Pile).
    """

    def __init__(self, eval_texts: Iterable[str], *, n: int = 13, threshold: float = 0.8,
                 unit: Union[str, Any] = "words", lowercase: bool = False):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
        self.n, self.threshold = n, float(threshold)
        self._units = _unit_fn(unit, lowercase)
        self._grams: set = set()
        for t in eval_texts:
            if not isinstance(t, str):
                raise ValueError(f"eval_texts must be strings, got {type(t).__name__}")
            self._grams.update(self._ngrams(t))

    def __len__(self) -> int:
        """Distinct n-grams of the evaluation set."""
        return len(self._grams)

    def _ngrams(self, text: str) -> List[int]:
        u = list(self._units(text))
        if not u:
            return []
        if len(u) < self.n:
            return [hash(tuple(u))]
        return [hash(tuple(u[i:i + self.n])) for i in range(len(u) - self.n + 1)]

    def overlap(self, text: str) -> float:
        """Fraction of the document's n-grams present in the evaluation set (0 for an empty one)."""
        grams = self._ngrams(text)
        return sum(g in self._grams for g in grams) / len(grams) if grams else 0.0

    def is_contaminated(self, text: str) -> bool:
        return self.overlap(text) >= self.threshold

    def filter(self, docs: Iterable[Any], report: Optional[DecontaminationReport] = None,
               text_column: str = "text") -> Iterator[Any]:
        """Yield the documents that are kept (strings, or dicts with `text_column`), counting into
        `report` (create one with new_report())."""
        report = report if report is not None else self.new_report()
        for i, doc in enumerate(docs):
            text = doc if isinstance(doc, str) else doc[text_column]
            report.total += 1
            if self.is_contaminated(text):
                report.dropped += 1
                report.dropped_indices.append(i)
                continue
            yield doc

    def filter_list(self, docs: Iterable[Any], text_column: str = "text") -> Tuple[List[Any], DecontaminationReport]:
        report = self.new_report()
        return list(self.filter(docs, report, text_column)), report

    def new_report(self) -> DecontaminationReport:
        return DecontaminationReport(n=self.n, threshold=self.threshold)

    def filter_dataset(self, dataset: Any, text_column: str = "text", **map_kwargs: Any) -> Tuple[Any, DecontaminationReport]:
        """A `datasets.Dataset` without its contaminated rows, and the report."""
        flags = [self.is_contaminated(t) for t in dataset[text_column]]
        report = self.new_report()
        report.total = len(flags)
        report.dropped_indices = [i for i, f in enumerate(flags) if f]
        report.dropped = len(report.dropped_indices)
        keep = [i for i, f in enumerate(flags) if not f]
        return dataset.select(keep), report


def decontaminate(reference: Iterable[Any], eval_texts: Iterable[str], *, n: int = 13, threshold: float = 0.8,
                  unit: Union[str, Any] = "words", lowercase: bool = False,
                  text_column: str = "text") -> Tuple[List[Any], DecontaminationReport]:
    """The reference documents that survive, and the report (how many were dropped, which).

    Example:
        >>> kept, rep = decontaminate(["a b c d", "x y z w"], ["a b c d e"], n=2)
        >>> kept, rep.dropped
        (['x y z w'], 1)
    """
    deco = Decontaminator(eval_texts, n=n, threshold=threshold, unit=unit, lowercase=lowercase)
    return deco.filter_list(reference, text_column)


class IndexDecontaminator:
    """The same test against an ∞-gram index instead of a set of hashed n-grams: a document (token
    ids) is contaminated when at least `threshold` of its token n-grams occur in the index. The
    index answers every n-gram exactly (one longest-match pass per document, `creativity`), so
    this scales to datastores far too large to hash in memory -- e.g. to drop held-out documents
    that the datastore copies before reporting perplexity. A document shorter than n counts as
    one n-gram (itself).

    Example:
        >>> deco = IndexDecontaminator(index, n=13, threshold=0.8)            # doctest: +SKIP
        >>> kept, report = deco.filter_list(heldout_ids)                      # doctest: +SKIP
    """

    def __init__(self, index: Any, *, n: int = 13, threshold: float = 0.8):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
        self.index, self.n, self.threshold = index, n, float(threshold)

    def overlap(self, ids: Sequence[int]) -> float:
        """Fraction of the document's n-grams that occur in the index (0 for an empty one)."""
        import numpy as np

        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not len(ids):
            return 0.0
        match = self.index.creativity(ids).match_len  # longest indexed prefix of ids[l:], per l
        if len(ids) < self.n:
            return float(match[0] >= len(ids))
        return float((match[: len(ids) - self.n + 1] >= self.n).mean())

    def is_contaminated(self, ids: Sequence[int]) -> bool:
        return self.overlap(ids) >= self.threshold

    def filter_list(self, docs: Iterable[Sequence[int]]) -> Tuple[List[Any], DecontaminationReport]:
        """The documents that are kept, and the report (which were dropped)."""
        report, kept = DecontaminationReport(n=self.n, threshold=self.threshold), []
        for i, d in enumerate(docs):
            report.total += 1
            if self.is_contaminated(d):
                report.dropped += 1
                report.dropped_indices.append(i)
            else:
                kept.append(d)
        return kept, report
