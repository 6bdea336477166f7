"""Brute-force references for the standalone LM tests: every statistic, probability and
distribution of infinigram_hf.lm.model computed by scanning raw token lists.

Conventions (as in native/include/infinigram_lm.h): the empty context's continuations are all
tokens (never end of document); with `eod`, an occurrence that ends its document continues with
EOD; the left context of an occurrence at a document start is BOS (one distinct left token).

Example:
    >>> ref = LMReference([[0, 1, 0, 1, 2]], vocab_size=3)
    >>> ref.followers((0,), eod=False)
    Counter({1: 2})
"""
from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from infinigram_hf import build_index
from infinigram_hf.lm import InfiniGramLM

def make_lm(tmp_path: Path, docs, vocab_size: int, *, shards: int = 1, max_context: int = 100,
            name: str = "ix") -> InfiniGramLM:
    cap = None
    if shards > 1:  # small shards: documents spread over several suffix arrays
        cap = max(max(len(d) for d in docs) + 1, sum(len(d) + 1 for d in docs) // shards + 1)
    idx = build_index([np.asarray(d, dtype=np.int64) for d in docs], tmp_path / name, vocab_size=vocab_size,
                      max_shard_tokens=cap, progress=False)
    if shards > 1:
        assert idx.num_shards > 1
    return InfiniGramLM(idx, max_context=max_context)


def random_corpus(seed: int, vocab: int = 3, n_docs: int = 5, max_len: int = 25) -> list:
    rng = random.Random(seed)
    docs = [[rng.randrange(vocab) for _ in range(rng.randint(1, max_len))] for _ in range(n_docs)]
    docs.append(docs[0] * 2)  # long repeats: deep matches
    return docs


EOD = "EOD"
BOS = "BOS"


def chi_square_z(observed: Dict[int, int], probs: Dict[int, float], n: int) -> float:
    """Wilson-Hilferty z-score of Pearson's chi-square statistic (no scipy needed): z > 4.5 means
    p < ~3e-6. Categories with expected count < 5 are pooled."""
    exp = {k: n * p for k, p in probs.items() if p > 0}
    assert set(observed) <= set(exp), f"sampled outside the support: {set(observed) - set(exp)}"
    big = [k for k in exp if exp[k] >= 5]
    small = [k for k in exp if exp[k] < 5]
    cells = [(observed.get(k, 0), exp[k]) for k in big]
    if small:
        cells.append((sum(observed.get(k, 0) for k in small), sum(exp[k] for k in small)))
    stat = sum((o - e) ** 2 / e for o, e in cells)
    df = max(len(cells) - 1, 1)
    return ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))


