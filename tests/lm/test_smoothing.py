"""Kneser-Ney family (fixed order, unbounded, Witten-Bell, with concentrations): scores and whole
distributions against a brute-force implementation on tiny corpora, finite perplexity on unseen
text, count-of-counts and per-level statistics against brute force, the numpy reference against
the C scorer, and tuning."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from infinigram_hf.lm.smoothing import (COL_CCOUNT, COL_COUNT, COL_CTOTAL, COL_DEPTH, COL_POS, COL_TOTAL,
                                     SmoothingParams, fit, mkn_discounts, probs_from_levels, tune)
from lm_reference import EOD, LMReference, make_lm, random_corpus

V = 4


def param_sets():
    rng = np.random.default_rng(0)
    d = lambda n: dict(d1=rng.uniform(0, 1, n), d2=rng.uniform(0, 2, n), d3=rng.uniform(0, 3, n))  # noqa: E731
    return [
        ("kn3", SmoothingParams(**d(3), theta=np.zeros(3), max_depth=2, raw_top=True)),
        ("kn5", SmoothingParams(**d(2), theta=np.zeros(2), max_depth=4, raw_top=True)),
        ("unbounded", SmoothingParams(**d(4), theta=np.zeros(4))),
        ("unbounded+theta", SmoothingParams(**d(3), theta=rng.uniform(0, 3, 3))),
        ("absolute", SmoothingParams(**d(2), theta=np.zeros(2), raw_all=True, max_depth=3)),
        ("wb", SmoothingParams.witten_bell_params()),
        ("wb3", SmoothingParams.witten_bell_params(2)),
    ]


PARAMS = param_sets()


@pytest.mark.parametrize("seed,shards", [(0, 1), (1, 3), (2, 1), (3, 2)])
def test_scores_and_distributions_match_brute_force(tmp_path, seed, shards):
    docs = random_corpus(seed, vocab=3)
    ref = LMReference(docs, V)
    lm = make_lm(tmp_path, docs, V, shards=shards)
    rng = random.Random(seed)
    query = [rng.randrange(V) for _ in range(16)]  # includes the unseen token 3
    for name, params in PARAMS:
        for eod in (False, True):
            s = lm.score(query, "kn", smoothing=params, eod=eod)
            for i, t in enumerate(query):
                want = ref.smooth_dist(query[:i], params, 100, eod)[t]
                assert s.probs[i] == pytest.approx(want, rel=1e-9), (name, eod, i)
            ctx = query[:rng.randrange(len(query))]
            d = lm.distribution(ctx, "kn", smoothing=params, eod=eod)
            want = ref.smooth_dist(ctx, params, 100, eod)
            assert d.sum() == pytest.approx(1.0, abs=1e-12)
            for w in range(V):
                assert d[w] == pytest.approx(want[w], rel=1e-9), (name, eod, w)
            assert d[V] == pytest.approx(want.get(EOD, 0.0), abs=1e-15)


def test_max_context_cuts_unbounded(tmp_path):
    docs = random_corpus(5, vocab=2)
    ref = LMReference(docs, V)
    lm = make_lm(tmp_path, docs, V, max_context=3)
    params = SmoothingParams.constant(0.6, 1.1, 1.3, theta=0.5)
    q = docs[0][:12]
    s = lm.score(q, "kn", smoothing=params)
    for i, t in enumerate(q):
        assert s.probs[i] == pytest.approx(ref.smooth_dist(q[:i], params, 3)[t], rel=1e-9)


def test_finite_perplexity_on_unseen_text(tmp_path):
    lm = make_lm(tmp_path, [[0, 1, 0, 1, 1, 0]], V)
    unseen = [3, 2, 3, 3, 2, 0, 3]
    for method, kw in (("kn", {}), ("kn", {"order": 3}), ("wb", {}), ("backoff", {})):
        r = lm.perplexity([unseen], method=method, **kw)
        assert np.isfinite(r.perplexity) and r.perplexity > 1, (method, kw)
    assert lm.perplexity([unseen], method="infgram").perplexity == math.inf


def test_estimated_discounts_are_valid_and_score(tmp_path):
    docs = random_corpus(7, vocab=3, n_docs=8, max_len=60)
    lm = make_lm(tmp_path, docs, V)
    for order in (None, 2, 4):
        p = lm.smoothing(order)
        assert p.max_depth == (None if order is None else order - 1)
        assert p.raw_top == (order is not None)
        d = lm.distribution(docs[1][:5], "kn", order=order)
        assert d.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="order"):
        lm.score([0, 1], "kn", order=3, smoothing=lm.smoothing(4))


@pytest.mark.parametrize("shards", [1, 3])
def test_count_of_counts_match_brute_force(tmp_path, shards):
    docs = random_corpus(11, vocab=3, n_docs=6, max_len=30)
    lm = make_lm(tmp_path, docs, V, shards=shards)
    raw, cont, types = lm.count_of_counts(7, kmax=4)
    wr, wc, wt = LMReference(docs, V).count_of_counts(7, 4)
    assert np.array_equal(raw, wr) and np.array_equal(cont, wc) and np.array_equal(types, wt)


def test_levels_match_brute_force(tmp_path):
    docs = random_corpus(3, vocab=3)
    ref = LMReference(docs, V)
    lm = make_lm(tmp_path, docs, V, shards=2)
    q = [0, 1, 2, 0, 1, 3, 0, 1]
    rows = lm.levels(q, with_cont=True, chunk_rows=5)  # several C calls
    seen = set()
    for r in rows:
        i, L = int(r[COL_POS]), int(r[COL_DEPTH])
        seen.add(i)
        s = tuple(q[i - L:i])
        f = ref.followers(s, False)
        assert r[COL_TOTAL] == sum(f.values()) and r[COL_COUNT] == f[q[i]]
        cf = ref.cont_followers(s, False)
        assert r[COL_CTOTAL] == sum(cf.values()) and r[COL_CCOUNT] == cf[q[i]]
    assert seen == set(range(len(q)))


def test_numpy_reference_equals_c(tmp_path):
    docs = random_corpus(9, vocab=3, n_docs=6, max_len=40)
    lm = make_lm(tmp_path, docs, V)
    q = random_corpus(10, vocab=3)[0] * 2
    for name, params in PARAMS:
        rows = lm.levels(q, max_depth=lm.max_context if params.max_depth is None else params.max_depth)
        want = lm.score(q, "kn", smoothing=params).probs
        got = probs_from_levels(rows, params, V, positions=np.arange(len(q)))
        assert np.allclose(got, want, rtol=1e-12), name


def test_mkn_discount_formula_and_params():
    d1, d2, d3 = mkn_discounts([100, 40, 20, 10])
    y = 100 / 180
    assert d1 == pytest.approx(1 - 2 * y * 0.4) and d2 == pytest.approx(2 - 3 * y * 0.5)
    assert d3 == pytest.approx(3 - 4 * y * 0.5)
    assert mkn_discounts([0, 0, 0, 0]) == (0.5, 1.0, 1.5)
    with pytest.raises(ValueError, match="d1"):
        SmoothingParams.constant(d1=1.5)
    with pytest.raises(ValueError, match="theta"):
        SmoothingParams.constant(theta=-1)


def test_save_load_roundtrip(tmp_path):
    p = SmoothingParams(np.array([0.1, 0.9]), np.array([1.0, 1.5]), np.array([2.0, 2.5]), np.array([0.0, 3.0]),
                        max_depth=5, raw_top=True, note="x")
    p.save(tmp_path / "p.json")
    q = SmoothingParams.load(tmp_path / "p.json")
    assert q == p and q.note == "x"


def test_tuning_lowers_heldout_nll(tmp_path):
    rng = random.Random(0)
    words = ["abc", "abd", "bca", "cab", "dab"]
    text = lambda n: [b for _ in range(n) for b in (rng.choice(words) + " ").encode()]  # noqa: E731
    lm = make_lm(tmp_path, [text(150)], 256)
    held = text(25)
    start = SmoothingParams.constant(0.2, 0.3, 0.4)  # deliberately poor
    before = lm.perplexity([held], "kn", smoothing=start).perplexity
    tuned = fit(lm, [held], start=start, depths=3, steps=1)
    after = lm.perplexity([held], "kn", smoothing=tuned).perplexity
    assert after < before
    assert "tuned on" in tuned.note
    with pytest.raises(ValueError, match="Witten-Bell"):
        tune(lm.levels(held), SmoothingParams.witten_bell_params(), 256)


def test_fit_shows_progress_unless_asked_not_to(tmp_path, capsys):
    """issue 13: fit ran for minutes in silence."""
    pytest.importorskip("tqdm")
    rng = random.Random(1)
    text = lambda n: [b for _ in range(n) for b in (rng.choice(["ab", "ba", "abc"]) + " ").encode()]  # noqa: E731
    lm = make_lm(tmp_path, [text(60)], 256)
    held = text(10)
    fit(lm, [held], depths=2, steps=1)
    err = capsys.readouterr().err
    assert "counting held-out levels" in err and "tuning KN" in err and "heldout_ppl" in err
    fit(lm, [held], depths=2, steps=1, progress=False)
    assert capsys.readouterr().err == ""
