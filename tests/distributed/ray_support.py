"""Helpers of the Ray tests: skipping without Ray, and comparing two indexes answer by answer."""
from __future__ import annotations

import itertools
import os
from typing import Any, Iterable, Sequence

import numpy as np
import pytest


def ray_or_skip() -> Any:
    """The ray module, or a module-level skip that says why."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("Ray's own processes cannot run with the AddressSanitizer runtime preloaded",
                    allow_module_level=True)
    ray = pytest.importorskip("ray", reason="the [ray] extra (pip install 'infinigram-hf[ray]') is not installed")
    pytest.importorskip("pyarrow", reason="Ray Data needs pyarrow")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # (a token file would refuse drivers of loopback clusters)
    return ray


def queries(vocab: Sequence[int], max_len: int = 3, extra: Iterable[Sequence[int]] = ()) -> list[list[int]]:
    """Every n-gram of up to max_len tokens of `vocab`, and the extra ones."""
    out = [list(q) for n in range(max_len + 1) for q in itertools.product(vocab, repeat=n)]
    return out + [list(q) for q in extra]


def assert_same_answers(got: Any, want: Any, qs: Sequence[Sequence[int]], tokens: Sequence[int],
                        docs: Iterable[int] = ()) -> None:
    """`got` answers every query as `want` does: counts, probabilities (with their counts, suffix
    and sparse flag), distributions, dense scoring and documents."""
    assert (got.num_tokens, got.num_docs) == (want.num_tokens, want.num_docs)
    for q in qs:
        assert got.count(q) == want.count(q), q
        assert got.infgram_suffix_len(q) == want.infgram_suffix_len(q), q
        for t in tokens:
            assert got.infgram_prob(q, t) == want.infgram_prob(q, t), (q, t)
            assert got.ngram_prob(q, t) == want.ngram_prob(q, t), (q, t)
        for name in ("infgram_ntd", "ngram_ntd"):
            a, b = getattr(got, name)(q), getattr(want, name)(q)
            assert (a.as_dict(), a.total, a.suffix_len, a.sparse) == (b.as_dict(), b.total, b.suffix_len, b.sparse), \
                (name, q)
        a, b = got.score(q), want.score(q)
        for field in ("counts", "prompt_counts", "suffix_len", "sparse"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), ("score", field, q)
    for d in docs:
        a, b = got.get_doc(d), want.get_doc(d)
        assert np.array_equal(a.token_ids, b.token_ids) and a.metadata == b.metadata and a.text == b.text, d
