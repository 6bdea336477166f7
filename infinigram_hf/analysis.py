"""The paper's §4 analyses of held-out text with an ∞-gram index: token-wise agreement by
effective n (Figure 3: 5-gram vs ∞-gram, all tokens vs sparse estimates only), the distribution
of effective n, and -- given a neural LM -- the ∞-gram's agreement per bucket of the neural
model's probability of the actual token (Figure 4). PNG plots (matplotlib) and a JSON summary.

Agreement, as in the paper: the ∞-gram (or n-gram) probability of the actual next token is
above 0.5. Effective n = 1 + the length of the longest context suffix with a non-zero count
(capped at n - 1 tokens for the n-gram). Sparse: that context has one distinct continuation.
The first `start` tokens of each text (default 1) are left out.

Example:
    >>> res = analyze(index, heldout_texts, model=gpt2, max_tokens=1024)   # doctest: +SKIP
    >>> plot_analysis(res, "eval/plots", prefix="stdlib")                    # doctest: +SKIP
    >>> res.summary()["infgram"]["agreement"]                                # doctest: +SKIP
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
from tqdm.auto import tqdm

from .index.infinigram_index import InfiniGramIndex
from .lm.model import InfiniGramLM

DEFAULT_BUCKETS = tuple(np.round(np.linspace(0, 1, 11), 2))


@dataclass(frozen=True)
class AgreementByN:
    """Tokens and agreeing tokens per effective n (index 0 <-> n = 1)."""

    count: np.ndarray
    agree: np.ndarray

    @property
    def effective_n(self) -> np.ndarray:
        return np.arange(1, len(self.count) + 1)

    @property
    def rate(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, self.agree / np.maximum(self.count, 1), np.nan)

    @property
    def overall(self) -> float:
        return float(self.agree.sum() / self.count.sum()) if self.count.sum() else float("nan")


@dataclass(frozen=True)
class Analysis:
    """Per-token arrays over all analysed positions (texts concatenated) and their aggregates."""

    infgram_prob: np.ndarray    # ∞-gram P(actual token)
    effective_n: np.ndarray     # ∞-gram effective n
    sparse: np.ndarray          # ∞-gram estimate is sparse
    ngram_prob: np.ndarray      # n-gram (with backoff to the longest seen suffix, up to n - 1 tokens)
    ngram_effective_n: np.ndarray
    ngram_n: int
    neural_prob: Optional[np.ndarray]  # the neural model's P(actual token), if a model was given
    threshold: float
    buckets: tuple

    def by_n(self, which: str = "infgram", sparse_only: bool = False) -> AgreementByN:
        """Agreement per effective n for "infgram" or "ngram"."""
        prob, n = (self.infgram_prob, self.effective_n) if which == "infgram" else (self.ngram_prob, self.ngram_effective_n)
        sel = self.sparse if sparse_only else np.ones(len(prob), dtype=bool)
        top = int(n.max()) if len(n) else 1
        count = np.bincount(n[sel] - 1, minlength=top)[:top]
        agree = np.bincount(n[sel & (prob > self.threshold)] - 1, minlength=top)[:top]
        return AgreementByN(count=count, agree=agree)

    def by_neural_bucket(self) -> Dict[str, np.ndarray]:
        """Per bucket of the neural probability: token counts, ∞-gram agreement over all tokens
        and over sparse ones."""
        if self.neural_prob is None:
            raise ValueError("no neural model was given to analyze()")
        edges = np.asarray(self.buckets, dtype=float)
        b = np.clip(np.searchsorted(edges, self.neural_prob, side="right") - 1, 0, len(edges) - 2)
        agree = self.infgram_prob > self.threshold
        out = {"edges": edges, "count": np.bincount(b, minlength=len(edges) - 1),
               "agree": np.bincount(b[agree], minlength=len(edges) - 1),
               "sparse_count": np.bincount(b[self.sparse], minlength=len(edges) - 1),
               "sparse_agree": np.bincount(b[self.sparse & agree], minlength=len(edges) - 1),
               "neural_agree": np.bincount(b[self.neural_prob > self.threshold], minlength=len(edges) - 1)}
        return out

    def summary(self) -> Dict[str, Any]:
        """JSON-able summary of every figure's numbers."""
        def block(a: AgreementByN) -> Dict[str, Any]:
            return {"agreement": a.overall, "tokens": int(a.count.sum()),
                    "by_effective_n": {int(n): {"tokens": int(c), "agreement": None if c == 0 else float(g / c)}
                                       for n, c, g in zip(a.effective_n, a.count, a.agree) if c}}
        n = self.effective_n
        out: Dict[str, Any] = {
            "tokens": int(len(n)),
            "threshold": self.threshold,
            "infgram": block(self.by_n("infgram")),
            "infgram_sparse": block(self.by_n("infgram", sparse_only=True)),
            f"{self.ngram_n}gram": block(self.by_n("ngram")),
            "sparse_fraction": float(self.sparse.mean()) if len(n) else float("nan"),
            "effective_n": {"mean": float(n.mean()) if len(n) else float("nan"),
                            "median": float(np.median(n)) if len(n) else float("nan"),
                            f"fraction_ge_{self.ngram_n}": float((n >= self.ngram_n).mean()) if len(n) else float("nan")},
        }
        if self.neural_prob is not None:
            b = self.by_neural_bucket()
            rate = lambda a, c: [None if x == 0 else float(y / x) for x, y in zip(c, a)]  # noqa: E731
            out["neural"] = {"buckets": [float(e) for e in b["edges"]], "tokens": b["count"].tolist(),
                             "infgram_agreement": rate(b["agree"], b["count"]),
                             "infgram_sparse_tokens": b["sparse_count"].tolist(),
                             "infgram_sparse_agreement": rate(b["sparse_agree"], b["sparse_count"]),
                             "neural_agreement": float((self.neural_prob > self.threshold).mean())}
        return out


