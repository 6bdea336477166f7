"""Document search (the paper's SEARCHDOC): documents that contain an n-gram, or that satisfy a
CNF of n-grams -- an AND of clauses, each an OR of n-grams.

The work happens in C (native/src/search.c): the rarest clause gives candidate documents, every
other clause is checked exactly per candidate. Only when even the rarest clause has more than
``max_clause_freq`` occurrences are those sampled, and then the result is ``approximate`` with an
unbiased estimate of the number of matching documents.

Example:
    >>> index = InfiniGramIndex.open("my_index")                        # doctest: +SKIP
    >>> index.search_docs([464, 2068]).count                             # an n-gram of ids
    >>> index.search_docs("def main(")                                   # text (saved tokenizer)
    >>> res = index.search_docs([["natural language", "NLP"], ["deep learning"]])  # CNF
    >>> res.documents[0].spans   # (offset, length, clause, n-gram) of every hit in the document
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

import numpy as np

from .._core import tokenization as tk
from .._core.args import int_arg, short_repr
from .._core.native import check, err_buffer, ffi, lib, ptr
from .results import Document

MAX_CLAUSES = int(lib.IG_SEARCH_MAX_CLAUSES)
MAX_TERMS = int(lib.IG_SEARCH_MAX_TERMS)
MAX_CLAUSE_FREQ = 10_000_000  # the C core allows 2**26; this keeps the result buffer sane
MAX_MAXNUM = 10_000           # documents returned with their tokens
MAX_SPANS = 1_000_000         # span rows of one result, all documents together (32 MB as int64)
DEFAULT_MAX_CLAUSE_FREQ = 50_000
_CHECKS = {"auto": int(lib.IG_SEARCH_CHECK_AUTO), "sorted": int(lib.IG_SEARCH_CHECK_SORTED),
           "scan": int(lib.IG_SEARCH_CHECK_SCAN)}

Ngram = Tuple[int, ...]
Cnf = Tuple[Tuple[Ngram, ...], ...]


@dataclass(frozen=True)
class DocumentMatch(Document):
    """A document found by `search_docs`: a `Document` plus where the query's n-grams occur in it.

    ``spans`` is an int64 array of shape (k, 4), one row per occurrence, ordered by offset:
    (offset in the document, length, clause index, n-gram index inside the clause).
    """

    spans: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), dtype=np.int64))
    spans_capped: bool = False  # the result's max_spans was reached: later spans are not listed


@dataclass(frozen=True)
class SearchResult:
    """Result of `search_docs`.

    count: matching documents -- exact, or (when ``approximate``) an unbiased estimate.
    approximate: the rarest clause had more than max_clause_freq occurrences and was sampled.
    doc_ids: every matching document found (all of them when exact), increasing global ids.
    documents: the first ``maxnum`` of doc_ids with their tokens, metadata and spans.
    cnf: the query as token ids, ((n-gram, ...) per clause, ...), repeated n-grams and clauses
    dropped (spans index it).
    anchor_clause / anchor_count / anchor_used: the rarest clause, its number of occurrences and
    how many of those were examined.
    spans_capped: the documents' spans reached max_spans in all; the documents after the cut
    (and the rest of the one cut) list no more spans (each such document says spans_capped).
    """

    count: int
    approximate: bool
    doc_ids: np.ndarray
    documents: Tuple[DocumentMatch, ...]
    cnf: Cnf
    estimate: float
    anchor_clause: int
    anchor_count: int
    anchor_used: int
    spans_capped: bool = False

    def __len__(self) -> int:
        return len(self.documents)


# ---------------------------------------------------------------------------- the query

def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_ngram(x: Any) -> bool:
    """A str, a 1-D integer array / tensor, or a sequence of ints (empty ones are refused later)."""
    if isinstance(x, str):
        return True
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x.ndim == 1 and (x.size == 0 or np.issubdtype(x.dtype, np.integer))
    return isinstance(x, (list, tuple)) and all(_is_int(t) for t in x)


def _ids(ngram: Any, encode: Any, where: str, vocab_size: int) -> Ngram:
    if isinstance(ngram, str):
        if encode is None:
            raise ValueError(f"{where}: text needs the index's tokenizer (none is saved in the index); "
                             f"pass token ids or tokenizer=")
        ids = tuple(int(t) for t in encode(ngram))
        if not ids:
            raise ValueError(f"{where}: {ngram!r} tokenizes to nothing")
        return ids
    if hasattr(ngram, "detach"):
        ngram = ngram.detach().cpu().numpy()
    ids = tuple(int(t) for t in np.asarray(ngram).ravel())
    if not ids:
        raise ValueError(f"{where}: empty n-gram")
    for t in ids:
        if not 0 <= t < vocab_size:
            raise ValueError(f"{where}: id {t} is outside the vocabulary (size {vocab_size})")
    return ids


def parse_query(query: Any, encode: Any = None, vocab_size: int = 2 ** 32 - 1) -> Cnf:
    """An n-gram (text or ids) or a CNF (list of clauses, each a list of n-grams) -> CNF of ids.

    Example:
        >>> parse_query([5, 6])
        (((5, 6),),)
        >>> parse_query([[[5, 6], [7]], [[8]]])     # (5 6 OR 7) AND 8
        (((5, 6), (7,)), ((8,),))
    """
    if _is_ngram(query):
        return ((_ids(query, encode, "query", vocab_size),),)
    if not isinstance(query, (list, tuple)) or not query:
        raise ValueError(f"query must be an n-gram (text or token ids) or a CNF (a list of clauses, each a list "
                         f"of n-grams); got {type(query).__name__}")
    if len(query) > MAX_CLAUSES:
        raise ValueError(f"query has {len(query)} clauses; at most {MAX_CLAUSES} are allowed")
    n_given = sum(len(c) if isinstance(c, (list, tuple)) and not _is_ngram(c) else 1 for c in query)
    if n_given > MAX_TERMS:  # (counted before any n-gram is tokenized)
        raise ValueError(f"query has {n_given} n-grams; at most {MAX_TERMS} are allowed")
    clauses: List[Tuple[Ngram, ...]] = []
    for c, clause in enumerate(query):
        if _is_ngram(clause) or not isinstance(clause, (list, tuple)) or not clause:
            raise ValueError(
                f"query clause {c} must be a non-empty list of n-grams; a CNF is [[ngram, ...], ...] "
                f"(e.g. [['a', 'b'], ['c']] is (a OR b) AND c; with ids [[[1, 2], [3]], [[4]]])")
        terms: List[Ngram] = []
        for j, term in enumerate(clause):
            if not _is_ngram(term):  # (short_repr: nested or self-referential lists print safely)
                raise ValueError(f"query clause {c}, n-gram {j}: expected text or a list of token ids, "
                                 f"got {short_repr(term)}")
            ids = _ids(term, encode, f"query clause {c}, n-gram {j}", vocab_size)
            if ids not in terms:  # a repeated n-gram matches nothing new; it only repeated every span
                terms.append(ids)
        if tuple(terms) not in clauses:  # (an AND of a clause with itself)
            clauses.append(tuple(terms))
    return tuple(clauses)


def _flatten(cnf: Cnf) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    terms = [t for clause in cnf for t in clause]
    ids = np.array([i for t in terms for i in t], dtype=np.uint32)
    term_off = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in terms], out=term_off[1:])
    clause_off = np.zeros(len(cnf) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in cnf], out=clause_off[1:])
    return ids, term_off, clause_off


# ---------------------------------------------------------------------------- the search


def search_docs(index: Any, query: Any, maxnum: int = 10, *, max_clause_freq: int = DEFAULT_MAX_CLAUSE_FREQ,
                max_diff_tokens: Optional[int] = None, seed: int = 0, tokenizer: Any = None,
                decode: Optional[bool] = None, max_spans: int = MAX_SPANS, _check: str = "auto") -> SearchResult:
    """Documents of `index` matching `query` (an n-gram, or a CNF of n-grams).

    Args:
        query: token ids or text (one n-gram), or a CNF: a list of clauses (all must hold), each
            a list of n-grams (any one suffices), n-grams as text or ids.
        maxnum: documents returned in full (0 .. 10000), the first matches by document id.
        max_clause_freq: occurrences of the rarest clause examined; beyond it they are sampled
            and the result is approximate (count estimated). Other clauses are always exact.
        max_diff_tokens: None = the clauses may match anywhere in the document; k = one
            occurrence per clause with start positions at most k tokens apart.
        seed: seeds the sampling (only used when it happens).
        tokenizer: for text queries, instead of the one saved in the index.
        decode: fill Document.text (default: when the query was given as text).
        max_spans: span rows listed over all returned documents (0 .. 10^8); past it the result
            and the documents cut say spans_capped (a run of one token holds a hit per n-gram
            at every position).
        _check: "auto" | "sorted" | "scan": how clauses other than the rarest are checked (both
            exact; for tests and benchmarks).

    Example:
        >>> res = search_docs(index, [["import os"], ["sys.argv", "argparse"]], maxnum=3)  # doctest: +SKIP
        >>> res.count, [d.doc_id for d in res.documents]                                    # doctest: +SKIP
    """
    maxnum = int_arg("maxnum", maxnum, 0, MAX_MAXNUM)
    max_clause_freq = int_arg("max_clause_freq", max_clause_freq, 1, MAX_CLAUSE_FREQ)
    diff = -1 if max_diff_tokens is None else int_arg("max_diff_tokens", max_diff_tokens, 0, 2 ** 62)
    seed = int_arg("seed", seed, 0, 2 ** 64 - 1)
    max_spans = int_arg("max_spans", max_spans, 0, 10 ** 8)
    tok = tk.index_tokenizer(index, tokenizer) if tokenizer is not None else None  # (checked against the index)
    has_text = _has_text(query)
    if has_text and tok is None:
        tok = tk.index_tokenizer(index)
    encode = (lambda s: tok.encode(s, add_special_tokens=False)) if tok is not None else None
    cnf = parse_query(query, encode, index.vocab_size)
    ids, term_off, clause_off = _flatten(cnf)

    cap = max(1, min(max_clause_freq, index.num_docs))
    out = np.empty(cap, dtype=np.int64)
    n_out = ffi.new("int64_t *")
    if _check not in _CHECKS:
        raise ValueError(f"_check must be one of {sorted(_CHECKS)}, got {_check!r}")
    opts = ffi.new("ig_search_opts *", {"max_clause_freq": max_clause_freq, "max_diff_tokens": diff, "seed": seed,
                                        "check": _CHECKS[_check]})
    stats = ffi.new("ig_search_stats *")
    err = err_buffer()
    with index.native_handle() as ix:
        rc = lib.ig_search_docs(ix, ptr(ids, "uint32_t"), ptr(term_off, "int64_t"), len(term_off) - 1,
                                ptr(clause_off, "int64_t"), len(clause_off) - 1, opts, ptr(out, "int64_t"),
                                cap, n_out, stats, err, len(err))
    check(rc, err)
    doc_ids = out[:int(n_out[0])].copy()
    approximate = bool(stats.approximate)
    estimate = float(stats.estimate)
    want_text = has_text if decode is None else bool(decode)
    if want_text and tok is None:  # (an id query asking for text: the index's own tokenizer)
        tok = tk.index_tokenizer(index, light=True)
    finder = _SpanFinder(index, cnf, ids, term_off) if maxnum and len(doc_ids) else None
    docs = []
    budget = max_spans
    for d in doc_ids[:maxnum].tolist():
        doc = _document(index, d, finder, tok if want_text else None, budget)
        budget -= len(doc.spans)
        docs.append(doc)
    return SearchResult(count=int(round(estimate)) if approximate else int(stats.num_matches),
                        approximate=approximate, doc_ids=doc_ids, documents=tuple(docs), cnf=cnf, estimate=estimate,
                        anchor_clause=int(stats.anchor_clause), anchor_count=int(stats.anchor_count),
                        anchor_used=int(stats.anchor_used), spans_capped=any(d.spans_capped for d in docs))


def _has_text(query: Any) -> bool:
    """Text at the places a query may hold it: the query itself or the n-grams of its clauses
    (a loop, not a recursion: 100,000-deep or self-referential lists are refused later)."""
    if isinstance(query, str):
        return True
    if not isinstance(query, (list, tuple)):
        return False
    for clause in query:
        if isinstance(clause, str) or (isinstance(clause, (list, tuple)) and
                                       any(isinstance(t, str) for t in clause)):
            return True
    return False


class _SpanFinder:
    """Finds every occurrence of a CNF's n-grams in documents, with the per-query tables and C
    buffers set up once for all the documents of a result."""

    def __init__(self, index: Any, cnf: Cnf, ids: np.ndarray, term_off: np.ndarray):
        self.index, self.ids, self.term_off = index, ids, term_off
        self.n_terms = len(term_off) - 1
        self.table = np.stack([np.diff(term_off),                                              # length
                               np.repeat(np.arange(len(cnf)), [len(c) for c in cnf]),          # clause
                               np.concatenate([np.arange(len(c)) for c in cnf])], axis=1)      # n-gram
        self._ids_p, self._off_p = ptr(ids, "uint32_t"), ptr(term_off, "int64_t")
        self._grow(256)
        self._n = ffi.new("int64_t *")
        self._err = err_buffer()

    def _grow(self, cap: int) -> None:
        self.cap = cap
        self.offs, self.terms = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int32)
        self._offs_p, self._terms_p = ptr(self.offs, "int64_t"), ptr(self.terms, "int32_t")

    def __call__(self, doc_id: int, limit: int = MAX_SPANS) -> Tuple[np.ndarray, bool]:
        """(spans, capped): at most `limit` rows, the first by offset; capped when there are more.
        The C scan stops one hit past its buffer, and the buffer grows (x8) up to `limit`: work
        and memory follow the rows returned, not the hits in the document."""
        shard, local = self.index.doc_shard(doc_id)
        while True:
            cap = min(self.cap, limit)
            with self.index.native_handle() as ix:
                rc = lib.ig_doc_spans(ix, shard, local, self._ids_p, self._off_p, self.n_terms, self._offs_p,
                                      self._terms_p, cap, self._n, self._err, len(self._err))
            if rc != lib.IG_ERR_CAPACITY or cap >= limit:
                break
            self._grow(min(8 * self.cap, limit))
        capped = rc == lib.IG_ERR_CAPACITY
        if not capped:
            check(rc, self._err)
        n = int(self._n[0])
        out = np.empty((n, 4), dtype=np.int64)
        out[:, 0] = self.offs[:n]
        out[:, 1:] = self.table[self.terms[:n]]
        return out, capped


def doc_spans(index: Any, doc_id: int, cnf: Any, max_spans: int = MAX_SPANS) -> np.ndarray:
    """Every occurrence of a query's n-grams (ids, or a CNF of ids) in a document: rows
    (offset, length, clause, n-gram index in the clause), by offset. More than max_spans of
    them: ValueError (pass a larger max_spans, up to 10^8).

    Example:
        >>> doc_spans(index, 3, [[[1, 2]], [[5], [6]]])     # doctest: +SKIP
    """
    max_spans = int_arg("max_spans", max_spans, 0, 10 ** 8)
    cnf = parse_query(cnf, None, index.vocab_size) if not _is_cnf_of_ids(cnf) else cnf
    ids, term_off, _ = _flatten(cnf)
    spans, capped = _SpanFinder(index, cnf, ids, term_off)(doc_id, max_spans)
    if capped:
        raise ValueError(f"document {doc_id} holds more than max_spans = {max_spans:,} spans of the query; "
                         f"pass a larger max_spans")
    return spans


def _is_cnf_of_ids(cnf: Any) -> bool:
    return isinstance(cnf, tuple) and all(isinstance(c, tuple) and all(isinstance(t, tuple) for t in c) for c in cnf)


def _document(index: Any, doc_id: int, spans: _SpanFinder, tok: Any, limit: int) -> DocumentMatch:
    doc = index.get_doc(doc_id, decode=False)
    text = tok.decode(doc.token_ids.tolist()) if tok is not None else None
    rows, capped = spans(doc_id, limit)
    return DocumentMatch(doc_id=doc.doc_id, token_ids=doc.token_ids, metadata=doc.metadata, shard=doc.shard,
                         text=text, spans=rows, spans_capped=capped)
