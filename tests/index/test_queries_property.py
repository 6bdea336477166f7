"""Every query type of InfiniGramIndex against the brute-force reference (conftest.Reference).

Corpora are random and small: token widths u8 / u16 / u32 (the vocabulary size forces the width,
and the largest allowed id vocab_size - 1 is always in the alphabet), long runs of one token,
empty documents, many tiny documents, several shards (small max_shard_tokens), and queries with
tokens the corpus never holds.
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infinigram_hf.build import build_index

from conftest import Reference, assert_ntd_matches, assert_prob_matches, built_index, doc_shards, score_row

BUILD_PARAMS = inspect.signature(build_index).parameters

# IG_HYPOTHESIS_EXAMPLES=2000 for a deeper hunt; the default keeps the file well under a minute.
SETTINGS = settings(max_examples=int(os.environ.get("IG_HYPOTHESIS_EXAMPLES", "120")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

U32_MAX_VOCAB = 2**32 - 2  # the separator 2**32 - 1 must stay free
VOCABS = {
    1: st.sampled_from([1, 2, 3, 255]) | st.integers(1, 255),
    2: st.sampled_from([256, 65535]) | st.integers(256, 65535),
    4: st.sampled_from([65536, U32_MAX_VOCAB]) | st.integers(65536, U32_MAX_VOCAB),
}


@dataclass
class Corpus:
    docs: list[list[int]]
    vocab_size: int
    alphabet: list[int]             # ids the documents are drawn from (vocab_size - 1 included)
    unseen: Optional[int]           # a valid id absent from the corpus, if the vocabulary has one
    max_shard_tokens: Optional[int]
    build_kwargs: dict              # extra build_index arguments (e.g. ntd_cache_min_cost)

    def build(self, base_dir):
        return built_index(self.docs, base_dir, vocab_size=self.vocab_size,
                           max_shard_tokens=self.max_shard_tokens, **self.build_kwargs)


@st.composite
def corpora(draw: st.DrawFn, width: Optional[int] = None) -> Corpus:
    width = width or draw(st.sampled_from([1, 2, 4]))
    vocab = draw(VOCABS[width])
    top = vocab - 1
    alphabet = sorted(set(draw(st.lists(st.integers(0, top), max_size=4)) + [top]))
    sym = st.sampled_from(alphabet)
    shape = draw(st.sampled_from(["random", "runs", "tiny", "mixed", "big"]))
    if shape == "random":
        docs = draw(st.lists(st.lists(sym, max_size=12), min_size=1, max_size=8))
    elif shape == "big":  # wide suffix-array ranges with several next tokens, long repeats
        docs = draw(st.lists(st.lists(sym, min_size=50, max_size=300), min_size=1, max_size=3))
    elif shape == "runs":  # "aaaa…": every prefix of the run repeats
        docs = [[t] * n for t, n in draw(st.lists(st.tuples(sym, st.integers(1, 150)), min_size=1, max_size=3))]
    elif shape == "tiny":
        docs = draw(st.lists(st.lists(sym, max_size=2), min_size=10, max_size=60))
    else:
        docs = (draw(st.lists(st.lists(sym, max_size=10), max_size=5))
                + [[draw(sym)] * draw(st.integers(1, 40))]
                + [[]] * draw(st.integers(0, 3)))
        docs = draw(st.permutations(docs))
    unseen = next((u for u in (0, 1, top - 1, top // 2) if 0 <= u < vocab and u not in alphabet), None)
    max_shard = None
    if draw(st.booleans()):  # several shards: a shard must still hold the longest document
        need = max((len(d) + 1 for d in docs), default=1)
        total = sum(len(d) + 1 for d in docs)
        max_shard = draw(st.integers(need, max(need, total)))
    build_kwargs = {}
    if "ntd_cache_min_cost" in BUILD_PARAMS:  # 1 caches every short context, 0 none
        build_kwargs["ntd_cache_min_cost"] = draw(st.sampled_from([0, 1, 2048]))
    return Corpus(docs, vocab, alphabet, unseen, max_shard, build_kwargs)


def draw_queries(data: st.DataObject, c: Corpus, n: int = 8) -> list[list[int]]:
    """Corpus substrings (maybe extended by one token), random alphabet strings, unseen ids."""
    sym = st.sampled_from(c.alphabet + ([c.unseen] if c.unseen is not None else []))
    out: list[list[int]] = [[]]
    nonempty = [d for d in c.docs if d]
    for _ in range(n):
        kind = data.draw(st.sampled_from(["sub", "sub+", "random"] if nonempty else ["random"]))
        if kind == "random":
            out.append(data.draw(st.lists(sym, max_size=6)))
            continue
        doc = data.draw(st.sampled_from(nonempty))
        i = data.draw(st.integers(0, len(doc) - 1))
        j = data.draw(st.integers(i + 1, min(len(doc), i + 8)))
        q = doc[i:j] + ([data.draw(sym)] if kind == "sub+" else [])
        if data.draw(st.booleans()):  # sometimes prepend context the corpus may not have
            q = data.draw(st.lists(sym, max_size=3)) + q
        out.append(q)
    return out


def next_tokens(c: Corpus) -> list[int]:
    return c.alphabet + ([c.unseen] if c.unseen is not None else [])


# ---------------------------------------------------------------------------- counting


@SETTINGS
@given(c=corpora(), data=st.data())
def test_count_and_find(scratch_dir, c: Corpus, data: st.DataObject) -> None:
    ref = Reference(c.docs, c.vocab_size)
    with c.build(scratch_dir) as ix:
        assert (ix.num_tokens, ix.num_docs, ix.vocab_size) == (ref.num_tokens, ref.num_docs, c.vocab_size)
        assert ix.separator_id == ref.separator and ix.token_width == ref.token_width
        shards = doc_shards(ix)
        for q in draw_queries(data, c):
            want = ref.count(q)
            assert ix.count(q) == want, q
            found = ix.find(q)
            assert found.count == want and int((found.hi - found.lo).sum()) == want, q
            assert len(found.lo) == len(found.hi) == ix.num_shards
            for s in range(ix.num_shards):  # per shard: the documents that shard holds
                in_shard = sum(1 for d, _ in ref.occurrences(q) if shards[d] == s)
                assert found.hi[s] - found.lo[s] == in_shard, (q, s)
            # Every rank of every range is an occurrence, and together they are all of them.
            pos = ix.positions(q)
            assert len(pos) == want and set(pos) == ref.positions(q, shards), q
            for shard, p in pos:
                doc, off = ix.locate(shard, p)
                assert ix.get_doc(doc).token_ids[off:off + len(q)].tolist() == list(q), (q, shard, p)


# ---------------------------------------------------------------------------- fixed-n


@SETTINGS
@given(c=corpora(), data=st.data())
def test_ngram_ntd_and_prob(scratch_dir, c: Corpus, data: st.DataObject) -> None:
    ref = Reference(c.docs, c.vocab_size)
    with c.build(scratch_dir) as ix:
        for q in draw_queries(data, c):
            want = ref.ntd(q)
            got = ix.ngram_ntd(q)
            assert_ntd_matches(got, want, len(q), f"ngram_ntd({q})")
            assert got.total == ix.count(q)
            for t in next_tokens(c):
                assert_prob_matches(ix.ngram_prob(q, t), ref.ngram_prob(q, t), f"ngram_prob({q}, {t})")
                assert ix.ngram_prob(q, t).effective_n == len(q) + 1


# ---------------------------------------------------------------------------- ∞-gram


@SETTINGS
@given(c=corpora(), data=st.data())
def test_infgram(scratch_dir, c: Corpus, data: st.DataObject) -> None:
    ref = Reference(c.docs, c.vocab_size)
    with c.build(scratch_dir) as ix:
        for q in draw_queries(data, c):
            k = ix.infgram_suffix_len(q)
            assert k == ref.suffix_len(q), q
            # The definition itself: the suffix of length k occurs, the one of length k + 1 does not.
            assert 0 <= k <= len(q)
            assert k == 0 or ix.count(q[len(q) - k:]) > 0
            assert k == len(q) or ix.count(q[len(q) - k - 1:]) == 0
            want, wk = ref.infgram_ntd(q)
            got = ix.infgram_ntd(q)
            assert_ntd_matches(got, want, wk, f"infgram_ntd({q})")
            assert got.total == ix.count(q[len(q) - k:])
            for t in next_tokens(c):
                p = ix.infgram_prob(q, t)
                assert_prob_matches(p, ref.infgram_prob(q, t), f"infgram_prob({q}, {t})")
                assert p.effective_n == k + 1
                assert p.count == got.as_dict().get(t, 0)


# ---------------------------------------------------------------------------- dense scoring


@SETTINGS
@given(c=corpora(), data=st.data())
def test_score(scratch_dir, c: Corpus, data: st.DataObject) -> None:
    ref = Reference(c.docs, c.vocab_size)
    with c.build(scratch_dir) as ix:
        pieces = draw_queries(data, c, n=4)
        ids = [t for piece in data.draw(st.permutations(pieces)) for t in piece]
        got = ix.score(ids)
        assert len(got) == len(ids)
        want = ref.score(ids)
        for i, w in enumerate(want):
            assert_prob_matches(score_row(got, i), w, f"score({ids})[{i}]")
            assert_prob_matches(ix.infgram_prob(ids[:i], ids[i]), w, f"infgram_prob at {i}")
        assert np.array_equal(got.effective_n, got.suffix_len + 1)
        # Accepts numpy arrays of any integer dtype, and the empty sequence.
        again = ix.score(np.asarray(ids, dtype=np.int64))
        assert np.array_equal(again.counts, got.counts) and np.array_equal(again.probs, got.probs)
        assert len(ix.score([])) == 0


# ---------------------------------------------------------------------------- documents


@SETTINGS
@given(c=corpora(), data=st.data())
def test_documents_locate_positions(scratch_dir, c: Corpus, data: st.DataObject) -> None:
    ref = Reference(c.docs, c.vocab_size)
    with c.build(scratch_dir) as ix:
        shards = doc_shards(ix)
        assert shards == sorted(shards) and len(set(shards)) <= ix.num_shards
        for d, doc in enumerate(c.docs):
            got = ix.get_doc(d)
            assert got.doc_id == d and got.token_ids.tolist() == doc and got.metadata == {}
        for bad in (-1, ix.num_docs):
            with pytest.raises(ValueError, match=str(bad)):
                ix.get_doc(bad)
        # Every position of every shard, separators included, maps back to (document, offset).
        layout = ref.shard_layout(shards)
        for d, (s, start) in enumerate(layout):
            for off in range(len(c.docs[d]) + 1):
                assert ix.locate(s, start + off) == (d, off), (d, off)
        ends = {}
        for d, (s, start) in enumerate(layout):
            ends[s] = start + len(c.docs[d]) + 1
        for s, end in ends.items():
            with pytest.raises(ValueError):
                ix.locate(s, end)
        with pytest.raises(ValueError):
            ix.locate(ix.num_shards, 0)
        with pytest.raises(ValueError):
            ix.locate(0, -1)
        for q in draw_queries(data, c, n=4):
            want = ref.positions(q, shards)
            limit = data.draw(st.integers(0, len(want) + 1))
            some = ix.positions(q, limit=limit)
            assert len(some) == min(limit, len(want)) and set(some) <= want


# ---------------------------------------------------------------------------- the empty prompt


@SETTINGS
@given(c=corpora())
def test_empty_prompt_is_the_unigram(scratch_dir, c: Corpus) -> None:
    ref = Reference(c.docs, c.vocab_size)
    with c.build(scratch_dir) as ix:
        uni = ref.unigram()
        assert ref.separator not in uni
        assert ix.count([]) == ix.num_tokens == sum(uni.values())
        for got in (ix.ngram_ntd([]), ix.infgram_ntd([]), ix.ngram_ntd(np.zeros(0, dtype=np.int64))):
            assert_ntd_matches(got, uni, 0, "empty prompt")
            assert ref.separator not in got.token_ids.tolist()
            assert int(got.counts.sum()) == ix.num_tokens
        assert ix.infgram_suffix_len([]) == 0
        found = ix.find([])
        assert found.count == ix.num_tokens and found.lo.tolist() == [0] * ix.num_shards
        for t in next_tokens(c):
            assert_prob_matches(ix.ngram_prob([], t), ref.ngram_prob([], t), f"P({t})")
            assert_prob_matches(ix.infgram_prob([], t), ref.ngram_prob([], t), f"P_inf({t})")


# ---------------------------------------------------------------------------- fixed edge cases


@pytest.mark.parametrize("docs", [[], [[]], [[], [], []]], ids=["no-docs", "one-empty", "three-empty"])
def test_corpus_without_tokens(scratch_dir, docs: list) -> None:
    with built_index(docs, scratch_dir, vocab_size=10) as ix:
        assert ix.num_tokens == 0 and ix.num_docs == len(docs)
        assert ix.count([]) == 0 and ix.count([3]) == 0
        d = ix.ngram_ntd([])
        assert d.total == 0 and len(d) == 0 and not d.sparse
        p = ix.infgram_prob([1, 2], 3)
        assert (p.prob, p.count, p.prompt_count, p.suffix_len, p.sparse) == (0.0, 0, 0, 0, False)
        s = ix.score([1, 2, 3])
        assert s.probs.tolist() == [0.0] * 3 and s.prompt_counts.tolist() == [0] * 3
        assert ix.positions([1]) == []
        for i in range(len(docs)):
            assert ix.get_doc(i).token_ids.tolist() == []


def test_long_run_of_one_token(scratch_dir) -> None:
    """'aaaa…': the count of a^k is n - k + 1 and every a^k (k < n) is followed by a or end."""
    n = 300
    ref = Reference([[7] * n], 8)
    with built_index([[7] * n], scratch_dir, vocab_size=8) as ix:
        for k in (1, 2, 17, n - 1, n):
            assert ix.count([7] * k) == n - k + 1
            assert_ntd_matches(ix.ngram_ntd([7] * k), ref.ntd([7] * k), k, f"a^{k}")
        assert ix.count([7] * (n + 1)) == 0
        assert ix.infgram_suffix_len([7] * (n + 5)) == n
        assert ix.infgram_ntd([7] * (n + 5)).as_dict() == {255: 1}
        assert ix.infgram_ntd([7] * (n + 5)).sparse
        s = ix.score([7] * (n + 2))
        want = ref.score([7] * (n + 2))
        assert s.counts.tolist() == [w.count for w in want]
        assert s.suffix_len.tolist() == [w.suffix_len for w in want]


def test_sparse_counts_end_of_document_as_a_token(scratch_dir) -> None:
    """'x y' occurs twice: once followed by z, once ending its document -> not sparse."""
    with built_index([[1, 2, 3], [1, 2]], scratch_dir, vocab_size=5) as ix:
        d = ix.ngram_ntd([1, 2])
        assert d.as_dict() == {3: 1, 255: 1}
        assert not d.sparse and not ix.ngram_prob([1, 2], 3).sparse
        only_end = ix.ngram_ntd([2, 3])
        assert only_end.as_dict() == {255: 1} and only_end.sparse
        assert ix.ngram_prob([2, 3], 4).sparse and ix.ngram_prob([2, 3], 4).count == 0


# ---------------------------------------------------------------------------- invalid ids


def _calls(ix, bad):
    """Every query with `bad` placed in each id argument."""
    return {
        "count": lambda: ix.count([0, bad]),
        "find": lambda: ix.find([bad]),
        "ngram_prob prompt": lambda: ix.ngram_prob([bad, 0], 0),
        "ngram_prob token": lambda: ix.ngram_prob([0], bad),
        "ngram_ntd": lambda: ix.ngram_ntd([bad]),
        "infgram_prob prompt": lambda: ix.infgram_prob([0, bad], 0),
        "infgram_prob token": lambda: ix.infgram_prob([0], bad),
        "infgram_ntd": lambda: ix.infgram_ntd([0, 0, bad]),
        "infgram_suffix_len": lambda: ix.infgram_suffix_len([bad]),
        "score": lambda: ix.score([0, bad, 0]),
        "positions": lambda: ix.positions([bad]),
    }


@pytest.mark.parametrize("vocab_size", [5, 255, 300, 65535, 70000, U32_MAX_VOCAB])
def test_invalid_ids_raise_value_error_naming_them(scratch_dir, vocab_size: int) -> None:
    with built_index([[0, vocab_size - 1, 0]], scratch_dir, vocab_size=vocab_size) as ix:
        sep = ix.separator_id
        bads = sorted({vocab_size, sep, -1, -(2**40), 2**32, 2**40} | ({vocab_size + 1} if vocab_size + 1 < sep else set()))
        for bad in bads:
            for name, call in _calls(ix, bad).items():
                with pytest.raises(ValueError, match=str(bad)) as exc:
                    call()
                if bad == sep:
                    assert "separator" in str(exc.value), (name, str(exc.value))
        # The largest valid id works everywhere.
        assert ix.count([vocab_size - 1]) == 1
        assert ix.ngram_prob([0], vocab_size - 1).count == 1


@pytest.mark.parametrize("bad", [[0.5], np.array([1.0]), [[0, 1]], np.zeros((2, 2), dtype=np.int64), "ab", [True]],
                         ids=["float-list", "float-array", "2d-list", "2d-array", "str", "bool"])
def test_non_integer_or_2d_ids_raise_value_error(scratch_dir, bad) -> None:
    with built_index([[0, 1, 2]], scratch_dir, vocab_size=5) as ix:
        for call in (ix.count, ix.ngram_ntd, ix.infgram_ntd, ix.score, lambda q: ix.ngram_prob(q, 0)):
            with pytest.raises(ValueError):
                call(bad)
        for token in (0.0, 1.5, "1", None, True, [1]):
            with pytest.raises(ValueError):
                ix.ngram_prob([0], token)
