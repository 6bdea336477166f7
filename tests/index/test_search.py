"""search_docs (CNF document search) against a brute-force scan of the documents, plus the caps,
the approximate flag, the sampling estimate, text queries, and document metadata round trips."""
from __future__ import annotations

import json
from typing import Optional, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import built_index, make_index
from infinigram_hf import InfiniGramIndex, SearchResult, TokenizerMismatchError
from infinigram_hf.build import build_index
from infinigram_hf.index.search import MAX_CLAUSES, MAX_TERMS, doc_spans, parse_query, search_docs

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# ---------------------------------------------------------------------------- brute force


def term_starts(doc: Sequence[int], term: Sequence[int]) -> list[int]:
    n = len(term)
    return [i for i in range(len(doc) - n + 1) if tuple(doc[i:i + n]) == tuple(term)]


def brute_matches(doc: Sequence[int], cnf, max_diff: Optional[int]) -> bool:
    """Every clause has an occurrence; with max_diff, one per clause within max_diff tokens."""
    starts = [sorted({s for term in clause for s in term_starts(doc, term)}) for clause in cnf]
    if any(not s for s in starts):
        return False
    if max_diff is None:
        return True
    anchors = {s for clause in starts for s in clause}
    return any(all(any(a <= s <= a + max_diff for s in clause) for clause in starts) for a in anchors)


def brute_spans(doc: Sequence[int], cnf) -> list[list[int]]:
    rows, flat = [], 0
    for c, clause in enumerate(cnf):
        for j, term in enumerate(clause):
            rows += [(s, flat, [s, len(term), c, j]) for s in term_starts(doc, term)]
            flat += 1
    return [r for _, _, r in sorted(rows)]


def dedup(cnf) -> tuple:
    """The CNF with repeated n-grams (inside a clause) and repeated clauses dropped."""
    out: list = []
    for clause in cnf:
        terms: list = []
        for t in clause:
            if tuple(t) not in terms:
                terms.append(tuple(t))
        if tuple(terms) not in out:
            out.append(tuple(terms))
    return tuple(out)


# ---------------------------------------------------------------------------- strategies


@st.composite
def corpus_and_queries(draw: st.DrawFn):
    vocab = draw(st.sampled_from([3, 5, 300, 70_000]))  # token widths 1, 2 and 4
    alphabet = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=4, unique=True))
    sym = st.sampled_from(alphabet)
    docs = draw(st.lists(st.lists(sym, max_size=14), min_size=1, max_size=10))
    shard = draw(st.sampled_from([None, 15, 30]))  # a shard holds any document (<= 14 + 1)
    term = st.lists(st.sampled_from(alphabet + [vocab - 1]), min_size=1, max_size=3)
    clause = st.lists(term, min_size=1, max_size=3)
    cnf = st.lists(clause, min_size=1, max_size=3)
    queries = draw(st.lists(st.tuples(cnf, st.sampled_from([None, None, 0, 1, 3])), min_size=1, max_size=8))
    return docs, vocab, shard, queries


@given(case=corpus_and_queries(), check=st.sampled_from(["auto", "sorted", "scan"]))
@SETTINGS
def test_cnf_search_matches_brute_force(case, check, scratch_dir):
    docs, vocab, shard, queries = case
    with built_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=shard) as index:
        for cnf, max_diff in queries:
            want = [d for d, doc in enumerate(docs) if brute_matches(doc, cnf, max_diff)]
            res = search_docs(index, cnf, maxnum=3, max_diff_tokens=max_diff, _check=check)
            assert isinstance(res, SearchResult)
            assert not res.approximate
            assert res.doc_ids.tolist() == want, (cnf, max_diff)
            assert res.count == len(want) and res.estimate == len(want)
            assert [d.doc_id for d in res.documents] == want[:3]
            assert res.cnf == dedup(cnf)  # repeated n-grams and clauses are dropped; spans index res.cnf
            for d in res.documents:
                assert d.token_ids.tolist() == list(docs[d.doc_id])
                assert d.spans.tolist() == brute_spans(docs[d.doc_id], res.cnf), (cnf, d.doc_id)


@given(case=corpus_and_queries(), cap=st.integers(1, 4), seed=st.integers(0, 2**64 - 1),
       check=st.sampled_from(["auto", "sorted", "scan"]))
