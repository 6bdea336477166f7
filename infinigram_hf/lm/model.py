"""InfiniGramLM: the ∞-gram as a standalone language model over an index -- scoring, finite
perplexity, next-token distributions and generation, with the hot loops in C (native/src/lm.c).

Methods (`method=`):

* ``"infgram"`` -- the paper's ∞-gram: counts of the longest suffix of the context that continues
  in the corpus. Zero probabilities happen (infinite perplexity); sampling from it copies
  documents verbatim once the match is unique.
* ``"backoff"`` -- selective back-off interpolation (N. Barry, "Generating Shakespeare without
  neural networks"): levels from the longest matching suffix down to length 1, a new level each
  time the number of continuations strictly grows, at most `k` of them, mixed as raw counts
  weighted decay^i; a zero probability is floored (1e-10) when scoring.
* ``"kn"`` -- interpolated modified Kneser-Ney over every context length up to `order - 1`
  (fixed order) or unbounded (order=None, the default), with exact continuation counts (see
  :mod:`infinigram_hf.smoothing`). Finite perplexity, distributions sum to 1.
* ``"wb"`` -- Witten-Bell interpolation over the same levels.

The index may be a `DifferenceIndex` (``index.difference(removed)``): every method then counts
net occurrences (the continuation counts and count-of-counts too), so scores, distributions,
smoothing estimates and samples are those of the same LM over an index rebuilt without the
removed documents (sampling with a seed: that index built as one shard).

Example:
    >>> lm = InfiniGramLM(InfiniGramIndex.open("shakespeare_idx"))    # doctest: +SKIP
    >>> lm.perplexity([val_text], method="backoff").perplexity          # doctest: +SKIP
    >>> print(lm.generate("First Citizen:\\n", max_new_tokens=200, seed=0).text)  # doctest: +SKIP
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple, Union

import numpy as np

from .._core import tokenization as tk
from .._core.args import INT32_MAX, UNSET, float_arg, int_arg, opt_int_arg
from .._core.native import check, err_buffer, ffi, lib, ptr
from .._core.ids import as_ids
from ..index import DifferenceIndex, InfiniGramIndex, is_index
from ..index.results import TokenProbs
from .generation import sample_continuation
from .smoothing import SmoothingParams

METHODS = ("infgram", "backoff", "kn", "wb")
DEFAULT_METHOD = "kn"  # finite perplexity, proper distributions: one default for scoring and sampling
_CODES = {"infgram": lib.IG_LM_INFGRAM, "backoff": lib.IG_LM_BACKOFF, "kn": lib.IG_LM_SMOOTH,
          "wb": lib.IG_LM_SMOOTH}
NSTAT = int(lib.IG_LM_NSTAT)
MAX_CONTEXT = 1 << 20        # the core's caps (native/src/lm.c)
MAX_CACHE_ENTRIES = 1 << 26


@dataclass(frozen=True)
class LMScoreResult(TokenProbs):
    """Scoring one sequence under an LM method: entry i is P(ids[i] | ids[:i]) with the longest
    context suffix used (effective n - 1) and whether that context has one continuation."""


@dataclass(frozen=True)
class LMPerplexityResult:
    """exp(mean negative log-likelihood) over the scored tokens of all texts."""

    perplexity: float
    nll: float          # mean natural-log loss per token
    num_tokens: int
    num_texts: int
    seconds: float
    method: str

    @property
    def bits_per_token(self) -> float:
        return self.nll / math.log(2)

    @property
    def tokens_per_second(self) -> float:
        return self.num_tokens / self.seconds if self.seconds > 0 else math.inf


def _check_method_options(method: str, **opts: Any) -> None:
    """A known method, and no option of another method (method="kn", k=3 once ignored k silently)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    given = {n for n, v in opts.items() if v is not UNSET and v is not None}
    stray = sorted(given & {"k", "decay"}) if method != "backoff" else []
    stray += sorted(given & {"order", "smoothing"}) if method not in ("kn", "wb") else []
    if stray:
        applies = {"k": "'backoff'", "decay": "'backoff'", "order": "'kn' and 'wb'", "smoothing": "'kn' and 'wb'"}
        raise ValueError(f"{', '.join(stray)} {'applies' if len(stray) == 1 else 'apply'} to method "
                         f"{applies[stray[0]]} only, not {method!r}")


