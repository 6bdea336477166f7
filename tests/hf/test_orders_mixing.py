"""Mixing several orders (issue 20, `infinigram_hf.lm.orders`): the levels' estimates equal the
brute-force n-gram counts (conftest.Reference); perplexity(mixing=) and the processor with a
model over several orders equal a brute-force mixture of the model, the ∞-gram and the levels;
every mixture is a proper distribution; the fit beats two-way mixing where the shorter suffix
holds the signal; files and scores round-trip."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from conftest import Reference
from hf_tiny import MIXING_CORPUS as SMALL_CORPUS, MIXING_DOCS as DOCS, TEXTS, mixing_index, scored_positions, tiny_model, tiny_tok  # noqa: F401
from infinigram_hf import InfiniGramLogitsProcessor, MixingModel, fit_mixing
from infinigram_hf.build import build_index
from infinigram_hf.hf.perplexity import perplexity, token_scores, with_index
from infinigram_hf.lm.learned_mixing import DEFAULT_FEATURES, FEATURES, MixingFormatError
from infinigram_hf.lm.mixture import TokenScores, interpolate
from infinigram_hf.lm.orders import DEFAULT_LEVELS, check_levels, level_lengths, level_scores



def random_orders_model(features, levels, seed=0, hidden=(5,)) -> MixingModel:
    rng = np.random.default_rng(seed)
    k = len(features) + len(levels)
    layers, width = [], k
    for h in hidden + (2 + len(levels),):
        layers.append((rng.normal(size=(h, width)), rng.normal(size=h)))
        width = h
    return MixingModel("mlp", tuple(features), rng.normal(size=k), rng.random(k) + 0.5, layers, levels=levels)


def brute_levels(ref: Reference, ctx: list, levels=DEFAULT_LEVELS) -> list:
    """Per level: None (it does not exist) or (suffix count, {token: count}) of its suffix."""
    k = ref.suffix_len(ctx)
    out = []
    for m in level_lengths(levels, np.array([k]))[0]:
        if m < 0:
            out.append(None)
        else:
            dist = ref.ntd(ctx[len(ctx) - m:])
            out.append((sum(dist.values()), dist))
    return out


def brute_weights(model: MixingModel, ref: Reference, ctx: list, logp_row: np.ndarray) -> tuple:
    """(weights over [model, ∞-gram, levels], the levels) of one context, from the brute-force
    ∞-gram features and level counts and the model's formula written out here."""
    dist, k = ref.infgram_ntd(ctx)
    total = sum(dist.values())
    f = dict(sparse=float(len(dist) == 1), log_effective_n=math.log(k + 1), log_context_count=math.log1p(total),
             log_num_distinct=math.log1p(len(dist)), top_infgram_prob=max(dist.values()) / total if total else 0.0,
             neural_entropy=float(-(np.exp(logp_row) * np.where(np.isinf(logp_row), 0, logp_row)).sum()),
             neural_top_prob=float(np.exp(logp_row.max())))
    lev = brute_levels(ref, ctx, model.levels)
    x = np.array([f[n] for n in model.features] + [math.log1p(v[0]) if v else 0.0 for v in lev])
    h = (x - model.mean) / model.std
    for i, (w, b) in enumerate(model.layers):
        h = w @ h + b
        if i < len(model.layers) - 1:
            h = np.tanh(h)
    avail = [True, total > 0] + [bool(v) and v[0] > 0 and total > 0 for v in lev]
    e = np.where(avail, np.exp(h - h.max()), 0.0)
    return e / e.sum(), lev


def test_level_lengths_follow_the_longest_match():
    got = level_lengths(("L-1", "L/2", "1", "3"), np.array([0, 1, 2, 3, 9]))
    want = [[-1, -1, -1, -1], [0, 0, -1, -1], [1, 1, 1, -1], [2, 1, 1, -1], [8, 4, 1, 3]]
    np.testing.assert_array_equal(got, want)
    for bad in ([], ["L-2"], ["0"], ["1", "1"], [1]):
        with pytest.raises(ValueError, match="levels"):
            check_levels(bad)


