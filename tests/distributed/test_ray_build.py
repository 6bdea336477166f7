"""The distributed build on a local Ray runtime (2 CPUs): it equals a single-machine build query
for query, survives a killed worker, and publishes nothing when a shard fails.

Skipped, with the reason, where Ray is not installed (the [ray] extra)."""
from __future__ import annotations

import json
import shutil
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_support import assert_same_answers, queries, ray_or_skip

ray = ray_or_skip()

from infinigram_hf import InfiniGramIndex  # noqa: E402
from infinigram_hf.build import build_index as single_build  # noqa: E402
from infinigram_hf.distributed import ShardRouter, build_index  # noqa: E402

VOCAB = 4


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    """One local Ray runtime for the module (its start costs seconds), shut down at the end."""
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 << 20, _node_ip_address="127.0.0.2",
             log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def _out(base: Path) -> Path:
    return base / f"ix-{uuid.uuid4().hex[:10]}"


corpora = st.lists(st.lists(st.integers(0, VOCAB - 1), max_size=30), min_size=1, max_size=40)


@settings(max_examples=5, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(docs=corpora, shard_tokens=st.integers(31, 200))
def test_distributed_build_answers_as_a_single_machine_build(scratch_dir, docs, shard_tokens):
    a = build_index(docs, _out(scratch_dir), vocab_size=VOCAB, shard_tokens=shard_tokens, progress=False)
    b = single_build(docs, _out(scratch_dir), vocab_size=VOCAB, progress=False)  # (one shard: another cut)
    try:
        assert a.num_shards >= b.num_shards
        assert_same_answers(a, b, queries(range(VOCAB), 3), range(VOCAB), docs=range(len(docs)))
    finally:
        for ix in (a, b):
            ix.close()
            shutil.rmtree(ix.paths[0], ignore_errors=True)


def test_text_files_with_metadata_and_a_shipped_tokenizer(scratch_dir, bpe_tokenizer):
    corpus = scratch_dir / f"corpus-{uuid.uuid4().hex[:6]}"
    corpus.mkdir()
    rng = np.random.default_rng(0)
    words = ["def", "main", "(", ")", "return", "x", "import", "os", " "]
    for f in range(3):
        with open(corpus / f"part{f}.jsonl", "w") as fh:
            for i in range(40):
                text = " ".join(rng.choice(words, size=rng.integers(1, 25)))
                fh.write(json.dumps({"text": text, "id": f"{f}-{i}"}) + "\n")
    (corpus / "note.txt").write_text("def main ( ) return os")
    a = build_index(corpus, _out(scratch_dir), tokenizer=bpe_tokenizer, metadata_columns=["id"], shard_tokens=300,
                    progress=False)
    b = single_build(corpus, _out(scratch_dir), tokenizer=bpe_tokenizer, metadata_columns=["id"], progress=False)
    with a, b:
        assert a.num_shards > 1 and a.meta["vocab_fingerprint"] == b.meta["vocab_fingerprint"]
        ids = [bpe_tokenizer.encode(w, add_special_tokens=False) for w in ("def main", "return x", "import os")]
        toks = sorted({t for q in ids for t in q})
        assert_same_answers(a, b, [q for i in ids for q in (i, i[:1], i[1:])] + [[]], toks, docs=range(a.num_docs))
        assert (Path(a.paths[0]) / "tokenizer").is_dir()


def test_datasets_and_ray_datasets_as_sources(scratch_dir):
    datasets = pytest.importorskip("datasets")
    texts = [f"doc {i} " + "ab" * (i % 7) for i in range(50)]
    ds = datasets.Dataset.from_dict({"text": texts, "id": list(range(50))})
    want = single_build(ds, _out(scratch_dir), metadata_columns=["id"], progress=False)
    got_hf = build_index(ds, _out(scratch_dir), metadata_columns=["id"], shard_tokens=200, progress=False)
    got_ray = build_index(ray.data.from_items([{"text": t, "id": i} for i, t in enumerate(texts)]),
                          _out(scratch_dir), metadata_columns=["id"], shard_tokens=300, progress=False)
    with want, got_hf, got_ray:
        for got in (got_hf, got_ray):
            assert got.num_shards > 1
            qs = [list(b"ab"), list(b"doc 1"), list(b" "), list(b"bab")]
            assert_same_answers(got, want, qs, sorted(set(b"abdoc ")), docs=range(0, 50, 7))


def test_a_killed_worker_is_retried_and_the_index_is_exact(scratch_dir):
    docs = [[i % VOCAB, (i * 7) % VOCAB, 1] * (1 + i % 5) for i in range(60)]
    marker = scratch_dir / f"killed-{uuid.uuid4().hex[:6]}"
    out = _out(scratch_dir)
    a = build_index(docs, out, vocab_size=VOCAB, shard_tokens=120, progress=False, _kill_once=(marker, 1))
    b = single_build(docs, _out(scratch_dir), vocab_size=VOCAB, progress=False)
    with a, b:
        assert marker.exists()  # (shard 1's first attempt died with SIGKILL after writing its files)
        assert a.num_shards > 2
        assert sorted(p.name for p in out.iterdir()) == ["meta.json"] + [f"shard_{i:05d}" for i in range(a.num_shards)]
        assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
        assert_same_answers(a, b, queries(range(VOCAB), 2), range(VOCAB), docs=range(len(docs)))


def test_a_failing_shard_publishes_nothing(scratch_dir):
    docs = [[1, 2, 3]] * 30 + [[1, 2, 9]]  # id 9 is outside the vocabulary: its shard's task fails
    out = _out(scratch_dir)
    with pytest.raises(ValueError, match="vocab"):
        build_index(docs, out, vocab_size=VOCAB, shard_tokens=40, progress=False)
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_router_over_local_shard_groups_answers_as_the_index(scratch_dir):
    rng = np.random.default_rng(3)
    docs = [list(rng.integers(0, VOCAB, size=rng.integers(0, 25))) for _ in range(80)]
    a = build_index(docs, _out(scratch_dir), vocab_size=VOCAB, shard_tokens=150, progress=False)
    with a, ShardRouter.start(a.paths[0], groups=[[0, 2], [1], list(range(3, a.num_shards))], num_cpus=0.1) as r:
        assert a.num_shards > 3
        assert_same_answers(r, a, queries(range(VOCAB), 2, extra=[[0, 1, 2, 3, 0, 1], [2, 2, 2]]), range(VOCAB),
                            docs=range(0, len(docs), 7))
        batch = [[0, 1], [], [2, 2, 2], [3]]
        want, got = a.infgram_ntd_batch(batch), r.suffix_cache().ntd_batch(batch)
        for f in ("offsets", "token_ids", "counts", "total", "suffix_len", "sparse"):
            assert np.array_equal(getattr(got, f), getattr(want, f)), f
        np.testing.assert_array_equal(r.count_batch(batch), a.count_batch(batch))
        s1, s2 = r.score_batch(batch), a.score_batch(batch)
        np.testing.assert_array_equal(s1.probs, s2.probs)
        with pytest.raises(ValueError):
            r.count([VOCAB + 5])  # (a group's own error, as it was raised)


def test_router_documents_are_decoded_as_the_index_decodes_them(scratch_dir):
    texts = [f"document {i}: " + "abc " * (i % 5) for i in range(30)]
    a = single_build(texts, _out(scratch_dir), max_shard_tokens=200, progress=False)  # byte-level
    with a, ShardRouter.start(a.paths[0], groups=[[0], list(range(1, a.num_shards))], num_cpus=0.1) as r:
        assert a.num_shards > 1
        for d in range(0, a.num_docs, 3):
            assert r.get_doc(d).text == a.get_doc(d).text == texts[d]  # (the router's had no text)
            assert r.get_doc(d, decode=False).text is None


from infinigram_hf.distributed import ShardGroup  # noqa: E402


class _SlowGroup(ShardGroup):
    """A shard group that takes 5 s to count (for the deadline)."""

    def count_batch(self, values, offsets):
        import time

        time.sleep(5)
        return super().count_batch(values, offsets)


def test_deadline_and_missing_group_raise_rather_than_answer_from_fewer_shards(scratch_dir):
    from infinigram_hf.distributed import DeadlineExceeded, ShardGroupUnavailable

    docs = [[i % VOCAB, 1, 2] for i in range(40)]
    a = build_index(docs, _out(scratch_dir), vocab_size=VOCAB, shard_tokens=50, progress=False)
    path = str(a.paths[0])
    groups = [[0], list(range(1, a.num_shards))]
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # (workers cannot import this test file)
    fast = ray.remote(num_cpus=0.1)(ShardGroup)
    slow = ray.remote(num_cpus=0.1, max_concurrency=4)(_SlowGroup)  # (threads: later calls pass the sleeper)
    with a, ShardRouter(path, groups, [fast.remote(path, groups[0]), slow.remote(path, groups[1])]) as r:
        with r.deadline(1.0), pytest.raises(DeadlineExceeded, match=r"shard group\(s\) \[1\]"):
            r.count([1])
        assert r.infgram_ntd([1]).as_dict() == a.infgram_ntd([1]).as_dict()  # (other calls are not slow)
        ray.kill(r._actors[0])
        with pytest.raises(ShardGroupUnavailable, match="shard group 0"):
            r.infgram_ntd([1])
        with pytest.raises(ShardGroupUnavailable, match="shard group 0"):
            r.suffix_cache().states([[1, 2]])  # (decoding states are routed alike)
        with pytest.raises(ShardGroupUnavailable, match="shard group 0"):
            r.search_docs([1, 2])


def test_cli_build_with_ray(scratch_dir):
    from infinigram_hf.cli import main

    corpus = scratch_dir / f"cli-{uuid.uuid4().hex[:6]}"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"f{i}.txt").write_text(f"int main{i}(void) {{ return {i}; }}\n" * (i + 1))
    out = _out(scratch_dir)
    assert main(["build", str(corpus), "-o", str(out), "-q", "--max-shard-tokens", "400", "--ray"]) == 0
    with InfiniGramIndex.open(out) as got, single_build(corpus, _out(scratch_dir), progress=False) as want:
        assert got.num_shards > 1
        assert_same_answers(got, want, [list(b"main"), list(b"return"), list(b"; }")], sorted(set(b"main;")),
                            docs=range(6))


