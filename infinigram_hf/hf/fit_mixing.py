"""Fit a learned mixing model (`infinigram_hf.lm.learned_mixing`) on held-out token scores by
maximising the interpolated log-likelihood Σ ln(λ(x)·P_∞ + (1 − λ(x))·P_neural), full-batch
L-BFGS in float64 (the data are a few hundred thousand rows of a handful of features).

Fit on validation tokens, never on the text you report: the successor of `tune_lambdas`, which
it reduces to when `features=("sparse",)` and `family="logistic"` (two free values: the same
optimum). With `levels` it fits a model mixing several orders (`infinigram_hf.lm.orders`): a
softmax over the model, the ∞-gram and the n-gram estimates of shorter suffixes, maximising
Σ ln Σ_k w_k(x)·P_k.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np
import torch

from .._core.args import int_arg
from ..lm.learned_mixing import (DEFAULT_FEATURES, FAMILIES, MixingModel, check_features, feature_matrix,
                                  has_estimate, level_inputs)
from ..lm.orders import check_levels
from ..lm.mixture import PerplexityResult, TokenScores, interpolate

_LOG_TINY = -1e4  # ln P where P = 0: exp() underflows to 0 exactly, gradients stay finite


@dataclass(frozen=True)
class MixingFit:
    """A fitted mixing model and its perplexity on the tokens it was fitted on."""

    model: MixingModel
    result: PerplexityResult
    iterations: int

    def __repr__(self) -> str:
        r = self.result
        return (f"MixingFit(model={self.model!r}, perplexity={r.perplexity:.4f}, "
                f"neural_perplexity={r.neural_perplexity:.4f}, num_tokens={r.num_tokens}, iterations={self.iterations})")


def _network(k: int, family: str, hidden: Sequence[int], outputs: int = 1) -> torch.nn.Sequential:
    layers: list = []
    width = k
    for h in (hidden if family == "mlp" else ()):
        layers += [torch.nn.Linear(width, h), torch.nn.Tanh()]
        width = h
    layers.append(torch.nn.Linear(width, outputs))
    return torch.nn.Sequential(*layers).double()


def fit_mixing(scores: Union[TokenScores, PerplexityResult], *, family: str = "mlp",
               features: Sequence[str] = DEFAULT_FEATURES, hidden: Union[int, Sequence[int]] = 16,
               weight_decay: float = 1e-4, max_iter: int = 300, seed: int = 0,
               info: Optional[dict] = None, levels: Optional[Sequence[str]] = None) -> MixingFit:
    """Fit λ(features) on `scores` (from `token_scores`/`perplexity` on validation data).

    Args:
        family: "logistic" (λ = σ(w·x + b)) or "mlp" (one tanh hidden layer per `hidden` entry).
        features: names from `infinigram_hf.lm.learned_mixing.FEATURES`.
        hidden: hidden widths of the MLP.
        weight_decay: L2 penalty on the weights (not the biases), per token.
        max_iter: L-BFGS iterations.
        seed: the MLP's initial weights.
        levels: mix several orders: the shorter suffixes to mix in besides the longest match, e.g.
            `infinigram_hf.lm.orders.DEFAULT_LEVELS` ("L-1", "L/2", "1"). The scores must hold
            them (token_scores(..., levels=...)); the weights are a softmax over the components.

    Example:
        >>> fit = fit_mixing(perplexity(model, tok, val, index).scores)        # doctest: +SKIP
        >>> fit.model.save("index_dir/mixing.json")                            # doctest: +SKIP
        >>> perplexity(model, tok, test, index, mixing="index_dir/mixing.json")  # doctest: +SKIP
    """
    if isinstance(scores, PerplexityResult):
        scores = scores.scores
    if not isinstance(scores, TokenScores):
        raise ValueError(f"scores must be TokenScores or a PerplexityResult, got {type(scores).__name__}")
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    features = check_features(features)
    hidden = (hidden,) if isinstance(hidden, int) else tuple(hidden)
    hidden = tuple(int_arg("hidden", h, 1, 4096) for h in hidden)
    max_iter = int_arg("max_iter", max_iter, 1, 100_000)
    if not (isinstance(weight_decay, (int, float)) and weight_decay >= 0):
        raise ValueError(f"weight_decay must be a number >= 0, got {weight_decay!r}")
    levels = check_levels(levels) if levels else ()
    x_all = feature_matrix(scores, features)
    use = has_estimate(scores)  # tokens without an ∞-gram estimate get λ = 0 whatever the model says
    if not use.any():
        raise ValueError("no token of scores has an ∞-gram estimate to fit on")
    with np.errstate(divide="ignore"):
        log_comp = [np.log(scores.infgram_prob[use])]  # the ∞-gram side's components, ln P
    avail = None
    if levels:
        prob, count = scores.level_columns(levels)
        x_all = np.concatenate([x_all, level_inputs(count)], axis=1)
        with np.errstate(divide="ignore"):
            log_comp += list(np.log(prob[use]).T)
        avail = torch.from_numpy(np.concatenate([np.ones((int(use.sum()), 2), bool), count[use] > 0], axis=1))
    x = x_all[use]
    mean, std = x.mean(axis=0), x.std(axis=0)
    std = np.where(std > 1e-12, std, 1.0)  # a constant feature: left as is (its weight stays ~0)
    xt = torch.from_numpy((x - mean) / std)
    lp_nn = torch.from_numpy(np.maximum(scores.neural_logprob[use], _LOG_TINY))
    lp = torch.from_numpy(np.stack([np.maximum(c, _LOG_TINY) for c in log_comp], axis=1))  # (tokens, 1 + levels)

    torch.manual_seed(seed)
    net = _network(x.shape[1], family, hidden, 2 + len(levels) if levels else 1)
    decay = [p for n, p in net.named_parameters() if n.endswith("weight")]
    opt = torch.optim.LBFGS(net.parameters(), lr=1.0, max_iter=max_iter, tolerance_grad=1e-9,
                            tolerance_change=1e-12, history_size=20, line_search_fn="strong_wolfe")
    steps = [0]

    def log_likelihood() -> torch.Tensor:
        z = net(xt)
        if not levels:  # λ = σ(z): ln(λ·P_∞ + (1 − λ)·P_neural)
            z = z[:, 0]
            return torch.logaddexp(torch.nn.functional.logsigmoid(z) + lp[:, 0],
                                   torch.nn.functional.logsigmoid(-z) + lp_nn)
        logw = torch.log_softmax(z.masked_fill(~avail, -torch.inf), dim=1)  # (levels that do not exist: w = 0)
        terms = torch.cat([lp_nn[:, None], lp], dim=1) + logw
        return torch.logsumexp(terms.masked_fill(~avail, -torch.inf), dim=1)

    def closure():
        opt.zero_grad()
        loss = -log_likelihood().mean() + weight_decay * sum((p ** 2).sum() for p in decay)
        loss.backward()
        steps[0] += 1
        return loss

    opt.step(closure)
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    model = MixingModel(family, features, mean, std,
                        [(m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy()) for m in linears],
                        dict(info or {}, fit_tokens=int(use.sum()), weight_decay=weight_decay), levels)
    result = interpolate(scores, mixing=model)
    if not math.isfinite(result.perplexity):
        raise ValueError("the fit diverged (non-finite perplexity)")
    model.info["fit_perplexity"] = result.perplexity
    return MixingFit(model=model, result=result, iterations=steps[0])
