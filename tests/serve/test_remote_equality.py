"""A real server (child process, loopback) and the real client: every query answers as in-process.

One server for the module, serving two indexes: "num" (random ids, three shards, metadata) and
"code" (the tiny BPE index of hf_tiny, with its tokenizer) -- the decoding tests run a tiny
GPT-2 against it, locally and remotely, and compare the tokens.
"""
from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import torch

from conftest import sample_ngrams, Reference
from hf_tiny import TEXTS, tiny_index, tiny_model, tiny_tok  # noqa: F401
from infinigram_hf import InfiniGramIndex, InfiniGramLM, build_index
from infinigram_hf.index import RemoteIndex
from server_proc import served

RNG = np.random.default_rng(7)
DOCS = [RNG.integers(0, 12, size=int(RNG.integers(1, 60))).tolist() for _ in range(40)]
META = [{"id": f"doc-{i}", "n": i} for i in range(len(DOCS))]


@pytest.fixture(scope="module")
def num_index(tmp_path_factory):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"input_ids": DOCS, "id": [m["id"] for m in META], "n": [m["n"] for m in META]})
    ix = build_index(ds, tmp_path_factory.mktemp("serve") / "num", vocab_size=12, metadata_columns=["id", "n"],
                     max_shard_tokens=400, progress=False)
    yield ix
    ix.close()


@pytest.fixture(scope="module")
def server(num_index, tiny_index):
    with served({"num": str(num_index.paths[0]), "code": str(tiny_index.paths[0])}) as s:
        yield s


@pytest.fixture(scope="module")
def remote(server):
    with InfiniGramIndex.open(server.url + "/num") as r:
        yield r


@pytest.fixture(scope="module")
def remote_code(server):
    with RemoteIndex(server.url + "/code") as r:
        yield r


def _same_ntd(a, b) -> None:
    assert a.token_ids.tolist() == b.token_ids.tolist() and a.counts.tolist() == b.counts.tolist()
    assert (a.total, a.suffix_len, a.sparse, a.approximate) == (b.total, b.suffix_len, b.sparse, b.approximate)


def _same_batch(a, b, fields) -> None:
    for f in fields:
        assert np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))), f


def test_metadata(remote, num_index) -> None:
    assert isinstance(remote, RemoteIndex)
    for key in ("num_tokens", "num_docs", "vocab_size", "separator_id", "num_shards", "state_size", "token_width",
                "eos_token_id", "tokenizer_name", "vocab_fingerprint"):
        assert getattr(remote, key) == getattr(num_index, key), key
    assert num_index.num_shards > 1


def test_every_query_type_equals_in_process(remote, num_index) -> None:
    ref = Reference(DOCS, 12)
    grams = sample_ngrams(ref, n=30, seed=1) + [[], [11, 11, 11, 11, 11, 11, 11]]
    for g in grams:
        assert remote.count(g) == num_index.count(g)
        assert remote.infgram_suffix_len(g) == num_index.infgram_suffix_len(g)
        if g:
            for t in (0, 5, 11):
                assert remote.infgram_prob(g, t) == num_index.infgram_prob(g, t)
                assert remote.ngram_prob(g, t) == num_index.ngram_prob(g, t)
            _same_ntd(remote.ngram_ntd(g), num_index.ngram_ntd(g))
        _same_ntd(remote.infgram_ntd(g), num_index.infgram_ntd(g))
        _same_ntd(remote.infgram_ntd(g, max_support=3), num_index.infgram_ntd(g, max_support=3))
        s1, s2 = remote.score(g), num_index.score(g)
        _same_batch(s1, s2, ("probs", "counts", "prompt_counts", "suffix_len", "sparse"))
    assert remote.count_batch(grams).tolist() == num_index.count_batch(grams).tolist()
    toks = [int(t) for t in RNG.integers(0, 12, len(grams))]
    _same_batch(remote.infgram_prob_batch(grams, toks), num_index.infgram_prob_batch(grams, toks),
                ("probs", "counts", "prompt_counts", "suffix_len", "sparse"))
    _same_batch(remote.infgram_ntd_batch(grams), num_index.infgram_ntd_batch(grams),
                ("offsets", "token_ids", "counts", "total", "suffix_len", "sparse", "approximate"))
    _same_batch(remote.score_batch(DOCS[:10]), num_index.score_batch(DOCS[:10]),
                ("offsets", "probs", "counts", "prompt_counts", "suffix_len", "sparse"))
    # padded batches with lengths, as the processor sends them
    padded = np.zeros((3, 8), dtype=np.int64)
    for i, g in enumerate(grams[:3]):
        g = g[-8:]
        padded[i, 8 - len(g):] = g
    lengths = [min(len(g), 8) for g in grams[:3]]
    _same_batch(remote.infgram_ntd_batch(padded, lengths=lengths, padding_side="left"),
                num_index.infgram_ntd_batch(padded, lengths=lengths, padding_side="left"),
                ("offsets", "token_ids", "counts", "total"))


