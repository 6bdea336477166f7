"""search_docs output is bounded whatever the query and the documents (issue 12, finding 10).

Before: search_docs([['a'] * 256]) on one 200k-token document built 51.2M span rows (1.5 GB,
10 s): every hit was listed once per copy of a repeated n-gram, and nothing bounded the rows.
Now repeated n-grams (and clauses) are dropped, and the span rows of one result are capped at
max_spans (default MAX_SPANS = 1,000,000); a cut result and its cut documents say spans_capped.
The C scan stops one hit past what it may return, so memory and time follow the cap.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import UNDER_ASAN, make_index

from infinigram_hf.index.search import MAX_SPANS, doc_spans


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    docs = [[1] * 300, [2, 1, 1, 2] * 10, [1] * 50]
    ix = make_index(docs, tmp_path_factory.mktemp("caps"), vocab_size=4)
    yield ix
    ix.close()


def test_repeated_ngrams_and_clauses_are_dropped(runs):
    res = runs.search_docs([[[1]] * 256], maxnum=3)
    assert res.cnf == (((1,),),)
    assert [len(d.spans) for d in res.documents] == [300, 20, 50]  # one row per hit, not 256
    res = runs.search_docs([[[1, 1], [1]], [[1], [1, 1]], [[1, 1], [1]]], maxnum=1)
    assert res.cnf == (((1, 1), (1,)), ((1,), (1, 1)))
    assert not res.spans_capped


def test_span_rows_are_capped_over_the_result(runs):
    ngrams = [[1] * k for k in range(1, 9)]  # 8 distinct n-grams, all hitting at most positions
    full = runs.search_docs([ngrams], maxnum=3)
    want = np.concatenate([d.spans for d in full.documents])
    assert not full.spans_capped and len(want) > 2000
    for cap in (0, 1, 7, 299, 300 * 8 - 28, 2000, len(want) - 1, len(want)):
        res = runs.search_docs([ngrams], maxnum=3, max_spans=cap)
        got = np.concatenate([d.spans for d in res.documents])
        assert len(got) == min(cap, len(want))
        # the first rows of each document by offset, documents in order, until the cap
        k, budget = 0, cap
        for d, f in zip(res.documents, full.documents):
            n = min(budget, len(f.spans))
            assert d.spans.tolist() == f.spans[:n].tolist()
            assert d.spans_capped == (n < len(f.spans))
            budget -= n
            k += n
        assert res.spans_capped == (cap < len(want))
        assert [d.doc_id for d in res.documents] == [d.doc_id for d in full.documents]


def test_doc_spans_refuses_more_than_max_spans(runs):
    assert len(doc_spans(runs, 0, [[[1]]], max_spans=300)) == 300
    with pytest.raises(ValueError, match="max_spans"):
        doc_spans(runs, 0, [[[1]]], max_spans=299)


_CHILD = textwrap.dedent("""
    import sys, time
    from infinigram_hf import build_index
    ix = build_index([[1] * 200_000, [3] * 20_000], sys.argv[1], vocab_size=4, progress=False)
    t0 = time.process_time()
    same = ix.search_docs([[[1]] * 256])          # the review's query: 256 copies of one n-gram
    distinct = ix.search_docs([[[3] * k for k in range(1, 257)]])   # 256 distinct n-grams: 5.1M hits
    took = time.process_time() - t0
    d = distinct.documents[0]
    print(len(same.documents[0].spans), same.spans_capped, len(d.spans), d.spans_capped, distinct.spans_capped,
          d.spans[:3].tolist() == [[0, 1, 0, 0], [0, 2, 0, 1], [0, 3, 0, 2]],
          # peak RSS of this process image (ru_maxrss would include the parent's from before exec)
          int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) // 1024, round(took, 1))
""")


def test_the_reviews_query_is_bounded(tmp_path):
    """One 200k-token document of a single token: the review's query gives 200k rows (one per
    hit, not 51.2M); 256 distinct n-grams of a 20k-token run (5.1M hits) stop at MAX_SPANS,
    flagged; peak memory stays far below what the rows took before (1.5 GB for 51.2M)."""
    res = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "ix")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    n_same, capped_same, n_distinct, doc_capped, res_capped, first_rows, rss_mib, _ = res.stdout.split()
    assert (int(n_same), capped_same) == (200_000, "False")
    assert (int(n_distinct), doc_capped, res_capped, first_rows) == (MAX_SPANS, "True", "True", "True")
    if not UNDER_ASAN:  # ASan's shadow memory and quarantine are not the query's
        assert int(rss_mib) < 250, f"peak RSS {rss_mib} MiB"