class InfiniGramLM:
    """The ∞-gram LM over an index (see the module docstring for the methods).

    Args:
        index: an open InfiniGramIndex, an index directory, or a DifferenceIndex (an index minus
            the documents of another: the LM of an index rebuilt without them; a removed index
            that turns out not to be a subset makes the call that meets a negative net count
            raise ValueError).
        tokenizer: for text in / text out; default: the one saved in the index (bytes for a
            byte-level index). Without one, pass and get token ids.
        max_context: longest context any method may use (the post caps it at 100).
        cache_entries: the most entries the continuation-count cache grows to (0 = default,
            2^18; it starts small, so memory follows use).
        method, k, decay, order, smoothing: the LM's distribution, used by score(), perplexity(),
            distribution() and generate() alike unless a call names another method (default:
            interpolated Kneser-Ney, unbounded order; back-off uses every level unless k= is given,
            so what you score is what you sample). A call's options override these for the same
            method; a call naming another method starts from that method's defaults.

    One handle is used under a lock: for parallel scoring, make one InfiniGramLM per thread.
    """

    def __init__(self, index: Union[InfiniGramIndex, DifferenceIndex, str, Path], tokenizer: Any = None, *,
                 max_context: int = 100, cache_entries: int = 0, method: str = DEFAULT_METHOD,
                 k: Any = UNSET, decay: Any = UNSET, order: Any = UNSET, smoothing: Any = UNSET):
        max_context = int_arg("max_context", max_context, 0, MAX_CONTEXT)
        _check_method_options(method, k=k, decay=decay, order=order, smoothing=smoothing)
        self.method = method
        self._method_opts = {n: v for n, v in (("k", k), ("decay", decay), ("order", order),
                                                ("smoothing", smoothing)) if v is not UNSET}
        cache_entries = int_arg("cache_entries", cache_entries, 0, MAX_CACHE_ENTRIES)
        if not is_index(index) and not isinstance(index, DifferenceIndex):
            index = InfiniGramIndex.open(index)
        self.index = index
        self.tokenizer = tk.index_tokenizer(index, tokenizer)
        self.max_context = int(max_context)
        self._lock = threading.Lock()
        self._estimated: Dict[Optional[int], SmoothingParams] = {}
        self._coc: Optional[Tuple[int, np.ndarray, np.ndarray, np.ndarray]] = None
        # Over a RemoteIndex, score() and distribution() (so perplexity() too) run on the server
        # with the server's own max_context; the other methods need the index in this process.
        self._remote = bool(getattr(index, "is_remote", False))
        if self._remote:
            self._lm = None
            return
        out = ffi.new("ig_lm **")
        err = err_buffer()
        with self._native() as ix:
            if isinstance(index, DifferenceIndex):
                rc = lib.ig_diff_lm_new(out, *ix, self.max_context, int(cache_entries), err, len(err))
            else:
                rc = lib.ig_lm_new(out, ix, self.max_context, int(cache_entries), err, len(err))
        check(rc, err)
        self._lm = ffi.gc(out[0], lib.ig_lm_free)

    def _native(self) -> Any:
        """``with self._native() as ix:`` the index's C handle held open for one call; over a
        DifferenceIndex the pair (index, removed)."""
        if isinstance(self.index, DifferenceIndex):
            return self.index.native_handles()
        return self.index.native_handle()

    def __repr__(self) -> str:
        opts = "".join(f", {n}={v!r}" for n, v in self._method_opts.items() if n != "smoothing")
        return f"InfiniGramLM({self.index!r}, method={self.method!r}{opts}, max_context={self.max_context})"

    def _resolve(self, method: Optional[str], opts: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
        """The method and options of one call: the LM's own unless the call names another method."""
        if method is None or method == self.method:
            return self.method, {**self._method_opts, **opts}
        return method, opts

    @property
    def vocab_size(self) -> int:
        """Ids the LM scores: the index's vocabulary."""
        return self.index.vocab_size

    # ------------------------------------------------------------ text <-> ids

    def encode(self, text: Union[str, Sequence[int], np.ndarray]) -> np.ndarray:
        """Text (with the LM's tokenizer) or token ids -> uint32 ids."""
        if isinstance(text, str):
            if self.tokenizer is None:
                raise ValueError("this index has no saved tokenizer: pass token ids or tokenizer=")
            return as_ids(tk.encode_texts(self.tokenizer, [text])[0])
        return as_ids(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids -> text with the LM's tokenizer (ValueError without one)."""
        if self.tokenizer is None:
            raise ValueError("this index has no saved tokenizer: decode the ids yourself")
        return self.tokenizer.decode([int(i) for i in ids])

    # ------------------------------------------------------------ configuration

    def smoothing(self, order: Optional[int] = None, method: str = "kn") -> SmoothingParams:
        """Default smoothing parameters: modified KN discounts estimated from this index's
        count-of-counts (cached), or Witten-Bell."""
        if method == "wb":
            return SmoothingParams.witten_bell_params(None if order is None else order - 1)
        if order not in self._estimated:
            self._estimated[order] = SmoothingParams.modified_kn(self, order)
        return self._estimated[order]

    def _config(self, method: str, *, k: Any = UNSET, decay: Any = UNSET, floor: float = 0.0,
                eod: bool = False, max_context: Optional[int] = None, order: Any = UNSET,
                smoothing: Any = UNSET) -> Tuple[Any, list]:
        """A C ig_lm_config for the method, and the buffers it points into (keep them alive).
        An option of another method is refused (method="kn", k=3 once ignored k silently)."""
        _check_method_options(method, k=k, decay=decay, order=order, smoothing=smoothing)
        k = None if k is UNSET else k
        decay = 0.1 if decay is UNSET else decay
        order = None if order is UNSET else order
        smoothing = None if smoothing is UNSET else smoothing
        mc = self.max_context if max_context is None else int_arg("max_context", max_context, 0, self.max_context)
        if k is not None and not (isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k < 0):
            k = int_arg("k", k, 1, INT32_MAX, "levels; None or -1 for all")
        cfg = ffi.new("ig_lm_config *")
        cfg.method = _CODES[method]
        cfg.max_context = mc
        cfg.eod = int(bool(eod))
        cfg.k = -1 if k is None or k < 0 else int(k)
        cfg.decay = float_arg("decay", decay, 0.0, 1.0, lo_open=True)
        cfg.floor = float_arg("floor", floor, 0.0, 1.0)
        keep: list = []
        if method in ("kn", "wb"):
            order = opt_int_arg("order", order, 1, MAX_CONTEXT + 1, "unbounded")
            params = smoothing if smoothing is not None else self.smoothing(order, method)
            if order is not None and params.max_depth is not None and params.max_depth != order - 1:
                raise ValueError(f"smoothing parameters are for order {params.max_depth + 1}, not {order}")
            depth = params.max_depth if params.max_depth is not None else (mc if order is None else order - 1)
            sm = cfg.smooth
            sm.max_depth = min(int(depth), mc)
            sm.raw_top = int(params.raw_top and depth <= mc)
            sm.raw_all = int(params.raw_all)
            sm.witten_bell = int(params.witten_bell)
            sm.n_params = len(params.d1)
            for name in ("d1", "d2", "d3", "theta"):
                arr = getattr(params, name)
                keep.append(arr)
                setattr(sm, name, ptr(arr, "double"))
        return cfg, keep

    # ------------------------------------------------------------ scoring

    def score(self, ids: Union[str, Sequence[int], np.ndarray], method: Optional[str] = None,
              **opts: Any) -> LMScoreResult:
        """P(ids[i] | ids[:i]) for every position under `method` (default: the LM's; options: k,
        decay, floor, eod, max_context, order, smoothing; see the module docstring)."""
        method, opts = self._resolve(method, opts)
        q = self.encode(ids)
        if method == "backoff":
            opts.setdefault("floor", 1e-10)
        if self._remote:
            a = self.index.call("lm_score", {"method": method, "options": opts}, {"ids": q})[1]
            return LMScoreResult(probs=a["probs"], suffix_len=a["suffix_len"], sparse=a["sparse"].astype(bool))
        cfg, keep = self._config(method, **opts)
        n = len(q)
        probs = np.zeros(n)
        slen = np.zeros(n, dtype=np.int64)
        sparse = np.zeros(n, dtype=np.uint8)
        err = err_buffer()
        with self._lock, self._native():
            rc = lib.ig_lm_score(self._lm, cfg, ptr(q, "uint32_t"), n, ptr(probs, "double"),
                                 ptr(slen, "int64_t"), ptr(sparse, "uint8_t"), err, len(err))
        check(rc, err)
        return LMScoreResult(probs=probs, suffix_len=slen, sparse=sparse.astype(bool))

    def perplexity(self, texts: Union[str, Iterable[Any]], method: Optional[str] = None, *, start: int = 1,
                   text_column: str = "text", **opts: Any) -> LMPerplexityResult:
        """Perplexity over texts (strings or id sequences, or a `datasets.Dataset` with a
        `text_column` or input_ids), each scored on its own; positions before `start` (default
        1: the first token has no context) are not counted. Back-off floors zero probabilities
        at 1e-10 (floor=); the ∞-gram may give inf."""
        columns = getattr(texts, "column_names", None)
        if type(texts).__module__.startswith("datasets.") and isinstance(columns, list):
            if text_column in columns:
                texts = texts[text_column]
            elif "input_ids" in columns:
                texts = texts["input_ids"]
            else:
                raise ValueError(f"the dataset has no {text_column!r} column (columns: {columns}); pass text_column=")
        if isinstance(texts, (str, np.ndarray)) or (isinstance(texts, Sequence) and texts and
                                                      isinstance(texts[0], (int, np.integer))):
            texts = [texts]
        start = int_arg("start", start, 0)
        method, opts = self._resolve(method, opts)
        t0 = time.perf_counter()
        total, count, n_texts = 0.0, 0, 0
        for text in texts:
            probs = self.score(text, method, **opts).probs[start:]
            n_texts += 1
            count += len(probs)
            with np.errstate(divide="ignore"):
                total += float(-np.log(probs).sum())
        secs = time.perf_counter() - t0
        nll = total / count if count else float("nan")
        return LMPerplexityResult(perplexity=math.exp(nll) if count else float("nan"), nll=nll,
                                num_tokens=count, num_texts=n_texts, seconds=secs, method=method)

    def distribution(self, context: Union[str, Sequence[int], np.ndarray], method: Optional[str] = None,
                     **opts: Any) -> np.ndarray:
        """Dense next-token distribution after `context` (method: default the LM's): vocab_size + 1
        probabilities, the last one being end of document (0 unless eod=True). Sums to 1."""
        method, opts = self._resolve(method, opts)
        q = self.encode(context)
        if self._remote:
            return np.array(self.index.call("lm_distribution", {"method": method, "options": opts}, {"ids": q})[1]["probs"])
        cfg, keep = self._config(method, **opts)
        out = np.zeros(self.vocab_size + 1)
        err = err_buffer()
        with self._lock, self._native():
            rc = lib.ig_lm_distribution(self._lm, cfg, ptr(q, "uint32_t"), len(q), ptr(out, "double"), err, len(err))
        check(rc, err)
        return out

    # ------------------------------------------------------------ statistics

    def levels(self, ids: Union[str, Sequence[int], np.ndarray], *, begin: int = 0, end: Optional[int] = None,
               max_depth: Optional[int] = None, eod: bool = False, with_cont: bool = True,
               chunk_rows: int = 1 << 20) -> np.ndarray:
        """Per-position, per-context-length statistics (rows of NSTAT int64; columns in
        smoothing.COL_*): what every method is computed from. Positions [begin, end)."""
        q = self.encode(ids)
        n = len(q)
        # every size is checked before the chunk buffer sized by it is made (max_depth=2**40 once
        # asked for 112 TiB)
        begin = int_arg("begin", begin, 0, n)
        end = n if end is None else int_arg("end", end, begin, n)
        depth = self.max_context if max_depth is None else int_arg("max_depth", max_depth, 0, self.max_context)
        cap = max(int_arg("chunk_rows", chunk_rows, 1, 1 << 26), depth + 2)
        parts = []
        pos = begin
        rows_out, next_pos = ffi.new("int64_t *"), ffi.new("int64_t *")
        err = err_buffer()
        while pos < end:
            buf = np.zeros((cap, NSTAT), dtype=np.int64)
            with self._lock, self._native():
                rc = lib.ig_lm_levels(self._lm, ptr(q, "uint32_t"), n, pos, end, depth, int(eod), int(with_cont),
                                      ptr(buf, "int64_t"), cap, rows_out, next_pos, err, len(err))
            check(rc, err)
            parts.append(buf[:rows_out[0]])
            pos = int(next_pos[0])
        return np.concatenate(parts) if parts else np.zeros((0, NSTAT), dtype=np.int64)

    def count_of_counts(self, max_n: int, kmax: int = 4) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(raw, cont, types): raw[n-1, k-1] = n-grams seen exactly k times, cont[n-1, k-1] =
        n-grams g with N1+(. g) = k, types[n-1] = distinct n-grams; n = 1..max_n. One pass over
        the suffix array (O(tokens * max_n)); cached for the largest max_n asked so far."""
        # checked before allocating max_n * kmax counters (the core caps max_n at 4096)
        max_n, kmax = int_arg("max_n", max_n, 1, 4096), int_arg("kmax", kmax, 1, 1 << 20)
        if max_n * kmax > 1 << 22:
            raise ValueError(f"max_n * kmax must be at most {1 << 22}, got {max_n} * {kmax}")
        max_n, kmax = int(max_n), int(kmax)
        if self._coc is None or self._coc[0] < max_n or self._coc[1].shape[1] < kmax:
            raw = np.zeros((max_n, kmax), dtype=np.uint64)
            cont = np.zeros((max_n, kmax), dtype=np.uint64)
            types = np.zeros(max_n, dtype=np.uint64)
            err = err_buffer()
            outs = (ptr(raw, "uint64_t"), ptr(cont, "uint64_t"), ptr(types, "uint64_t"), err, len(err))
            with self._native() as ix:
                if isinstance(self.index, DifferenceIndex):
                    rc = lib.ig_diff_lm_count_of_counts(*ix, max_n, kmax, *outs)
                else:
                    rc = lib.ig_lm_count_of_counts(ix, max_n, kmax, *outs)
            check(rc, err)
            self._coc = (max_n, raw, cont, types)
        _, raw, cont, types = self._coc
        return raw[:max_n, :kmax], cont[:max_n, :kmax], types[:max_n]

    def clear_cache(self) -> None:
        """Drop the continuation-count cache (it never goes stale; this only frees memory)."""
        with self._lock:
            lib.ig_lm_clear_cache(self._lm)

    # ------------------------------------------------------------ generation

    def _sample_chunk(self, cfg: Any, smp: Any, ctx: np.ndarray, n: int,
                      state: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Up to n sampled tokens after ctx (C loop); `state` (4 uint64 of xoshiro256**) advances
        in place. Returns (ids, suffix_len, matches, ended: 0 length / 1 end of document)."""
        out = np.zeros(n, dtype=np.uint32)
        sl = np.zeros(n, dtype=np.int64)
        mt = np.zeros(n, dtype=np.uint64)
        n_out, ended = ffi.new("int64_t *"), ffi.new("int *")
        err = err_buffer()
        with self._lock, self._native():
            rc = lib.ig_lm_generate(self._lm, cfg, smp, ptr(ctx, "uint32_t"), len(ctx), n, ptr(state, "uint64_t"),
                                    ffi.NULL, 0, ptr(out, "uint32_t"), ptr(sl, "int64_t"), ptr(mt, "uint64_t"),
                                    n_out, ended, err, len(err))
        check(rc, err)
        k = int(n_out[0])
        return out[:k], sl[:k], mt[:k], int(ended[0])

    def generate(self, prompt: Union[str, Sequence[int], np.ndarray] = "", max_new_tokens: int = 200,
                 method: Optional[str] = None, **kwargs: Any) -> Any:
        """Sample a continuation of `prompt` from the LM's distribution (or `method`'s); see
        infinigram_hf.lm.generation.sample_continuation for every option (method, k, decay,
        greedy / temperature / top_k / top_p, seed, stop strings and the constraints
        starts_with / ends_with / contains / min_length / max_length)."""
        method_opts = {n: kwargs.pop(n) for n in ("k", "decay", "order", "smoothing") if n in kwargs}
        method, method_opts = self._resolve(method, method_opts)
        return sample_continuation(self, self._config, self._sample_chunk, prompt, max_new_tokens,
                                   method=method, **method_opts, **kwargs)