# ---------------------------------------------------------------------------- routed decoding


def _same(a, b, fields) -> None:
    for f in fields:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


def assert_same_decoding(router, index, contexts, vocab, seed=0) -> None:
    """The router's decoding-loop answers (SuffixCache batches, the drafter's steps, chains,
    children and trees, a decoding loop with rejected drafts) equal the index's."""
    from infinigram_hf.lm.drafter import InfiniGramDrafter

    rng = np.random.default_rng(seed)
    c1, c2 = index.suffix_cache(), router.suffix_cache()
    _same(c2.ntd_batch(contexts), c1.ntd_batch(contexts), ("offsets", "token_ids", "counts", "total", "suffix_len",
                                                           "sparse"))
    toks = [int(t) % vocab for t in range(len(contexts))]
    _same(c2.prob_batch(contexts, toks), c1.prob_batch(contexts, toks), ("counts", "prompt_counts", "suffix_len",
                                                                         "sparse"))
    assert [c2.state(c).suffix_len for c in contexts] == [c1.state(c).suffix_len for c in contexts]
    for opts in ({"source": "infgram", "min_share": 0.0, "min_joint": 0.0, "max_draft": 6},
                 {"source": "longest", "match_ratio": 0, "min_match": 1}):
        d1, d2 = InfiniGramDrafter(index, adaptive=False, **opts), InfiniGramDrafter(router, adaptive=False, **opts)
        for q in contexts:
            x, y = d1.draft(q), d2.draft(q)
            assert (x.tokens.tolist(), x.source, x.match_len) == (y.tokens.tolist(), y.source, y.match_len), (opts, q)
            s1, s2 = d1.infgram_state(np.asarray(q, dtype=np.int64)), d2.infgram_state(np.asarray(q, dtype=np.int64))
            k1, k2 = d1.children(s1, 3), d2.children(s2, 3)
            assert (k1[0].tolist(), k1[1].tolist(), k1[3]) == (k2[0].tolist(), k2[1].tolist(), k2[3]), (opts, q)
            for j, t in enumerate(k1[0].tolist()):
                x, y = d1.infgram_chain(k1[2][j], 4), d2.infgram_chain(k2[2][j], 4)
                assert (x.tokens.tolist(), x.counts.tolist()) == (y.tokens.tolist(), y.counts.tolist()), (opts, q, t)
                if t == index.separator_id:
                    continue
                # a child state advanced by one more token (groups the child left behind search again)
                seq = np.asarray(list(q) + [t, int(rng.integers(0, vocab))], dtype=np.int64)
                a, b = d1._step(seq, k1[2][j].copy(), 1, 4), d2._step(seq, k2[2][j].copy(), 1, 4)
                assert (a.tokens.tolist(), a.source, a.match_len) == (b.tokens.tolist(), b.source, b.match_len)
            x, y = d1.tree(q, width=2, max_nodes=8, min_prob=0.05), d2.tree(q, width=2, max_nodes=8, min_prob=0.05)
            assert (x.tokens.tolist(), x.parents.tolist()) == (y.tokens.tolist(), y.parents.tolist()), (opts, q)
            r1, r2 = d1.start(q), d2.start(q)
            for step in range(4):  # accepted drafts, rejected ones, a document boundary
                a, b = d1.draft_row(r1), d2.draft_row(r2)
                assert (a.tokens.tolist(), a.source) == (b.tokens.tolist(), b.source), (opts, q, step)
                new = list(a.tokens[:2]) if step % 2 == 0 and len(a) else [int(rng.integers(0, vocab + 1))]
                d1.append(r1, new)
                d2.append(r2, new)


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(docs=st.lists(st.lists(st.integers(0, VOCAB - 1), max_size=40), min_size=4, max_size=60),
       shard_tokens=st.integers(41, 300), split=st.integers(0, 2))