@pytest.mark.parametrize("seed", range(3))
def test_level_scores_equal_brute_force_counts(seed, tmp_path):
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, 6, size=rng.integers(3, 60)) for _ in range(25)]
    index = build_index(docs, tmp_path / "ix", vocab_size=9, progress=False)
    ref = Reference(docs, 9)
    seq = rng.integers(0, 6, size=80)
    levels = ("L-1", "L/2", "1", "2")
    prob, count = level_scores(index, seq, index.score(seq).suffix_len, levels)
    for t in range(len(seq)):
        for j, v in enumerate(brute_levels(ref, list(seq[:t]), levels)):
            if v is None:
                assert prob[t, j] == 0 and count[t, j] == 0
            else:
                assert count[t, j] == v[0] > 0
                assert prob[t, j] == pytest.approx(v[1].get(int(seq[t]), 0) / v[0], abs=1e-15)
    index.close()


def test_perplexity_with_orders_equals_brute_force(tiny_model, tiny_tok, mixing_index):
    model = random_orders_model(list(FEATURES)[:7], DEFAULT_LEVELS, seed=5)
    res = perplexity(tiny_model, tiny_tok, DOCS, mixing_index, mixing=model, progress=False)
    assert res.scores.level_names == DEFAULT_LEVELS
    ref = Reference([tiny_tok.encode(t) for t in SMALL_CORPUS], mixing_index.vocab_size)
    logs = []
    for ctx, y, lp in scored_positions(tiny_model, tiny_tok, DOCS):
        w, lev = brute_weights(model, ref, ctx, lp)
        comp = [math.exp(lp[y]), ref.infgram_prob(ctx, y).prob] + [v[1].get(y, 0) / v[0] if v else 0.0 for v in lev]
        logs.append(math.log(float(np.dot(w, comp))))
    assert res.num_tokens == len(logs)
    assert res.perplexity == pytest.approx(math.exp(-np.mean(logs)), rel=1e-5)
    # with_index recomputes the levels from the index it is given
    again = with_index(res.scores, tiny_tok, DOCS, mixing_index)
    np.testing.assert_allclose(again.level_prob, res.scores.level_prob)
    np.testing.assert_array_equal(again.level_count, res.scores.level_count)


@pytest.mark.parametrize("levels_by", ["one C step", "C levels", "query + cache"])
@pytest.mark.parametrize("features", [list(DEFAULT_FEATURES) + ["neural_entropy"], list(DEFAULT_FEATURES)],
                         ids=["numpy weights", "C weights"])
def test_processor_with_orders_equals_brute_force(features, levels_by, tiny_model, tiny_tok, mixing_index, tmp_path):
    """Both weight paths (numpy; the C call for the default features), every level path (the
    whole step in one C call, `mix_step`, for the default features; a local
    index's levels in one C call, `suffix_probs_batch`; the batched query other indexes answer,
    kept by suffix), twice over the same rows: the second call of the cached path hits its cache."""
    model = random_orders_model(features, DEFAULT_LEVELS, seed=6)
    model.save(tmp_path / "m.json")
    proc = InfiniGramLogitsProcessor(mixing_index, tokenizer=tiny_tok, mixing=tmp_path / "m.json")
    fused = levels_by == "one C step" and features == list(DEFAULT_FEATURES)
    proc._fused = levels_by == "one C step" and proc._fused  # (numpy weights: the C step does not apply)
    if levels_by == "query + cache":  # what a served, routed or difference index gets
        from infinigram_hf.hf.level_cache import LevelDistributions
        proc._levels = LevelDistributions(proc._level_probs, max_items=64)
    ref = Reference([tiny_tok.encode(t) for t in SMALL_CORPUS], mixing_index.vocab_size)
    prompts = [tiny_tok.encode(SMALL_CORPUS[0][100:160]), tiny_tok.encode("zebra quux"),
               tiny_tok.encode(SMALL_CORPUS[1][:40]), tiny_tok.encode("x")]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # left padding (pad = EOS = 0)
    scores = torch.from_numpy(np.random.default_rng(7).normal(size=(len(prompts), tiny_model.config.vocab_size))).float()
    scores[0, 5] = -float("inf")  # forbidden by an earlier processor: stays so
    got = proc(ids, scores.clone()).double().numpy()
    hits = proc._levels.stats["hits"]
    np.testing.assert_array_equal(proc(ids, scores.clone()).double().numpy(), got)
    assert (proc._levels.stats["hits"] > hits) == (levels_by == "query + cache")
    assert (proc._levels.stats["queried"] == 0) == fused  # (the one C step asks nothing of LevelDistributions)
    logp = torch.log_softmax(scores.double(), -1).numpy()
    vocab = logp.shape[1]

    def dense(dist):  # {index token: count} -> the model's ids, end-of-document as EOS (id 0)
        p = np.zeros(vocab)
        total = sum(dist.values())
        for t, c in dist.items():
            p[0 if t == mixing_index.separator_id else t] += c / total
        return p

    for r, p in enumerate(prompts):
        w, lev = brute_weights(model, ref, p, logp[r].astype(np.float32).astype(np.float64))
        mix = w[0] * np.exp(logp[r]) + w[1] * dense(ref.infgram_ntd(p)[0])
        for j, v in enumerate(lev):
            if v:
                mix += w[2 + j] * dense(v[1])
        with np.errstate(divide="ignore"):
            want = np.log(mix)
        np.testing.assert_allclose(got[r], want, rtol=1e-4, atol=1e-4)
        assert np.exp(got[r]).sum() == pytest.approx(1.0, abs=1e-4)
    assert got[0, 5] == -np.inf


