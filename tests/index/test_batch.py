"""Batched queries (count_batch, infgram_prob_batch, infgram_ntd_batch, score_batch) against the
brute-force reference and against the single-query methods, for every input form, thread count,
shard layout, and with/without precomputed short-context distributions (ntdcache.bin)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Reference, assert_ntd_matches, assert_prob_matches, built_index, make_index
from infinigram_hf.index.batch import suffix_probs_batch
from infinigram_hf.index.batch import Ragged, as_batch, count_batch, ntd_batch, prob_batch, score_batch
from infinigram_hf import InfiniGramError

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@st.composite
def corpus_and_queries(draw: st.DrawFn):
    vocab = draw(st.sampled_from([3, 7, 300, 70000]))
    alphabet = sorted(set(draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=4)) + [vocab - 1]))
    sym = st.sampled_from(alphabet)
    docs = draw(st.lists(st.lists(sym, max_size=30), min_size=1, max_size=6))
    queries = []
    for _ in range(draw(st.integers(0, 10))):
        nonempty = [d for d in docs if d]
        if nonempty and draw(st.booleans()):
            d = draw(st.sampled_from(nonempty))
            i = draw(st.integers(0, len(d) - 1))
            j = draw(st.integers(i, len(d)))
            q = d[i:j] + draw(st.lists(sym, max_size=1))
        else:
            q = draw(st.lists(sym, max_size=6))
        queries.append(q)
    total = sum(len(d) + 1 for d in docs)
    max_shard = draw(st.sampled_from([None, max(max(len(d) + 1 for d in docs), total // 3)]))
    return vocab, docs, queries, max_shard, draw(st.sampled_from([0, 1, 2048])), draw(st.sampled_from([0, 1, 3]))


@SETTINGS
@given(case=corpus_and_queries())
def test_batches_match_brute_force(scratch_dir, case) -> None:
    vocab, docs, queries, max_shard, min_cost, threads = case
    ref = Reference(docs, vocab)
    with built_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=max_shard,
                     ntd_cache_min_cost=min_cost) as ix:
        counts = ix.count_batch(queries, n_threads=threads)
        assert counts.dtype == np.int64 and counts.tolist() == [ref.count(q) for q in queries]

        tokens = [(q[-1] if q else vocab - 1) for q in queries]
        pb = ix.infgram_prob_batch(queries, tokens, n_threads=threads)
        nb = prob_batch(ix, queries, tokens, infinite=False, n_threads=threads)
        assert len(pb) == len(nb) == len(queries)
        for i, (q, t) in enumerate(zip(queries, tokens)):
            assert_prob_matches(pb[i], ref.infgram_prob(q, t), f"infgram_prob_batch[{i}]")
            assert_prob_matches(nb[i], ref.ngram_prob(q, t), f"ngram prob_batch[{i}]")

        dists = ix.infgram_ntd_batch(queries, n_threads=threads)
        fixed = ntd_batch(ix, queries, infinite=False, n_threads=threads)
        assert len(dists) == len(queries) and dists.offsets[-1] == len(dists.token_ids)
        for i, q in enumerate(queries):
            want, k = ref.infgram_ntd(q)
            assert_ntd_matches(dists[i], want, k, f"infgram_ntd_batch[{i}]")
            assert not dists.approximate[i]
            assert_ntd_matches(fixed[i], ref.ntd(q), len(q), f"ngram ntd_batch[{i}]")
        if len(queries):
            assert np.array_equal(dists.rows, np.repeat(np.arange(len(queries)), np.diff(dists.offsets)))

        scored = ix.score_batch(queries, n_threads=threads)
        for i, q in enumerate(queries):
            single = ix.score(q)
            assert np.array_equal(scored[i].counts, single.counts)
            assert np.array_equal(scored[i].prompt_counts, single.prompt_counts)
            assert np.array_equal(scored[i].suffix_len, single.suffix_len)
            assert np.array_equal(scored[i].sparse, single.sparse)


def _mixable(dist: dict, separator: int, eos) -> tuple[dict, int]:
    """A brute-force distribution as a mixture takes it: end-of-document given to eos (added to
    eos's own count), or dropped (eos None); (token -> P, the total after that)."""
    counts = {t: c for t, c in dist.items() if t != separator}
    if separator in dist and eos is not None:
        counts[eos] = counts.get(eos, 0) + dist[separator]
    total = sum(counts.values())
    return {t: c / total for t, c in counts.items()}, total


@SETTINGS
@given(case=corpus_and_queries(), eos_pick=st.sampled_from(["none", "real", "absent"]), infinite=st.booleans(),
       seed=st.integers(0, 2**16))
def test_suffix_probs_batch_matches_brute_force(scratch_dir, case, eos_pick, infinite, seed) -> None:
    """suffix_probs_batch (the levels of a processor mixing several orders): each query is a tail
    of a row, in any order, rows repeated; its entries are its brute-force distribution with
    end-of-document moved to EOS -- merged when EOS is a real next token, dropped and
    renormalized without one -- and its total after that."""
    vocab, docs, queries, max_shard, min_cost, threads = case
    ref = Reference(docs, vocab)
    eos = {"none": None, "real": docs[0][0] if docs[0] else 0, "absent": vocab + 5}[eos_pick]
    rng = np.random.default_rng(seed)
    width = max([len(q) for q in queries] + [1])
    rows = np.stack([np.concatenate([rng.integers(0, vocab, width - len(q)), q]) for q in queries]
                    or [np.zeros(width)]).astype(np.int64)  # random ids before each query's tail
    which = rng.permutation(len(queries)).astype(np.int64)
    which = np.concatenate([which, which[:2]])  # a row asked twice
    lengths = np.array([len(queries[r]) for r in which], dtype=np.int64)
    with built_index(docs, scratch_dir, vocab_size=vocab, max_shard_tokens=max_shard,
                     ntd_cache_min_cost=min_cost) as ix:
        item, tokens, probs, totals = suffix_probs_batch(ix, rows, which, lengths, eos_token_id=eos,
                                                         infinite=infinite)
    assert item.dtype == tokens.dtype == np.int64 and probs.dtype == totals.dtype == np.float64
    assert len(totals) == len(which) and np.all(np.diff(item) >= 0)
    for i, r in enumerate(which):
        q = queries[r]
        want, total = _mixable(ref.infgram_ntd(q)[0] if infinite else ref.ntd(q), ref.separator, eos)
        mine = item == i
        assert totals[i] == total
        assert dict(zip(tokens[mine].tolist(), probs[mine].tolist())) == pytest.approx(want, rel=1e-12)
        assert len(set(tokens[mine].tolist())) == mine.sum()  # every token once
        if mine.any():
            assert probs[mine].sum() == pytest.approx(1.0, rel=1e-12)


def test_suffix_probs_batch_refuses_bad_input(tmp_path) -> None:
    rows = np.array([[1, 2, 3], [4, -1, 9]])
    with built_index([[1, 2, 3]], tmp_path, vocab_size=5) as ix:
        with pytest.raises(ValueError, match=r"rows\[1\]: id -1 at column 1 is outside the vocabulary"):
            suffix_probs_batch(ix, rows, np.array([0, 1]), np.array([3, 2]), eos_token_id=0)
        with pytest.raises(ValueError, match=r"rows\[1\]: id 9 at column 2"):
            suffix_probs_batch(ix, rows, np.array([1]), np.array([1]), eos_token_id=0)
        with pytest.raises(ValueError, match=r"which\[0\] = 2 is not a row"):
            suffix_probs_batch(ix, rows, np.array([2]), np.array([1]), eos_token_id=0)
        with pytest.raises(ValueError, match=r"lengths\[0\] = 4 is not within"):
            suffix_probs_batch(ix, rows, np.array([0]), np.array([4]), eos_token_id=0)
        with pytest.raises(ValueError, match="2-D"):
            suffix_probs_batch(ix, rows[0], np.array([0]), np.array([1]), eos_token_id=0)
        with pytest.raises(ValueError, match="eos"):
            suffix_probs_batch(ix, rows, np.array([0]), np.array([1]), eos_token_id=1 << 40)
        item, tokens, probs, totals = suffix_probs_batch(ix, rows, np.array([0, 0]), np.array([0, 3]), eos_token_id=0)
        assert totals.tolist() == [3.0, 1.0] and tokens[item == 1].tolist() == [0]  # 1 2 3 ends its document


def test_short_context_cache_gives_exact_distributions(scratch_dir) -> None:
    """Frequent 1-3 token contexts with many distinct next tokens come from ntdcache.bin."""
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50, size=400).tolist() for _ in range(20)] + [[7] * 300]
    ref = Reference(docs, 60)
    with built_index(docs, scratch_dir, vocab_size=60, ntd_cache_min_cost=1) as cached, \
            built_index(docs, scratch_dir, vocab_size=60, ntd_cache_min_cost=0) as plain:
        assert any(p.name == "ntdcache.bin" for p in cached.paths[0].rglob("*"))
        assert not any(p.name == "ntdcache.bin" for p in plain.paths[0].rglob("*"))
        queries = [[t] for t in range(60)] + [[7, 7], [7, 7, 7], [1, 2], [3, 4, 5], []]
        a, b = cached.infgram_ntd_batch(queries), plain.infgram_ntd_batch(queries)
        for i, q in enumerate(queries):
            want, k = ref.infgram_ntd(q)
            assert_ntd_matches(a[i], want, k, f"cached {q}")
            assert_ntd_matches(b[i], want, k, f"walked {q}")
            assert cached.infgram_ntd(q).as_dict() == want


