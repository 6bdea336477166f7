"""Batched queries: one C call for a whole batch, looping in C with the GIL released and
threads across queries.

A batch can be given as
  - a list (or any sequence) of token-id sequences (lists, numpy arrays, 1-D tensors), ragged;
  - ``Ragged(values, offsets)`` or ``offsets=``: one flat id array, query i being
    ``values[offsets[i]:offsets[i+1]]`` (the layout the C core reads, zero-copy);
  - a padded 2-D array or tensor with ``lengths=`` (``padding_side`` "right" or "left", as HF
    tokenizers pad): padding is dropped whatever its value;
  - a 2-D array or tensor without lengths: every row is a full query.

``n_threads``: 0 = automatic (the CPUs this process may use, fewer for small batches), 1 = no
threads, k = up to k threads. Results never depend on it.

Example:
    >>> from infinigram_hf.index.batch import count_batch                     # doctest: +SKIP
    >>> count_batch(index, [[464, 2068], [11], []])                        # doctest: +SKIP
    array([12, 3071, 7213340])
"""
from __future__ import annotations

import array
import itertools
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import numpy as np

from .._core.args import max_entries_arg, max_support_arg, n_threads_arg
from .._core.ids import U32_CODE, U32_MAX, checked_u32, one_per_row, to_numpy
from .._core.interrupt import call_interruptibly
from .._core.native import check, err_buffer, ffi, lib, ptr
from .results import BatchNextTokenDistributions, BatchProbResult, BatchScoreResult, NextTokenDistribution

if TYPE_CHECKING:
    from .infinigram_index import InfiniGramIndex

# Entries (distinct next tokens, summed over rows) one distribution batch may hold by default:
# a row holds up to vocab_size + 1, so 10^4 short contexts of a 128k vocabulary could ask for
# 15 GiB. 2^26 entries are 768 MiB in C plus as much in numpy; None lifts the cap.
DEFAULT_MAX_ENTRIES = 1 << 26


class Ragged(NamedTuple):
    """A ragged batch: query i is ``values[offsets[i]:offsets[i+1]]``."""

    values: np.ndarray   # uint32 token ids
    offsets: np.ndarray  # int64, n + 1 entries

    @classmethod
    def from_sequences(cls, seqs: Any) -> "Ragged":
        return cls(*as_batch(seqs))

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.offsets) - 1


def _offsets_array(offsets: Any, n_values: int) -> np.ndarray:
    offs = np.ascontiguousarray(to_numpy(offsets))
    if offs.ndim != 1 or len(offs) < 1 or not np.issubdtype(offs.dtype, np.integer):
        raise ValueError(f"offsets must be a 1-D integer array of n + 1 entries, got shape {offs.shape}, dtype {offs.dtype}")
    offs = offs.astype(np.int64, copy=False)
    if offs[0] < 0 or offs[-1] > n_values or (len(offs) > 1 and (np.diff(offs) < 0).any()):
        raise ValueError(f"offsets must be non-decreasing within [0, {n_values}] (the number of values)")
    return offs


