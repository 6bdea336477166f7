"""The mixture of P_∞ with a neural distribution (paper §2 and §5): its weights and checks, the
interpolated perplexity of cached per-token probabilities, and λ tuning. Torch-free: the
processor, the perplexity wrapper and the evaluate metric (infinigram_hf/hf/, metrics/) build on it.

    P(y | x) = λ · P_∞(y | x) + (1 − λ) · P_neural(y | x),   λ = λ_sparse or λ_dense

by whether the ∞-gram estimate of the token is sparse. Everything here works on `TokenScores`
(neural log-probability, P_∞, sparse flag, effective n for every scored token), so trying another
λ, tuning it on validation data or breaking results down never reruns the model.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Optional, Union

import numpy as np

from .._core.args import float_arg, int_arg
from .._core.errors import TokenizerMismatchError
from .._core.tokenization import BYTES_NAME
from ..index import InfiniGramIndex

DEFAULT_LAMBDA_SPARSE = 0.5
DEFAULT_LAMBDA_DENSE = 0.3


def check_lambda(value: float, name: str) -> float:
    """A mixture weight in [0, 1], as float; ValueError naming the argument otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


# A byte-level index (ids = UTF-8 bytes) serves only a model whose ids are bytes too: such
# models have a few hundred ids (256 bytes plus specials); a subword model has thousands.
BYTE_MODEL_MAX_VOCAB = 512


def check_model_vocab(index: InfiniGramIndex, model_vocab_size: int) -> None:
    """The model must have a row for every id of the index (more rows are fine: padding), and a
    byte-level index is refused for a model with a subword vocabulary (its ids are not bytes)."""
    if model_vocab_size < index.vocab_size:
        raise TokenizerMismatchError(
            f"the model scores {model_vocab_size} tokens but the index at {index.paths[0]} has "
            f"{index.vocab_size} ids: the index was built with another tokenizer than the model's")
    if index.tokenizer_name == BYTES_NAME and model_vocab_size > BYTE_MODEL_MAX_VOCAB:
        raise TokenizerMismatchError(
            f"the index at {index.paths[0]} is byte-level (its ids are UTF-8 bytes) but the model scores "
            f"{model_vocab_size} tokens, a subword vocabulary: build the index with the model's tokenizer "
            f"(build_index(..., tokenizer=tok))")