def test_max_support_samples_and_flags_approximate(scratch_dir) -> None:
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 40, size=500).tolist() for _ in range(10)]
    with built_index(docs, scratch_dir, vocab_size=40, ntd_cache_min_cost=0) as ix:
        exact = ix.infgram_ntd_batch([[5], [5, 6, 7, 8, 9, 10]])
        approx = ix.infgram_ntd_batch([[5], [5, 6, 7, 8, 9, 10]], max_support=10)
        assert not exact.approximate.any()
        assert approx.approximate[0] and approx[0].approximate
        assert int(approx[0].counts.sum()) == int(exact.total[0]) == int(approx.total[0])
        assert set(approx[0].token_ids.tolist()) <= set(exact[0].token_ids.tolist())
        if exact.total[1] <= 10:  # a rare context stays exact
            assert not approx.approximate[1] and approx[1].as_dict() == exact[1].as_dict()
        with pytest.raises(ValueError, match="max_support"):
            ix.infgram_ntd_batch([[5]], max_support=0)
        # Several sampled rows in one batch (one thread's store): each row equals its own call.
        prompts = [[t] for t in range(40)] * 2
        both = ix.infgram_ntd_batch(prompts, max_support=10, n_threads=1)
        for i, p in enumerate(prompts):
            one = ix.infgram_ntd(p, max_support=10)
            assert both[i].as_dict() == one.as_dict() and both[i].approximate == one.approximate, p
            assert int(both[i].counts.sum()) == int(both.total[i])


