"""Decoding states and SuffixCache: extended one token at a time, rolled back, batched — always
equal to the brute-force ∞-gram answers for the context itself."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Reference, assert_ntd_matches, assert_prob_matches, built_index, make_index
from infinigram_hf import InfiniGramError
from infinigram_hf.index.states import (DecodingState, SuffixCache, extend_state, init_state, states_ntd,
                                       states_prob)

SETTINGS = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@st.composite
def decoding_runs(draw: st.DrawFn):
    vocab = draw(st.sampled_from([4, 300]))
    alphabet = sorted(set(draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=4)) + [vocab - 1]))
    sym = st.sampled_from(alphabet)
    docs = draw(st.lists(st.lists(sym, max_size=25), min_size=1, max_size=5))
    # operations: ("push", token) appends, ("back", k) rolls the context back k tokens,
    # ("copy", i) continues from the i-th token of a document (long matches)
    ops = draw(st.lists(st.one_of(st.tuples(st.just("push"), sym),
                                  st.tuples(st.just("back"), st.integers(1, 4)),
                                  st.tuples(st.just("copy"), st.integers(0, 40))), max_size=25))
    total = sum(len(d) + 1 for d in docs)
    max_shard = draw(st.sampled_from([None, max(max(len(d) + 1 for d in docs), total // 2)]))
    return vocab, docs, ops, max_shard, draw(st.sampled_from([0, 2, 16]))


@SETTINGS
@given(run=decoding_runs())
def test_cache_follows_pushes_and_rollbacks(scratch_dir, run) -> None:
    vocab, docs, ops, max_shard, lookback = run
    ref = Reference(docs, vocab)
    flat = [t for d in docs for t in d] or [0]
    with built_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=max_shard,
                     ntd_cache_min_cost=1) as ix:
        cache = SuffixCache(ix, max_states=8, max_distributions=4, lookback=lookback)
        ctx: list[int] = []
        history = []
        for op, arg in ops:
            if op == "push":
                ctx.append(arg)
            elif op == "back":
                del ctx[max(0, len(ctx) - arg):]
            else:
                ctx.append(flat[arg % len(flat)])
            want, k = ref.infgram_ntd(ctx)
            assert cache.state(ctx).suffix_len == k
            assert_ntd_matches(cache.ntd(ctx), want, k, f"ntd({ctx})")
            t = ctx[-1] if ctx else vocab - 1
            assert_prob_matches(cache.prob(ctx, t), ref.infgram_prob(ctx, t), f"prob({ctx}, {t})")
            history.append(list(ctx))
            assert len(cache) <= 8
        if history:  # every context seen, in one batch (some parents cached, some not)
            d = cache.ntd_batch(history)
            p = cache.prob_batch(history, [c[-1] if c else vocab - 1 for c in history])
            for i, c in enumerate(history):
                want, k = ref.infgram_ntd(c)
                assert_ntd_matches(d[i], want, k, f"ntd_batch[{i}]")
                assert_prob_matches(p[i], ref.infgram_prob(c, c[-1] if c else vocab - 1), f"prob_batch[{i}]")


def test_state_api(tmp_path) -> None:
    docs = [[1, 2, 3, 4, 1, 2, 3, 5], [2, 3, 4, 6]]
    ref = Reference(docs, 10)
    ix = make_index(docs, tmp_path, vocab_size=10)
    empty = init_state(ix, [])
    assert empty.suffix_len == 0 and empty.count == ix.num_tokens and empty.ranges.shape == (ix.num_shards, 2)
    ctx: list[int] = []
    state = empty
    for t in [1, 2, 3, 4, 6, 2, 9, 3]:
        ctx.append(t)
        full = extend_state(ix, state, ctx)
        tail = extend_state(ix, state, ctx[len(ctx) - state.suffix_len - 1:])  # only the needed tail
        assert np.array_equal(full.values, tail.values)
        assert np.array_equal(full.values, init_state(ix, ctx).values)
        assert full.suffix_len == ref.suffix_len(ctx) and full.count == ref.count(ctx[len(ctx) - full.suffix_len:])
        state = full
    states = [init_state(ix, ctx[:i]) for i in range(len(ctx) + 1)]
    d = states_ntd(ix, states)
    p = states_prob(ix, np.stack([s.values for s in states]), 3)
    for i, s in enumerate(states):
        want, k = ref.infgram_ntd(ctx[:i])
        assert_ntd_matches(d[i], want, k, f"states_ntd[{i}]")
        assert_prob_matches(p[i], ref.infgram_prob(ctx[:i], 3), f"states_prob[{i}]")


def test_state_errors(tmp_path) -> None:
    ix = make_index([[1, 2, 3, 1, 2]], tmp_path, vocab_size=10)
    s = init_state(ix, [1, 2])
    assert s.suffix_len == 2
    with pytest.raises(ValueError, match="at least 3"):
        extend_state(ix, s, [2, 3])  # the tail must hold the matched suffix and the new token
    with pytest.raises(ValueError, match="outside the vocabulary"):
        extend_state(ix, s, [1, 2, 10])
    with pytest.raises(ValueError, match="separator"):
        init_state(ix, [1, ix.separator_id])
    bad = s.values.copy()
    bad[3] = 10**9  # a range beyond the suffix array
    with pytest.raises(ValueError, match="not a state"):
        extend_state(ix, DecodingState(bad), [1, 2, 3])
    bad = s.values.copy()
    bad[1] += 1  # count inconsistent with the ranges
    with pytest.raises(ValueError, match="not a state"):
        states_ntd(ix, [DecodingState(bad)])
    with pytest.raises(ValueError, match="states"):
        states_ntd(ix, np.zeros((2, 3), dtype=np.int64))
    # a short state (another index's) is refused by the C call, which takes the state's length
    # with its pointer (it read past the array's end before)
    with pytest.raises(ValueError, match="2 int64 values given; the call needs 4"):
        extend_state(ix, DecodingState(s.values[:2].copy()), [1, 2, 3])
    with pytest.raises(ValueError):
        SuffixCache(ix, max_states=0)
    cache = ix.suffix_cache()
    cache.ntd([1, 2])
    ix.close()
    with pytest.raises(InfiniGramError, match="closed"):
        cache.ntd([1, 2, 3])  # needs the index: extends [1, 2]
    with pytest.raises(InfiniGramError, match="closed"):
        init_state(ix, [1])


def test_accepting_several_draft_tokens_extends_from_an_ancestor(tmp_path) -> None:
    rng = np.random.default_rng(0)
    doc = rng.integers(0, 20, size=3000).tolist()
    ix = make_index([doc], tmp_path, vocab_size=20)
    cache = SuffixCache(ix, lookback=8)
    ctx = doc[:100]
    cache.ntd(ctx)
    searched = cache.stats["searched"]
    ctx = ctx + doc[100:106]  # six tokens accepted at once
    assert cache.ntd(ctx).as_dict() == ix.infgram_ntd(ctx).as_dict()
    assert cache.stats["searched"] == searched and cache.stats["extended"] >= 6
    ctx = ctx + doc[106:130]  # beyond the lookback: searched from scratch, still exact
    assert cache.ntd(ctx).as_dict() == ix.infgram_ntd(ctx).as_dict()
    assert cache.stats["searched"] == searched + 1