@dataclass(frozen=True)
class TokenScores:
    """What the model and the ∞-gram said about every scored token, in document order.

    Example:
        >>> s = TokenScores.from_arrays(neural_logprob=[-1.0, -2.0], infgram_prob=[1.0, 0.0],
        ...                             sparse=[True, False], effective_n=[5, 2])
        >>> round(interpolate(s, 0.0, 0.0).perplexity, 4) == round(math.exp(1.5), 4)
        True
    """

    neural_logprob: np.ndarray  # float64: ln P_neural(token | window context)
    infgram_prob: np.ndarray    # float64: P_∞(token | document prefix)
    sparse: np.ndarray          # bool: the ∞-gram estimate has a single possible next token
    effective_n: np.ndarray     # int64: matched suffix length + 1 (0: token outside the index's vocab)
    doc_index: np.ndarray       # int64: which input document the token belongs to
    # Optional context features for learned mixing (`infinigram_hf.lm.learned_mixing`); None
    # when not computed. All describe the context only, never the token being predicted.
    neural_entropy: Optional[np.ndarray] = None      # float64: entropy (nats) of P_neural(· | context)
    neural_top_logprob: Optional[np.ndarray] = None  # float64: ln max_y P_neural(y | context)
    context_count: Optional[np.ndarray] = None       # float64: count of the matched suffix (P_∞'s denominator)
    num_distinct: Optional[np.ndarray] = None        # float64: distinct continuations of the matched suffix
    top_infgram_prob: Optional[np.ndarray] = None    # float64: max_y P_∞(y | context)
    neural_infgram_agreement: Optional[np.ndarray] = None  # float64: ln Σ_y P_∞(y | ctx)·P_neural(y | ctx)
    neural_logprob_infgram_top: Optional[np.ndarray] = None  # float64: ln P_neural(argmax_y P_∞(y | ctx) | ctx)
    # Mixing several orders (`infinigram_hf.lm.orders`): per level named in level_names, the
    # estimate of the token from that shorter suffix and the suffix's count (0, 0: no such level).
    level_prob: Optional[np.ndarray] = None   # float64 (tokens, levels): P_m(token | suffix of length m)
    level_count: Optional[np.ndarray] = None  # float64 (tokens, levels): count of that suffix
    level_names: tuple = ()

    @classmethod
    def from_arrays(cls, neural_logprob, infgram_prob, sparse, effective_n, doc_index=None, *,
                    level_prob: Any = None, level_count: Any = None, level_names: Any = (),
                    **features: Any) -> "TokenScores":
        """TokenScores from per-token arrays (converted and checked for equal lengths); `features`:
        the optional context features by field name (neural_entropy, ..., top_infgram_prob);
        level_prob / level_count: (tokens, len(level_names)) arrays of the levels."""
        n = len(neural_logprob)
        arrays = [np.asarray(neural_logprob, dtype=np.float64), np.asarray(infgram_prob, dtype=np.float64),
                  np.asarray(sparse, dtype=bool), np.asarray(effective_n, dtype=np.int64),
                  np.zeros(n, dtype=np.int64) if doc_index is None else np.asarray(doc_index, dtype=np.int64)]
        unknown = set(features) - set(FEATURE_FIELDS)
        if unknown:
            raise ValueError(f"unknown TokenScores features {sorted(unknown)} (known: {list(FEATURE_FIELDS)})")
        extra = {k: None if v is None else np.asarray(v, dtype=np.float64) for k, v in features.items()}
        if any(a.shape != (n,) for a in arrays + [v for v in extra.values() if v is not None]):
            raise ValueError("TokenScores arrays must all be 1-D of the same length")
        levels: dict = {}
        if level_names or level_prob is not None or level_count is not None:
            from .orders import check_levels
            names = check_levels(level_names)
            levels = dict(level_names=names, level_prob=np.asarray(level_prob, dtype=np.float64),
                          level_count=np.asarray(level_count, dtype=np.float64))
            if levels["level_prob"].shape != (n, len(names)) or levels["level_count"].shape != (n, len(names)):
                raise ValueError(f"level_prob and level_count must both be ({n}, {len(names)}): one column per level")
        return cls(*arrays, **extra, **levels)

    def __len__(self) -> int:
        return len(self.neural_logprob)

    def features(self) -> dict[str, np.ndarray]:
        """The optional context features that are present, by name."""
        return {k: getattr(self, k) for k in FEATURE_FIELDS if getattr(self, k) is not None}

    def with_features(self, **features: Any) -> "TokenScores":
        """A copy with these optional features set (or replaced); the levels too (level_names,
        level_prob, level_count: see `infinigram_hf.lm.orders`)."""
        return TokenScores.from_arrays(self.neural_logprob, self.infgram_prob, self.sparse, self.effective_n,
                                       self.doc_index, **{**self._levels(), **self.features(), **features})

    def _levels(self) -> dict:
        return dict(level_prob=self.level_prob, level_count=self.level_count, level_names=self.level_names) \
            if self.level_names else {}

    def level_columns(self, levels: Any) -> tuple[np.ndarray, np.ndarray]:
        """(level_prob, level_count) columns of these levels, in this order; ValueError when the
        scores lack one (compute them with token_scores(..., levels=...))."""
        missing = [name for name in levels if name not in self.level_names]
        if missing:
            raise ValueError(f"these scores lack the levels {missing} (they have {list(self.level_names)}): "
                             f"compute them with token_scores(..., levels={list(levels)}) or with_index(..., levels=...)")
        cols = [self.level_names.index(name) for name in levels]
        return self.level_prob[:, cols], self.level_count[:, cols]

    def select(self, mask: Any) -> "TokenScores":
        """The tokens where `mask` (bool array, or indexes) selects, every array alike."""
        return replace(self, **{k: getattr(self, k)[mask] for k in self._array_fields() if getattr(self, k) is not None})

    @staticmethod
    def _array_fields() -> tuple:
        return ("neural_logprob", "infgram_prob", "sparse", "effective_n", "doc_index") + FEATURE_FIELDS + \
            ("level_prob", "level_count")

    def concat(self, other: "TokenScores") -> "TokenScores":
        """Both sets of tokens (document indexes of `other` shifted past this one's; a feature
        kept only when both have it)."""
        shift = int(self.doc_index.max()) + 1 if len(self) else 0
        out = [np.concatenate([a, b]) for a, b in zip(
            (self.neural_logprob, self.infgram_prob, self.sparse, self.effective_n, self.doc_index),
            (other.neural_logprob, other.infgram_prob, other.sparse, other.effective_n, other.doc_index + shift))]
        feats = {k: np.concatenate([getattr(self, k), getattr(other, k)]) for k in FEATURE_FIELDS
                 if getattr(self, k) is not None and getattr(other, k) is not None}
        if self.level_names and self.level_names == other.level_names:  # (levels kept when both have the same)
            feats.update(level_names=self.level_names, level_prob=np.concatenate([self.level_prob, other.level_prob]),
                         level_count=np.concatenate([self.level_count, other.level_count]))
        return TokenScores(*out, **feats)

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write to a .npz file (reload with `TokenScores.load`)."""
        levels = {k: (np.array(v, dtype=str) if k == "level_names" else v) for k, v in self._levels().items()}
        np.savez_compressed(path, neural_logprob=self.neural_logprob, infgram_prob=self.infgram_prob,
                            sparse=self.sparse, effective_n=self.effective_n, doc_index=self.doc_index,
                            **self.features(), **levels)

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "TokenScores":
        """TokenScores saved with save()."""
        with np.load(path) as z:
            levels = dict(level_names=tuple(str(x) for x in z["level_names"]), level_prob=z["level_prob"],
                          level_count=z["level_count"]) if "level_names" in z.files else {}
            return cls.from_arrays(z["neural_logprob"], z["infgram_prob"], z["sparse"], z["effective_n"],
                                   z["doc_index"], **levels, **{k: z[k] for k in FEATURE_FIELDS if k in z.files})


FEATURE_FIELDS = ("neural_entropy", "neural_top_logprob", "context_count", "num_distinct", "top_infgram_prob",
                  "neural_infgram_agreement", "neural_logprob_infgram_top")


@dataclass(frozen=True)
class EffectiveNBreakdown:
    """Perplexities per bucket of effective n: bucket i holds tokens with n_lo[i] <= n <= n_hi[i]."""

    n_lo: np.ndarray
    n_hi: np.ndarray
    num_tokens: np.ndarray
    neural_perplexity: np.ndarray
    perplexity: np.ndarray
    sparse_fraction: np.ndarray

    def rows(self) -> list[dict]:
        """One dict per bucket, for printing or a table."""
        return [dict(n=f"{lo}" if lo == hi else f"{lo}-{hi}", tokens=int(c), neural_ppl=float(a), ppl=float(b),
                     sparse=float(s)) for lo, hi, c, a, b, s in zip(self.n_lo, self.n_hi, self.num_tokens,
                                                                     self.neural_perplexity, self.perplexity,
                                                                     self.sparse_fraction)]


@dataclass(frozen=True)
class PerplexityResult:
    """Neural vs interpolated perplexity over a set of tokens.

    `relative_improvement` is the paper's (1 − (PPL − 1) / (PPL₀ − 1)) · 100 %: the share of the
    gap to perfect prediction (PPL = 1) that the ∞-gram closes.
    """

    neural_perplexity: float
    perplexity: float
    relative_improvement: float
    num_tokens: int
    sparse_fraction: float
    lambda_sparse: float
    lambda_dense: float
    by_effective_n: EffectiveNBreakdown
    scores: TokenScores
    mixing: Any = None  # the learned MixingModel when one chose λ per token (the two λs are then unused)

    def __repr__(self) -> str:  # (summary numbers, not the per-token arrays of .scores)
        weights = f"mixing={self.mixing!r}" if self.mixing is not None else \
            f"lambda_sparse={self.lambda_sparse:.4f}, lambda_dense={self.lambda_dense:.4f}"
        return (f"PerplexityResult(perplexity={self.perplexity:.4f}, neural_perplexity={self.neural_perplexity:.4f}, "
                f"relative_improvement={self.relative_improvement:.2f}, num_tokens={self.num_tokens}, {weights})")

    def summary(self) -> str:
        """One line: tokens, the model's and the interpolated perplexity, the improvement, λ."""
        return (f"tokens {self.num_tokens:,}  neural PPL {self.neural_perplexity:.3f}  "
                f"+∞-gram PPL {self.perplexity:.3f}  ({self.relative_improvement:.1f}% improvement, "
                + (f"learned λ ({self.mixing.family}{', levels ' + '/'.join(self.mixing.levels) if self.mixing.levels else ''}), "
                   if self.mixing is not None else
                   f"λ_sparse={self.lambda_sparse:.3f}, λ_dense={self.lambda_dense:.3f}, ")
                + f"{100 * self.sparse_fraction:.1f}% sparse)")