# ---------------------------------------------------------------------------- input forms


def test_input_forms_agree(tmp_path) -> None:
    docs = [[1, 2, 3, 1, 2, 4], [2, 3, 1, 2]]
    ix = make_index(docs, tmp_path, vocab_size=10)
    queries = [[1, 2], [3], [], [2, 3, 1]]
    want = [ix.count(q) for q in queries]
    values, offsets = as_batch(queries)
    assert values.dtype == np.uint32 and offsets.tolist() == [0, 2, 3, 3, 6]
    padded = np.full((4, 3), 99, dtype=np.int64)  # pad value outside the vocabulary: dropped
    lengths = np.array([len(q) for q in queries])
    left = padded.copy()
    for i, q in enumerate(queries):
        padded[i, :len(q)] = q
        left[i, 3 - len(q):] = q
    torch = pytest.importorskip("torch")
    forms = [
        ix.count_batch(queries),
        ix.count_batch([np.array(q, dtype=np.int32) for q in queries]),
        ix.count_batch(values, offsets=offsets),
        ix.count_batch(Ragged(values, offsets)),
        ix.count_batch(padded, lengths=lengths),
        ix.count_batch(left, lengths=lengths, padding_side="left"),
        ix.count_batch(torch.tensor(left), lengths=torch.tensor(lengths), padding_side="left"),
        count_batch(ix, tuple(tuple(q) for q in queries), n_threads=4),
    ]
    for got in forms:
        assert got.tolist() == want
    full = np.array([[1, 2], [2, 3], [3, 1]])
    assert ix.count_batch(full).tolist() == [ix.count(r) for r in full.tolist()]
    assert ix.count_batch([]).tolist() == []
    assert len(ix.infgram_ntd_batch([])) == 0 and len(ix.score_batch([])) == 0
    assert len(ix.infgram_prob_batch([], [])) == 0
    # offsets may start past 0 and leave values unused
    vals = np.array([9, 1, 2, 3, 9], dtype=np.uint32)
    assert ix.count_batch(vals, offsets=[1, 3, 4]).tolist() == [ix.count([1, 2]), ix.count([3])]
    r = ix.score_batch(vals, offsets=[1, 4])
    assert np.array_equal(r.counts, ix.score([1, 2, 3]).counts) and r.offsets.tolist() == [0, 3]
    # one token for every prompt
    assert np.array_equal(ix.infgram_prob_batch(queries, 2).counts,
                          ix.infgram_prob_batch(queries, [2] * 4).counts)


# ---------------------------------------------------------------------------- errors