@pytest.mark.parametrize("kind", ["two λs", "two λs, λ = 1", "two-way learned", "levels"])
@pytest.mark.parametrize("eos", [0, 7, None], ids=["eos 0", "eos a real token", "no eos"])
@pytest.mark.parametrize("min_n", [1, 4])
def test_one_c_step_equals_the_numpy_path(kind, eos, min_n, tiny_tok, mixing_index):
    """mix_step (ig_mix_step_f32) gives what the numpy path gives for every mixture it does,
    whatever the EOS handling (moved to EOS, merged with a real token's entry, or dropped and
    renormalized) and min_effective_n; random contexts, some in the corpus, some not, some after
    padding."""
    from test_learned_mixing import random_model

    rng = np.random.default_rng(min_n)
    model = {"two λs": None, "two λs, λ = 1": None, "two-way learned": random_model(list(DEFAULT_FEATURES), seed=2),
             "levels": random_orders_model(list(DEFAULT_FEATURES), ("L-1", "L/2", "1", "2"), seed=3)}[kind]
    lambdas = (1.0, 1.0) if kind == "two λs, λ = 1" else (0.6, 0.3)
    text = tiny_tok.encode(SMALL_CORPUS[1])
    rows = [text[s:s + 24] for s in rng.integers(0, len(text) - 24, size=5)]
    rows += [list(rng.integers(0, mixing_index.vocab_size, 24)), [0] * 20 + text[:4]]
    ids = torch.tensor(np.array(rows))
    scores = torch.from_numpy(rng.normal(size=(len(rows), mixing_index.vocab_size + 3)) * 2).float()
    outs = []
    for fused in (True, False):
        proc = InfiniGramLogitsProcessor(mixing_index, *lambdas, mixing=model, min_effective_n=min_n, pad_token_id=0)
        proc.eos_token_id = eos
        proc._fused = fused
        outs.append(proc(ids, scores.clone()).double().numpy())
        assert (proc._levels.stats["queried"] == 0) == (fused or kind != "levels")
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.exp(outs[0]).sum(-1), 1.0, atol=1e-5)