@SETTINGS
def test_sampled_anchor_finds_only_true_matches(case, cap, seed, check, scratch_dir):
    """With a tiny max_clause_freq the result is approximate exactly when the rarest clause is
    over the cap, and every document it reports does match."""
    docs, vocab, shard, queries = case
    with built_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=shard) as index:
        for cnf, max_diff in queries:
            want = {d for d, doc in enumerate(docs) if brute_matches(doc, cnf, max_diff)}
            rarest = min(sum(index.count(t) for t in clause) for clause in dedup(cnf))
            res = search_docs(index, cnf, max_clause_freq=cap, max_diff_tokens=max_diff, seed=seed, _check=check)
            assert res.anchor_count == rarest
            assert res.approximate == (rarest > cap)
            assert res.anchor_used == min(rarest, cap)
            assert set(res.doc_ids.tolist()) <= want
            if not res.approximate:
                assert res.doc_ids.tolist() == sorted(want)
            elif want and not res.doc_ids.size:
                assert res.count == 0


def test_sampling_estimate_is_unbiased(scratch_dir):
    """The mean estimate over many seeds approaches the true number of matching documents, also
    when documents hold very different numbers of anchor occurrences."""
    rng = np.random.default_rng(0)
    docs = []
    for d in range(60):
        doc = list(rng.integers(2, 6, size=int(rng.integers(5, 40))))
        if d % 3 == 0:
            doc += [1] * int(rng.integers(1, 12))   # the anchor, 1..11 times
        if d % 2 == 0:
            doc += [0]
        docs.append(doc)
    index = make_index(docs, scratch_dir, vocab_size=10)
    cnf = [[[1]], [[0]]]
    truth = index.search_docs(cnf).count
    assert truth == sum(1 for d in range(60) if d % 6 == 0)
    ests = [index.search_docs(cnf, max_clause_freq=20, seed=s) for s in range(300)]
    assert all(e.approximate for e in ests)
    mean = float(np.mean([e.estimate for e in ests]))
    assert abs(mean - truth) < 0.05 * truth, (mean, truth)
    index.close()


def test_single_ngram_forms(scratch_dir):
    docs = [[1, 2, 3], [3, 1, 2], [2, 2]]
    index = make_index(docs, scratch_dir, vocab_size=10)
    for q in ([1, 2], (1, 2), np.array([1, 2]), [[[1, 2]]]):
        assert index.search_docs(q).doc_ids.tolist() == [0, 1]
    assert index.search_docs([7]).count == 0 and index.search_docs([7]).doc_ids.size == 0
    assert index.search_docs([2], maxnum=0).documents == ()
    assert parse_query([[[1, 2], [3]], [[4]]]) == (((1, 2), (3,)), ((4,),))
    assert doc_spans(index, 1, [[[1, 2]], [[3], [2]]]).tolist() == [[0, 1, 1, 0], [1, 2, 0, 0], [2, 1, 1, 1]]
    index.close()


def test_union_of_indexes_uses_global_doc_ids(scratch_dir):
    a = make_index([[1, 2], [3]], scratch_dir, vocab_size=10)
    b = make_index([[3, 1, 2], [1]], scratch_dir, vocab_size=10)
    both = InfiniGramIndex.open([a.paths[0], b.paths[0]])
    res = both.search_docs([[[1, 2]], [[3], [1]]])
    assert res.doc_ids.tolist() == [0, 2]
    assert res.documents[1].token_ids.tolist() == [3, 1, 2] and res.documents[1].shard == 1
    for ix in (a, b, both):
        ix.close()


def test_limits_and_bad_queries(scratch_dir):
    index = make_index([[1, 2, 3]], scratch_dir, vocab_size=10)
    bad = [
        ([], "query"),
        ([[]], "clause 0"),
        ([[[1], []]], "empty"),
        ([[1, 2], [3]], "clause 0"),             # ambiguous: clauses must be lists of n-grams
        ([[[10]]], "outside the vocabulary"),
        ([[[255]]], "outside the vocabulary"),  # the separator id
        ([-1], "outside"),
        ([[[1]]] * (MAX_CLAUSES + 1), "clauses"),
        ([[[1]] * 100] * 3, "n-grams"),
        ("abc", "tokenizer"),                    # text, but no tokenizer saved
    ]
    assert 300 > MAX_TERMS
    for q, msg in bad:
        with pytest.raises(ValueError, match=msg):
            index.search_docs(q)
    for kwargs, msg in [({"maxnum": -1}, "maxnum"), ({"maxnum": 10**6}, "maxnum"),
                        ({"max_clause_freq": 0}, "max_clause_freq"), ({"max_diff_tokens": -1}, "max_diff_tokens"),
                        ({"seed": -1}, "seed"), ({"maxnum": 1.5}, "maxnum")]:
        with pytest.raises(ValueError, match=msg):
            index.search_docs([1], **kwargs)
    index.close()
    with pytest.raises(Exception, match="closed"):
        index.search_docs([1])