@dataclass(frozen=True)
class LambdaFit:
    """The (λ_sparse, λ_dense) that minimise perplexity on the tokens they were tuned on."""

    lambda_sparse: float
    lambda_dense: float
    method: str
    iterations: int
    result: PerplexityResult

    def __repr__(self) -> str:  # (the result holds per-token arrays: the default repr printed them all)
        r = self.result
        return (f"LambdaFit(lambda_sparse={self.lambda_sparse:.4f}, lambda_dense={self.lambda_dense:.4f}, "
                f"method={self.method!r}, iterations={self.iterations}, perplexity={r.perplexity:.4f}, "
                f"neural_perplexity={r.neural_perplexity:.4f}, num_tokens={r.num_tokens})")


def relative_improvement(ppl: float, neural_ppl: float) -> float:
    """(1 − (PPL − 1) / (PPL₀ − 1)) · 100 (paper §5.1)."""
    if neural_ppl == 1.0:
        return 0.0
    return (1.0 - (ppl - 1.0) / (neural_ppl - 1.0)) * 100.0


def mixture_logprob(scores: TokenScores, lambda_sparse: float, lambda_dense: float) -> np.ndarray:
    """ln(λ·P_∞ + (1 − λ)·P_neural) per token; λ = 0 returns the neural log-probabilities exactly."""
    lam = np.where(scores.sparse, lambda_sparse, lambda_dense)
    with np.errstate(divide="ignore"):
        a = np.log1p(-lam) + scores.neural_logprob
        b = np.log(lam) + np.log(scores.infgram_prob)
    return np.logaddexp(a, b)


