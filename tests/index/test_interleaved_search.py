"""Batches larger than the C core's interleaved search lanes (native/src/find_many.c: 16
searches in flight, refilled as they finish) against brute force: counts and ∞-gram/n-gram
probabilities of many queries at once, over one or several shards, with and without the cache
of short contexts (whose narrowing the lanes use before they bisect)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Reference, assert_prob_matches, built_index
from infinigram_hf.index.batch import prob_batch

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@st.composite
def corpus_and_many_queries(draw: st.DrawFn):
    vocab = draw(st.sampled_from([3, 300, 70000]))
    alphabet = sorted(set(draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=5)) + [vocab - 1]))
    sym = st.sampled_from(alphabet)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    docs = [[alphabet[i] for i in rng.integers(0, len(alphabet), rng.integers(0, 120))]
            for _ in range(draw(st.integers(1, 12)))]
    queries = []
    for _ in range(draw(st.integers(17, 90))):  # more than the lanes: refills mid-flight
        nonempty = [d for d in docs if d]
        if nonempty and rng.random() < 0.7:
            d = nonempty[rng.integers(len(nonempty))]
            i = int(rng.integers(0, len(d)))
            q = d[i:i + int(rng.integers(0, 14))] + draw(st.lists(sym, max_size=1))
        else:
            q = draw(st.lists(sym, max_size=8))
        queries.append(q)
    total = sum(len(d) + 1 for d in docs)
    max_shard = draw(st.sampled_from([None, max(max(len(d) + 1 for d in docs), total // 3)]))
    return vocab, docs, queries, max_shard, draw(st.sampled_from([0, 1, 2048]))


@SETTINGS
@given(case=corpus_and_many_queries())
def test_many_queries_match_brute_force(scratch_dir, case) -> None:
    vocab, docs, queries, max_shard, min_cost = case
    ref = Reference(docs, vocab)
    with built_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=max_shard,
                     ntd_cache_min_cost=min_cost) as ix:
        assert ix.count_batch(queries, n_threads=1).tolist() == [ref.count(q) for q in queries]
        tokens = [(q[-1] if q else vocab - 1) for q in queries]
        contexts = [q[:-1] for q in queries]
        pb = ix.infgram_prob_batch(contexts, tokens, n_threads=1)
        nb = prob_batch(ix, contexts, tokens, infinite=False, n_threads=1)
        for i, (q, t) in enumerate(zip(contexts, tokens)):
            assert_prob_matches(pb[i], ref.infgram_prob(q, t), f"infgram_prob_batch[{i}]")
            assert_prob_matches(nb[i], ref.ngram_prob(q, t), f"ngram prob_batch[{i}]")