# ---------------------------------------------------------------------------- text and metadata


def test_text_queries_with_the_byte_tokenizer(scratch_dir):
    texts = ["import os\nimport sys\n", "def main():\n    return os.getcwd()\n", "print('hi')\n"]
    out = scratch_dir / "bytes-index"
    index = build_index(texts, out, progress=False)
    res = index.search_docs("import")
    assert res.doc_ids.tolist() == [0]
    assert res.documents[0].text == texts[0]
    assert res.documents[0].spans[:, 0].tolist() == [0, 10]
    res = index.search_docs([["os."], ["return", "print"]])
    assert res.doc_ids.tolist() == [1]
    # starts: "os" 7 and "sys" 17 in doc 0; "main" 4 and "os" 23 in doc 1
    assert index.search_docs([["os"], ["sys", "main"]], max_diff_tokens=9).doc_ids.tolist() == []
    assert index.search_docs([["os"], ["sys", "main"]], max_diff_tokens=10).doc_ids.tolist() == [0]
    assert index.search_docs([["os"], ["sys", "main"]], max_diff_tokens=19).doc_ids.tolist() == [0, 1]
    # "import" at 0 and 10, "sys" at 17: the closest pair is 7 apart
    assert index.search_docs([["import"], ["sys"]], max_diff_tokens=7).doc_ids.tolist() == [0]
    assert index.search_docs([["import"], ["sys"]], max_diff_tokens=6).doc_ids.tolist() == []
    index.close()


def test_text_with_a_mismatched_tokenizer_is_refused(scratch_dir):
    from tokenizers import Tokenizer, models, pre_tokenizers

    raw = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    index = build_index(["a b"], scratch_dir / "bytes-index-2", progress=False)
    with pytest.raises(TokenizerMismatchError):
        index.search_docs("a", tokenizer=raw)
    index.close()


def test_metadata_round_trips_through_get_doc_and_search(scratch_dir, tmp_path):
    rows = [{"text": "alpha beta", "id": 7, "url": "http://x/ä", "tags": ["a", "b"]},
            {"text": "beta gamma", "id": 8, "url": None, "tags": []},
            {"text": "gamma alpha beta", "id": 9, "url": "u", "tags": [{"k": 1}]}]
    src = tmp_path / "data.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    index = build_index(src, scratch_dir / "meta-index", metadata_columns=["id", "url", "tags"],
                        max_shard_tokens=20, progress=False)
    assert index.num_shards >= 2
    for d, r in enumerate(rows):
        doc = index.get_doc(d)
        assert doc.metadata == {k: r[k] for k in ("id", "url", "tags")}
        assert bytes(doc.token_ids.tolist()).decode() == r["text"]
    res = index.search_docs([["alpha"], ["beta"]])
    assert [d.metadata["id"] for d in res.documents] == [7, 9]
    # positions back to documents
    for shard, pos in index.positions(list(b"gamma")):
        doc_id, offset = index.locate(shard, pos)
        assert rows[doc_id]["text"][offset:offset + 5] == "gamma"
    index.close()


def test_threads_get_the_serial_answers(scratch_dir):
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(3)
    docs = [list(rng.integers(0, 6, size=int(rng.integers(0, 60)))) for _ in range(80)]
    index = make_index(docs, scratch_dir, vocab_size=6, max_shard_tokens=400)
    queries = [[[list(rng.integers(0, 6, size=int(rng.integers(1, 3))))] for _ in range(int(rng.integers(1, 3)))]
               for _ in range(40)]
    kw = [dict(max_diff_tokens=d, max_clause_freq=f) for d in (None, 5) for f in (3, 50_000)]

    def answer(i: int):
        r = index.search_docs(queries[i % 40], maxnum=2, seed=i, **kw[i % 4])
        return r.count, r.doc_ids.tolist(), [d.spans.tolist() for d in r.documents]

    serial = [answer(i) for i in range(320)]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(answer, range(320))) == serial
    index.close()