def test_decoding_cache_equals_in_process(remote, num_index) -> None:
    rc, lc = remote.suffix_cache(), num_index.suffix_cache()
    for doc in DOCS[:6]:
        rows = [doc[:k] for k in range(1, len(doc) + 1)]
        _same_batch(rc.ntd_batch(rows), lc.ntd_batch(rows), ("offsets", "token_ids", "counts", "total", "suffix_len"))
        toks = [doc[k % len(doc)] for k in range(len(rows))]
        _same_batch(rc.prob_batch(rows, toks), lc.prob_batch(rows, toks), ("probs", "counts", "suffix_len"))
        assert np.array_equal(rc.states(rows), lc.states(rows))
        assert rc.state(doc).values.tolist() == lc.state(doc).values.tolist()
        _same_ntd(rc.ntd(doc), num_index.infgram_ntd(doc))


def test_row_states_kept_by_the_client_equal_in_process(remote, num_index) -> None:
    """RemoteRowStates (op rows_ntd: grown rows sent as state + tail) against the local RowStates
    and plain batches, over steps that grow every row, roll some back, reorder them, pad them on
    the left and start a new context mid-batch."""
    from infinigram_hf.index.remote_rows import RemoteRowStates
    from infinigram_hf.index.row_states import RowStates

    rows_r = remote.suffix_cache().row_states()
    assert isinstance(rows_r, RemoteRowStates)
    rows_l = RowStates(num_index.suffix_cache())
    rng = np.random.default_rng(5)
    docs = [d for d in DOCS if len(d) >= 20][:4]
    width = 6
    for step in range(40):
        if step % 9 == 8:
            width = max(2, width - 3)  # a rejected draft: every row rolls back
        else:
            width += 1
        rows = np.stack([np.asarray(d[:width] if width <= len(d) else d + [0] * (width - len(d))) for d in docs])
        if step % 13 == 12:
            rows = rows[::-1].copy()  # beams reordered
        starts = np.minimum(rng.integers(0, 3, len(rows)) * (step % 5 == 0), width - 1)  # left padding / new context
        a, b = rows_r.ntd(rows, starts), rows_l.ntd(rows, starts)
        _same_batch(a, b, ("offsets", "token_ids", "counts", "total", "suffix_len", "sparse"))
        plain = num_index.infgram_ntd_batch(rows, lengths=width - starts, padding_side="left")
        _same_batch(a, plain, ("offsets", "token_ids", "counts", "total", "suffix_len"))
    assert rows_r.stats["extended"] > 0 and rows_r.stats["looked_up"] > 0
    assert rows_r.stats["requests"] == 40  # one request per step, whatever the batch


def test_documents_and_search_with_metadata(remote, num_index) -> None:
    for i in (0, 17, len(DOCS) - 1):
        a, b = remote.get_doc(i), num_index.get_doc(i)
        assert a.token_ids.tolist() == b.token_ids.tolist() and a.metadata == b.metadata == META[i]
        assert a.shard == b.shard
    for q in ([3, 4], [[[1, 2], [5]], [[7]]]):
        a, b = remote.search_docs(q, maxnum=5), num_index.search_docs(q, maxnum=5)
        assert (a.count, a.approximate, a.cnf) == (b.count, b.approximate, b.cnf)
        assert a.doc_ids.tolist() == b.doc_ids.tolist()
        assert [d.metadata for d in a.documents] == [d.metadata for d in b.documents]
        assert [d.spans.tolist() for d in a.documents] == [d.spans.tolist() for d in b.documents]


