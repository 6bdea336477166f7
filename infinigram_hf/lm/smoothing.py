"""Kneser-Ney-family smoothing for the standalone ∞-gram LM: parameters, their estimation from
count-of-counts, a reference implementation over per-level statistics, and tuning on held-out text.

The model (see native/include/infinigram_lm.h) interpolates every context length L = 0..Lmax of
a position, where Lmax is the longest suffix of the context (at most `max_depth`) that has a
continuation in the corpus, starting from the uniform distribution:

    p_L(w) = (max(c_L(w) - D_L(c_L(w)), 0) + (theta_L + d1_L n1 + d2_L n2 + d3_L n3) p_{L-1}(w))
             / (B_L + theta_L)

c_L(w) is the Kneser-Ney continuation count N1+(. ctx_L w) -- the number of distinct tokens seen
left of ctx_L w, counted exactly over the occurrences in the suffix array -- or the raw count at
"raw" levels (the top level of fixed-order KN). With `max_depth=None` ("unbounded") every level uses
continuation counts: the deepest possible context of a training token is its whole document,
which occurs once, so no finite level is a top level. theta_L (a Pitman-Yor-style concentration)
is 0 in plain modified KN; tuning may raise it.

Example:
    >>> params = SmoothingParams.modified_kn(lm, order=7)      # doctest: +SKIP
    >>> lm.perplexity(texts, method="kn", smoothing=params)     # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np

from .._core.progress import progress_bar

if TYPE_CHECKING:  # pragma: no cover
    from .model import InfiniGramLM

# Columns of InfiniGramLM.levels() rows (IG_LM_NSTAT in infinigram_lm.h).
COL_POS, COL_DEPTH, COL_TOTAL, COL_COUNT, COL_TYPES, COL_R1, COL_R2, COL_R3 = range(8)
COL_CTOTAL, COL_CCOUNT, COL_CTYPES, COL_C1, COL_C2, COL_C3 = range(8, 14)

DEFAULT_UNBOUNDED_DEPTHS = 24  # per-depth parameters estimated / tuned; deeper levels share the last


@dataclass(frozen=True, eq=False)
class SmoothingParams:
    """Discounts (d1, d2, d3 for counts 1, 2, 3+) and concentrations theta, one entry per context
    length 0, 1, ...; contexts deeper than the arrays use the last entry.

    max_depth: longest context used (order - 1 for fixed-order KN; None = the LM's max_context).
    raw_top: the level at depth max_depth uses raw counts (fixed-order KN does).
    raw_all: every level uses raw counts (interpolated absolute discounting).
    witten_bell: Witten-Bell interpolation instead (the arrays are ignored).
    """

    d1: np.ndarray
    d2: np.ndarray
    d3: np.ndarray
    theta: np.ndarray
    max_depth: Optional[int] = None
    raw_top: bool = False
    raw_all: bool = False
    witten_bell: bool = False
    note: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        arrs = [np.ascontiguousarray(np.asarray(getattr(self, k), dtype=np.float64).reshape(-1))
                for k in ("d1", "d2", "d3", "theta")]
        n = len(arrs[0])
        if n < 1 or any(len(a) != n for a in arrs):
            raise ValueError("d1, d2, d3 and theta must be non-empty and of the same length")
        for name, a, hi in zip(("d1", "d2", "d3"), arrs, (1, 2, 3)):
            if not np.all((a >= 0) & (a <= hi)):
                raise ValueError(f"{name} must lie in [0, {hi}], got {a}")
        if not np.all((arrs[3] >= 0) & np.isfinite(arrs[3])):
            raise ValueError(f"theta must be >= 0, got {arrs[3]}")
        if self.max_depth is not None and self.max_depth < 0:
            raise ValueError(f"max_depth must be >= 0 or None, got {self.max_depth}")
        for k, a in zip(("d1", "d2", "d3", "theta"), arrs):
            object.__setattr__(self, k, a)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SmoothingParams):
            return NotImplemented
        return (all(np.array_equal(getattr(self, k), getattr(other, k)) for k in ("d1", "d2", "d3", "theta"))
                and (self.max_depth, self.raw_top, self.raw_all, self.witten_bell)
                == (other.max_depth, other.raw_top, other.raw_all, other.witten_bell))

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------ constructors

    @classmethod
    def constant(cls, d1: float = 0.7, d2: float = 1.0, d3: float = 1.2, theta: float = 0.0,
                 **kw: Any) -> "SmoothingParams":
        """The same discounts at every depth."""
        return cls(np.array([d1]), np.array([d2]), np.array([d3]), np.array([theta]), **kw)

    @classmethod
    def witten_bell_params(cls, max_depth: Optional[int] = None) -> "SmoothingParams":
        """Witten-Bell interpolation (raw counts, no parameters)."""
        return cls(np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1), max_depth=max_depth,
                   raw_all=True, witten_bell=True, note="witten-bell")

    @classmethod
    def modified_kn(cls, lm: "InfiniGramLM", order: Optional[int] = None,
                    depths: int = DEFAULT_UNBOUNDED_DEPTHS) -> "SmoothingParams":
        """Chen & Goodman's modified Kneser-Ney discounts, estimated from the index's
        count-of-counts: for a fixed `order`, continuation counts below the top order and raw
        counts at it; unbounded (order=None), continuation counts at `depths` depths."""
        if order is not None:
            if order < 1:
                raise ValueError(f"order must be >= 1, got {order}")
            raw, cont, _ = lm.count_of_counts(order)
            rows = [mkn_discounts(cont[n]) for n in range(order - 1)] + [mkn_discounts(raw[order - 1])]
            note = f"modified KN, order {order}, discounts from count-of-counts"
            max_depth, raw_top = order - 1, True
        else:
            _, cont, _ = lm.count_of_counts(depths)
            rows = [mkn_discounts(cont[n]) for n in range(depths)]
            note = f"modified KN, unbounded order, continuation counts, {depths} depths from count-of-counts"
            max_depth, raw_top = None, False
        d = np.array(rows)
        return cls(d[:, 0], d[:, 1], d[:, 2], np.zeros(len(d)), max_depth=max_depth, raw_top=raw_top, note=note)

    # ------------------------------------------------------------ persistence

    def to_dict(self) -> dict:
        """The parameters as plain JSON values."""
        return {"d1": self.d1.tolist(), "d2": self.d2.tolist(), "d3": self.d3.tolist(),
                "theta": self.theta.tolist(), "max_depth": self.max_depth, "raw_top": self.raw_top,
                "raw_all": self.raw_all, "witten_bell": self.witten_bell, "note": self.note}

    @classmethod
    def from_dict(cls, d: dict) -> "SmoothingParams":
        """Parameters from to_dict()'s output."""
        return cls(np.array(d["d1"]), np.array(d["d2"]), np.array(d["d3"]), np.array(d["theta"]),
                   max_depth=d.get("max_depth"), raw_top=bool(d.get("raw_top", False)),
                   raw_all=bool(d.get("raw_all", False)), witten_bell=bool(d.get("witten_bell", False)),
                   note=d.get("note", ""))

    def save(self, path: Union[str, Path]) -> None:
        """Write the parameters as JSON (what lm-tune writes)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Union[str, Path]) -> "SmoothingParams":
        """Parameters saved with save()."""
        return cls.from_dict(json.loads(Path(path).read_text()))

    def level_is_raw(self, depth: np.ndarray) -> np.ndarray:
        """Whether context length `depth` uses raw (undiscounted) counts."""
        if self.raw_all:
            return np.ones(depth.shape, dtype=bool)
        if self.raw_top and self.max_depth is not None:
            return depth == self.max_depth
        return np.zeros(depth.shape, dtype=bool)


def mkn_discounts(n: Sequence[float]) -> tuple[float, float, float]:
    """(D1, D2, D3+) from the numbers of n-grams seen 1, 2, 3, 4 times (Chen & Goodman 1998):
    Y = n1 / (n1 + 2 n2), D_k = k - (k + 1) Y n_{k+1} / n_k, clamped to [0, k]."""
    n1, n2, n3, n4 = (float(x) for x in list(n)[:4])
    if n1 <= 0:  # nothing to estimate from
        return (0.5, 1.0, 1.5)
    y = n1 / (n1 + 2 * n2)
    d1 = 1 - 2 * y * n2 / n1
    d2 = 2 - 3 * y * n3 / n2 if n2 > 0 else 1.0
    d3 = 3 - 4 * y * n4 / n3 if n3 > 0 else 1.5
    return (min(max(d1, 0.0), 1.0), min(max(d2, 0.0), 2.0), min(max(d3, 0.0), 3.0))


# ------------------------------------------------------------------ reference over level rows


def _level_arrays(rows: np.ndarray, params: SmoothingParams) -> dict:
    depth = rows[:, COL_DEPTH]
    raw = params.level_is_raw(depth)
    pick = lambda a, b: np.where(raw, rows[:, a], rows[:, b]).astype(np.float64)  # noqa: E731
    return {
        "pos": rows[:, COL_POS], "depth": depth,
        "cnt": pick(COL_COUNT, COL_CCOUNT), "B": pick(COL_TOTAL, COL_CTOTAL),
        "types": pick(COL_TYPES, COL_CTYPES), "n1": pick(COL_R1, COL_C1), "n2": pick(COL_R2, COL_C2),
        "n3": pick(COL_R3, COL_C3),
    }


def probs_from_levels(rows: np.ndarray, params: SmoothingParams, vocab: int,
                      positions: Optional[np.ndarray] = None) -> np.ndarray:
    """Smoothed P(token | context) for every position that has rows (levels L = 0..Lmax in
    increasing order), computed in numpy from InfiniGramLM.levels(with_cont=True) rows. `vocab`
    is the size of the uniform base (vocab_size, + 1 with end of document). The C scorer must
    agree with this to rounding (tests check it)."""
    a = _level_arrays(rows, params)
    pos = a["pos"]
    uniq, inv = np.unique(pos, return_inverse=True)
    p = np.full(len(uniq), 1.0 / vocab)
    depth = a["depth"]
    nP = len(params.d1)
    for L in range(int(depth.max()) + 1 if len(depth) else 0):
        sel = np.nonzero(depth == L)[0]
        if not len(sel):
            continue
        r = inv[sel]
        B, cnt, types = a["B"][sel], a["cnt"][sel], a["types"][sel]
        ok = B > 0
        if params.witten_bell:
            new = (cnt + types * p[r]) / np.where(ok, B + types, 1)
        else:
            j = min(L, nP - 1)
            d1, d2, d3, th = params.d1[j], params.d2[j], params.d3[j], params.theta[j]
            disc = np.where(cnt <= 0, 0, np.where(cnt == 1, d1, np.where(cnt == 2, d2, d3)))
            gamma = th + d1 * a["n1"][sel] + d2 * a["n2"][sel] + d3 * a["n3"][sel]
            new = (np.maximum(cnt - disc, 0) + gamma * p[r]) / np.where(ok, B + th, 1)
        p[r] = np.where(ok, new, p[r])
    if positions is None:
        return p
    out = np.full(len(positions), np.nan)
    out[np.searchsorted(uniq, positions)] = p
    return out


# ------------------------------------------------------------------ tuning on held-out text


def tune(rows: np.ndarray, start: SmoothingParams, vocab: int, *, depths: int = DEFAULT_UNBOUNDED_DEPTHS,
         tune_theta: bool = True, steps: int = 10, tol: float = 2e-5, progress: bool = False) -> SmoothingParams:
    """Per-depth discounts (and concentrations) that minimise the held-out negative
    log-likelihood of the positions in `rows` (InfiniGramLM.levels(with_cont=True) over held-out
    text scored against an index that excludes it), starting from `start`. L-BFGS in torch (at
    most `steps` rounds of 20 evaluations, stopping when a round gains less than `tol` nats per
    token); discounts stay inside their valid ranges through sigmoids."""
    import torch

    if start.witten_bell:
        raise ValueError("Witten-Bell has no parameters to tune")
    a = _level_arrays(rows, start)
    uniq, inv = np.unique(a["pos"], return_inverse=True)
    depth = a["depth"].astype(np.int64)
    maxL = int(depth.max()) if len(depth) else 0
    groups = []
    for L in range(maxL + 1):
        sel = np.nonzero(depth == L)[0]
        if len(sel):
            t = lambda k: torch.tensor(a[k][sel], dtype=torch.float64)  # noqa: E731
            groups.append((L, torch.tensor(inv[sel]), t("cnt"), t("B"), t("n1"), t("n2"), t("n3")))

    def init(vals: np.ndarray, hi: float) -> torch.Tensor:
        v = np.array([vals[min(j, len(vals) - 1)] for j in range(depths)]) / hi
        v = np.clip(v, 1e-4, 1 - 1e-4)
        return torch.tensor(np.log(v / (1 - v)), dtype=torch.float64, requires_grad=True)

    x1, x2, x3 = init(start.d1, 1), init(start.d2, 2), init(start.d3, 3)
    th0 = np.array([start.theta[min(j, len(start.theta) - 1)] for j in range(depths)])
    xt = torch.tensor(np.log(np.expm1(np.maximum(th0, 1e-3))), dtype=torch.float64, requires_grad=True)
    params = [x1, x2, x3] + ([xt] if tune_theta else [])

    def current() -> tuple:
        th = torch.nn.functional.softplus(xt) if tune_theta else torch.tensor(th0)
        return torch.sigmoid(x1), 2 * torch.sigmoid(x2), 3 * torch.sigmoid(x3), th

    def nll() -> torch.Tensor:
        d1, d2, d3, th = current()
        p = torch.full((len(uniq),), 1.0 / vocab, dtype=torch.float64)
        for L, r, cnt, B, n1, n2, n3 in groups:
            j = min(L, depths - 1)
            disc = torch.where(cnt <= 0, torch.zeros_like(cnt),
                               torch.where(cnt == 1, d1[j], torch.where(cnt == 2, d2[j], d3[j])))
            gamma = th[j] + d1[j] * n1 + d2[j] * n2 + d3[j] * n3
            ok = B > 0
            new = (torch.clamp(cnt - disc, min=0) + gamma * p[r]) / torch.where(ok, B + th[j], torch.ones_like(B))
            p = p.index_put((r,), torch.where(ok, new, p[r]))
        return -torch.log(p).mean()

    opt = torch.optim.LBFGS(params, lr=1, max_iter=20, line_search_fn="strong_wolfe")
    best = math.inf
    bar = progress_bar(total=steps, unit="round", desc="tuning KN (L-BFGS)", disable=not progress,
                       dynamic_ncols=True)
    for step in range(steps):
        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = nll()
            loss.backward()
            return loss
        loss = float(opt.step(closure).detach())
        bar.update(1)
        bar.set_postfix(heldout_ppl=f"{math.exp(loss):.4f}")
        gain = best - loss
        best = min(best, loss)
        if gain < tol:
            break
    bar.close()
    best = float(nll().detach())
    d1, d2, d3, th = (t.detach().numpy().copy() for t in current())
    return SmoothingParams(d1, d2, d3, th, max_depth=start.max_depth, raw_top=start.raw_top,
                           raw_all=start.raw_all,
                           note=f"tuned on {len(uniq)} held-out tokens (held-out ppl {math.exp(best):.4f}); from: {start.note}")


def fit(lm: "InfiniGramLM", heldout: Union[str, Sequence[Any]], *, start: Optional[SmoothingParams] = None,
        depths: int = DEFAULT_UNBOUNDED_DEPTHS, first: int = 1, eod: bool = False, progress: bool = True,
        **kw: Any) -> SmoothingParams:
    """Tune unbounded-order KN on held-out text: `lm` must be over an index that does NOT
    contain `heldout` (e.g. the first 90% of the training split, held-out = the last 10%); the
    parameters then serve an LM over the whole training split. Positions before `first` of each
    text are left out, as in perplexity(). Shows progress bars (counting, then each L-BFGS
    round with the held-out perplexity; `progress=False` silences them). Returns the tuned
    SmoothingParams.

    Example:
        >>> params = fit(InfiniGramLM(tune_index), heldout_text)        # doctest: +SKIP
        >>> InfiniGramLM(full_index).perplexity(val, smoothing=params)   # doctest: +SKIP
    """
    texts = [heldout] if isinstance(heldout, str) else list(heldout)
    start = start if start is not None else lm.smoothing(None)
    parts, offset = [], 0
    bar = progress_bar(total=len(texts), unit="text", desc="counting held-out levels", disable=not progress,
                       dynamic_ncols=True)
    for t in texts:
        bar.update(1)
        ids = lm.encode(t)
        r = lm.levels(ids, begin=min(first, len(ids)), max_depth=lm.max_context if start.max_depth is None
                      else start.max_depth, eod=eod, with_cont=True)
        r[:, COL_POS] += offset  # positions of different texts must not collide
        offset += len(ids)
        parts.append(r)
    bar.close()
    rows = np.concatenate(parts) if parts else np.zeros((0, 14), dtype=np.int64)
    if not len(rows):
        raise ValueError("no held-out positions to tune on")
    return tune(rows, start, lm.vocab_size + (1 if eod else 0), depths=depths, progress=progress, **kw)