def as_batch(queries: Any, *, offsets: Any = None, lengths: Any = None, padding_side: str = "right",
             name: str = "queries") -> tuple[np.ndarray, np.ndarray]:
    """Any accepted batch form -> (values: uint32, offsets: int64 of n + 1).

    Example:
        >>> as_batch([[1, 2], [3]])
        (array([1, 2, 3], dtype=uint32), array([0, 2, 3]))
        >>> as_batch(np.array([[0, 1, 2], [0, 0, 3]]), lengths=[2, 1], padding_side="left")
        (array([1, 2, 3], dtype=uint32), array([0, 2, 3]))
    """
    if isinstance(queries, Ragged):
        queries, offsets = queries.values, queries.offsets
    if offsets is None and lengths is None and type(queries) is list and set(map(type, queries)) <= {list}:
        # Fast path for lists of int lists: C-speed conversion (negatives, ids >= 2**32 and
        # non-integers raise, and take the general path below for the message).
        offs = np.zeros(len(queries) + 1, dtype=np.int64)
        np.cumsum(np.array(list(map(len, queries)), dtype=np.int64), out=offs[1:])
        try:
            buf = array.array(U32_CODE, list(itertools.chain.from_iterable(queries)))
        except (OverflowError, TypeError):
            pass
        else:
            return (np.frombuffer(buf, dtype=np.uint32) if len(buf) else np.zeros(0, dtype=np.uint32)), offs
    if offsets is not None:
        values = np.asarray(to_numpy(queries))
        if values.ndim != 1:
            raise ValueError(f"with offsets, {name} must be one flat 1-D id array, got shape {values.shape}")
        offs = _offsets_array(offsets, len(values))
        return checked_u32(values, offs, name), offs
    if lengths is not None:
        arr = np.asarray(to_numpy(queries))
        if arr.ndim != 2:
            raise ValueError(f"with lengths, {name} must be a padded 2-D array, got shape {arr.shape}")
        lens = np.asarray(to_numpy(lengths))
        if lens.shape != (arr.shape[0],) or (lens.size and not np.issubdtype(lens.dtype, np.integer)):
            raise ValueError(f"lengths must be {arr.shape[0]} integers (one per row), got shape {lens.shape}")
        lens = lens.astype(np.int64)
        if lens.size and (lens.min() < 0 or lens.max() > arr.shape[1]):
            raise ValueError(f"lengths must lie in [0, {arr.shape[1]}] (the padded width)")
        cols = np.arange(arr.shape[1])
        if padding_side == "right":
            mask = cols[None, :] < lens[:, None]
        elif padding_side == "left":
            mask = cols[None, :] >= (arr.shape[1] - lens)[:, None]
        else:
            raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
        offs = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        return checked_u32(arr[mask], offs, name), offs
    arr = to_numpy(queries)
    if isinstance(arr, np.ndarray) and arr.ndim == 2:
        n, w = arr.shape
        offs = np.arange(n + 1, dtype=np.int64) * w
        return checked_u32(arr.reshape(-1), offs, name), offs
    if isinstance(arr, np.ndarray) and arr.ndim != 2 and arr.dtype != object:
        raise ValueError(f"{name} must be a sequence of id sequences or a 2-D array, got shape {arr.shape}")
    try:
        rows = [to_numpy(q) for q in queries]
    except TypeError as exc:
        raise ValueError(f"{name} must be a sequence of token-id sequences, got {type(queries).__name__}") from exc
    for i, r in enumerate(rows):
        if not hasattr(r, "__len__") or isinstance(r, (str, bytes)):
            raise ValueError(f"{name}[{i}] must be a sequence of token ids, got {r!r:.40} "
                             f"(a batch is a sequence of sequences; for one query call the single-query method)")
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offs = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    if rows and all(isinstance(r, np.ndarray) for r in rows):
        for i, r in enumerate(rows):
            if r.ndim != 1:
                raise ValueError(f"{name}[{i}] must be a 1-D sequence of token ids, got shape {r.shape}")
        values = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    else:  # lists of ints: numpy infers the dtype, so floats and strings are refused below
        flat = list(itertools.chain.from_iterable(rows))
        values = np.array(flat) if flat else np.zeros(0, dtype=np.int64)
        if values.ndim != 1:
            raise ValueError(f"{name} must be a sequence of 1-D id sequences")
        if values.dtype == object:  # ints beyond int64, or mixed types
            j = next(j for j, v in enumerate(flat) if not (isinstance(v, (int, np.integer)) and 0 <= v <= U32_MAX))
            row = int(np.searchsorted(offs, j, side="right") - 1)
            raise ValueError(f"{name}[{row}]: {flat[j]!r} is not a token id in the vocabulary")
    return checked_u32(values, offs, name), offs


