"""InfiniGramLM over a DifferenceIndex (an index minus an index of a subset of its documents)
against the same LM over an index rebuilt without the removed documents: scores, sparse flags,
distributions, per-level statistics, count-of-counts and the smoothing estimated from them,
perplexity and seeded generation, for every method (the C LM reads net counts: ig_diff_lm_*).
Token widths u8 / u16 / u32 and several shards on either side; plus a removed index that is not
a subset."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import make_index
from infinigram_hf import InfiniGramIndex, InfiniGramLM
from infinigram_hf.lm.model import METHODS

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# every method, with its defaults and with the options that change what it reads
VARIANTS = [(m, {}) for m in METHODS] + [("backoff", {"k": 2, "decay": 0.5}), ("kn", {"order": 3}),
                                         ("wb", {"order": 2})]


def same_probs(a, b, what: str) -> None:
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=0, err_msg=what)


def assert_lms_agree(diff_lm: InfiniGramLM, kept_lm: InfiniGramLM, queries, seeds) -> None:
    """Every answer of the LM over the difference equals the LM's over the rebuilt index."""
    for got, want in zip(diff_lm.count_of_counts(6, 5), kept_lm.count_of_counts(6, 5)):
        np.testing.assert_array_equal(got, want, err_msg="count_of_counts")
    assert diff_lm.smoothing(None) == kept_lm.smoothing(None)
    assert diff_lm.smoothing(3) == kept_lm.smoothing(3)
    for q in queries:
        np.testing.assert_array_equal(diff_lm.levels(q, with_cont=True), kept_lm.levels(q, with_cont=True),
                                      err_msg=f"levels {q}")
        np.testing.assert_array_equal(diff_lm.levels(q, eod=True, max_depth=3), kept_lm.levels(q, eod=True, max_depth=3),
                                      err_msg=f"levels eod {q}")
        for method, opts in VARIANTS:
            for eod in (False, True):
                what = f"{method} {opts} eod={eod} {q}"
                a, b = diff_lm.score(q, method, eod=eod, **opts), kept_lm.score(q, method, eod=eod, **opts)
                same_probs(a.probs, b.probs, f"score {what}")
                np.testing.assert_array_equal(a.suffix_len, b.suffix_len, err_msg=f"suffix_len {what}")
                np.testing.assert_array_equal(a.sparse, b.sparse, err_msg=f"sparse {what}")
                for cut in sorted({0, len(q) // 2, len(q)}):
                    same_probs(diff_lm.distribution(q[:cut], method, eod=eod, **opts),
                               kept_lm.distribution(q[:cut], method, eod=eod, **opts), f"distribution {cut} {what}")
            a, b = diff_lm.perplexity([q, q[::-1]], method, **opts), kept_lm.perplexity([q, q[::-1]], method, **opts)
            assert a.num_tokens == b.num_tokens
            np.testing.assert_allclose(a.nll, b.nll, rtol=1e-12, err_msg=f"perplexity {method} {opts}")
    # sampling: plain draws by rank (∞-gram, back-off) and the dense path (kn, temperature, top-k)
    for q in queries[:2]:
        for seed in seeds:
            for method, opts in VARIANTS:
                for smp in ({}, {"temperature": 0.7, "top_k": 2}, {"greedy": True}):
                    a = diff_lm.generate(q, 12, method, seed=seed, **opts, **smp)
                    b = kept_lm.generate(q, 12, method, seed=seed, **opts, **smp)
                    what = f"generate {q} {method} {opts} {smp} seed={seed}"
                    assert a.token_ids.tolist() == b.token_ids.tolist(), what
                    assert (a.suffix_len.tolist(), a.matches.tolist(), a.finish_reason) == (
                        b.suffix_len.tolist(), b.matches.tolist(), b.finish_reason), what


@st.composite
def split_corpus(draw: st.DrawFn):
    vocab = draw(st.sampled_from([3, 7, 300, 70_000]))  # u8, u8, u16, u32 tokens
    alphabet = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=4, unique=True))
    sym = st.sampled_from(alphabet)
    docs = draw(st.lists(st.lists(sym, max_size=14), min_size=2, max_size=10))
    removed = draw(st.lists(st.booleans(), min_size=len(docs), max_size=len(docs)))
    keep = draw(st.integers(0, len(docs) - 1))
    removed[keep] = False  # keep at least one document, remove at least one
    removed[(keep + draw(st.integers(1, len(docs) - 1))) % len(docs)] = True
    room = max(len(d) for d in docs) + 1  # a shard holds at least the longest document
    shard_a = draw(st.sampled_from([None, 14, 30]))
    shard_b = draw(st.sampled_from([None, 10]))
    shard_a, shard_b = (None if c is None else max(c, room) for c in (shard_a, shard_b))
    probe = st.sampled_from(alphabet + [vocab - 1])
    queries = draw(st.lists(st.lists(probe, max_size=8), min_size=1, max_size=3))
    max_context = draw(st.sampled_from([100, 3]))
    return vocab, docs, removed, shard_a, shard_b, queries, max_context