def test_bad_batches_raise_value_errors_naming_the_query(tmp_path) -> None:
    ix = make_index([[1, 2, 3]], tmp_path, vocab_size=10)
    with pytest.raises(ValueError, match=r"queries\[1\].*10.*outside the vocabulary"):
        ix.count_batch([[1], [2, 10]])
    with pytest.raises(ValueError, match=r"prompts\[0\].*separator"):
        ix.infgram_ntd_batch([[1, ix.separator_id]])
    with pytest.raises(ValueError, match=r"queries\[1\].*-1"):
        ix.count_batch([[1], [-1]])
    with pytest.raises(ValueError, match=r"queries.*integer"):
        ix.count_batch([[1.5]])
    with pytest.raises(ValueError, match=r"queries\[0\]"):
        ix.count_batch([1, 2])  # a single query is not a batch
    with pytest.raises(ValueError, match="tokens"):
        ix.infgram_prob_batch([[1], [2]], [1])
    with pytest.raises(ValueError, match=r"tokens.*outside"):
        ix.infgram_prob_batch([[1]], [10])
    with pytest.raises(ValueError, match="offsets"):
        ix.count_batch(np.array([1, 2], dtype=np.uint32), offsets=[0, 3])
    with pytest.raises(ValueError, match="offsets"):
        ix.count_batch(np.array([1, 2], dtype=np.uint32), offsets=[0, 2, 1])
    with pytest.raises(ValueError, match="lengths"):
        ix.count_batch(np.zeros((2, 3), dtype=np.int64), lengths=[1, 4])
    with pytest.raises(ValueError, match="padding_side"):
        ix.count_batch(np.zeros((2, 3), dtype=np.int64), lengths=[1, 1], padding_side="middle")
    with pytest.raises(ValueError, match="n_threads"):
        ix.count_batch([[1]], n_threads=-1)
    ix.close()
    with pytest.raises(InfiniGramError, match="closed"):
        ix.count_batch([[1]])
    with pytest.raises(InfiniGramError, match="closed"):
        ix.score_batch([[1]])


def test_long_prompts_and_sequences(tmp_path) -> None:
    """100k-token prompts: exact answers, and the split dense scoring equals the single call."""
    rng = np.random.default_rng(2)
    doc = rng.integers(0, 30, size=20_000)
    ix = make_index([doc.tolist(), doc[:5000].tolist()], tmp_path, vocab_size=32)
    long = np.concatenate([rng.integers(0, 30, size=100_000 - 3000), doc[:3000]])
    p = ix.infgram_prob(long[:-1], int(long[-1]))
    assert p.suffix_len >= 2999 and p.count >= 1
    d = ix.infgram_ntd_batch([long, long[:50_000]])
    assert d[0].suffix_len == ix.infgram_suffix_len(long) and d[0].as_dict() == ix.infgram_ntd(long).as_dict()
    big = np.concatenate([doc, long])
    a, b = ix.score_batch([big], n_threads=3), ix.score(big)
    assert np.array_equal(a.counts, b.counts) and np.array_equal(a.prompt_counts, b.prompt_counts)
    assert np.array_equal(a.suffix_len, b.suffix_len) and np.array_equal(a.sparse, b.sparse)
    assert ix.count(long) == 0 and ix.count_batch([long]).tolist() == [0]


def test_corrupt_short_context_cache_entries_fall_back_to_exact_answers(scratch_dir) -> None:
    """ntdcache.bin entries are checked on first use: a damaged record is ignored, not trusted."""
    import struct

    rng = np.random.default_rng(2)
    docs = [rng.integers(0, 30, size=300).tolist() for _ in range(10)]
    ref = Reference(docs, 40)
    ix = make_index(docs, scratch_dir, vocab_size=40, ntd_cache_min_cost=1)
    path = ix.paths[0]
    ix.close()
    ntc = next(path.rglob("ntdcache.bin"))
    raw = bytearray(ntc.read_bytes())
    n_records = struct.unpack_from("<Q", raw, 16)[0]
    assert n_records > 0
    entries = 64 + 32 * n_records
    for j in range(0, (len(raw) - entries) // 8, 7):  # every 7th entry: an id beyond the vocabulary
        struct.pack_into("<I", raw, entries + 8 * j, 0xFFFF0 + j)
    ntc.write_bytes(bytes(raw))
    from infinigram_hf import InfiniGramIndex

    with InfiniGramIndex.open(path) as damaged:
        queries = [[t] for t in range(40)] + [[1, 2], [3, 4, 5]]
        got = damaged.infgram_ntd_batch(queries)
        for i, q in enumerate(queries):
            want, k = ref.infgram_ntd(q)
            assert_ntd_matches(got[i], want, k, f"damaged cache {q}")
            assert damaged.infgram_ntd(q).as_dict() == want
    shutil.rmtree(path, ignore_errors=True)