class LMReference:
    def __init__(self, docs: Sequence[Sequence[int]], vocab_size: int):
        self.docs = [list(map(int, d)) for d in docs]
        self.V = vocab_size

    # ------------------------------------------------------------ occurrences

    def occurrences(self, s: Tuple[int, ...]) -> List[Tuple[int, int]]:
        out = []
        for di, d in enumerate(self.docs):
            for p in range(len(d) - len(s) + 1):
                if tuple(d[p:p + len(s)]) == s:
                    out.append((di, p))
        return out

    def followers(self, s: Tuple[int, ...], eod: bool) -> Counter:
        """Raw continuation counts of s (EOD key for document ends, with eod)."""
        c: Counter = Counter()
        if not s:
            for d in self.docs:
                c.update(d)
            return c
        for di, p in self.occurrences(s):
            d = self.docs[di]
            if p + len(s) < len(d):
                c[d[p + len(s)]] += 1
            elif eod:
                c[EOD] += 1
        return c

    def nleft(self, s: Tuple[int, ...], end: bool = False) -> int:
        """N1+(. s); with end, only over occurrences that end their document."""
        lefts = set()
        for di, p in self.occurrences(s):
            if end and p + len(s) != len(self.docs[di]):
                continue
            lefts.add(self.docs[di][p - 1] if p > 0 else BOS)
        return len(lefts)

    def cont_followers(self, s: Tuple[int, ...], eod: bool) -> Counter:
        """Continuation counts N1+(. s w) of the continuations w of s."""
        out: Counter = Counter()
        for w in self.followers(s, eod):
            out[w] = self.nleft(s, end=True) if w == EOD else self.nleft(s + (w,))
        return out

    # ------------------------------------------------------------ methods

    def infgram(self, ctx: Sequence[int], t: int, max_context: int, eod: bool = False) -> Tuple[float, int, bool]:
        ctx = tuple(ctx)[max(0, len(ctx) - max_context):] if max_context else ()
        for L in range(len(ctx), -1, -1):
            f = self.followers(ctx[len(ctx) - L:], eod)
            T = sum(f.values())
            if T:
                return f[t] / T, L, len(f) == 1
        return 0.0, 0, False

    def backoff_levels(self, ctx: Sequence[int], k: Optional[int], max_context: int, eod: bool) -> List[Tuple[int, Counter]]:
        ctx = tuple(ctx)[max(0, len(ctx) - max_context):] if max_context else ()
        levels, last = [], 0
        for L in range(len(ctx), 0, -1):
            f = self.followers(ctx[len(ctx) - L:], eod)
            T = sum(f.values())
            if T > last:
                levels.append((L, f))
                last = T
                if k is not None and len(levels) == k:
                    break
        return levels

    def backoff(self, ctx: Sequence[int], t: int, k: Optional[int], decay: float, max_context: int,
                eod: bool = False) -> float:
        num = den = 0.0
        for i, (L, f) in enumerate(self.backoff_levels(ctx, k, max_context, eod)):
            num += decay ** i * f[t]
            den += decay ** i * sum(f.values())
        return num / den if den else 0.0

    def smooth_dist(self, ctx: Sequence[int], params, max_context: int, eod: bool = False) -> Dict:
        """The whole smoothed distribution {token or EOD: p} (params: SmoothingParams)."""
        maxd = max_context if params.max_depth is None else min(params.max_depth, max_context)
        ctx = tuple(ctx)[max(0, len(ctx) - maxd):] if maxd else ()
        keys = list(range(self.V)) + ([EOD] if eod else [])
        p = {w: 1.0 / len(keys) for w in keys}
        Lmax = -1
        for L in range(len(ctx), -1, -1):
            if sum(self.followers(ctx[len(ctx) - L:], eod).values()):
                Lmax = L
                break
        for L in range(Lmax + 1):
            s = ctx[len(ctx) - L:]
            raw = params.raw_all or (params.raw_top and params.max_depth is not None and L == params.max_depth)
            c = self.followers(s, eod) if raw else self.cont_followers(s, eod)
            B = sum(c.values())
            if not B:
                continue
            j = min(L, len(params.d1) - 1)
            if params.witten_bell:
                T = len(c)
                p = {w: (c.get(w, 0) + T * p[w]) / (B + T) for w in keys}
                continue
            d = {1: params.d1[j], 2: params.d2[j]}
            disc = lambda x: 0 if x == 0 else d.get(x, params.d3[j])  # noqa: E731
            gamma = params.theta[j] + sum(disc(x) for x in c.values())
            p = {w: (max(c.get(w, 0) - disc(c.get(w, 0)), 0) + gamma * p[w]) / (B + params.theta[j]) for w in keys}
        return p

    def count_of_counts(self, max_n: int, kmax: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        raw = np.zeros((max_n, kmax), dtype=np.uint64)
        cont = np.zeros((max_n, kmax), dtype=np.uint64)
        types = np.zeros(max_n, dtype=np.uint64)
        for n in range(1, max_n + 1):
            grams: Counter = Counter()
            for d in self.docs:
                for p in range(len(d) - n + 1):
                    grams[tuple(d[p:p + n])] += 1
            types[n - 1] = len(grams)
            for g, c in grams.items():
                if c <= kmax:
                    raw[n - 1, c - 1] += 1
                nl = self.nleft(g)
                if nl <= kmax:
                    cont[n - 1, nl - 1] += 1
        return raw, cont, types
