"""mix_sparse (the processor's mixture, infinigram_hf/hf/mixing.py) against a dense float64
computation of log((1-λ)·softmax + λ·P_∞): rows with λ = 0 (untouched), λ = 1, entries on
forbidden (-inf) tokens, and a batch without entries; both of its paths (the C call for float32
CPU rows, torch ops for the others)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from infinigram_hf.hf.mixing import mix_sparse


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # the C path, the torch path
@pytest.mark.parametrize("seed", range(5))
def test_mix_sparse_matches_dense_mixture(seed, dtype):
    rng = np.random.default_rng(seed)
    n, v = 7, 50
    scores = rng.normal(size=(n, v)) * 3
    scores[0, 3] = -np.inf  # forbidden by an earlier processor
    logp = torch.log_softmax(torch.from_numpy(scores).to(dtype), dim=-1)
    lam = rng.choice([0.0, 0.3, 0.9, 1.0], size=n)
    p_inf = np.zeros((n, v))
    rows, toks = [], []
    for r in range(n):
        support = rng.choice(v, size=int(rng.integers(0, 6)), replace=False)
        if r == 0:
            support = np.union1d(support, [3])
        w = rng.random(len(support)) + 0.1
        p_inf[r, support] = w / w.sum()
        rows += [r] * len(support)
        toks += support.tolist()
    row_of, tok = np.array(rows, dtype=np.int64), np.array(toks, dtype=np.int64)
    lam = np.where(p_inf.sum(axis=1) > 0, lam, 0.0)
    with np.errstate(divide="ignore"):
        logv = np.log(lam[row_of]) + np.log(p_inf[row_of, tok])
    got = mix_sparse(logp.clone(), row_of, tok, logv, lam).double().numpy()
    p_nn = np.exp(logp.double().numpy())
    with np.errstate(divide="ignore"):
        want = np.log((1 - lam)[:, None] * p_nn + lam[:, None] * p_inf)
    want[0, 3] = -np.inf
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    fin = ~np.isneginf(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5)
    untouched = lam == 0
    assert torch.equal(torch.from_numpy(got[untouched]).to(dtype), logp[torch.from_numpy(untouched)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mix_sparse_without_entries_only_shifts(dtype):
    logp = torch.log_softmax(torch.randn(3, 10, generator=torch.Generator().manual_seed(1), dtype=dtype), dim=-1)
    lam = np.array([0.5, 0.0, 0.2])
    got = mix_sparse(logp.clone(), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), lam)
    torch.testing.assert_close(got, logp + torch.from_numpy(np.log1p(-lam)).to(dtype)[:, None])


def test_mix_sparse_c_and_torch_paths_agree_and_bad_entries_are_refused():
    """The C path equals the torch one on the same float32 rows (to float32 rounding), and an
    entry outside the rows is refused before anything is written."""
    from infinigram_hf.hf.mixing import _mix_sparse_torch

    rng = np.random.default_rng(3)
    logp = torch.log_softmax(torch.from_numpy(rng.normal(size=(4, 300)) * 4).float(), dim=-1)
    row_of = np.repeat(np.arange(4), 50)
    tok = np.concatenate([rng.choice(300, 50, replace=False) for _ in range(4)])
    logv = np.log(rng.random(200) * 0.01)
    lam = np.array([0.3, 0.0, 1.0, 0.75])
    with np.errstate(divide="ignore"):
        shift = np.log1p(-lam)
    torch.testing.assert_close(mix_sparse(logp.clone(), row_of, tok, logv, lam),
                               _mix_sparse_torch(logp.clone(), row_of, tok, logv, shift), rtol=1e-6, atol=1e-6)
    before = logp.clone()
    with pytest.raises(ValueError, match="outside"):
        mix_sparse(logp, np.array([0, 4]), np.array([1, 2]), np.zeros(2), lam)
    with pytest.raises(ValueError, match="outside"):
        mix_sparse(logp, np.array([0]), np.array([300]), np.zeros(1), lam)
    assert torch.equal(logp, before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_neural_entropy_and_top_with_masked_tokens(dtype):
    """The neural features of rows with tokens masked to -inf (by an earlier processor): a masked
    token adds 0 to the entropy (not nan), and a row with one token left has entropy 0."""
    from infinigram_hf.hf.mixing import neural_entropy, neural_top_logprob

    logits = torch.tensor([[1.0, 2.0, float("-inf"), 0.5], [float("-inf"), 3.0, float("-inf"), float("-inf")]],
                          dtype=dtype)
    logp = torch.log_softmax(logits, dim=-1)
    p = torch.softmax(logits[0, [0, 1, 3]].double(), dim=-1)
    want = float(-(p * p.log()).sum())
    got = neural_entropy(logp)
    assert torch.isfinite(got).all()
    assert got[0].item() == pytest.approx(want, rel=1e-6) and got[1].item() == 0.0
    assert neural_top_logprob(logp).tolist() == pytest.approx([float(p.max().log()), 0.0], abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # the C path, bincount + mix_sparse
def test_mix_sum_adds_repeated_cells_and_matches_dense_mixture(dtype):
    """mix_sum (the several-orders mixture) against a dense float64 log(w·p_nn + Σ masses): entries
    repeating a cell add up, a row with the model's weight 1 and no entries stays as it was,
    weight 0 leaves only the components' mass, a forbidden token stays -inf; bad entries are
    refused before anything is written."""
    from infinigram_hf.hf.mixing import mix_sum

    rng = np.random.default_rng(5)
    n, v = 5, 40
    scores = rng.normal(size=(n, v)) * 3
    scores[1, 7] = -np.inf
    logp = torch.log_softmax(torch.from_numpy(scores).to(dtype), dim=-1)
    w_model = np.array([0.6, 0.3, 1.0, 0.0, 0.9])
    rows, toks, vals = [], [], []
    for r in (0, 1, 3, 4):
        for comp in range(3):  # three components over overlapping supports
            support = rng.choice(12, size=4, replace=False)
            rows += [r] * 4
            toks += support.tolist()
            vals += (rng.random(4) * (1 - w_model[r]) / 12).tolist()
    rows += [1]
    toks += [7]
    vals += [0.01]
    rows, toks, vals = np.array(rows), np.array(toks), np.array(vals)
    mass = np.zeros((n, v))
    np.add.at(mass, (rows, toks), vals)
    got = mix_sum(logp.clone(), rows, toks, vals, w_model).double().numpy()
    with np.errstate(divide="ignore"):
        want = np.log(w_model[:, None] * np.exp(logp.double().numpy()) + mass)
    want[1, 7] = -np.inf
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    fin = ~np.isneginf(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5)
    assert torch.equal(torch.from_numpy(got[2]).to(dtype), logp[2])
    if dtype == torch.float32:
        before = logp.clone()
        with pytest.raises(ValueError, match="outside"):
            mix_sum(logp, np.array([0, 5]), np.array([1, 2]), np.ones(2) * 0.1, w_model)
        with pytest.raises(ValueError, match="negative"):
            mix_sum(logp, np.array([0]), np.array([1]), np.array([-0.1]), w_model)
        assert torch.equal(logp, before)
