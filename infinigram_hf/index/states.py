"""Incremental ∞-gram queries for decoding: a context's state, extended one token at a time.

The ∞-gram distribution after a context depends only on the longest suffix of the context that
occurs in the corpus. A `DecodingState` holds that suffix's length, count and suffix-array ranges
(plain numbers). Extending a context by one token narrows those ranges once while the match
grows, and backs off (a search bounded by the current length) when it does not — about one
binary search per generated token instead of a full search of the context.

`SuffixCache` is what decoders use. It keys states by the context itself (a 128-bit hash of its
token ids), never by call order, so anything that rolls a context back stays correct:
speculative decoding rejecting drafts, beam search reordering or dropping beams, several
sequences sharing prefixes. A lookup for context ``c + [t]`` finds the state of ``c`` (or of a
context a few tokens shorter) and extends it; a context with no cached ancestor is searched from
scratch once. Distributions are cached as well, keyed by the state (contexts that end in the same
matched suffix share one entry). Results equal `index.infgram_ntd(context)` /
`index.infgram_prob(context, token)` exactly.

Example:
    >>> cache = SuffixCache(index)                          # doctest: +SKIP
    >>> ids = tokenizer.encode("def main(")                 # doctest: +SKIP
    >>> cache.ntd(ids).as_dict()                            # doctest: +SKIP   # searched once
    >>> cache.prob(ids + [42], 7).prob                       # doctest: +SKIP   # extends ids's state
    >>> d = cache.ntd_batch([ids, ids + [42]])               # doctest: +SKIP   # one C call for the rows
    >>> d.rows, d.token_ids, d.probs                         # doctest: +SKIP   # CSR, for a scatter

Thread-safe: one cache may serve several threads (dictionary updates are locked; the C calls
run without the lock and without the GIL).
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from .._core.args import max_entries_arg, max_support_arg, n_threads_arg
from .._core.ids import as_ids, one_per_row
from .._core.native import check, err_buffer, ffi, int64_len, lib, ptr
from .batch import DEFAULT_MAX_ENTRIES, as_batch, collect_ntd_batch
from .results import BatchNextTokenDistributions, BatchProbResult, NextTokenDistribution, ProbResult

if TYPE_CHECKING:
    from .infinigram_index import InfiniGramIndex


@dataclass(frozen=True)
class DecodingState:
    """The longest occurring suffix of a context, as plain data.

    ``values`` is ``[suffix_len, count, lo_0, hi_0, lo_1, hi_1, ...]`` (int64; suffix-array range
    per shard), exactly what the C core reads (`ig_state_*` in infinigram_state.h).
    """

    values: np.ndarray

    @property
    def suffix_len(self) -> int:
        """Length of the matched suffix (effective n - 1)."""
        return int(self.values[0])

    @property
    def count(self) -> int:
        """Occurrences of the matched suffix in the corpus."""
        return int(self.values[1])

    @property
    def effective_n(self) -> int:
        return self.suffix_len + 1

    @property
    def ranges(self) -> np.ndarray:
        """(n_shards, 2) suffix-array ranges [lo, hi)."""
        return self.values[2:].reshape(-1, 2)


def _ids(context: Any) -> np.ndarray:
    return as_ids(context, "context")


def init_state(index: "InfiniGramIndex", context: Any) -> DecodingState:
    """The state of a context, searched from scratch (the longest suffix that occurs)."""
    q = _ids(context)
    out = np.zeros(index.state_size, dtype=np.int64)
    err = err_buffer()
    with index.native_handle() as ix:
        rc = lib.ig_state_init(ix, ptr(q, "uint32_t"), len(q), ptr(out, "int64_t"), int64_len(out), err, len(err))
    check(rc, err)
    return DecodingState(out)


def extend_state(index: "InfiniGramIndex", state: DecodingState, context: Any) -> DecodingState:
    """The state of ``context`` given ``state``, that of ``context[:-1]``.

    ``context`` may be the whole context or any tail of it with at least ``state.suffix_len + 1``
    tokens (the matched suffix and the new token).
    """
    q = _ids(context)
    out = np.zeros(index.state_size, dtype=np.int64)
    st = np.ascontiguousarray(state.values, dtype=np.int64)
    err = err_buffer()
    with index.native_handle() as ix:
        rc = lib.ig_state_extend(ix, ptr(st, "int64_t"), int64_len(st), ptr(q, "uint32_t"), len(q), ptr(out, "int64_t"),
                                 err, len(err))
    check(rc, err)
    return DecodingState(out)


def extend_states(index: "InfiniGramIndex", states: np.ndarray, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The states of n contexts from those of the same contexts one token shorter, in one C call:
    row i of ``states`` (n, state size) is extended by the last token of
    ``values[offsets[i]:offsets[i + 1]]``, a tail of context i with at least its state's
    suffix_len + 1 tokens. Forged states and short tails are refused by the C core (ValueError)."""
    st = _stack(index, states)
    vals = np.ascontiguousarray(values, dtype=np.uint32)
    offs = np.ascontiguousarray(offsets, dtype=np.int64)
    res = np.zeros_like(st)
    err = err_buffer()
    with index.native_handle() as ix:
        rc = lib.ig_state_extend_batch(ix, ptr(st, "int64_t"), int64_len(st), ptr(vals, "uint32_t"), len(vals),
                                       ptr(offs, "int64_t"), len(st), ptr(res, "int64_t"), 0, err, len(err))
    check(rc, err)
    return res


