"""Bounded work (issue 7, part 6): every query whose memory or time an argument could blow up
has a cap with a safe default, and hitting it gives a clear error or an ``approximate`` result.
RELIABILITY.md lists every entry point with its cap; this file checks each cap in one place
(the search caps are also covered by test_search.py, the LM ones by test_lm.py)."""
from __future__ import annotations

import numpy as np
import pytest

import infinigram_hf.index.infinigram_index as index_module
from conftest import make_index
from infinigram_hf import InfiniGramError, InfiniGramLM
from infinigram_hf.index.batch import DEFAULT_MAX_ENTRIES
from infinigram_hf.index.search import MAX_CLAUSE_FREQ, MAX_CLAUSES, MAX_MAXNUM, MAX_TERMS

VOCAB = 300


@pytest.fixture(scope="module")
def ix(tmp_path_factory):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, VOCAB, size=400).tolist() + [7, 8, 9] * 30 for _ in range(60)]
    index = make_index(docs, tmp_path_factory.mktemp("caps"), vocab_size=VOCAB, ntd_cache_min_cost=0)
    yield index
    index.close()


def test_defaults_are_the_documented_ones() -> None:
    assert (MAX_CLAUSES, MAX_TERMS, MAX_MAXNUM, MAX_CLAUSE_FREQ) == (64, 256, 10_000, 10_000_000)
    assert DEFAULT_MAX_ENTRIES == 1 << 26 and index_module.MAX_POSITIONS == 1_000_000


@pytest.mark.parametrize("call, match", [
    (lambda ix: ix.search_docs([[[1]]] * (MAX_CLAUSES + 1)), "clauses"),
    (lambda ix: ix.search_docs([[[1]] * 200, [[2]] * 57]), "n-grams; at most"),
    (lambda ix: ix.search_docs([1], maxnum=MAX_MAXNUM + 1), "maxnum"),
    (lambda ix: ix.search_docs([1], max_clause_freq=MAX_CLAUSE_FREQ + 1), "max_clause_freq"),
    (lambda ix: ix.positions([7], limit=-1), "limit"),
    (lambda ix: ix.infgram_ntd_batch([[7]], max_support=0), "max_support"),
    (lambda ix: ix.infgram_ntd_batch([[7]], max_entries=0), "max_entries"),
    (lambda ix: ix.count_batch([[7]], n_threads=-1), "n_threads"),
    (lambda ix: ix.suffix_cache(max_states=0), "max_states"),
    (lambda ix: InfiniGramLM(ix, max_context=(1 << 20) + 1), "max_context"),
    (lambda ix: InfiniGramLM(ix, cache_entries=(1 << 26) + 1), "cache_entries"),
    (lambda ix: InfiniGramLM(ix).count_of_counts(4097), "max_n"),
    (lambda ix: InfiniGramLM(ix).generate([7], max_new_tokens=-1), "max_new_tokens"),
    (lambda ix: InfiniGramLM(ix).generate([7], max_tries=0), "max_tries"),
], ids=["clauses", "terms", "maxnum", "max_clause_freq", "positions-limit", "max_support", "max_entries",
        "n_threads", "max_states", "lm-max_context", "lm-cache_entries", "count_of_counts", "max_new_tokens",
        "max_tries"])
def test_arguments_past_a_cap_are_refused_by_name(ix, call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call(ix)


def test_search_past_max_clause_freq_is_approximate(ix) -> None:
    exact = ix.search_docs([7, 8])
    assert not exact.approximate and exact.count == 60
    capped = ix.search_docs([7, 8], max_clause_freq=100)
    assert capped.approximate and capped.anchor_used <= 100 < capped.anchor_count
    assert set(capped.doc_ids.tolist()) <= set(exact.doc_ids.tolist())


def test_ntd_past_max_support_is_approximate(ix) -> None:
    exact = ix.infgram_ntd([7])
    sampled = ix.infgram_ntd([7], max_support=16)
    assert not exact.approximate and sampled.approximate
    assert sampled.total == exact.total and int(sampled.counts.sum()) == exact.total
    rows = ix.infgram_ntd_batch([[7], [1, 2, 3, 4, 5, 6]], max_support=16)
    assert rows.approximate.tolist()[0] is True


def test_ntd_batch_size_cap(ix) -> None:
    """Rows of short contexts hold many entries each: past max_entries the batch is refused
    (InfiniGramError naming the cap), not built; None lifts the cap; the decoding cache's
    batches go through the same cap."""
    one = len(ix.infgram_ntd([]).token_ids)  # the unigram: every token of the corpus
    assert one > 100
    batch = [[]] * 50
    with pytest.raises(InfiniGramError, match="max_entries = 1000 "):
        ix.infgram_ntd_batch(batch, max_entries=1000)
    with pytest.raises(InfiniGramError, match="max_entries"):
        ix.infgram_ntd_batch(batch, max_entries=1000, n_threads=4)
    assert len(ix.infgram_ntd_batch(batch, max_entries=50 * one).token_ids) == 50 * one
    assert len(ix.infgram_ntd_batch(batch, max_entries=None).token_ids) == 50 * one
    from infinigram_hf.index.states import states_ntd

    cache = ix.suffix_cache()
    states = cache.states([[]] * 50)  # the empty context: the unigram
    with pytest.raises(InfiniGramError, match="max_entries"):
        states_ntd(ix, states, max_entries=1000)
    assert len(states_ntd(ix, states).token_ids) == 50 * one


def test_positions_without_a_limit_are_capped(ix, monkeypatch) -> None:
    assert len(ix.positions([7, 8])) == ix.count([7, 8]) == 60 * 30
    monkeypatch.setattr(index_module, "MAX_POSITIONS", 100)
    with pytest.raises(ValueError, match="MAX_POSITIONS = 100; pass limit="):
        ix.positions([7, 8])
    assert len(ix.positions([7, 8], limit=500)) == 500
    assert len(ix.positions([1, 2, 3, 4, 5, 6, 7])) == ix.count([1, 2, 3, 4, 5, 6, 7])


def test_suffix_cache_is_bounded(ix) -> None:
    cache = ix.suffix_cache(max_states=16, max_distributions=8)
    rng = np.random.default_rng(1)
    for _ in range(200):
        cache.ntd(rng.integers(0, VOCAB, size=6).tolist())
    assert len(cache) <= 16 and len(cache._dists.d) <= 8