def _ppl(logp: np.ndarray) -> float:
    return float(np.exp(-logp.mean())) if len(logp) else float("nan")


def _buckets(max_n: int) -> list[tuple[int, int]]:
    """0 (outside the vocab), 1..16 one by one, then 17-32, 33-64, ... up to max_n."""
    out = [(n, n) for n in range(0, min(max_n, 16) + 1)]
    lo = 17
    while lo <= max_n:
        out.append((lo, 2 * lo - 2))
        lo = 2 * lo - 1
    return out


def breakdown(scores: TokenScores, logp: np.ndarray) -> EffectiveNBreakdown:
    """Neural and interpolated perplexity per effective-n bucket (empty buckets left out)."""
    rows = []
    n = scores.effective_n
    for lo, hi in _buckets(int(n.max()) if len(n) else 0):
        sel = (n >= lo) & (n <= hi)
        if sel.any():
            rows.append((lo, hi, int(sel.sum()), _ppl(scores.neural_logprob[sel]), _ppl(logp[sel]),
                         float(scores.sparse[sel].mean())))
    cols = list(zip(*rows)) if rows else [()] * 6
    return EffectiveNBreakdown(n_lo=np.array(cols[0], dtype=np.int64), n_hi=np.array(cols[1], dtype=np.int64),
                               num_tokens=np.array(cols[2], dtype=np.int64),
                               neural_perplexity=np.array(cols[3], dtype=np.float64),
                               perplexity=np.array(cols[4], dtype=np.float64),
                               sparse_fraction=np.array(cols[5], dtype=np.float64))


def interpolate(scores: TokenScores, lambda_sparse: float = DEFAULT_LAMBDA_SPARSE,
                lambda_dense: float = DEFAULT_LAMBDA_DENSE, *, mixing: Any = None) -> PerplexityResult:
    """Perplexities of the model alone and mixed with the ∞-gram, from cached token scores.
    `mixing`: a learned `MixingModel` (or its file) choosing λ per token instead of the two λs.

    Example:
        >>> res = perplexity(model, tok, texts, index)                 # doctest: +SKIP
        >>> interpolate(res.scores, 0.7, 0.2).perplexity                # doctest: +SKIP
        >>> interpolate(res.scores, mixing="mixing.json").perplexity    # doctest: +SKIP
    """
    ls = check_lambda(lambda_sparse, "lambda_sparse")
    ld = check_lambda(lambda_dense, "lambda_dense")
    if not isinstance(scores, TokenScores):
        raise ValueError(f"scores must be TokenScores (e.g. result.scores), got {type(scores).__name__}")
    if mixing is not None:
        from .learned_mixing import as_mixing, learned_logprob
        mixing = as_mixing(mixing)
        logp = learned_logprob(scores, mixing)
    else:
        logp = mixture_logprob(scores, ls, ld)
    neural, mixed = _ppl(scores.neural_logprob), _ppl(logp)
    return PerplexityResult(neural_perplexity=neural, perplexity=mixed,
                            relative_improvement=relative_improvement(mixed, neural), num_tokens=len(scores),
                            sparse_fraction=float(scores.sparse.mean()) if len(scores) else 0.0,
                            lambda_sparse=ls, lambda_dense=ld, by_effective_n=breakdown(scores, logp),
                            scores=scores, mixing=mixing)