def test_bad_input_is_the_same_valueerror(remote, num_index) -> None:
    for call in (lambda ix: ix.count([-1]), lambda ix: ix.infgram_prob([1], 2 ** 40),
                 lambda ix: ix.score([99]), lambda ix: ix.get_doc(10 ** 9)):
        with pytest.raises(ValueError):
            call(num_index)
        with pytest.raises(ValueError):
            call(remote)
    assert remote.count([1]) == num_index.count([1])  # still fine afterwards


# ---------------------------------------------------------------------------- decoding over the remote index


def test_processor_over_remote_gives_the_same_tokens(remote_code, tiny_index, tiny_model, tiny_tok) -> None:
    from transformers import LogitsProcessorList

    from infinigram_hf import InfiniGramLogitsProcessor

    enc = tiny_tok(["def wrap(text", "import heapq\n"], return_tensors="pt", padding=True)
    outs = []
    for ix in (tiny_index, remote_code):
        proc = InfiniGramLogitsProcessor(ix, lambda_sparse=0.9, lambda_dense=0.5, tokenizer=tiny_tok)
        for kw in ({"do_sample": False}, {"do_sample": True, "top_k": 20}):
            torch.manual_seed(3)
            outs.append(tiny_model.generate(**enc, logits_processor=LogitsProcessorList([proc]), max_new_tokens=8,
                                            pad_token_id=0, **kw))
    assert torch.equal(outs[0], outs[2]) and torch.equal(outs[1], outs[3])
    assert proc._rows.stats["extended"] > 0  # the remote steps sent states and tails, not whole contexts



def test_processor_mixing_several_orders_over_remote_equals_in_process(remote_code, tiny_index, tiny_model,
                                                                       tiny_tok) -> None:
    """A learned model over several orders queries each row's shorter suffixes through the
    remote cache too: the processor's output equals the in-process one."""
    from infinigram_hf import InfiniGramLogitsProcessor, MixingModel

    rng = np.random.default_rng(0)
    model = MixingModel("logistic", ("sparse", "log_effective_n"), np.zeros(5), np.ones(5),
                        [(rng.normal(size=(5, 5)), rng.normal(size=5))], levels=("L-1", "L/2", "1"))
    enc = tiny_tok(["def wrap(text", "import heapq\n"], return_tensors="pt", padding=True)
    scores = torch.from_numpy(rng.normal(size=(2, tiny_model.config.vocab_size))).float()
    outs = [InfiniGramLogitsProcessor(ix, tokenizer=tiny_tok, mixing=model)(enc["input_ids"], scores.clone())
            for ix in (tiny_index, remote_code)]
    assert torch.allclose(outs[0], outs[1], rtol=0, atol=1e-6)


def test_speculative_decoding_over_remote_gives_the_same_tokens(remote_code, tiny_index, tiny_model,
                                                                 tiny_tok) -> None:
    from infinigram_hf import speculative_generate

    a, b = tiny_tok.encode(TEXTS[0][:300]), tiny_tok.encode(TEXTS[1][:300])
    n = min(len(a), len(b), 40)
    ids = torch.tensor([a[:n], b[:n]])
    mask = torch.ones_like(ids)
    for tree in (False, True):
        local, st_l = speculative_generate(tiny_model, ids, tiny_index, attention_mask=mask, max_new_tokens=16,
                                           do_sample=False, draft_tree=tree, return_stats=True)
        rem, st_r = speculative_generate(tiny_model, ids, remote_code, attention_mask=mask, max_new_tokens=16,
                                         do_sample=False, draft_tree=tree, return_stats=True)
        assert torch.equal(local, rem)
        assert (st_l.steps, st_l.drafted, st_l.accepted) == (st_r.steps, st_r.drafted, st_r.accepted)
        assert st_r.drafted > 0  # the remote drafter's calls were exercised


def test_lm_scoring_and_perplexity_over_remote(remote_code, tiny_index, tiny_model, tiny_tok) -> None:
    from infinigram_hf import perplexity

    ids = tiny_tok.encode(TEXTS[2][:200])
    local, rem = InfiniGramLM(tiny_index), InfiniGramLM(remote_code)
    for method in ("infgram", "kn"):
        assert np.array_equal(local.score(ids, method).probs, rem.score(ids, method).probs), method
    assert np.array_equal(local.distribution(ids[:20], "kn"), rem.distribution(ids[:20], "kn"))
    assert local.perplexity([ids], "kn").perplexity == rem.perplexity([ids], "kn").perplexity
    texts = [TEXTS[3][:200], TEXTS[4][:150]]
    a = perplexity(tiny_model, tiny_tok, texts, tiny_index, window=64, stride=32, progress=False)
    b = perplexity(tiny_model, tiny_tok, texts, remote_code, window=64, stride=32, progress=False)
    assert (a.perplexity, a.neural_perplexity, a.sparse_fraction) == (b.perplexity, b.neural_perplexity,
                                                                       b.sparse_fraction)