def _stack(index: "InfiniGramIndex", states: Any) -> np.ndarray:
    if isinstance(states, np.ndarray):
        arr = states
    else:
        arr = np.stack([s.values if isinstance(s, DecodingState) else np.asarray(s) for s in states]) if len(states) \
            else np.zeros((0, index.state_size), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != index.state_size:
        raise ValueError(f"states must be DecodingStates or an (n, {index.state_size}) int64 array, got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def states_prob(index: "InfiniGramIndex", states: Any, tokens: Any, *, n_threads: int = 0) -> BatchProbResult:
    """P_∞(tokens[i] | context i) from the contexts' states (one C call)."""
    arr = _stack(index, states)
    n = len(arr)
    toks = one_per_row(tokens, n)
    count, prompt = np.zeros(max(n, 1), dtype=np.uint64), np.zeros(max(n, 1), dtype=np.uint64)
    slen, sparse = np.zeros(max(n, 1), dtype=np.int64), np.zeros(max(n, 1), dtype=np.uint8)
    err = err_buffer()
    with index.native_handle() as ix:
        rc = lib.ig_state_prob_batch(ix, ptr(arr, "int64_t"), int64_len(arr), n, ptr(toks, "uint32_t"),
                                     ptr(count, "uint64_t"), ptr(prompt, "uint64_t"), ptr(slen, "int64_t"),
                                     ptr(sparse, "uint8_t"), n_threads_arg(n_threads), err, len(err))
    check(rc, err)
    return BatchProbResult.from_counts(count[:n], prompt[:n], slen[:n], sparse[:n])


def states_ntd(index: "InfiniGramIndex", states: Any, *, max_support: Optional[int] = None,
               n_threads: int = 0, max_entries: Optional[int] = DEFAULT_MAX_ENTRIES) -> BatchNextTokenDistributions:
    """The ∞-gram next-token distributions of the contexts whose states are given (one C call;
    ``max_entries`` caps the result's size as for `infinigram_hf.index.batch.ntd_batch`)."""
    arr = _stack(index, states)
    out = ffi.new("ig_ntd_batch **")
    err = err_buffer()
    with index.native_handle() as ix:
        rc = lib.ig_ntd_batch_states(ix, ptr(arr, "int64_t"), int64_len(arr), len(arr), max_support_arg(max_support),
                                     max_entries_arg(max_entries), n_threads_arg(n_threads), out, err, len(err))
    check(rc, err)
    return collect_ntd_batch(out[0])


class _LRU:
    """A bounded OrderedDict; callers hold the cache's lock."""

    def __init__(self, max_entries: int):
        self.max = max_entries
        self.d: "OrderedDict[bytes, Any]" = OrderedDict()

    def get(self, key: bytes) -> Any:
        v = self.d.get(key)
        if v is not None:
            self.d.move_to_end(key)
        return v

    def put(self, key: bytes, value: Any) -> None:
        self.d[key] = value
        self.d.move_to_end(key)
        while len(self.d) > self.max:
            self.d.popitem(last=False)


class SuffixCache:
    """∞-gram states and distributions of contexts, keyed by context, for decoding loops.

    Args:
        index: the InfiniGramIndex to query.
        max_states: states kept (LRU); one per context seen, ~100 bytes each.
        max_distributions: next-token distributions kept (LRU), keyed by matched suffix.
        lookback: how many tokens shorter an ancestor may be and still be extended (a draft of
            k tokens accepted at once needs lookback >= k); beyond it the context is searched
            from scratch (still exact, only slower).
        max_support: None = exact distributions; an int samples contexts with more occurrences
            (rows flagged approximate).

    Example:
        >>> cache = index.suffix_cache()                         # doctest: +SKIP
        >>> for step in range(20):                                # doctest: +SKIP
        ...     d = cache.ntd(ids)          # exact P_∞(. | ids): d.token_ids, d.probs
        ...     ids = ids + [int(d.token_ids[d.counts.argmax()])]
    """

    def __init__(self, index: "InfiniGramIndex", *, max_states: int = 65536, max_distributions: int = 4096,
                 lookback: int = 16, max_support: Optional[int] = None):
        for name, v, lo in (("max_states", max_states, 1), ("max_distributions", max_distributions, 0),
                            ("lookback", lookback, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
        self.index = index
        self.lookback = lookback
        self.max_support = max_support_arg(max_support)
        self._states = _LRU(max_states)
        self._dists = _LRU(max_distributions)
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "extended": 0, "searched": 0, "dist_hits": 0, "dist_computed": 0}

    def __len__(self) -> int:
        return len(self._states.d)

    def clear(self) -> None:
        """Drop every cached state and distribution (they never go stale; this frees memory)."""
        with self._lock:
            self._states.d.clear()
            self._dists.d.clear()

    # ------------------------------------------------------------ states

    def _keys(self, q: np.ndarray) -> list[bytes]:
        """Keys of q[:len(q) - k] for k = 0 .. lookback (fewer for short contexts): one hash pass."""
        n = len(q)
        k = min(self.lookback, n)
        h = hashlib.blake2b(q[:n - k].tobytes(), digest_size=16)
        keys = [h.digest()]
        tail = q[n - k:]
        for j in range(k):
            h.update(tail[j:j + 1].tobytes())
            keys.append(h.digest())
        keys.reverse()  # keys[j] = key of q[:n - j]
        return keys

    def _state_of(self, q: np.ndarray) -> DecodingState:
        keys = self._keys(q)
        with self._lock:
            hit = self._states.get(keys[0])
            if hit is not None:
                self.stats["hits"] += 1
                return hit
            found = next((j for j in range(1, len(keys)) if keys[j] in self._states.d), None)
            base = (found, self._states.get(keys[found])) if found else None
        if base is None:
            state = init_state(self.index, q)
            new = [(keys[0], state)]
            self.stats["searched"] += 1
        else:
            j, state = base
            new = []
            for back in range(j - 1, -1, -1):  # extend through q[:n - back]
                state = extend_state(self.index, state, q[:len(q) - back])
                new.append((keys[back], state))
            self.stats["extended"] += j
        with self._lock:
            for k, s in new:
                self._states.put(k, s)
        return state

    def state(self, context: Any) -> DecodingState:
        """The state of a context (cached; extended from a cached shorter context when possible)."""
        return self._state_of(_ids(context))

    def states(self, contexts: Any, **batch_kw: Any) -> np.ndarray:
        """States of a batch of contexts as an (n, 2 + 2 * shards) int64 array. Contexts whose
        parent (one token shorter) is cached are extended in one C call; others one by one.
        ``batch_kw``: offsets= / lengths= / padding_side= as in infinigram_hf.index.batch."""
        values, offs = as_batch(contexts, name="contexts", **batch_kw)
        n, size = len(offs) - 1, self.index.state_size
        out = np.zeros((n, size), dtype=np.int64)
        rows = [values[offs[i]:offs[i + 1]] for i in range(n)]
        keys = [self._keys(r) for r in rows]
        todo_ext: list[int] = []
        todo_other: list[int] = []
        with self._lock:
            for i in range(n):
                hit = self._states.get(keys[i][0])
                if hit is not None:
                    out[i] = hit.values
                    self.stats["hits"] += 1
                elif len(keys[i]) > 1 and keys[i][1] in self._states.d:
                    out[i] = self._states.get(keys[i][1]).values
                    todo_ext.append(i)
                else:
                    todo_other.append(i)
        if todo_ext:  # one batched extension: the parent's state and the context's tail
            tails, toffs = [], [0]
            for i in todo_ext:
                need = int(out[i, 0]) + 1
                tails.append(rows[i][len(rows[i]) - need:])
                toffs.append(toffs[-1] + need)
            res = extend_states(self.index, out[todo_ext], np.concatenate(tails), np.asarray(toffs, dtype=np.int64))
            out[todo_ext] = res
            self.stats["extended"] += len(todo_ext)
            with self._lock:
                for j, i in enumerate(todo_ext):
                    self._states.put(keys[i][0], DecodingState(res[j].copy()))
        for i in todo_other:
            out[i] = self._state_of(rows[i]).values
        return out

    # ------------------------------------------------------------ queries

    def prob(self, context: Any, token: int) -> ProbResult:
        """P_∞(token | context), equal to ``index.infgram_prob(context, token)``."""
        return states_prob(self.index, [self.state(context)], [token], n_threads=1)[0]

    def prob_batch(self, contexts: Any, tokens: Any, **batch_kw: Any) -> BatchProbResult:
        """P_∞(tokens[i] | contexts[i]) for a batch."""
        return states_prob(self.index, self.states(contexts, **batch_kw), tokens)

    def ntd(self, context: Any) -> NextTokenDistribution:
        """The ∞-gram next-token distribution, equal to ``index.infgram_ntd(context)``."""
        return self.ntd_batch([_ids(context)])[0]

    def ntd_batch(self, contexts: Any, **batch_kw: Any) -> BatchNextTokenDistributions:
        """Next-token distributions of a batch of contexts (CSR; see BatchNextTokenDistributions)."""
        return self._ntd_states(self.states(contexts, **batch_kw))

    def _ntd_states(self, states: np.ndarray) -> BatchNextTokenDistributions:
        """Distributions for an (n, state size) array of states, using the distribution cache."""
        states = _stack(self.index, states)
        n = len(states)
        keys = [s.tobytes() for s in states]
        rows: list[Any] = [None] * n
        with self._lock:
            for i, k in enumerate(keys):
                rows[i] = self._dists.get(k) if self._dists.max else None
        missing = [i for i in range(n) if rows[i] is None]
        self.stats["dist_hits"] += n - len(missing)
        self.stats["dist_computed"] += len(missing)
        if missing:
            got = states_ntd(self.index, states[missing], max_support=self.max_support or None)
            with self._lock:
                for j, i in enumerate(missing):
                    a, b = int(got.offsets[j]), int(got.offsets[j + 1])
                    rows[i] = (got.token_ids[a:b], got.counts[a:b], got.total[j], got.suffix_len[j], got.sparse[j],
                               got.approximate[j])
                    if self._dists.max:
                        self._dists.put(keys[i], rows[i])
            if len(missing) == n:
                return got
        lens = np.fromiter((len(r[0]) for r in rows), dtype=np.int64, count=n)
        offs = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        cat = (lambda parts, dt: np.concatenate(parts) if parts else np.zeros(0, dtype=dt))
        return BatchNextTokenDistributions(
            offsets=offs, token_ids=cat([r[0] for r in rows], np.uint32), counts=cat([r[1] for r in rows], np.uint64),
            total=np.array([r[2] for r in rows], dtype=np.uint64), suffix_len=np.array([r[3] for r in rows], dtype=np.int64),
            sparse=np.array([r[4] for r in rows], dtype=bool), approximate=np.array([r[5] for r in rows], dtype=bool))


# SuffixCache is the door (index.suffix_cache()); the functions above are the index layer's own
# (the cache, tests, fuzzing), not public API.
__all__ = ["DecodingState", "SuffixCache"]
