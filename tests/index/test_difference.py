"""DifferenceIndex (an index minus an index of a subset of its documents) against an index built
without the removed documents, for every query type: count, n-gram / ∞-gram probabilities and
next-token distributions, the ∞-gram suffix length, dense scoring; plus the refusals."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Reference, assert_ntd_matches, assert_prob_matches, make_index
from infinigram_hf import DifferenceIndex, InfiniGramIndex, TokenizerMismatchError
from infinigram_hf.build import build_index

SETTINGS = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def same_prob(a, b, what: str) -> None:
    fields = ("count", "prompt_count", "suffix_len", "sparse", "prob")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields], what


def same_ntd(a, b, what: str) -> None:
    assert a.as_dict() == b.as_dict(), what
    assert (a.total, a.suffix_len, a.sparse) == (b.total, b.suffix_len, b.sparse), what
    np.testing.assert_allclose(a.probs, b.probs, err_msg=what)


def assert_equivalent(diff, kept, ref: Reference, queries, vocab: int) -> None:
    """Every query answers the same on the difference, the rebuilt index and brute force."""
    assert (diff.num_tokens, diff.num_docs) == (ref.num_tokens, ref.num_docs)
    for q in queries:
        assert diff.count(q) == kept.count(q) == ref.count(q), q
        same_ntd(diff.ngram_ntd(q), kept.ngram_ntd(q), f"ngram_ntd {q}")
        assert_ntd_matches(diff.ngram_ntd(q), ref.ntd(q), len(q), f"ngram_ntd {q}")
        assert diff.infgram_suffix_len(q) == kept.infgram_suffix_len(q) == ref.suffix_len(q), q
        want, k = ref.infgram_ntd(q)
        assert_ntd_matches(diff.infgram_ntd(q), want, k, f"infgram_ntd {q}")
        same_ntd(diff.infgram_ntd(q), kept.infgram_ntd(q), f"infgram_ntd {q}")
        for t in sorted({0, vocab - 1, *q[-2:]}):
            same_prob(diff.ngram_prob(q, t), kept.ngram_prob(q, t), f"ngram_prob {q} {t}")
            same_prob(diff.infgram_prob(q, t), kept.infgram_prob(q, t), f"infgram_prob {q} {t}")
            assert_prob_matches(diff.infgram_prob(q, t), ref.infgram_prob(q, t), f"infgram_prob {q} {t}")
        a, b = diff.score(q), kept.score(q)
        for field in ("counts", "prompt_counts", "suffix_len", "sparse", "probs"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=f"score {q} {field}")


@st.composite
def split_corpus(draw: st.DrawFn):
    vocab = draw(st.sampled_from([3, 6, 300]))
    alphabet = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=4, unique=True))
    sym = st.sampled_from(alphabet)
    docs = draw(st.lists(st.lists(sym, max_size=12), min_size=2, max_size=10))
    removed = draw(st.lists(st.booleans(), min_size=len(docs), max_size=len(docs)))
    removed[draw(st.integers(0, len(docs) - 1))] = False  # keep at least one document
    shard_a = draw(st.sampled_from([None, 14, 30]))
    shard_b = draw(st.sampled_from([None, 14]))
    queries = draw(st.lists(st.lists(st.sampled_from(alphabet + [vocab - 1]), max_size=6), min_size=1, max_size=6))
    return vocab, docs, removed, shard_a, shard_b, queries


@given(case=split_corpus())
@SETTINGS
def test_difference_equals_index_without_removed_docs(case, scratch_dir):
    vocab, docs, removed, shard_a, shard_b, queries = case
    kept_docs = [d for d, r in zip(docs, removed) if not r]
    gone = [d for d, r in zip(docs, removed) if r]
    full = make_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=shard_a)
    sub = make_index(gone[::-1], scratch_dir, vocab_size=vocab, max_shard_tokens=shard_b)  # any order
    kept = make_index(kept_docs, scratch_dir, vocab_size=vocab)
    try:
        diff = full.difference(sub)
        assert_equivalent(diff, kept, Reference(kept_docs, vocab), queries, vocab)
    finally:
        for ix in (full, sub, kept):
            ix.close()


def test_union_minus_union_and_open_subtract(scratch_dir):
    rng = np.random.default_rng(1)
    docs = [list(rng.integers(0, 5, size=int(rng.integers(0, 30)))) for _ in range(40)]
    halves = [make_index(docs[:20], scratch_dir, vocab_size=5), make_index(docs[20:], scratch_dir, vocab_size=5)]
    drop = [3, 7, 21, 22, 39]
    removed = [make_index([docs[i] for i in drop[:2]], scratch_dir, vocab_size=5),
               make_index([docs[i] for i in drop[2:]], scratch_dir, vocab_size=5)]
    kept_docs = [d for i, d in enumerate(docs) if i not in drop]
    kept = make_index(kept_docs, scratch_dir, vocab_size=5)
    queries = [list(rng.integers(0, 5, size=int(rng.integers(0, 8)))) for _ in range(40)] + [docs[3][:6], []]
    with InfiniGramIndex.open([h.paths[0] for h in halves], subtract=[r.paths[0] for r in removed],
                              verify=True) as diff:
        assert isinstance(diff, DifferenceIndex)
        assert_equivalent(diff, kept, Reference(kept_docs, 5), queries, 5)
        long_doc = [int(t) for d in kept_docs[:4] for t in d]
        a, b = diff.score(long_doc), kept.score(long_doc)
        np.testing.assert_array_equal(a.probs, b.probs)
        np.testing.assert_array_equal(a.suffix_len, b.suffix_len)
    assert not any(ix.closed for ix in halves + removed)  # open(subtract=) opened its own copies
    for ix in halves + removed + [kept]:
        ix.close()


def test_removing_everything_leaves_an_empty_model(scratch_dir):
    docs = [[1, 2, 3], [2, 2]]
    full = make_index(docs, scratch_dir, vocab_size=5)
    same = make_index(docs[::-1], scratch_dir, vocab_size=5)
    diff = full.difference(same)
    assert diff.num_tokens == 0 and diff.count([]) == 0 and diff.count([2]) == 0
    assert diff.infgram_suffix_len([1, 2]) == 0
    ntd = diff.infgram_ntd([1, 2])
    assert ntd.total == 0 and len(ntd) == 0 and not ntd.sparse
    assert diff.infgram_prob([1, 2], 3).prob == 0.0
    assert diff.score([1, 2, 3]).counts.tolist() == [0, 0, 0]
    full.close(), same.close()


def test_refuses_incompatible_and_non_subset_indexes(scratch_dir):
    full = make_index([[1, 2, 3], [3, 3, 1]], scratch_dir, vocab_size=5)
    with pytest.raises(ValueError, match="vocab_size"):
        full.difference(make_index([[1]], scratch_dir, vocab_size=7))
    with pytest.raises(ValueError, match="not a subset.*token 4"):
        full.difference(make_index([[4]], scratch_dir, vocab_size=5))
    with pytest.raises(ValueError, match="larger"):
        full.difference(make_index([[1], [2], [3]], scratch_dir, vocab_size=5))
    # same unigram counts as a subset would have, but "3 1 2" is no document of full:
    sneaky = make_index([[3, 1, 2]], scratch_dir, vocab_size=5)
    diff = full.difference(sneaky)         # the cheap checks pass ...
    assert diff.count([1, 2]) == 0
    with pytest.raises(ValueError, match="not a subset"):
        diff.count([3, 1, 2])              # ... but no query answers with a negative count
    with pytest.raises(ValueError, match="not a subset"):
        diff.ngram_prob([3, 1], 2)
    with pytest.raises(ValueError, match="not a subset"):
        diff.ngram_ntd([3, 1])
    with pytest.raises(ValueError, match="not a subset"):
        full.difference(sneaky, verify=True)
    text = build_index(["ab"], scratch_dir / "bytes-a", progress=False)
    other = build_index([[1]], scratch_dir / "ids-b", vocab_size=255, progress=False)
    with pytest.raises(TokenizerMismatchError):
        text.difference(other)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        full.difference(make_index([[1]], scratch_dir, vocab_size=5)).count([9])
    with pytest.raises(AttributeError, match="documents"):
        full.difference(make_index([[1]], scratch_dir, vocab_size=5)).search_docs([1])


def test_threads_get_the_serial_answers(scratch_dir):
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(4)
    docs = [list(rng.integers(0, 5, size=int(rng.integers(0, 40)))) for _ in range(60)]
    full = make_index(docs, scratch_dir, vocab_size=5, max_shard_tokens=300)
    removed = make_index(docs[::3], scratch_dir, vocab_size=5)
    diff = full.difference(removed)
    prompts = [list(rng.integers(0, 5, size=int(rng.integers(0, 12)))) for _ in range(50)]

    def answer(i: int):
        p = prompts[i % 50]
        return (diff.count(p), diff.infgram_ntd(p).as_dict(), diff.infgram_prob(p, i % 5).prob,
                diff.score(p).probs.tolist())

    serial = [answer(i) for i in range(200)]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(answer, range(200))) == serial
    full.close(), removed.close()