# ---------------------------------------------------------------------------- counting


def count_batch(index: "InfiniGramIndex", queries: Any, *, offsets: Any = None, lengths: Any = None,
                padding_side: str = "right", n_threads: int = 0) -> np.ndarray:
    """Counts of every n-gram of the batch (int64 array).

    Example:
        >>> count_batch(index, [[464, 2068], [11]])                        # doctest: +SKIP
        array([12, 3071])
    """
    values, offs = as_batch(queries, offsets=offsets, lengths=lengths, padding_side=padding_side)
    n = len(offs) - 1
    out = np.zeros(max(n, 1), dtype=np.uint64)
    err = err_buffer()
    with index.native_handle() as ix:
        rc = lib.ig_count_batch(ix, ptr(values, "uint32_t"), len(values), ptr(offs, "int64_t"), n,
                                ptr(out, "uint64_t"), n_threads_arg(n_threads), err, len(err))
    check(rc, err)
    return out[:n].astype(np.int64)


# ---------------------------------------------------------------------------- probabilities


def prob_batch(index: "InfiniGramIndex", prompts: Any, tokens: Any, *, infinite: bool = True, offsets: Any = None,
               lengths: Any = None, padding_side: str = "right", n_threads: int = 0) -> BatchProbResult:
    """P(tokens[i] | prompt i) for a batch: ∞-gram (backoff) by default, fixed n with infinite=False.

    Example:
        >>> prob_batch(index, [[5, 6], [7]], [8, 9]).probs                  # doctest: +SKIP
    """
    values, offs = as_batch(prompts, offsets=offsets, lengths=lengths, padding_side=padding_side, name="prompts")
    n = len(offs) - 1
    toks = one_per_row(tokens, n)
    count, prompt = np.zeros(max(n, 1), dtype=np.uint64), np.zeros(max(n, 1), dtype=np.uint64)
    slen, sparse = np.zeros(max(n, 1), dtype=np.int64), np.zeros(max(n, 1), dtype=np.uint8)
    err = err_buffer()
    with index.native_handle() as ix:
        rc = lib.ig_prob_batch(ix, ptr(values, "uint32_t"), len(values), ptr(offs, "int64_t"), n, ptr(toks, "uint32_t"),
                               1 if infinite else 0, ptr(count, "uint64_t"), ptr(prompt, "uint64_t"),
                               ptr(slen, "int64_t"), ptr(sparse, "uint8_t"), n_threads_arg(n_threads), err, len(err))
    check(rc, err)
    return BatchProbResult.from_counts(count[:n], prompt[:n], slen[:n], sparse[:n])


# ---------------------------------------------------------------------------- next-token distributions


def collect_ntd_batch(handle: Any) -> BatchNextTokenDistributions:
    """Copy a C `ig_ntd_batch` out into numpy arrays sized exactly (the handle is freed)."""
    try:
        rows = int(lib.ig_ntd_batch_rows(handle))
        m = int(lib.ig_ntd_batch_entries(handle))
        offs = np.zeros(rows + 1, dtype=np.int64)
        toks, cnts = np.zeros(max(m, 1), dtype=np.uint32), np.zeros(max(m, 1), dtype=np.uint64)
        slen, total = np.zeros(max(rows, 1), dtype=np.int64), np.zeros(max(rows, 1), dtype=np.uint64)
        sparse, approx = np.zeros(max(rows, 1), dtype=np.uint8), np.zeros(max(rows, 1), dtype=np.uint8)
        err = err_buffer()
        rc = lib.ig_ntd_batch_copy(handle, ptr(offs, "int64_t"), ptr(toks, "uint32_t"), ptr(cnts, "uint64_t"), m,
                                   ptr(slen, "int64_t"), ptr(total, "uint64_t"), ptr(sparse, "uint8_t"),
                                   ptr(approx, "uint8_t"), err, len(err))
        check(rc, err)
    finally:
        lib.ig_ntd_batch_free(handle)
    return BatchNextTokenDistributions(offsets=offs, token_ids=toks[:m], counts=cnts[:m], total=total[:rows],
                                       suffix_len=slen[:rows], sparse=sparse[:rows].astype(bool),
                                       approximate=approx[:rows].astype(bool))