# ------------------------------------------------------------------ computing


def neural_token_probs(model: Any, ids: np.ndarray, window: Optional[int] = None, stride: Optional[int] = None,
                       device: Optional[str] = None) -> np.ndarray:
    """P_model(ids[i] | ids[:i]) for i >= 1 (entry 0 is nan), with a sliding window of `window`
    tokens (default: the model's context) advancing by `stride` (default window // 2); every
    position is predicted with at least window - stride tokens of context once available."""
    import torch

    n = len(ids)
    out = np.full(n, np.nan)
    if n < 2:
        return out
    window = int(window or getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", 1024))
    stride = int(stride or max(1, window // 2))
    device = device or next(model.parameters()).device
    x = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=device)
    done = 1  # next position still to predict
    start = 0
    with torch.no_grad():
        while done < n:
            end = min(start + window, n)
            logits = model(x[start:end].unsqueeze(0)).logits[0].float()
            logp = torch.log_softmax(logits, -1)
            # logits at j predict token start + j + 1
            tgt = x[start + 1:end]
            lp = logp[:-1].gather(1, tgt.unsqueeze(1)).squeeze(1).exp().cpu().numpy()
            pos = np.arange(start + 1, end)
            keep = pos >= done
            out[pos[keep]] = lp[keep]
            done = end
            if end == n:
                break
            start = end - (window - stride)
    return out


def analyze(index: Union[InfiniGramIndex, InfiniGramLM], texts: Iterable[Any], *, tokenizer: Any = None,
            n: int = 5, threshold: float = 0.5, start: int = 1, max_tokens: Optional[int] = 1024,
            model: Any = None, window: Optional[int] = None, buckets: Sequence[float] = DEFAULT_BUCKETS,
            progress: bool = True) -> Analysis:
    """Score held-out texts (strings, or token-id sequences) with the ∞-gram (unbounded, the
    index's own dense scoring) and an n-gram (the same with the context cut to n - 1 tokens),
    and optionally a neural causal LM (a transformers model over the index's vocabulary).
    Each text is cut to its first `max_tokens` tokens (the paper: 1024)."""
    lm = index if isinstance(index, InfiniGramLM) else InfiniGramLM(index, tokenizer, max_context=max(n - 1, 1))
    if n < 1 or n - 1 > lm.max_context:
        raise ValueError(f"n must be in 1..{lm.max_context + 1}, got {n}")
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold must be in [0, 1), got {threshold}")
    if len(buckets) < 2 or any(b >= a for a, b in zip(buckets[1:], buckets[:-1])):
        raise ValueError("buckets must be at least two increasing edges")
    if model is not None:
        model.eval()
    parts: Dict[str, List[np.ndarray]] = {k: [] for k in ("p", "n", "s", "gp", "gn", "np")}
    texts = list(texts)
    for text in tqdm(texts, desc="analysing", unit="text", disable=not progress):
        ids = lm.encode(text)
        if max_tokens is not None:
            ids = ids[:max_tokens]
        if len(ids) <= start:
            continue
        sc = lm.index.score(ids)
        ng = lm.score(ids, "infgram", max_context=n - 1, eod=True)
        sl = slice(start, None)
        parts["p"].append(sc.probs[sl])
        parts["n"].append(sc.suffix_len[sl] + 1)
        parts["s"].append(sc.sparse[sl])
        parts["gp"].append(ng.probs[sl])
        parts["gn"].append(ng.suffix_len[sl] + 1)
        if model is not None:
            parts["np"].append(neural_token_probs(model, ids, window)[sl])
    cat = lambda k, dt: np.concatenate(parts[k]).astype(dt) if parts[k] else np.zeros(0, dtype=dt)  # noqa: E731
    return Analysis(infgram_prob=cat("p", np.float64), effective_n=cat("n", np.int64), sparse=cat("s", bool),
                    ngram_prob=cat("gp", np.float64), ngram_effective_n=cat("gn", np.int64), ngram_n=n,
                    neural_prob=cat("np", np.float64) if model is not None else None, threshold=threshold,
                    buckets=tuple(float(b) for b in buckets))


# ------------------------------------------------------------------ plots and summary


def _agreement_panel(ax: Any, a: AgreementByN, title: str, max_n: int) -> None:
    count = a.count.astype(float)
    agree = a.agree.astype(float)
    if len(count) > max_n:  # fold the tail into the last bar ("max_n+")
        count = np.concatenate([count[:max_n - 1], [count[max_n - 1:].sum()]])
        agree = np.concatenate([agree[:max_n - 1], [agree[max_n - 1:].sum()]])
    x = np.arange(1, len(count) + 1)
    ax.bar(x, count, color="0.75", label="tokens")
    ax.set_xlabel("effective n" + (f" (last bar: ≥{max_n})" if len(a.count) > max_n else ""))
    ax.set_ylabel("tokens")
    ax.set_title(f"{title}\noverall agreement {a.overall:.1%}")
    ax2 = ax.twinx()
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(count > 0, agree / np.maximum(count, 1), np.nan)
    ax2.plot(x, rate * 100, "o", color="tab:green", label="agreement")
    ax2.set_ylim(0, 100)
    ax2.set_ylabel("agreement (%)", color="tab:green")


def plot_analysis(res: Analysis, out_dir: Union[str, Path], prefix: str = "analysis", max_n: int = 32,
                  title: str = "") -> List[Path]:
    """Write <prefix>_agreement.png (Figure 3), <prefix>_effective_n.png and, with a neural
    model, <prefix>_neural.png (Figure 4); returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    _agreement_panel(axes[0], res.by_n("ngram"), f"{res.ngram_n}-gram, all tokens", max_n)
    _agreement_panel(axes[1], res.by_n("infgram"), "∞-gram, all tokens", max_n)
    _agreement_panel(axes[2], res.by_n("infgram", sparse_only=True), "∞-gram, sparse estimates only", max_n)
    fig.suptitle(title or f"token-wise agreement ({len(res.effective_n):,} tokens)")
    fig.tight_layout()
    paths.append(out / f"{prefix}_agreement.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    n = res.effective_n
    fig, ax = plt.subplots(figsize=(7, 4))
    top = min(int(n.max()) if len(n) else 1, 64)
    ax.hist(np.minimum(n, top), bins=np.arange(0.5, top + 1.5), color="tab:blue")
    if len(n):
        ax.axvline(np.median(n), color="k", ls="--", label=f"median {np.median(n):.0f}")
        ax.axvline(n.mean(), color="tab:red", ls=":", label=f"mean {n.mean():.1f}")
    ax.set_xlabel(f"effective n of the ∞-gram (last bin: ≥{top})")
    ax.set_ylabel("tokens")
    ax.legend()
    ax.set_title(title or "distribution of effective n")
    fig.tight_layout()
    paths.append(out / f"{prefix}_effective_n.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    if res.neural_prob is not None:
        b = res.by_neural_bucket()
        edges = b["edges"]
        mids = (edges[:-1] + edges[1:]) / 2
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ax.bar(mids, b["count"], width=np.diff(edges) * 0.9, color="0.75", label="tokens")
        ax.set_xlabel("neural model's probability of the actual token")
        ax.set_ylabel("tokens")
        ax2 = ax.twinx()
        with np.errstate(invalid="ignore", divide="ignore"):
            ax2.plot(mids, 100 * b["agree"] / np.maximum(b["count"], 1), "o-", color="tab:green",
                     label="∞-gram agreement, all tokens")
            ax2.plot(mids, 100 * b["sparse_agree"] / np.maximum(b["sparse_count"], 1), "s--", color="tab:olive",
                     label="∞-gram agreement, sparse only")
        ax2.set_ylim(0, 100)
        ax2.set_ylabel("agreement (%)")
        ax2.legend(loc="upper left")
        ax.set_title(title or "∞-gram agreement by neural probability")
        fig.tight_layout()
        paths.append(out / f"{prefix}_neural.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def save_summary(res: Analysis, path: Union[str, Path], **extra: Any) -> Dict[str, Any]:
    """Write res.summary() (plus `extra` keys) as JSON; returns it."""
    summary = {**extra, **res.summary()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    return summary