# ------------------------------------------------------------------ tuning


def _em(p_inf: np.ndarray, p_nn: np.ndarray, tol: float, max_iter: int) -> tuple[float, int]:
    """EM for the weight of a two-component mixture with fixed components: λ ← E[posterior of P_∞].

    The log-likelihood is concave in λ and EM increases it monotonically, so this converges to
    the optimum (slowly near 0 or 1, hence the iteration cap)."""
    if len(p_inf) == 0:
        return 0.0, 0
    lam = 0.5
    for it in range(1, max_iter + 1):
        a = lam * p_inf
        den = a + (1.0 - lam) * p_nn
        post = np.divide(a, den, out=np.zeros_like(a), where=den > 0)
        new = float(post.mean())
        if abs(new - lam) < tol:
            return new, it
        lam = new
    return lam, max_iter


def _grid(p_inf: np.ndarray, lnn: np.ndarray, step: float) -> float:
    if len(p_inf) == 0:
        return 0.0
    best, best_ll = 0.0, -math.inf
    for lam in np.arange(0.0, 1.0 + step / 2, step):
        lam = float(min(lam, 1.0))
        with np.errstate(divide="ignore"):
            ll = float(np.logaddexp(np.log1p(-lam) + lnn, np.log(lam) + np.log(p_inf)).sum())
        if ll > best_ll:
            best, best_ll = lam, ll
    return best


def tune_lambdas(scores: Union[TokenScores, PerplexityResult], *, method: str = "em", tol: float = 1e-7,
                 max_iter: int = 5000, grid_step: float = 0.01) -> LambdaFit:
    """Pick (λ_sparse, λ_dense) minimising the interpolated perplexity of `scores`.

    Tokens with sparse and with dense ∞-gram estimates are disjoint, so each weight is fitted on
    its own tokens. method="em" runs EM to convergence (`tol` on λ); method="grid" tries every
    multiple of `grid_step` in [0, 1]. Tune on validation data, then `interpolate` the test scores.

    Example:
        >>> val = perplexity(model, tok, val_texts, index).scores                 # doctest: +SKIP
        >>> fit = tune_lambdas(val)                                                # doctest: +SKIP
        >>> perplexity(model, tok, test_texts, index, lambda_sparse=fit.lambda_sparse,
        ...            lambda_dense=fit.lambda_dense)                              # doctest: +SKIP
    """
    if isinstance(scores, PerplexityResult):
        scores = scores.scores
    if not isinstance(scores, TokenScores):
        raise ValueError(f"scores must be TokenScores or a PerplexityResult, got {type(scores).__name__}")
    if method not in ("em", "grid"):
        raise ValueError(f"method must be 'em' or 'grid', got {method!r}")
    # grid_step sets the number of grid points (1e-300 meant 10^300 of them)
    grid_step = float_arg("grid_step", grid_step, 1e-6, 1.0)
    tol = float_arg("tol", tol, 0.0, 1.0, lo_open=True)
    max_iter = int_arg("max_iter", max_iter, 1, 10**8)
    lams, iters = [], 0
    for sel in (scores.sparse, ~scores.sparse):
        p_inf, lnn = scores.infgram_prob[sel], scores.neural_logprob[sel]
        if method == "em":
            lam, it = _em(p_inf, np.exp(lnn), tol, max_iter)
            iters = max(iters, it)
        else:
            lam = _grid(p_inf, lnn, grid_step)
        lams.append(min(max(lam, 0.0), 1.0))
    return LambdaFit(lambda_sparse=lams[0], lambda_dense=lams[1], method=method, iterations=iters,
                     result=interpolate(scores, lams[0], lams[1]))