def ntd_batch(index: "InfiniGramIndex", prompts: Any, *, infinite: bool = True, max_support: Optional[int] = None,
              offsets: Any = None, lengths: Any = None, padding_side: str = "right",
              n_threads: int = 0, max_entries: Optional[int] = DEFAULT_MAX_ENTRIES) -> BatchNextTokenDistributions:
    """Exact next-token distributions of a batch (∞-gram by default; fixed n with infinite=False).

    ``max_support``: None = exact. An int caps the work per row: a context with more occurrences
    (and no precomputed distribution) is sampled, and its row is flagged ``approximate``.
    ``max_entries``: cap on the result's size (entries over all rows; InfiniGramError past it).

    Example:
        >>> d = ntd_batch(index, [[5, 6], [7]])                             # doctest: +SKIP
        >>> d[1].as_dict()                                                   # doctest: +SKIP
    """
    values, offs = as_batch(prompts, offsets=offsets, lengths=lengths, padding_side=padding_side, name="prompts")
    n = len(offs) - 1
    out = ffi.new("ig_ntd_batch **")
    err = err_buffer()
    mode = lib.IG_NTD_INFGRAM if infinite else lib.IG_NTD_NGRAM
    with index.native_handle() as ix:
        rc = lib.ig_ntd_batch_run(ix, ptr(values, "uint32_t"), len(values), ptr(offs, "int64_t"), n, mode,
                                  max_support_arg(max_support), max_entries_arg(max_entries), n_threads_arg(n_threads),
                                  out, err, len(err))
    check(rc, err)
    return collect_ntd_batch(out[0])


