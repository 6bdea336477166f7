"""Learned per-token mixing (issue 20): fitting recovers a planted dependence and reduces to the
two λs on the sparse feature alone; λ gives a proper distribution; files round-trip and bad ones
are refused by name; perplexity(mixing=) and the processor with mixing= equal a brute-force
computation from the brute-force ∞-gram (conftest.Reference) and the model's own softmax."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from conftest import Reference
from hf_tiny import MIXING_CORPUS as SMALL_CORPUS, MIXING_DOCS as DOCS, TEXTS, mixing_index, scored_positions, tiny_index, tiny_model, tiny_tok  # noqa: F401
from infinigram_hf import InfiniGramLogitsProcessor, MixingModel, fit_mixing
from infinigram_hf.build import build_index
from infinigram_hf.hf.mixing import HOST_COLUMNS, DeviceMixing, feature_columns, mix_sparse_learned
from infinigram_hf.hf.perplexity import perplexity, token_scores, with_index
from infinigram_hf.lm.learned_mixing import FEATURES, MixingFormatError, feature_matrix
from infinigram_hf.lm.mixture import TokenScores, interpolate, tune_lambdas



def planted(n: int, seed: int) -> tuple[TokenScores, np.ndarray]:
    """Tokens drawn from a mixture whose true λ depends on effective n: λ = σ(2·ln n − 4)."""
    rng = np.random.default_rng(seed)
    eff = rng.integers(1, 200, n)
    lam = 1 / (1 + np.exp(-(2 * np.log(eff) - 4)))
    from_inf = rng.random(n) < lam
    # only the source component gives the token mass (1e-12 for the neural one otherwise): the
    # maximum-likelihood λ of a set of tokens is then exactly its share drawn from P_∞
    p_inf = np.where(from_inf, 0.8, 0.0)
    p_nn = np.where(from_inf, 1e-12, 0.8)
    s = TokenScores.from_arrays(np.log(p_nn), p_inf, rng.random(n) < 0.3, eff, context_count=rng.integers(1, 50, n),
                                num_distinct=rng.integers(1, 9, n), top_infgram_prob=rng.random(n),
                                neural_entropy=rng.random(n) * 5, neural_top_logprob=-rng.random(n))
    return s, lam


def random_model(features, seed=0, hidden=(5,)) -> MixingModel:
    rng = np.random.default_rng(seed)
    k, layers, width = len(features), [], len(features)
    for h in hidden + (1,):
        layers.append((rng.normal(size=(h, width)), rng.normal(size=h)))
        width = h
    return MixingModel("mlp", tuple(features), rng.normal(size=k), rng.random(k) + 0.5, layers)


def test_fit_recovers_a_planted_dependence_on_effective_n():
    torch.manual_seed(0)
    s, lam = planted(20_000, 0)
    fit = fit_mixing(s, family="logistic", features=("log_effective_n",))
    got = fit.model.lambdas(s)
    assert np.abs(got - lam).max() < 0.06
    w, b = fit.model.layers[0]
    slope = w[0, 0] / fit.model.std[0]  # in units of ln n
    assert slope == pytest.approx(2.0, rel=0.1)
    # the MLP finds it too, and both beat the best two λs (which cannot see n)
    mlp = fit_mixing(s, family="mlp", features=("log_effective_n", "sparse"), hidden=3, max_iter=60)
    assert np.abs(mlp.model.lambdas(s) - lam).mean() < 0.05
    assert fit.result.perplexity < tune_lambdas(s).result.perplexity
    assert mlp.result.perplexity < tune_lambdas(s).result.perplexity


def test_sparse_only_logistic_reduces_to_the_two_lambdas():
    s, _ = planted(20_000, 1)
    two = tune_lambdas(s)
    fit = fit_mixing(s, family="logistic", features=("sparse",))
    lam = fit.model.lambdas(s)
    assert lam[s.sparse] == pytest.approx(two.lambda_sparse, abs=1e-4)
    assert lam[~s.sparse] == pytest.approx(two.lambda_dense, abs=1e-4)
    assert fit.result.perplexity == pytest.approx(two.result.perplexity, rel=1e-7)
    # and the two λs written as a mixing model give exactly interpolate()'s numbers
    as_model = MixingModel.two_lambda(0.7, 0.2)
    assert interpolate(s, mixing=as_model).perplexity == pytest.approx(interpolate(s, 0.7, 0.2).perplexity,
                                                                       rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_mixture_is_a_proper_distribution(seed):
    """Whatever the weights, λ lies in [0, 1] and depends on the context only, so
    λ·P_∞ + (1 − λ)·P_nn sums to 1 over the vocabulary, on every row."""
    rng = np.random.default_rng(seed)
    model = random_model(list(FEATURES), seed)
    n, v = 6, 40
    logp = torch.log_softmax(torch.from_numpy(rng.normal(size=(n, v)) * 4), dim=-1).float()
    p_inf = rng.random((n, v)) * (rng.random((n, v)) < 0.3)
    p_inf[1] = 0
    p_inf[2, 5] = 1.0
    total = p_inf.sum(1, keepdims=True)
    p_inf = np.divide(p_inf, total, out=np.zeros_like(p_inf), where=total > 0)
    row_of, tok = np.nonzero(p_inf)
    top_token = np.where(p_inf.sum(1) > 0, p_inf.argmax(1), -1)
    host = np.stack([rng.integers(1, 50, n), p_inf.astype(bool).sum(1) == 1, rng.integers(1, 1000, n),
                     p_inf.astype(bool).sum(1), p_inf.max(1), top_token], axis=1).astype(np.float64)
    active = p_inf.sum(1) > 0
    out = mix_sparse_learned(logp.clone(), row_of, tok, np.log(p_inf[row_of, tok]), host, active,
                             DeviceMixing(model))
    sums = out.double().exp().sum(-1).numpy()
    np.testing.assert_allclose(sums, 1.0, atol=1e-5)
    assert torch.equal(out[1], logp[1])  # no estimate: untouched


def test_torch_features_equal_the_numpy_ones():
    """The processor's features (torch, and numpy for CPU scores) equal the ones token_scores
    records, computed here directly from a dense P_∞."""
    from infinigram_hf.hf.mixing import learned_lambdas_host

    rng = np.random.default_rng(3)
    n, v = 9, 30
    logp = torch.log_softmax(torch.from_numpy(rng.normal(size=(n, v)) * 3), dim=-1)
    p_inf = rng.random((n, v)) * (rng.random((n, v)) < 0.3)
    p_inf[4] = 0  # a row without an estimate
    p_inf = p_inf / np.maximum(p_inf.sum(1, keepdims=True), 1e-300)
    row_of, tok = np.nonzero(p_inf)
    lpi = np.log(p_inf[row_of, tok])
    has = p_inf.sum(1) > 0
    top_token = np.where(has, p_inf.argmax(1), -1)
    host = np.stack([rng.integers(0, 40, n), rng.random(n) < 0.5, rng.integers(0, 99, n), rng.integers(0, 9, n),
                     rng.random(n), top_token], axis=1).astype(np.float64)
    lp = logp.numpy()
    agree = np.where(has, np.log(np.maximum((p_inf * np.exp(lp)).sum(1), 1e-300)), 0.0)
    at_top = np.where(has, lp[np.arange(n), np.maximum(top_token, 0)], 0.0)
    s = TokenScores.from_arrays(np.zeros(n), np.zeros(n), host[:, 1].astype(bool), host[:, 0].astype(np.int64),
                                context_count=host[:, 2], num_distinct=host[:, 3], top_infgram_prob=host[:, 4],
                                neural_entropy=-(logp.exp() * logp).sum(-1).numpy(),
                                neural_top_logprob=logp.max(-1).values.numpy(),
                                neural_infgram_agreement=agree, neural_logprob_infgram_top=at_top)
    entries = (torch.from_numpy(row_of), torch.from_numpy(tok), torch.from_numpy(lpi))
    got = feature_columns(list(FEATURES), torch.from_numpy(host), logp, entries).numpy()
    want = feature_matrix(s, list(FEATURES))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    model = random_model(list(FEATURES), seed=3)
    lam_host = learned_lambdas_host(model, host, np.ones(n, bool), logp, (row_of, tok, lpi))
    np.testing.assert_allclose(lam_host, model.lambdas(s), rtol=1e-9, atol=1e-12)
    assert HOST_COLUMNS[-1] == "top_token" and len(HOST_COLUMNS) == 6


def test_save_load_round_trip(tmp_path):
    model = random_model(["sparse", "log_effective_n", "neural_entropy"], seed=4, hidden=(3, 2))
    model.info["note"] = "test"
    path = tmp_path / "mixing.json"
    model.save(path)
    back = MixingModel.load(path)
    assert back.features == model.features and back.family == "mlp" and back.info["note"] == "test"
    s, _ = planted(500, 2)
    np.testing.assert_array_equal(back.lambdas(s), model.lambdas(s))
    assert MixingModel.from_dict(model.to_dict()).features == model.features


def test_bad_files_are_refused_by_name(tmp_path):
    good = random_model(["sparse"]).to_dict()
    cases = {
        "notjson.json": "not json {",
        "otherformat.json": json.dumps({"format": "something-else"}),
        "newer.json": json.dumps({**good, "version": 99}),
        "unknownfeature.json": json.dumps({**good, "features": ["moon_phase"]}),
        "badshape.json": json.dumps({**good, "layers": [{"weight": [[1.0, 2.0]], "bias": [0.0]}]}),
        "nolayers.json": json.dumps({k: v for k, v in good.items() if k != "layers"}),
    }
    for name, text in cases.items():
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(MixingFormatError, match=name):
            MixingModel.load(p)
    with pytest.raises(ValueError, match="mixing must be"):  # (the processor and perplexity() use as_mixing)
        from infinigram_hf.lm.learned_mixing import as_mixing
        as_mixing(3)
    with pytest.raises(ValueError, match="features"):
        fit_mixing(planted(100, 0)[0], features=("nope",))
    lacking = TokenScores.from_arrays([-1.0], [0.5], [False], [3])
    with pytest.raises(ValueError, match="neural_entropy"):
        interpolate(lacking, mixing=random_model(["neural_entropy"]))


def brute_features(ref: Reference, ctx: list, logp_row: np.ndarray, eos: int, separator: int) -> dict:
    dist, k = ref.infgram_ntd(ctx)
    total = sum(dist.values())
    agree, at_top = brute_agreement(ref, ctx, logp_row, eos, separator)
    return dict(effective_n=k + 1, sparse=float(len(dist) == 1), context_count=total, num_distinct=len(dist),
                top_infgram_prob=max(dist.values()) / total if total else 0.0,
                neural_entropy=float(-(np.exp(logp_row) * logp_row).sum()), neural_top_logprob=float(logp_row.max()),
                neural_infgram_agreement=agree, neural_logprob_infgram_top=at_top)


def lam_of(model: MixingModel, f: dict) -> float:
    s = TokenScores.from_arrays([0.0], [0.0], [bool(f["sparse"])], [f["effective_n"]],
                                **{k: [v] for k, v in f.items() if k not in ("sparse", "effective_n")})
    return float(model.lambdas(s)[0])


def test_perplexity_with_mixing_equals_brute_force(tiny_model, tiny_tok, mixing_index):
    window = 512
    model = random_model(list(FEATURES), seed=5)
    res = perplexity(tiny_model, tiny_tok, DOCS, mixing_index, mixing=model, progress=False)
    ref = Reference([tiny_tok.encode(t) for t in SMALL_CORPUS], mixing_index.vocab_size)
    logs = []
    for ctx, y, lp in scored_positions(tiny_model, tiny_tok, DOCS, window):
        lam = lam_of(model, brute_features(ref, ctx, lp, tiny_tok.bos_token_id, mixing_index.separator_id))
        p = ref.infgram_prob(ctx, y).prob
        logs.append(math.log(lam * p + (1 - lam) * math.exp(lp[y])))
    assert res.num_tokens == len(logs)
    assert res.perplexity == pytest.approx(math.exp(-np.mean(logs)), rel=1e-5)
    assert res.mixing is model and "learned" in res.summary()
    # the features follow the index in with_index (datastore ablations)
    # (not the agreement ones: they compare the model with the old index, and are dropped)
    again = with_index(res.scores, tiny_tok, DOCS, mixing_index)
    assert again.neural_infgram_agreement is None and again.neural_logprob_infgram_top is None
    for name, v in res.scores.features().items():
        if name not in ("neural_infgram_agreement", "neural_logprob_infgram_top"):
            np.testing.assert_allclose(getattr(again, name), v, err_msg=name)


@pytest.mark.parametrize("fused", [True, False], ids=["one C step", "numpy path"])
@pytest.mark.parametrize("features", ["all", "default"])  # numpy features; the C calls (ig_mixing_lambdas, ig_mix_step_f32)
def test_processor_with_mixing_equals_brute_force(tiny_model, tiny_tok, mixing_index, tmp_path, features, fused):
    from infinigram_hf.lm.learned_mixing import DEFAULT_FEATURES

    model = random_model(list(FEATURES if features == "all" else DEFAULT_FEATURES), seed=6)
    path = tmp_path / "m.json"
    model.save(path)
    proc = InfiniGramLogitsProcessor(mixing_index, tokenizer=tiny_tok, mixing=path)
    assert (proc._host_mixing._net is not None) == (features == "default") == proc._fused
    proc._fused = fused and proc._fused
    ref = Reference([tiny_tok.encode(t) for t in SMALL_CORPUS], mixing_index.vocab_size)
    prompts = [tiny_tok.encode(SMALL_CORPUS[0][100:160]), tiny_tok.encode("zebra quux"),
               tiny_tok.encode(SMALL_CORPUS[1][:40])]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # left padding (pad = EOS = 0)
    scores = torch.from_numpy(np.random.default_rng(7).normal(size=(len(prompts), tiny_model.config.vocab_size))).float()
    got = proc(ids, scores.clone()).double().numpy()
    logp = torch.log_softmax(scores.double(), -1).numpy()
    for r, p in enumerate(prompts):
        f = brute_features(ref, p, logp[r].astype(np.float32).astype(np.float64), 0, mixing_index.separator_id)
        lam = lam_of(model, f)
        dist, _ = ref.infgram_ntd(p)
        total = sum(dist.values())
        p_inf = np.zeros(logp.shape[1])
        for t, c in dist.items():
            p_inf[0 if t == mixing_index.separator_id else t] += c / total  # end-of-document -> EOS (id 0)
        want = np.log((1 - lam) * np.exp(logp[r]) + lam * p_inf)
        np.testing.assert_allclose(got[r], want, rtol=1e-4, atol=1e-4)
        assert np.exp(got[r]).sum() == pytest.approx(1.0, abs=1e-4)


def test_token_scores_record_every_feature(tiny_model, tiny_tok, mixing_index, tmp_path):
    assert token_scores(tiny_model, tiny_tok, DOCS, mixing_index, progress=False).neural_infgram_agreement is None
    s = token_scores(tiny_model, tiny_tok, DOCS, mixing_index, progress=False, agreement=True)
    assert set(s.features()) == {"neural_entropy", "neural_top_logprob", "context_count", "num_distinct",
                                 "top_infgram_prob", "neural_infgram_agreement", "neural_logprob_infgram_top"}
    s.save(tmp_path / "s.npz")
    back = TokenScores.load(tmp_path / "s.npz")
    for name, v in s.features().items():
        np.testing.assert_array_equal(getattr(back, name), v)
    both = s.concat(back)
    assert len(both.neural_entropy) == 2 * len(s)


def brute_agreement(ref: Reference, ctx: list, logp_row: np.ndarray, eos: int, separator: int) -> tuple:
    """(ln Σ_y P_∞(y)·P_neural(y), ln P_neural(argmax P_∞)) of one context, end-of-document
    read as `eos`; the first of equal counts in token-id order, as the index lists them."""
    dist, _ = ref.infgram_ntd(ctx)
    total = sum(dist.values())
    if not total:
        return 0.0, 0.0
    model_id = lambda t: eos if t == separator else t  # noqa: E731
    agree = sum(c / total * math.exp(logp_row[model_id(t)]) for t, c in dist.items())
    top = min(dist, key=lambda t: (-dist[t], t))
    return math.log(agree), float(logp_row[model_id(top)])


def test_token_scores_agreement_features_equal_brute_force(tiny_model, tiny_tok, mixing_index):
    s = token_scores(tiny_model, tiny_tok, DOCS, mixing_index, progress=False, agreement=True)
    ref = Reference([tiny_tok.encode(t) for t in SMALL_CORPUS], mixing_index.vocab_size)
    want_a, want_t = [], []
    for text in DOCS:
        doc = tiny_tok.encode(text)
        seq = [tiny_tok.bos_token_id] + doc
        with torch.no_grad():
            lp_all = torch.log_softmax(tiny_model(torch.tensor([seq])).logits[0].double(), -1).numpy()
        for t in range(1, len(seq)):
            a, top = brute_agreement(ref, doc[: t - 1], lp_all[t - 1], tiny_tok.bos_token_id, mixing_index.separator_id)
            want_a.append(a)
            want_t.append(top)
    np.testing.assert_allclose(s.neural_infgram_agreement, want_a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.neural_logprob_infgram_top, want_t, rtol=1e-5, atol=1e-5)
    assert (s.neural_infgram_agreement <= 1e-9).all()  # a probability's log


@pytest.mark.parametrize("seed", range(4))
def test_first_max_per_row_is_the_first_of_equals(seed):
    from infinigram_hf.lm.learned_mixing import first_max_per_row

    rng = np.random.default_rng(seed)
    width = rng.integers(0, 5, 12)
    offsets = np.concatenate([[3], 3 + np.cumsum(width)])  # (rows need not start at 0)
    values = rng.integers(0, 3, int(offsets[-1]) + 2).astype(np.uint64)  # ties are common
    want = [int(offsets[i] + np.argmax(values[offsets[i]:offsets[i + 1]])) if width[i] else -1
            for i in range(len(width))]
    assert first_max_per_row(values, offsets).tolist() == want


def test_host_and_device_paths_of_the_processor_agree():
    """On CPU scores the processor computes λ in numpy (learned_lambdas_host) and mixes with the
    two-λ kernel; elsewhere on the device (mix_sparse_learned). Both give the same rows."""
    from infinigram_hf.hf.mixing import learned_lambdas_host, mix_sparse

    rng = np.random.default_rng(8)
    model = random_model(list(FEATURES), seed=8)
    n, v = 5, 60
    logp = torch.log_softmax(torch.from_numpy(rng.normal(size=(n, v)) * 3), dim=-1).float()
    p_inf = rng.random((n, v)) * (rng.random((n, v)) < 0.2)
    p_inf[3] = 0
    total = p_inf.sum(1, keepdims=True)
    p_inf = np.divide(p_inf, total, out=np.zeros_like(p_inf), where=total > 0)
    row_of, tok = np.nonzero(p_inf)
    top_token = np.where(p_inf.sum(1) > 0, p_inf.argmax(1), -1)
    host = np.stack([rng.integers(1, 50, n), rng.random(n) < 0.5, rng.integers(1, 999, n), rng.integers(1, 9, n),
                     rng.random(n), top_token], axis=1).astype(np.float64)
    active = p_inf.sum(1) > 0
    lpi = np.log(p_inf[row_of, tok])
    device = mix_sparse_learned(logp.clone(), row_of, tok, lpi, host, active, DeviceMixing(model))
    lam = learned_lambdas_host(model, host, active, logp, (row_of, tok, lpi))
    with np.errstate(divide="ignore"):
        hostp = mix_sparse(logp.clone(), row_of, tok, np.log(lam[row_of]) + lpi, lam)
    torch.testing.assert_close(hostp, device, rtol=1e-5, atol=1e-5)


def test_saved_inside_an_index_directory(tiny_index, tmp_path):
    import shutil

    d = tmp_path / "ix"
    shutil.copytree(tiny_index.paths[0], d)
    model = random_model(["sparse", "log_effective_n"], seed=9)
    model.save(d)  # a directory: its mixing.json
    assert (d / "mixing.json").is_file()
    back = MixingModel.load(d)
    assert back.to_dict() == model.to_dict()
    proc = InfiniGramLogitsProcessor(str(d), mixing=str(d))
    assert proc.mixing.features == model.features
    with pytest.raises(FileNotFoundError):
        MixingModel.load(tmp_path)  # a directory without one


@pytest.mark.parametrize("seed", range(3))
def test_prepared_host_path_equals_the_general_one(seed):
    """HostMixing prepares its folded plan (the C call's; its values: test_native_lambdas_equal_the_
    numpy_ones) exactly for models over host columns, and its host path gives the λ of
    learned_lambdas_host, for models over the default features and over others."""
    from infinigram_hf.hf.mixing import HostMixing, learned_lambdas_host
    from infinigram_hf.lm.learned_mixing import DEFAULT_FEATURES

    rng = np.random.default_rng(seed)
    n = 7
    host = np.stack([rng.integers(0, 40, n), rng.random(n) < 0.5, rng.integers(0, 99, n), rng.integers(0, 9, n),
                     rng.random(n), np.full(n, -1)], axis=1).astype(np.float64)
    active = rng.random(n) < 0.8
    logp = torch.log_softmax(torch.from_numpy(rng.normal(size=(n, 20))), dim=-1)
    for features, hidden in ((DEFAULT_FEATURES, (5,)), (("log_context_count", "sparse"), (3, 2)),
                             (("sparse", "neural_entropy"), (4,))):
        model = random_model(list(features), seed, hidden)
        want = learned_lambdas_host(model, host, active, logp)
        prepared = HostMixing(model)
        assert (prepared.plan is not None) == ("neural_entropy" not in features)
        np.testing.assert_allclose(prepared.lambdas(host, active, logp), want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", range(4))
def test_native_lambdas_equal_the_numpy_ones(seed):
    """HostMixing.native_lambdas (one C call reading the rows' distributions) gives the λ of the
    numpy path over HOST_COLUMNS written out here by brute force: empty rows, single-token rows,
    inactive rows, one to three layers."""
    from infinigram_hf.hf.mixing import HostMixing, learned_lambdas_host
    from infinigram_hf.lm.learned_mixing import DEFAULT_FEATURES
    from mixing_rows import random_rows

    d, host, active = random_rows(np.random.default_rng(seed))
    n = len(active)
    logp = torch.zeros(n, 4)
    for features, hidden in ((DEFAULT_FEATURES, (5,)), (("top_infgram_prob", "sparse"), ()),
                             (("log_num_distinct", "log_effective_n", "log_context_count"), (4, 3))):
        model = random_model(list(features), seed, hidden)
        lam = HostMixing(model).native_lambdas(d, active)
        np.testing.assert_allclose(lam, learned_lambdas_host(model, host, active, logp), rtol=1e-12, atol=1e-14)
        assert (lam[~active] == 0).all()
    assert HostMixing(random_model(["sparse", "neural_entropy"], seed)).native_lambdas(d, active) is None


def test_native_lambdas_refuse_malformed_input():
    """Bad offsets or a net whose widths do not chain are refused by the C call (an error, never
    a read out of bounds)."""
    from infinigram_hf._core.native import err_buffer, ffi, lib, ptr
    from infinigram_hf.hf.mixing import HostMixing
    from infinigram_hf.index.results import BatchNextTokenDistributions

    prepared = HostMixing(random_model(["sparse", "log_context_count"]))
    one = np.ones(2, bool)
    d = BatchNextTokenDistributions(np.array([0, 3, 2]), np.zeros(2, np.uint32), np.ones(2, np.uint64),
                                    np.ones(2, np.uint64), np.zeros(2, np.int64), one, one)
    with pytest.raises(ValueError, match="offsets decrease"):
        prepared.native_lambdas(d, one)
    past_end = BatchNextTokenDistributions(np.array([0, 1, 3]), *[getattr(d, f) for f in
                                                                 ("token_ids", "counts", "total", "suffix_len", "sparse", "approximate")])
    with pytest.raises(ValueError, match="offsets outside"):
        prepared.native_lambdas(past_end, one)
    net, (codes, widths, params) = prepared._net
    bad_widths = widths.copy()
    bad_widths[-1] = 2
    other = ffi.new("ig_mixing_net *")
    other.n_inputs, other.n_layers, other.codes, other.params = net.n_inputs, net.n_layers, net.codes, net.params
    other.widths = ptr(bad_widths, "int64_t")
    out, err = np.empty(1), err_buffer()
    z = np.zeros(2, np.int64)
    rc = lib.ig_mixing_lambdas(other, 1, ptr(z, "int64_t"), ffi.NULL, 0, ptr(z.view(np.uint64), "uint64_t"),
                               ptr(z, "int64_t"), ptr(one.view(np.uint8), "uint8_t"), ptr(one.view(np.uint8), "uint8_t"),
                               ptr(out, "double"), err, len(err))
    assert rc == lib.IG_ERR_ARG and b"widths" in ffi.string(err)