@given(case=split_corpus(), seed=st.integers(0, 2**32 - 1))
@SETTINGS
def test_lm_over_difference_equals_lm_over_rebuilt_index(case, seed, scratch_dir):
    vocab, docs, removed, shard_a, shard_b, queries, max_context = case
    kept_docs = [d for d, r in zip(docs, removed) if not r]
    gone = [d for d, r in zip(docs, removed) if r]
    full = make_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=shard_a)
    kept = make_index(kept_docs, scratch_dir, vocab_size=vocab)  # one shard: seeded draws by rank match it
    sub = make_index(gone[::-1], scratch_dir, vocab_size=vocab, max_shard_tokens=shard_b)  # any order
    try:
        assert_lms_agree(InfiniGramLM(full.difference(sub), max_context=max_context),
                         InfiniGramLM(kept, max_context=max_context), queries, [seed])
    finally:
        for ix in (full, kept, sub):
            ix.close()


def test_union_minus_union_with_repeats(scratch_dir):
    """Larger counts (the continuation-count cache, long matches) over two directories minus two."""
    rng = np.random.default_rng(3)
    docs = [list(rng.integers(0, 4, size=int(rng.integers(0, 50)))) for _ in range(60)]
    docs += [docs[5] * 3, docs[6] + docs[5], docs[5]]  # long repeats, some of them removed
    halves = [make_index(docs[:30], scratch_dir, vocab_size=4, max_shard_tokens=400),
              make_index(docs[30:], scratch_dir, vocab_size=4)]
    drop = [3, 5, 7, 31, 32, 60, 62]
    removed = [make_index([docs[i] for i in drop[:3]], scratch_dir, vocab_size=4),
               make_index([docs[i] for i in drop[3:]], scratch_dir, vocab_size=4)]
    kept = make_index([d for i, d in enumerate(docs) if i not in drop], scratch_dir, vocab_size=4)
    queries = [docs[5][:20], docs[6][:12] + docs[5][:10], list(rng.integers(0, 4, size=30))]
    with InfiniGramIndex.open([h.paths[0] for h in halves], subtract=[r.paths[0] for r in removed]) as diff:
        lm = InfiniGramLM(diff)
        assert_lms_agree(lm, InfiniGramLM(kept), queries, [0, 1, 2])
        lm.clear_cache()  # answers do not depend on what the cache held
        same_probs(lm.score(queries[0]).probs, InfiniGramLM(kept).score(queries[0]).probs, "after clear_cache")
    for ix in halves + removed + [kept]:
        ix.close()


def test_a_removed_index_that_is_not_a_subset(tmp_path):
    """Opening checks only the unigram: a removed index that passes it but holds an n-gram the
    index lacks answers until a call meets a negative net count, which raises ValueError (as
    every query of a DifferenceIndex does)."""
    full = make_index([[1, 2, 3], [1, 2, 4], [2, 2]], tmp_path, vocab_size=6)
    sneaky = make_index([[2, 1]], tmp_path, vocab_size=6)  # "2 1" is not in the index
    bad = full.difference(sneaky)
    lm = InfiniGramLM(bad, method="infgram")
    lm.score([1, 2, 3])  # meets no negative count
    with pytest.raises(ValueError, match="not a subset"):
        lm.score([2, 1])
    with pytest.raises(ValueError, match="not a subset"):
        lm.distribution([2], method="backoff")
    with pytest.raises(ValueError, match="not a subset"):
        lm.count_of_counts(2)  # (so every Kneser-Ney call, whose discounts come from it)
    with pytest.raises(ValueError, match="not a subset"):
        InfiniGramLM(bad).score([1, 2])
    lm.score([1, 2, 3])  # a failed call leaves nothing behind
    for ix in (full, sneaky):
        ix.close()