def test_one_c_step_refuses_bad_arguments_and_writes_nothing(mixing_index):
    """ig_mix_step_f32 called directly with what the package never passes: unknown level rules,
    more than 64 levels, levels without an index, λs outside [0, 1], decreasing offsets, a level's
    suffix holding an id outside the vocabulary, an EOS id outside the rows: a clear IG_ERR_ARG
    and the rows untouched."""
    from infinigram_hf._core.native import ffi, lib
    from infinigram_hf.hf.mixing import HostMixing, _c_distributions

    host = HostMixing(random_orders_model(list(DEFAULT_FEATURES), ("1",), seed=1))
    vocab = mixing_index.vocab_size
    d = mixing_index.infgram_ntd_batch([[5, 6, 7]])
    d.suffix_len[:] = 3  # as if the three ids matched, so that level "1" asks for the last one

    def call(rows, rules=(1,), offsets=None, eos=0, lambdas=(0.5, 0.5), net=True, index=True):
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        rules = np.asarray(rules, dtype=np.int64)
        logp = np.full((1, vocab + 1), -3.0, dtype=np.float32)
        c = _c_distributions(d, 1)
        if offsets is not None:
            c[0] = ffi.cast("int64_t *", offsets.ctypes.data)
        tokens = np.ascontiguousarray(d.token_ids, dtype=np.uint32)
        err = ffi.new("char[256]")
        with mixing_index.native_handle() as ix:
            rc = lib.ig_mix_step_f32(ix if index else ffi.NULL, host._net[0] if net else ffi.NULL, *lambdas,
                                     ffi.cast("int64_t *", rows.ctypes.data), 1, rows.shape[1], c[0],
                                     ffi.cast("uint32_t *", tokens.ctypes.data), *c[1:], 1, len(rules),
                                     ffi.cast("int64_t *", rules.ctypes.data), mixing_index.separator_id, eos,
                                     ffi.cast("float *", logp.ctypes.data), vocab + 1, err, 256)
        return rc, ffi.string(err).decode(), (logp == -3.0).all()

    assert call([[5, 6, 7]])[0] == lib.IG_OK
    assert call([[5, 6, 7]], rules=(), net=False, lambdas=(1.0, 0.0))[0] == lib.IG_OK  # the two λs
    for args, message in [(dict(rows=[[5, 6, 7]], rules=(0,)), "rule"),
                          (dict(rows=[[5, 6, 7]], rules=(1,) * 65), "64 levels"),
                          (dict(rows=[[5, 6, 7]], index=False), "levels need"),
                          (dict(rows=[[5, 6, 7]], rules=(), net=False, lambdas=(1.5, 0.2)), "[0, 1]"),
                          (dict(rows=[[5, 6, 7]], rules=(), net=False, lambdas=(float("nan"), 0.2)), "[0, 1]"),
                          (dict(rows=[[5, 6, 7]], offsets=np.array([5, 0], dtype=np.int64)), "offsets"),
                          (dict(rows=[[5, 6, vocab + 4]]), "outside the vocabulary"),
                          (dict(rows=[[5, 6, 7]], eos=vocab + 9), "eos")]:
        rc, err, untouched = call(**args)
        assert rc == lib.IG_ERR_ARG and message in err and untouched, (args, err)


@pytest.mark.parametrize("seed", range(3))
def test_orders_mixture_is_a_proper_distribution(seed, tiny_tok, mixing_index):
    """Whatever the weights, every processed row sums to 1 (random models, random contexts)."""
    rng = np.random.default_rng(seed)
    model = random_orders_model(list(DEFAULT_FEATURES), ("L-1", "1", "3"), seed=seed, hidden=(4, 3))
    proc = InfiniGramLogitsProcessor(mixing_index, tokenizer=tiny_tok, mixing=model)
    text = tiny_tok.encode(SMALL_CORPUS[0])
    ids = torch.tensor(np.stack([text[s:s + 30] for s in rng.integers(0, len(text) - 30, size=6)]))
    vocab = mixing_index.vocab_size + 12
    out = proc(ids, torch.from_numpy(rng.normal(size=(6, vocab)) * 3).float())
    np.testing.assert_allclose(out.double().exp().sum(-1).numpy(), 1.0, atol=1e-5)


