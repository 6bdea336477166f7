"""attribute() and creativity() against brute force (conftest.Reference) on random corpora:
u8 / u16 / u32 tokens, runs, tiny documents, several shards, texts cut from the corpus and
spliced with tokens it never holds.

The reference follows the definitions of native/include/infinigram_trace.h literally: a search
for the longest match at every start, the delimiter cut, the word-end back-off, the filters and
the "end beyond every span kept so far" rule. Without delimiters or word starts it is moreover
checked to be every maximal span (one that cannot grow either way and still occur).
"""
from __future__ import annotations

import math
import os
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attribution_reference import ref_attribute, ref_match_len, ref_maximal
from conftest import Reference, built_index

SETTINGS = settings(max_examples=int(os.environ.get("IG_HYPOTHESIS_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
VOCABS = {1: st.integers(2, 255), 2: st.integers(256, 65535), 4: st.integers(65536, 2**32 - 2)}


@st.composite
def cases(draw: st.DrawFn):
    width = draw(st.sampled_from([1, 2, 4]))
    vocab = draw(VOCABS[width])
    top = vocab - 1
    alphabet = sorted(set(draw(st.lists(st.integers(0, top), min_size=1, max_size=4)) + [top, 0]))
    sym = st.sampled_from(alphabet)
    shape = draw(st.sampled_from(["random", "runs", "tiny", "big"]))
    if shape == "random":
        docs = draw(st.lists(st.lists(sym, max_size=12), min_size=1, max_size=8))
    elif shape == "big":
        docs = draw(st.lists(st.lists(sym, min_size=30, max_size=120), min_size=1, max_size=3))
    elif shape == "runs":
        docs = [[t] * k for t, k in draw(st.lists(st.tuples(sym, st.integers(1, 60)), min_size=1, max_size=3))]
    else:
        docs = draw(st.lists(st.lists(sym, max_size=2), min_size=5, max_size=30))
    max_shard = None
    if draw(st.booleans()):
        need = max((len(d) + 1 for d in docs), default=1)
        max_shard = draw(st.integers(need, max(need, sum(len(d) + 1 for d in docs))))
    unseen = [u for u in (1, top - 1, top // 2) if 0 <= u < vocab and u not in alphabet][:1]
    texts = []
    nonempty = [d for d in docs if d]
    for _ in range(draw(st.integers(1, 4))):
        x: list = []
        for _ in range(draw(st.integers(0, 4))):
            if nonempty and draw(st.booleans()):
                d = draw(st.sampled_from(nonempty))
                i = draw(st.integers(0, len(d) - 1))
                x += d[i:draw(st.integers(i + 1, len(d)))]
            else:
                x += draw(st.lists(st.sampled_from(alphabet + unseen), max_size=5))
        texts.append(x)
    rules = st.sets(st.sampled_from(alphabet), max_size=3)
    params = dict(min_len=draw(st.integers(1, 3)), max_count=draw(st.none() | st.integers(1, 6)),
                  delimiters=draw(st.none() | rules), word_starts=draw(st.none() | rules))
    return docs, vocab, max_shard, texts, params


@SETTINGS
@given(case=cases())
def test_attribute_and_creativity_equal_brute_force(scratch_dir, case) -> None:
    docs, vocab, max_shard, texts, params = case
    ref = Reference(docs, vocab)
    total = ref.num_tokens + ref.num_docs  # separators count in the unigram total (as officially)
    uni = ref.unigram()
    with built_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=max_shard) as ix:
        # creativity
        for x, got in zip(texts, ix.creativity_batch(texts, n_threads=2)):
            want = ref_match_len(ref, x)
            assert got.match_len.tolist() == want, x
            for k in (1, 2, 4):
                covered = [any(l <= i < l + want[l] and want[l] >= k for l in range(i + 1)) for i in range(len(x))]
                assert got.covered(k).tolist() == covered
                if x:
                    assert math.isclose(got.index(k), 1 - sum(covered) / len(x))
        # attribution
        got_all = ix.attribute_batch(texts, max_docs=1000, context=2, n_threads=2, **params)
        for x, got in zip(texts, got_all):
            want = ref_attribute(ref, x, params["min_len"], params["max_count"], params["delimiters"] or set(),
                                 params["word_starts"])
            assert [(s.start, s.end, s.count) for s in got.spans] == want, (x, params)
            if not params["delimiters"] and params["word_starts"] is None and params["max_count"] is None:
                assert want == [s for s in ref_maximal(ref, x) if s[1] - s[0] >= params["min_len"]], x
            for s in got.spans:
                span = x[s.start:s.end]
                lp = sum(math.log(uni[t]) - math.log(total) for t in span)
                assert math.isclose(s.unigram_logprob_sum, lp, rel_tol=1e-9, abs_tol=1e-9)
                assert sorted((d.doc_id, d.offset) for d in s.docs) == sorted(ref.occurrences(span)), span
                assert [d.shard for d in s.docs] == sorted(d.shard for d in s.docs)  # shard order
                for d in s.docs:
                    doc = ix.get_doc(d.doc_id).token_ids.tolist()
                    assert doc[d.offset:d.offset + len(span)] == span
                    assert d.window.tolist() == doc[max(d.offset - 2, 0):d.offset + len(span) + 2]
                    assert d.window_start == max(d.offset - 2, 0)
        # one at a time = the batch; max_docs caps the documents, not the spans
        for x, batch in zip(texts, got_all):
            one = ix.attribute(x, max_docs=1, **params)
            assert [(s.start, s.end, s.count) for s in one.spans] == [(s.start, s.end, s.count) for s in batch.spans]
            assert all(len(s.docs) == min(1, s.count) for s in one.spans)