def test_router_decoding_states_drafts_and_search_equal_the_index(scratch_dir, docs, shard_tokens, split):
    a = build_index(docs, _out(scratch_dir), vocab_size=VOCAB, shard_tokens=shard_tokens, progress=False)
    n = a.num_shards
    third = -(-n // 3)
    plans = [[list(range(n))], [list(range(0, n, 2)), list(range(1, n, 2))],
             [list(range(i, min(i + third, n))) for i in range(0, n, third)]]
    groups = [g for g in plans[split] if g]
    with a, ShardRouter(a.paths[0], groups, [ray.remote(num_cpus=0.1)(ShardGroup).remote(str(a.paths[0]), g)
                                             for g in groups]) as r:
        assert r.state_size == 2 + 2 * len(groups) + 2 * n
        contexts = [[], [1, 2], [3, 3, 3], [0, 1, 2, 3, 0, 1]] + [d[:7] for d in docs[:2]]
        assert_same_decoding(r, a, contexts, VOCAB)
        for query in ([1, 2], [[[0, 1]], [[2, 2], [3]]], [[[3, 0, 1]]]):
            x, y = a.search_docs(query, maxnum=5, max_clause_freq=10 ** 6), r.search_docs(query, maxnum=5,
                                                                                           max_clause_freq=10 ** 6)
            assert (x.count, x.doc_ids.tolist(), x.anchor_clause, x.anchor_count, x.approximate) == \
                (y.count, y.doc_ids.tolist(), y.anchor_clause, y.anchor_count, y.approximate), query
            for u, v in zip(x.documents, y.documents):
                assert u.doc_id == v.doc_id and np.array_equal(u.spans, v.spans) and u.shard == v.shard


def test_router_drafts_equal_the_index_where_candidates_are_sampled(scratch_dir):
    """Above IG_DRAFT_EXACT_MAX occurrences the C drafter samples candidates at spaced suffix-
    array ranks; the router asks the groups for the tokens at the same ranks."""
    rng = np.random.default_rng(7)
    docs = [list(rng.choice(3, size=200, p=[0.5, 0.3, 0.2])) for _ in range(60)]  # 12,000 tokens
    a = build_index(docs, _out(scratch_dir), vocab_size=VOCAB, shard_tokens=2500, progress=False)
    groups = [[s] for s in range(a.num_shards)]
    with a, ShardRouter(a.paths[0], groups, [ray.remote(num_cpus=0.1)(ShardGroup).remote(str(a.paths[0]), g)
                                             for g in groups]) as r:
        assert a.count([0]) > 2048 and a.num_shards >= 4
        assert_same_decoding(r, a, [[], [0], [1], [0, 0], [2, 1, 0]], VOCAB, seed=1)
        with pytest.raises(ValueError, match="max_clause_freq"):
            r.search_docs([0], max_clause_freq=100)  # (a single index would sample: the router refuses)