def planted_levels(n: int, seed: int) -> TokenScores:
    """Tokens whose best predictor is the bigram level when the ∞-gram context is long and rare
    (its estimate overfits), the ∞-gram otherwise."""
    rng = np.random.default_rng(seed)
    eff = rng.integers(1, 40, n)
    count = rng.integers(1, 200, n).astype(float)
    overfit = (eff > 10) & (count < 20)
    p_nn = np.full(n, 0.05)
    p_inf = np.where(overfit, 0.01, 0.6)
    p_bigram = np.where(overfit, 0.5, 0.02)
    level_count = np.stack([np.where(eff > 2, count * 2, 0), np.where(eff > 1, count * 50, 0)], axis=1)
    level_prob = np.stack([np.full(n, 0.05), np.where(eff > 1, p_bigram, 0)], axis=1)
    return TokenScores.from_arrays(np.log(p_nn), p_inf, rng.random(n) < 0.3, eff, context_count=count,
                                   num_distinct=rng.integers(1, 9, n), top_infgram_prob=rng.random(n),
                                   level_names=("L-1", "1"), level_prob=level_prob, level_count=level_count)


def test_fit_with_levels_beats_two_way_mixing():
    torch.manual_seed(0)
    s = planted_levels(8000, 0)
    two_way = fit_mixing(s, max_iter=100)
    orders = fit_mixing(s, levels=("L-1", "1"), max_iter=100)
    assert orders.model.levels == ("L-1", "1")
    assert orders.result.perplexity < 0.9 * two_way.result.perplexity
    w = orders.model.weights(s)
    np.testing.assert_allclose(w.sum(1), 1.0)
    no_level = s.level_count == 0
    assert (w[:, 2:][no_level] == 0).all()  # a level that does not exist gets no weight
    with pytest.raises(ValueError, match="lack the levels"):
        fit_mixing(s, levels=("L/2",))


def test_orders_files_and_scores_round_trip(tmp_path):
    model = random_orders_model(["sparse", "log_effective_n"], ("L-1", "1"), seed=3, hidden=(3,))
    model.save(tmp_path / "m.json")
    d = json.loads((tmp_path / "m.json").read_text())
    assert d["version"] == 2 and d["levels"] == ["L-1", "1"]
    back = MixingModel.load(tmp_path / "m.json")
    s = planted_levels(300, 1)
    np.testing.assert_array_equal(back.weights(s), model.weights(s))
    assert "levels" in repr(back)
    # a two-way model keeps version 1 (readers before levels still read it)
    assert MixingModel.two_lambda(0.5, 0.2).to_dict()["version"] == 1
    (tmp_path / "bad.json").write_text(json.dumps({**d, "version": 1}))
    with pytest.raises(MixingFormatError, match="bad.json"):
        MixingModel.load(tmp_path / "bad.json")
    (tmp_path / "bad2.json").write_text(json.dumps({**d, "levels": ["L-7"]}))
    with pytest.raises(MixingFormatError, match="bad2.json"):
        MixingModel.load(tmp_path / "bad2.json")
    # scores keep their levels through save/load, select and concat
    s.save(tmp_path / "s.npz")
    t = TokenScores.load(tmp_path / "s.npz")
    assert t.level_names == s.level_names
    np.testing.assert_array_equal(t.level_prob, s.level_prob)
    part = t.select(np.arange(10))
    assert part.level_prob.shape == (10, 2)
    assert len(part.concat(part).level_count) == 20
    assert interpolate(s, mixing=model).perplexity == pytest.approx(interpolate(t, mixing=back).perplexity)
    with pytest.raises(ValueError, match="level_prob"):
        TokenScores.from_arrays([0.0], [0.5], [True], [2], level_names=("1",), level_prob=[[0.1, 0.2]],
                                level_count=[[1.0, 2.0]])


def test_token_scores_levels_are_opt_in(tiny_model, tiny_tok, mixing_index):
    plain = token_scores(tiny_model, tiny_tok, DOCS[:1], mixing_index, progress=False)
    assert plain.level_names == () and plain.level_prob is None
    with pytest.raises(ValueError, match="lack the levels"):
        interpolate(plain, mixing=random_orders_model(["sparse"], ("1",)))
    s = token_scores(tiny_model, tiny_tok, DOCS[:1], mixing_index, progress=False, levels=["1"])
    assert s.level_names == ("1",) and s.level_prob.shape == (len(s), 1)