def test_official_shaped_requests(server, tiny_index, tiny_tok) -> None:
    url = server.url + "/"
    text = "def wrap(text"
    ids = tiny_tok.encode(text)

    def post(**payload):
        r = httpx.post(url, json={"index": "code", **payload}, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    c = post(query_type="count", query=text)
    assert c["count"] == tiny_index.count(ids) and c["approx"] is False and c["token_ids"] == ids
    assert c["tokens"] == tiny_tok.convert_ids_to_tokens(ids) and c["latency"] >= 0
    assert post(query_type="count", query_ids=ids)["count"] == c["count"]
    p = post(query_type="prob", query_ids=ids)
    want = tiny_index.ngram_prob(ids[:-1], ids[-1])
    assert (p["prompt_cnt"], p["cont_cnt"]) == (want.prompt_count, want.count) and p["prob"] == pytest.approx(want.prob)
    assert post(query_type="prob", query_ids=[5, 5, 5, 5, 5, 5, 5, 5, 5])["prob"] == -1.0  # unseen prompt
    ip = post(query_type="infgram_prob", query=text)
    want = tiny_index.infgram_prob(ids[:-1], ids[-1])
    assert (ip["prompt_cnt"], ip["cont_cnt"], ip["suffix_len"]) == (want.prompt_count, want.count, want.suffix_len)
    for qt, fn in (("ntd", tiny_index.ngram_ntd), ("infgram_ntd", tiny_index.infgram_ntd)):
        n = post(query_type=qt, query=text)
        d = fn(ids)
        assert n["prompt_cnt"] == d.total and n["approx"] is False
        assert {int(k): v["cont_cnt"] for k, v in n["result_by_token_id"].items()} == d.as_dict()
        assert all(v["token"] == tiny_tok.convert_ids_to_tokens(int(k)) for k, v in n["result_by_token_id"].items())
        assert ("suffix_len" in n) == (qt == "infgram_ntd")
    s = post(query_type="search_docs", query="self AND None OR True", maxnum=2)
    want = tiny_index.search_docs([["self"], ["None", "True"]], maxnum=2, tokenizer=tiny_tok)
    assert s["cnt"] == want.count == 2 and s["idxs"] == [d.doc_id for d in want.documents]
    assert [d["doc_ix"] for d in s["documents"]] == s["idxs"]
    assert all(d["doc_len"] == len(tiny_index.get_doc(d["doc_ix"]).token_ids) for d in s["documents"])
    # errors are a JSON {"error": ...} with a 4xx, as scripts for the official API check
    for bad in ({"query_type": "nope", "query": "x"}, {"query_type": "count"},
                {"query_type": "count", "query_ids": [1, "a"]}, {"index": "missing", "query_type": "count", "query": "x"}):
        r = httpx.post(url, json={"index": "code", **bad}, timeout=30)
        assert 400 <= r.status_code < 500 and "error" in r.json(), (bad, r.text)


def test_health_info_metrics_and_no_cors_by_default(server, remote) -> None:
    h = httpx.get(server.url + "/health", headers={"Origin": "https://any.example"}, timeout=10)
    assert h.json()["ok"] is True and h.json()["indexes"] == ["code", "num"]
    assert "access-control-allow-origin" not in h.headers
    info = httpx.get(server.url + "/info", timeout=10).json()
    assert set(info["indexes"]) == {"code", "num"} and info["indexes"]["num"]["num_docs"] == len(DOCS)
    assert "/tmp" not in json.dumps(info) and str(server.url) not in json.dumps(info)  # no host paths
    remote.count([1])
    m = httpx.get(server.url + "/metrics", timeout=10)
    assert m.headers["content-type"].startswith("text/plain")
    assert 'infinigram_requests_total{endpoint="op:count",status="200"}' in m.text
    assert 'infinigram_request_seconds_bucket{endpoint="op:count",le="0.001"}' in m.text
