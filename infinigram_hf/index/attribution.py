"""Tracing texts back to the corpus: verbatim spans with their documents (`attribute`) and the
longest corpus match at every position (`creativity`), for one text or a batch, in one C call
(one pass of ∞-gram states per text: native/include/infinigram_trace.h has the exact rules).

Example:
    >>> a = index.attribute(tokenizer.encode(" the quick brown fox"), min_len=2)   # doctest: +SKIP
    >>> [(s.start, s.end, s.count) for s in a.ranked()]                          # doctest: +SKIP
    >>> index.creativity(ids).index(5)      # share of tokens in no corpus 5-gram  # doctest: +SKIP
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence

import numpy as np

from .._core.args import int_arg, n_threads_arg, opt_int_arg
from .._core.interrupt import call_interruptibly
from .._core.native import check, err_buffer, ffi, lib, ptr
from .batch import as_batch

if TYPE_CHECKING:
    from .infinigram_index import InfiniGramIndex

U64_MAX = 2**64 - 1
UNSEEN_LOGPROB = -10000.0  # the official engine's unigram log-probability of an unseen token


@dataclass(frozen=True)
class SpanDocument:
    """One occurrence of a span: the document (global id, shard, metadata), where the span starts
    in it (`offset`, tokens) and a window of the document around it (`window`, starting at
    `window_start`; the match is window[offset - window_start : + span length])."""

    doc_id: int
    shard: int
    offset: int
    metadata: dict = field(default_factory=dict)
    window: Optional[np.ndarray] = None
    window_start: int = 0

    def as_dict(self, length: int, tokenizer: Any = None) -> dict:
        d: dict[str, Any] = {"doc_id": self.doc_id, "shard": self.shard, "offset": self.offset,
                             "metadata": self.metadata}
        if self.window is not None:
            a = self.offset - self.window_start
            w = self.window.tolist()
            d["window_start"] = self.window_start
            if tokenizer is not None:
                d["before"], d["match"], d["after"] = (tokenizer.decode(w[:a]), tokenizer.decode(w[a:a + length]),
                                                       tokenizer.decode(w[a + length:]))
            else:
                d["window"] = w
        return d


@dataclass(frozen=True)
class Span:
    """Tokens [start, end) of the text occur verbatim in the corpus `count` times.
    `unigram_logprob_sum`: the sum of the span's tokens' unigram log-probabilities (natural log;
    more negative = more surprising, so more telling about provenance). `docs`: the first
    occurrences (shard order, suffix-array order inside a shard), at most max_docs of them."""

    start: int
    end: int
    count: int
    unigram_logprob_sum: float
    docs: tuple = ()

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Attribution:
    """The verbatim spans of one text (`ids`), in text order (increasing start and end)."""

    ids: np.ndarray
    spans: tuple

    def ranked(self) -> list:
        """Spans the way a reader wants them: longest first, then most surprising, then by start."""
        return sorted(self.spans, key=lambda s: (-s.length, s.unigram_logprob_sum, s.start))

    def merged(self) -> list:
        """Overlapping (or touching) spans merged for display: a list of (start, end, [span indexes])."""
        out: list = []
        for i, s in enumerate(self.spans):
            if out and s.start <= out[-1][1]:
                a, b, members = out[-1]
                out[-1] = (a, max(b, s.end), members + [i])
            else:
                out.append((s.start, s.end, [i]))
        return out

    def covered(self, min_len: int = 1) -> np.ndarray:
        """Bool per token: inside a span of at least min_len tokens."""
        mask = np.zeros(len(self.ids), dtype=bool)
        for s in self.spans:
            if s.length >= min_len:
                mask[s.start:s.end] = True
        return mask

    def as_dict(self, tokenizer: Any = None) -> dict:
        """JSON-ready: ids, and every span with its documents (texts decoded with `tokenizer`)."""
        spans = []
        for s in self.spans:
            d = {"start": s.start, "end": s.end, "length": s.length, "count": s.count,
                 "unigram_logprob_sum": s.unigram_logprob_sum,
                 "docs": [doc.as_dict(s.length, tokenizer) for doc in s.docs]}
            if tokenizer is not None:
                d["text"] = tokenizer.decode(self.ids[s.start:s.end].tolist())
            spans.append(d)
        return {"ids": self.ids.tolist(), "spans": spans}


@dataclass(frozen=True)
class Creativity:
    """Longest corpus matches of one text: match_len[l] = the length of the longest prefix of
    ids[l:] that occurs (the official engine's creativity() gives rs[l] = l + match_len[l])."""

    ids: np.ndarray
    match_len: np.ndarray

    @property
    def rs(self) -> np.ndarray:
        return np.arange(len(self.match_len), dtype=np.int64) + self.match_len

    @property
    def copy_len(self) -> np.ndarray:
        """Per token i: the longest corpus match ending at i (inclusive), i.e. how long the
        verbatim copy is that token i extends (the start of the match ending at j is the first l
        with rs[l] >= j: rs never decreases)."""
        j = np.arange(1, len(self.match_len) + 1)
        return j - np.searchsorted(self.rs, j, side="left")

    def covered(self, n: int) -> np.ndarray:
        """Bool per token: inside some corpus match of at least n tokens."""
        n = int_arg("n", n, 1)
        if len(self.match_len) == 0:
            return np.zeros(0, dtype=bool)
        ends = np.where(self.match_len >= n, self.rs, 0)
        return np.maximum.accumulate(ends) > np.arange(len(ends))

    def index(self, n: int) -> float:
        """The creativity index of Lu et al. (2024) for n-grams of n tokens: the share of tokens
        covered by no corpus span of at least n tokens (nan for an empty text)."""
        cov = self.covered(n)
        return float("nan") if len(cov) == 0 else float(1.0 - cov.mean())

    def curve(self, ns: Iterable[int]) -> dict:
        """{n: index(n)} for several n."""
        return {int(n): self.index(n) for n in ns}


def _flags(index: "InfiniGramIndex", ids: Any, name: str) -> Optional[np.ndarray]:
    """A set of ids (any iterable, or a bool mask of vocab_size) as C flags; None stays None."""
    if ids is None:
        return None
    v = index.vocab_size
    arr = np.asarray(sorted(ids) if isinstance(ids, (set, frozenset)) else ids)
    if arr.dtype == bool:
        if arr.shape != (v,):
            raise ValueError(f"{name}: a mask must have vocab_size = {v} entries, got shape {arr.shape}")
        return np.ascontiguousarray(arr, dtype=np.uint8)
    if arr.size and (arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0 or arr.max() >= v):
        raise ValueError(f"{name} must be token ids in [0, {v}) or a bool mask of {v}, got {arr!r}"[:300])
    flags = np.zeros(v, dtype=np.uint8)
    flags[arr.astype(np.int64)] = 1
    return flags


def unigram_logprobs(index: "InfiniGramIndex", tokens: np.ndarray) -> np.ndarray:
    """ln(count(t) / total) per token, total counting every token and document separator (the
    official engine's definition); UNSEEN_LOGPROB for a token that never occurs."""
    uniq, inv = np.unique(tokens, return_inverse=True)
    if len(uniq) == 0:
        return np.zeros(0)
    counts = index.count_batch(uniq.reshape(-1, 1).astype(np.uint32), n_threads=1).astype(np.float64)
    total = sum(index._shard_info(s)[1] for s in range(index.num_shards))
    with np.errstate(divide="ignore"):
        lp = np.where(counts > 0, np.log(np.maximum(counts, 1)) - math.log(max(total, 1)), UNSEEN_LOGPROB)
    return lp[inv]


def creativity_batch(index: "InfiniGramIndex", texts: Any, *, offsets: Any = None, lengths: Any = None,
                     padding_side: str = "right", n_threads: int = 0) -> list:
    """`Creativity` of every text of a batch (batch forms: `infinigram_hf.index.batch`)."""
    values, offs = as_batch(texts, offsets=offsets, lengths=lengths, padding_side=padding_side, name="texts")
    n, m = len(offs) - 1, len(values)
    match = np.zeros(max(m, 1), dtype=np.int64)
    err = err_buffer()
    with index.native_handle() as ix:  # (Ctrl-C stops it: infinigram_hf._core.interrupt)
        rc = call_interruptibly(lib.ig_creativity_batch, ix, ptr(values, "uint32_t"), m, ptr(offs, "int64_t"), n,
                                ptr(match, "int64_t"), n_threads_arg(n_threads), work=m, tail=(err, len(err)))
    check(rc, err)
    return [Creativity(values[offs[i]:offs[i + 1]].copy(), match[offs[i]:offs[i + 1]].copy()) for i in range(n)]


def attribute_batch(index: "InfiniGramIndex", texts: Any, *, min_len: int = 1, max_count: Optional[int] = None,
                    delimiters: Any = None, word_starts: Any = None, max_docs: int = 10,
                    context: Optional[int] = 16, offsets: Any = None, lengths: Any = None,
                    padding_side: str = "right", n_threads: int = 0) -> list:
    """`Attribution` of every text of a batch: its verbatim spans with counts, unigram
    log-probability sums and documents.

    min_len: shortest span kept (tokens, >= 1). max_count: spans occurring more often are dropped
    (None: no limit); a frequent span says nothing about where a text comes from.
    delimiters: token ids a span may not cross (it may end with one), e.g. newline and ".".
    word_starts: None, or the token ids that begin a word (ids or a bool mask; see
    `infinigram_hf.index.word_starts` to derive them from a tokenizer): then a span starts with
    such a token and is followed by one (or ends the text). max_docs: occurrences resolved per
    span (0: none). context: tokens of document shown on each side of a match (None: no window).
    """
    min_len = int_arg("min_len", min_len, 1)
    max_count = opt_int_arg("max_count", max_count, 1, U64_MAX, "no limit")
    max_docs = int_arg("max_docs", max_docs, 0, 1 << 20)
    context = opt_int_arg("context", context, 0, 1 << 20, "no window")
    delim = _flags(index, delimiters, "delimiters")
    ws = _flags(index, word_starts, "word_starts")
    values, offs = as_batch(texts, offsets=offsets, lengths=lengths, padding_side=padding_side, name="texts")
    n, m, S = len(offs) - 1, len(values), index.num_shards
    slots = max(m - (int(offs[0]) if n else 0), 1)
    n_spans = np.zeros(max(n, 1), dtype=np.int64)
    sl, sr = np.zeros(slots, dtype=np.int64), np.zeros(slots, dtype=np.int64)
    sc = np.zeros(slots, dtype=np.uint64)
    # Suffix-array ranges (n_shards per span slot) only when documents are asked for: they are
    # the bulk of the memory (16 bytes per token and shard).
    ranges = max_docs > 0
    lo, hi = (np.zeros(slots * S, dtype=np.int64), np.zeros(slots * S, dtype=np.int64)) if ranges else (None, None)
    opts = ffi.new("ig_attribute_opts *")
    opts.min_len, opts.max_count = min_len, U64_MAX if max_count is None else max_count
    opts.delimiter = ffi.NULL if delim is None else ptr(delim, "uint8_t")
    opts.word_start = ffi.NULL if ws is None else ptr(ws, "uint8_t")
    err = err_buffer()
    with index.native_handle() as ix:  # (Ctrl-C stops it: infinigram_hf._core.interrupt)
        rc = call_interruptibly(lib.ig_attribute_batch, ix, ptr(values, "uint32_t"), m, ptr(offs, "int64_t"), n, opts,
                                ptr(n_spans, "int64_t"), ptr(sl, "int64_t"), ptr(sr, "int64_t"), ptr(sc, "uint64_t"),
                                ptr(lo, "int64_t") if ranges else ffi.NULL, ptr(hi, "int64_t") if ranges else ffi.NULL,
                                n_threads_arg(n_threads), work=m, tail=(err, len(err)))
    check(rc, err)
    base = offs[:n] - (offs[0] if n else 0)
    keep = np.concatenate([np.arange(b, b + k) for b, k in zip(base, n_spans[:n])]) if n else np.zeros(0, np.int64)
    keep = keep.astype(np.int64)
    docs = _resolve_docs(index, lo.reshape(-1, S)[keep], hi.reshape(-1, S)[keep], sl[keep], sr[keep], max_docs,
                         context) if ranges else [()] * len(keep)
    lps = unigram_logprobs(index, values[offs[0]:offs[-1]]) if n else np.zeros(0)
    cum = np.concatenate([[0.0], np.cumsum(lps)])
    out, k = [], 0
    for i in range(n):
        a = int(offs[i] - offs[0])
        spans = []
        for _ in range(int(n_spans[i])):
            j = keep[k]
            l, r = int(sl[j]), int(sr[j])
            spans.append(Span(l, r, int(sc[j]), float(cum[a + r] - cum[a + l]), docs[k]))
            k += 1
        out.append(Attribution(values[offs[i]:offs[i + 1]].copy(), tuple(spans)))
    return out


def _resolve_docs(index: "InfiniGramIndex", lo: np.ndarray, hi: np.ndarray, sl: np.ndarray, sr: np.ndarray,
                  max_docs: int, context: Optional[int]) -> list:
    """Per span: its first max_docs occurrences as SpanDocuments (windows read when context)."""
    k = len(lo)
    if k == 0 or max_docs == 0:
        return [()] * k
    lo, hi = np.ascontiguousarray(lo), np.ascontiguousarray(hi)
    shard = np.zeros(k * max_docs, dtype=np.int32)
    doc, off = np.zeros(k * max_docs, dtype=np.int64), np.zeros(k * max_docs, dtype=np.int64)
    n_out = np.zeros(k, dtype=np.int64)
    err = err_buffer()
    out = []
    with index.native_handle() as ix:
        rc = call_interruptibly(lib.ig_locate_ranges, ix, ptr(lo, "int64_t"), ptr(hi, "int64_t"), k, max_docs,
                                ptr(shard, "int32_t"), ptr(doc, "int64_t"), ptr(off, "int64_t"), ptr(n_out, "int64_t"),
                                work=k * max_docs, tail=(err, len(err)))
        check(rc, err)
        for i in range(k):
            length = int(sr[i] - sl[i])
            docs = []
            for j in range(i * max_docs, i * max_docs + int(n_out[i])):
                s, d, o = int(shard[j]), int(doc[j]), int(off[j])
                window, start = None, 0
                if context is not None:
                    window, start = _window(ix, s, d, o - context, o + length + context)
                docs.append(SpanDocument(int(index._shard_docs[s] + d), s, o, index._docmeta[s].get(d) or {},
                                         window, start))
            out.append(tuple(docs))
    return out


def _window(ix: Any, shard: int, doc: int, begin: int, end: int) -> tuple:
    cap = max(end - max(begin, 0), 0)
    buf = np.zeros(max(cap, 1), dtype=np.uint32)
    b0, n = ffi.new("int64_t *"), ffi.new("int64_t *")
    err = err_buffer()
    check(lib.ig_doc_window(ix, shard, doc, begin, end, ptr(buf, "uint32_t"), cap, b0, n, err, len(err)), err)
    return buf[:int(n[0])].copy(), int(b0[0])