def suffix_probs_batch(index: "InfiniGramIndex", rows: np.ndarray, which: np.ndarray, lengths: np.ndarray, *,
                       eos_token_id: Optional[int], infinite: bool = False,
                       max_entries: Optional[int] = DEFAULT_MAX_ENTRIES) -> tuple:
    """The next-token distributions after suffixes of a batch's rows -- query i is the last
    ``lengths[i]`` ids of ``rows[which[i]]``, fixed n by default -- as the entries a mixture adds
    up: (query, token, P) int64, int64, float64 arrays, end-of-document given to
    ``eos_token_id`` (merged with its own entry where EOS is also a real next token) or, for
    None, dropped and the query's distribution renormalized; and each query's total after that
    (float64, 0: no entries). One C run and one C copy, no Python per query: a processor mixing
    several orders calls it at every decoding step for its levels. rows: (n_rows, width) ids."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    which = np.ascontiguousarray(which, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    if rows.ndim != 2 or which.shape != lengths.shape or which.ndim != 1:
        raise ValueError(f"rows must be 2-D and which, lengths 1-D of one length; got shapes {rows.shape}, "
                         f"{which.shape}, {lengths.shape}")
    n = len(which)
    out = ffi.new("ig_ntd_batch **")
    err = err_buffer()
    mode = lib.IG_NTD_INFGRAM if infinite else lib.IG_NTD_NGRAM
    with index.native_handle() as ix:
        rc = lib.ig_ntd_batch_tails(ix, ptr(rows, "int64_t"), rows.shape[0], rows.shape[1], ptr(which, "int64_t"),
                                    ptr(lengths, "int64_t"), n, mode, 0, max_entries_arg(max_entries), 0, out, err,
                                    len(err))
    check(rc, err)
    handle = out[0]
    try:
        m = int(lib.ig_ntd_batch_entries(handle))
        query, tokens, probs = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64), np.empty(m)
        totals = np.empty(n)
        got = ffi.new("int64_t *")
        eos = -1 if eos_token_id is None else int(eos_token_id)
        check(lib.ig_ntd_batch_probs(handle, index.separator_id, eos, ptr(query, "int64_t"), ptr(tokens, "int64_t"),
                                     ptr(probs, "double"), m, got, ptr(totals, "double"), err, len(err)), err)
    finally:
        lib.ig_ntd_batch_free(handle)
    k = int(got[0])
    return query[:k], tokens[:k], probs[:k], totals


# ---------------------------------------------------------------------------- dense scoring


def score_batch(index: "InfiniGramIndex", sequences: Any, *, offsets: Any = None, lengths: Any = None,
                padding_side: str = "right", n_threads: int = 0) -> BatchScoreResult:
    """Dense ∞-gram scoring of every sequence of a batch (flat arrays + offsets).

    Long sequences are split across threads; every piece starts from the exact state, so the
    numbers equal `index.score(seq)` for each sequence.

    Example:
        >>> r = score_batch(index, [[5, 6, 7], [8, 9]])                     # doctest: +SKIP
        >>> r[0].probs                                                        # doctest: +SKIP
    """
    values, offs = as_batch(sequences, offsets=offsets, lengths=lengths, padding_side=padding_side, name="sequences")
    n, m = len(offs) - 1, len(values)
    num, den = np.zeros(max(m, 1), dtype=np.uint64), np.zeros(max(m, 1), dtype=np.uint64)
    slen, sparse = np.zeros(max(m, 1), dtype=np.int64), np.zeros(max(m, 1), dtype=np.uint8)
    err = err_buffer()
    with index.native_handle() as ix:  # (Ctrl-C stops it within a second: see _interrupt)
        rc = call_interruptibly(lib.ig_score_batch, ix, ptr(values, "uint32_t"), m, ptr(offs, "int64_t"), n,
                                ptr(num, "uint64_t"), ptr(den, "uint64_t"), ptr(slen, "int64_t"),
                                ptr(sparse, "uint8_t"), n_threads_arg(n_threads), work=m, tail=(err, len(err)))
    check(rc, err)
    a, b = int(offs[0]), int(offs[-1])
    return BatchScoreResult.from_counts(num[a:b], den[a:b], slen[a:b], sparse[a:b], offsets=offs - a)


def ntd_one(index: "InfiniGramIndex", q: np.ndarray, *, infinite: bool = True,
            max_support: Optional[int] = None) -> "NextTokenDistribution":
    """One prompt's next-token distribution (q: uint32 ids) through the batch core: one search
    for the suffix, one walk, and output arrays sized exactly."""
    ints = ffi.new("int64_t[3]", [0, len(q), 0])  # offsets, then the suffix length
    out = ffi.new("ig_ntd_batch **")
    err = err_buffer()
    mode = lib.IG_NTD_INFGRAM if infinite else lib.IG_NTD_NGRAM
    with index.native_handle() as ix:
        rc = lib.ig_ntd_batch_run(ix, ptr(q, "uint32_t"), len(q), ints, 1, mode, max_support_arg(max_support), 0,
                                  1, out, err, len(err))
    check(rc, err)
    h = out[0]
    try:
        m = int(lib.ig_ntd_batch_entries(h))
        toks, cnts = np.empty(m, dtype=np.uint32), np.empty(m, dtype=np.uint64)
        tot = ffi.new("uint64_t *")
        flags = ffi.new("uint8_t[2]")
        check(lib.ig_ntd_batch_copy(h, ffi.NULL, ptr(toks, "uint32_t"), ptr(cnts, "uint64_t"), m, ints + 2, tot,
                                    flags, flags + 1, err, len(err)), err)
    finally:
        lib.ig_ntd_batch_free(h)
    return NextTokenDistribution.from_counts(toks, cnts, tot[0], ints[2], flags[0], flags[1])
