"""Learned per-token mixing (issue 20; the paper's appendix): λ = σ(f(features of the context))
instead of the two weights λ_sparse / λ_dense.

    P(y | x) = λ(x) · P_∞(y | x) + (1 − λ(x)) · P_neural(y | x)

The features describe the context x only -- never the candidate y -- so every λ(x) gives a
proper distribution over y (a weight that depended on y would need renormalising over the whole
vocabulary). They are free at decoding time: the ∞-gram side computes them for its estimate, the
neural side reads them off the model's distribution. `FEATURES` lists them; a model names the
ones it uses, in order, in its file.

`MixingModel` evaluates λ in numpy (here: torch-free) and in torch (`infinigram_hf.hf.mixing`,
on the scores' device); fitting is `infinigram_hf.hf.fit_mixing.fit_mixing` (torch). A model is
a small JSON file: format name, version, family, feature names, standardisation, weights.

A model with `levels` mixes several orders instead (`infinigram_hf.lm.orders`): weights from a
softmax over the model, the ∞-gram and the n-gram estimates of shorter suffixes,

    P(y | x) = Σ_k w_k(x) · P_k(y | x),

still from the context only, so still a proper distribution; its file is version 2.

Example:
    >>> from infinigram_hf.lm.mixture import TokenScores
    >>> m = MixingModel.two_lambda(0.6, 0.2)          # the two-λ scheme as a mixing model
    >>> s = TokenScores.from_arrays([-1.0, -2.0], [1.0, 0.5], [True, False], [5, 2])
    >>> [round(float(x), 6) for x in m.lambdas(s)]
    [0.6, 0.2]
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Sequence, Union

import numpy as np

# (TokenScores comes from .mixture, which imports this module: annotations name it as a string
# and nothing here imports it, so the layer has no import cycle)
TokenScores = Any

FORMAT = "infinigram_hf-mixing"
INDEX_FILE = "mixing.json"  # its name inside a directory (e.g. beside an index's shards)
VERSION = 1         # a two-way model (λ): what every reader of this format reads
VERSION_ORDERS = 2  # a model mixing several orders (`levels`): older readers refuse it by its version
FAMILIES = ("logistic", "mlp")

# name -> (what it is, the TokenScores field it comes from). The transforms live in `raw_to_feature`
# (numpy) and in infinigram_hf.hf.mixing (torch); both are tested equal.
FEATURES: Dict[str, str] = {
    "sparse": "1 when the ∞-gram estimate has a single possible next token, else 0",
    "log_effective_n": "ln(effective n) = ln(matched suffix length + 1)",
    "log_context_count": "ln(1 + count of the matched suffix)",
    "log_num_distinct": "ln(1 + number of distinct continuations of the matched suffix)",
    "top_infgram_prob": "max_y P_∞(y | context)",
    "neural_entropy": "entropy (nats) of the model's next-token distribution",
    "neural_top_prob": "max_y P_neural(y | context)",
    "log_agreement": "ln Σ_y P_∞(y | context)·P_neural(y | context): the model's mass on the ∞-gram's continuations",
    "neural_logprob_infgram_top": "ln P_neural(argmax_y P_∞(y | context) | context)",
}
# The default: the ∞-gram's five. In the feature ablation (eval/RESULTS.md, issue 20) the model's
# entropy and top probability changed held-out perplexity by under 0.3% on both domains, and they
# cost the processor a pass over the vocabulary per row; they stay available by name.
DEFAULT_FEATURES = ("sparse", "log_effective_n", "log_context_count", "log_num_distinct", "top_infgram_prob")
# The features that compare the model's distribution with the ∞-gram's: they need both at once,
# so token_scores computes them only when asked (agreement=True), and with_index cannot.
AGREEMENT_FEATURES = ("log_agreement", "neural_logprob_infgram_top")
AGREEMENT_FLOOR = 1e-300  # the probability they clamp to: ln 0 must not reach the mixing model
_SOURCES = {"log_context_count": "context_count", "log_num_distinct": "num_distinct",
            "top_infgram_prob": "top_infgram_prob", "neural_entropy": "neural_entropy",
            "neural_top_prob": "neural_top_logprob", "log_agreement": "neural_infgram_agreement",
            "neural_logprob_infgram_top": "neural_logprob_infgram_top"}


class MixingFormatError(ValueError):
    """A mixing-model file (or dict) that is not one this version reads: names the file."""


def check_features(names: Sequence[str]) -> tuple:
    """The feature names as a tuple; ValueError naming the unknown ones."""
    if isinstance(names, str):
        names = (names,)
    names = tuple(names)
    bad = [n for n in names if n not in FEATURES]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(f"features must be distinct names from {list(FEATURES)}, got {list(names)!r}")
    return names


def raw_to_feature(name: str, scores: TokenScores) -> np.ndarray:
    """One feature column (float64) of every token of `scores`; ValueError when `scores` lack the
    field it needs (compute them with `token_scores`, which records every feature)."""
    if name == "sparse":
        return scores.sparse.astype(np.float64)
    if name == "log_effective_n":
        return np.log(np.maximum(scores.effective_n, 1).astype(np.float64))
    src = getattr(scores, _SOURCES[name])
    if src is None:
        how = "token_scores(..., agreement=True)" if name in AGREEMENT_FEATURES else "token_scores/perplexity()"
        raise ValueError(f"the mixing feature {name!r} needs TokenScores.{_SOURCES[name]}, which these scores "
                         f"lack (scores from {how} of this version have it)")
    if name in ("log_context_count", "log_num_distinct"):
        return np.log1p(np.maximum(src, 0.0))
    if name == "neural_top_prob":
        return np.exp(src)
    return np.asarray(src, dtype=np.float64)


def uses_agreement(features: Sequence[str]) -> bool:
    """Whether a model over these features needs the agreement features (AGREEMENT_FEATURES)."""
    return any(f in AGREEMENT_FEATURES for f in features)


def first_max_per_row(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """For CSR rows values[offsets[i]:offsets[i+1]]: the index (into values) of each row's largest
    value, the first of equals; -1 for an empty row."""
    offsets = np.asarray(offsets, dtype=np.int64)
    width = offsets[1:] - offsets[:-1]
    out = np.full(len(width), -1, dtype=np.int64)
    has = width > 0
    if not has.any():
        return out
    v = values[offsets[0]:offsets[-1]]
    best = np.full(len(width), np.inf)
    best[has] = np.maximum.reduceat(v, (offsets[:-1] - offsets[0])[has])
    row = np.repeat(np.arange(len(width)), width)
    idx = np.flatnonzero(v >= best[row])
    first_rows, where = np.unique(row[idx], return_index=True)  # (idx is sorted: the first per row)
    out[first_rows] = idx[where] + offsets[0]
    return out


def feature_matrix(scores: TokenScores, names: Sequence[str]) -> np.ndarray:
    """(tokens, len(names)) float64 matrix of the named features."""
    names = check_features(names)
    if not len(scores):
        return np.zeros((0, len(names)))
    return np.stack([raw_to_feature(n, scores) for n in names], axis=1)


def has_estimate(scores: TokenScores) -> np.ndarray:
    """Tokens whose context has an ∞-gram estimate (λ = 0 elsewhere, as in the processor)."""
    ok = scores.effective_n > 0
    if scores.context_count is not None:
        ok &= scores.context_count > 0
    return ok


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))


def masked_softmax(z: np.ndarray, available: np.ndarray) -> np.ndarray:
    """Row-wise softmax of z over the available columns (0 elsewhere); column 0 (the model) is
    always available, so every row sums to 1."""
    z = np.where(available, z, -np.inf)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def available_components(has_infgram: np.ndarray, has_level: np.ndarray) -> np.ndarray:
    """(tokens, 2 + levels) which components a several-orders model mixes for each context: the
    model always, the ∞-gram where it has an estimate, a level where it exists and the ∞-gram
    does (the rows the processor leaves neural get the model alone)."""
    has_infgram = np.asarray(has_infgram, bool)
    out = np.empty((len(has_infgram), 2 + np.shape(has_level)[1]), dtype=bool)
    out[:, 0] = True
    out[:, 1] = has_infgram
    np.logical_and(has_level, has_infgram[:, None], out=out[:, 2:])
    return out


def level_inputs(level_count: np.ndarray) -> np.ndarray:
    """The inputs a model mixing several orders adds per level: ln(1 + count of its suffix)."""
    return np.log1p(np.maximum(np.asarray(level_count, dtype=np.float64), 0.0))


@dataclass
class MixingModel:
    """λ(features) = σ(network(standardised features)); `family` "logistic" (one linear layer) or
    "mlp" (hidden layers with tanh). `layers` are (weight (out, in), bias (out,)) float64 arrays.
    `info` holds what the fit recorded (data, perplexities); it is saved, never used.

    With `levels` (`infinigram_hf.lm.orders`) the model mixes several orders: its inputs are the
    features and then ln(1 + count) of each level's suffix; its 2 + len(levels) outputs are the
    logits of a softmax over the components (the model, the ∞-gram, each level), components that
    do not exist for a context taking weight 0."""

    family: str
    features: tuple
    mean: np.ndarray
    std: np.ndarray
    layers: List[tuple]
    info: Dict[str, Any] = field(default_factory=dict)
    levels: tuple = ()

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")
        self.features = check_features(self.features)
        if self.levels:
            from .orders import check_levels
            self.levels = check_levels(self.levels)
        self.levels = tuple(self.levels)
        k = len(self.features) + len(self.levels)
        outputs = 2 + len(self.levels) if self.levels else 1
        self.mean = np.asarray(self.mean, dtype=np.float64).reshape(-1)
        self.std = np.asarray(self.std, dtype=np.float64).reshape(-1)
        if self.mean.shape != (k,) or self.std.shape != (k,) or not (self.std > 0).all():
            raise ValueError(f"mean and std must hold {k} numbers (std > 0), one per input")
        layers, width = [], k
        for w, b in self.layers:
            w, b = np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64).reshape(-1)
            if w.ndim != 2 or w.shape[1] != width or b.shape != (w.shape[0],):
                raise ValueError(f"layer shapes do not chain: expected a weight (out, {width}) and a bias (out,), "
                                 f"got {w.shape} and {b.shape}")
            if not (np.isfinite(w).all() and np.isfinite(b).all()):
                raise ValueError("layer weights must be finite")
            layers.append((w, b))
            width = w.shape[0]
        if not layers or width != outputs or (self.family == "logistic" and len(layers) != 1):
            raise ValueError(f"the last layer must have {outputs} output(s): one, or 2 + the number of levels "
                             "(a logistic model has exactly one layer)")
        self.layers = layers

    # ------------------------------------------------------------ construction

    @classmethod
    def two_lambda(cls, lambda_sparse: float, lambda_dense: float) -> "MixingModel":
        """The two-λ scheme as a logistic model over the `sparse` feature alone (λ strictly inside
        (0, 1): the logit of 0 or 1 is infinite, so they are clipped to 1e-12 from the ends)."""
        for name, v in (("lambda_sparse", lambda_sparse), ("lambda_dense", lambda_dense)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)) or not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")
        ls = min(max(float(lambda_sparse), 1e-12), 1 - 1e-12)
        ld = min(max(float(lambda_dense), 1e-12), 1 - 1e-12)
        logit = lambda p: math.log(p / (1 - p))  # noqa: E731
        return cls("logistic", ("sparse",), np.zeros(1), np.ones(1),
                   [(np.array([[logit(ls) - logit(ld)]]), np.array([logit(ld)]))])

    # ------------------------------------------------------------ evaluation

    def outputs(self, x: np.ndarray) -> np.ndarray:
        """The network's outputs (tokens, 1 or 2 + levels) for raw input rows x (tokens, inputs)."""
        h = (np.asarray(x, dtype=np.float64) - self.mean) / self.std
        for i, (w, b) in enumerate(self.layers):
            h = h @ w.T + b
            if i < len(self.layers) - 1:
                h = np.tanh(h)
        return h

    def logits(self, x: np.ndarray) -> np.ndarray:
        """σ⁻¹(λ) of raw feature rows x (tokens, features) of a two-way model."""
        return self.outputs(x)[:, 0]

    def inputs(self, scores: TokenScores) -> np.ndarray:
        """The raw input rows of every token of `scores`: the features, then the levels' log counts."""
        x = feature_matrix(scores, self.features)
        if self.levels:
            _, count = scores.level_columns(self.levels)
            x = np.concatenate([x, level_inputs(count)], axis=1)
        return x

    def weights(self, scores: TokenScores) -> np.ndarray:
        """(tokens, components) mixture weights, each row summing to 1: [1 − λ, λ] for a two-way
        model, [model, ∞-gram, level...] for one mixing several orders."""
        if not self.levels:
            lam = self.lambdas(scores)
            return np.stack([1.0 - lam, lam], axis=1)
        _, count = scores.level_columns(self.levels)
        return self.weights_from_inputs(self.inputs(scores), has_estimate(scores), count > 0)

    def weights_from_inputs(self, x: np.ndarray, has_infgram: np.ndarray, has_level: np.ndarray) -> np.ndarray:
        """`weights` of a model mixing several orders from its raw inputs x, and which contexts have
        an ∞-gram estimate and which levels exist (tokens, levels)."""
        return masked_softmax(self.outputs(x), available_components(has_infgram, has_level))

    def lambdas(self, scores: TokenScores) -> np.ndarray:
        """λ of every token of `scores` (0 where the context has no ∞-gram estimate); for a model
        mixing several orders, the weight of all the ∞-gram side together (1 − the model's)."""
        if self.levels:
            return 1.0 - self.weights(scores)[:, 0]
        lam = _sigmoid(self.logits(feature_matrix(scores, self.features)))
        return np.where(has_estimate(scores), lam, 0.0)

    # ------------------------------------------------------------ files

    def to_dict(self) -> dict:
        """The model as a JSON-ready dict (what `save` writes; `from_dict` reads it back)."""
        d = {"format": FORMAT, "version": VERSION_ORDERS if self.levels else VERSION, "family": self.family,
             "features": list(self.features), "feature_docs": {n: FEATURES[n] for n in self.features},
             "activation": "tanh", "mean": self.mean.tolist(), "std": self.std.tolist(),
             "layers": [{"weight": w.tolist(), "bias": b.tolist()} for w, b in self.layers], "info": self.info}
        if self.levels:
            d["levels"] = list(self.levels)
            d["outputs"] = ["neural", "infgram"] + [f"level {name}" for name in self.levels]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "the mixing model") -> "MixingModel":
        """A model from `to_dict()` output; MixingFormatError naming `source` otherwise."""
        if not isinstance(d, Mapping) or d.get("format") != FORMAT:
            raise MixingFormatError(f"{source} is not an infinigram_hf mixing model (no \"format\": \"{FORMAT}\")")
        if d.get("version") not in (VERSION, VERSION_ORDERS) or (d.get("version") == VERSION and d.get("levels")):
            raise MixingFormatError(f"{source} has mixing-model version {d.get('version')!r}; this infinigram_hf "
                                    f"reads versions {VERSION} and {VERSION_ORDERS} (with levels)")
        unknown = [n for n in d.get("features", []) if n not in FEATURES]
        if unknown:
            raise MixingFormatError(f"{source} uses features {unknown} that this version does not compute "
                                    f"(known: {list(FEATURES)})")
        try:
            return cls(d["family"], tuple(d["features"]), d["mean"], d["std"],
                       [(layer["weight"], layer["bias"]) for layer in d["layers"]], dict(d.get("info", {})),
                       tuple(d.get("levels", ())))
        except (KeyError, TypeError, ValueError) as exc:
            raise MixingFormatError(f"{source} is malformed: {exc}") from None

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write the model as JSON (a few KB). `path` may be a file name, or a directory (an index
        directory, say): the model is then its `mixing.json`, where `load` looks for it."""
        if os.path.isdir(path):
            path = os.path.join(path, INDEX_FILE)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "MixingModel":
        """A model written by `save` (a file, or a directory holding `mixing.json`);
        MixingFormatError naming the file when it is not one."""
        if os.path.isdir(path):
            path = os.path.join(path, INDEX_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise MixingFormatError(f"{os.fspath(path)} is not a mixing-model JSON file: {exc}") from None
        return cls.from_dict(d, source=os.fspath(path))

    def __repr__(self) -> str:
        hidden = [w.shape[0] for w, _ in self.layers[:-1]]
        levels = f", levels={list(self.levels)}" if self.levels else ""
        return f"MixingModel(family={self.family!r}, features={list(self.features)}, hidden={hidden}{levels})"


def as_mixing(mixing: Any) -> MixingModel:
    """A MixingModel from a model, a path to its file, or its dict."""
    if isinstance(mixing, MixingModel):
        return mixing
    if isinstance(mixing, (str, os.PathLike)):
        return MixingModel.load(mixing)
    if isinstance(mixing, Mapping):
        return MixingModel.from_dict(mixing)
    raise ValueError(f"mixing must be a MixingModel, a path to its file or its dict, got {type(mixing).__name__}")


def learned_logprob(scores: TokenScores, mixing: Any) -> np.ndarray:
    """ln(λ·P_∞ + (1 − λ)·P_neural) per token with λ from the mixing model; for one mixing several
    orders, ln Σ_k w_k·P_k over the model, the ∞-gram and the levels."""
    mixing = as_mixing(mixing)
    if mixing.levels:
        w = mixing.weights(scores)
        prob, _ = scores.level_columns(mixing.levels)
        comp = np.concatenate([np.exp(scores.neural_logprob)[:, None], scores.infgram_prob[:, None], prob], axis=1)
        with np.errstate(divide="ignore"):
            return np.log((w * comp).sum(axis=1))
    lam = mixing.lambdas(scores)
    with np.errstate(divide="ignore"):
        a = np.log1p(-lam) + scores.neural_logprob
        b = np.log(lam) + np.log(scores.infgram_prob)
    return np.logaddexp(a, b)