@pytest.mark.parametrize("seed", range(3))
def test_native_weights_equal_the_numpy_ones(seed):
    """HostMixing.native_weights (one C call over the rows' distributions and the levels' counts)
    gives MixingModel.weights_from_inputs over the features written out by brute force: empty and
    single-token rows, inactive rows, levels that do not exist, one or two hidden layers."""
    from infinigram_hf.hf.mixing import HostMixing, host_features
    from infinigram_hf.lm.learned_mixing import level_inputs
    from mixing_rows import random_rows

    rng = np.random.default_rng(seed)
    d, host, active = random_rows(rng)
    n = len(active)
    for levels, hidden in ((DEFAULT_LEVELS, (5,)), (("1",), (4, 3))):
        model = random_orders_model(list(DEFAULT_FEATURES), levels, seed=seed, hidden=hidden)
        level_count = rng.integers(0, 500, (n, len(levels))) * (rng.random((n, len(levels))) < 0.7)
        x = np.concatenate([host_features(model.features, host, None), level_inputs(level_count)], axis=1)
        want = model.weights_from_inputs(x, active, level_count > 0)
        got = HostMixing(model).native_weights(d, level_count, active)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-12)
        assert (got[~active, 0] == 1).all()
        assert (got[:, 2:][level_count == 0] == 0).all()
    other = random_orders_model(list(DEFAULT_FEATURES) + ["neural_entropy"], ("1",), seed=seed)
    assert HostMixing(other).native_weights(d, np.zeros((n, 1)), active) is None


def test_level_distributions_cache_by_suffix():
    """LevelDistributions: hits give what a fresh query gives, one batched query per call for the
    missing suffixes only, and the caps (suffixes, entries; 0 = none kept) hold."""
    from infinigram_hf.hf.level_cache import LevelDistributions

    dists = {(): {1: 3, 2: 1}, (5,): {7: 2}, (5, 6): {9: 1}, (6,): {1: 1, 3: 1, 4: 2}}
    calls = []

    def probs(rows, which, lengths):
        calls.append(len(which))
        d = [dists[tuple(rows[r, rows.shape[1] - m:].tolist())] for r, m in zip(which, lengths)]
        item = np.concatenate([[i] * len(x) for i, x in enumerate(d)] or [[]]).astype(np.int64)
        t = np.concatenate([list(x) for x in d] or [[]]).astype(np.int64)
        total = np.array([sum(x.values()) for x in d], dtype=np.float64)
        p = np.concatenate([list(x.values()) for x in d] or [[]]).astype(np.float64) / total[item]
        return item, t, p, total

    rows = np.array([[4, 5, 6], [3, 6, 5], [0, 5, 6]])
    cache = LevelDistributions(probs, max_items=8)
    for _ in range(2):
        i, t, p, count = cache.gather(rows, np.array([0, 1, 2]), np.array([1, 1, 2]))
        assert i.tolist() == [0, 0, 0, 1, 2] and t.tolist() == [1, 3, 4, 7, 9]
        np.testing.assert_allclose(p, [0.25, 0.25, 0.5, 1.0, 1.0])
        assert count.tolist() == [4.0, 2.0, 1.0]
    assert calls == [3] and cache.stats == {"hits": 3, "queried": 3}
    i, t, p, count = cache.gather(rows, np.array([2, 0]), np.array([0, 1]))  # the unigram: one query, one row
    assert calls == [3, 1] and i.tolist() == [0, 0, 1, 1, 1] and count.tolist() == [4.0, 4.0]
    small = LevelDistributions(probs, max_items=8, max_entries=3)
    small.gather(rows, np.array([0, 1]), np.array([1, 1]))  # 3 + 1 entries: the first is dropped
    assert len(small._items) == 1 and small._held == 1
    none = LevelDistributions(probs, max_items=0)  # (a local index: every call queries)
    for _ in range(2):
        i, t, p, count = none.gather(rows, np.array([2, 0]), np.array([2, 1]))
        assert i.tolist() == [0, 1, 1, 1] and t.tolist() == [9, 1, 3, 4] and count.tolist() == [1.0, 4.0]
    assert calls[-2:] == [2, 2] and none.stats == {"hits": 0, "queried": 4} and not none._items
