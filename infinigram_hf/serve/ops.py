"""The batched operations of the server: a named op, JSON params and numpy arrays in, the same
out (the body format is `infinigram_hf.index.wire`). Each op calls only the public query API of
the index it serves, so anything with that API (an `InfiniGramIndex`, a `DifferenceIndex`, a
fan-out over several machines) can be served; the decoding-state and drafter ops need an index
with a native handle and answer 400 on others.

Every op checks its input and caps (`Limits`) before any work: a ValueError here becomes a 400.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ..index.states import extend_states, states_ntd

Arrays = dict[str, np.ndarray]
Result = tuple[dict[str, Any], Arrays]


@dataclass(frozen=True)
class Limits:
    """Caps of one server, on top of the in-process API's own (RELIABILITY.md)."""

    max_body_bytes: int = 64 << 20      # request body
    max_batch: int = 4096               # rows of a batched op
    max_ntd_entries: int = 1 << 22      # entries of the distributions of one request
    max_clause_freq: int = 1_000_000    # search_docs / count CNF work
    max_docs: int = 1000                # documents returned by one search
    time_budget_s: float = 30.0         # per request; past it 504 (dense scoring stops in C)
    max_inflight: int = 64              # requests in progress per worker; past it 503 + Retry-After


def _flag(params: dict, name: str, default: bool) -> bool:
    v = params.get(name, default)
    if not isinstance(v, bool):
        raise ValueError(f"{name} must be true or false, got {v!r}")
    return v


def _opt_int(params: dict, name: str, lo: int, hi: int) -> Optional[int]:
    v = params.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"{name} must be an int in [{lo}, {hi}] or null, got {v!r}")
    return v


def _array(arrays: Arrays, name: str, kinds: str = "iu", ndim: int = 1) -> np.ndarray:
    a = arrays.get(name)
    if a is None:
        raise ValueError(f"array {name!r} is missing")
    if a.dtype.kind not in kinds or a.ndim != ndim:
        raise ValueError(f"array {name!r} must be {ndim}-D of an integer dtype, got {a.dtype} with shape {a.shape}")
    return a


def files_identity(paths: Any) -> Optional[str]:
    """What tells these index files from any others: a hash of every file's name, size, inode
    and modification time, in each directory. The same in every worker and after a restart on
    the same files; another build (or files replaced in place) gives another. Clients send it back
    with each op, so decoding states they kept from one index are never read against another
    (the C core's checks catch a state outside the index, not one of another index that fits)."""
    h = hashlib.sha256()
    try:
        for d in paths:
            for e in sorted(os.scandir(d), key=lambda e: e.name):
                if e.is_file():
                    st = e.stat()
                    h.update(f"{d}/{e.name}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns};".encode())
    except OSError:
        return None
    return h.hexdigest()[:32] if paths else None


class ServedIndex:
    """One index the server answers for, with what the ops keep between requests: a shared
    `SuffixCache` (keyed by context, so clients cannot disturb each other's answers), drafters
    by parameters, and an `InfiniGramLM` for scoring (all made on first use)."""

    def __init__(self, name: str, index: Any, limits: Limits):
        self.name, self.index, self.limits = name, index, limits
        self.identity = files_identity(getattr(index, "paths", None) or [])
        self._lock = threading.Lock()
        self._cache: Any = None
        self._drafters: "OrderedDict[str, Any]" = OrderedDict()
        self._lm: Any = None

    def info(self) -> dict[str, Any]:
        ix = self.index
        out: dict[str, Any] = {"name": self.name}
        for key in ("num_tokens", "num_docs", "vocab_size", "separator_id", "eos_token_id", "token_width",
                    "num_shards", "state_size", "tokenizer_name", "vocab_fingerprint"):
            out[key] = getattr(ix, key, None)
        out["native"] = hasattr(ix, "native_handle")
        out["identity"] = self.identity
        out["ops"] = sorted(OPS)
        metas = getattr(ix, "metas", None)
        # the build metadata, without host paths (the server never says where its files are)
        out["metas"] = [{k: v for k, v in m.items() if "path" not in k and "dir" not in k} for m in metas or []]
        return out

    def cache(self) -> Any:
        with self._lock:
            if self._cache is None:
                self._cache = self.index.suffix_cache(max_states=1 << 18, max_distributions=1 << 14, lookback=16)
            return self._cache

    def drafter(self, options: Any) -> Any:
        if not isinstance(options, dict):
            raise ValueError(f"drafter must be an object of InfiniGramDrafter arguments, got {options!r}")
        allowed = {"max_draft", "min_match", "match_ratio", "min_count", "min_share", "min_joint", "prompt_lookup",
                   "lookup_min_match", "lookup_max_match", "source", "eos_token_id"}
        extra = set(options) - allowed
        if extra:
            raise ValueError(f"unknown drafter arguments {sorted(extra)}; allowed: {sorted(allowed)}")
        key = json.dumps(options, sort_keys=True)
        with self._lock:
            d = self._drafters.get(key)
            if d is not None:
                self._drafters.move_to_end(key)
                return d
        from ..lm.drafter import InfiniGramDrafter
        d = InfiniGramDrafter(self.index, adaptive=False, **options)
        with self._lock:
            self._drafters[key] = d
            while len(self._drafters) > 64:
                self._drafters.popitem(last=False)
        return d

    def lm(self) -> Any:
        with self._lock:
            if self._lm is None:
                from ..lm.model import InfiniGramLM
                self._lm = InfiniGramLM(self.index)
            return self._lm

    # ------------------------------------------------------------ helpers

    def batch(self, arrays: Arrays, name: str = "values", offsets: str = "offsets") -> tuple[np.ndarray, np.ndarray]:
        values = _array(arrays, name)
        offsets = _array(arrays, offsets)
        if len(offsets) - 1 > self.limits.max_batch:
            raise ValueError(f"at most {self.limits.max_batch} rows per request (--max-batch), got {len(offsets) - 1}")
        return values, offsets


def _ntd_arrays(d: Any) -> Arrays:
    return {"offsets": d.offsets, "token_ids": d.token_ids, "counts": d.counts, "total": d.total,
            "suffix_len": d.suffix_len, "sparse": d.sparse, "approximate": d.approximate}


def _probs_arrays(r: Any) -> Arrays:
    return {"counts": r.counts, "prompt_counts": r.prompt_counts, "suffix_len": r.suffix_len, "sparse": r.sparse}


# ---------------------------------------------------------------------------- the ops


def op_count(s: ServedIndex, p: dict, a: Arrays) -> Result:
    v, o = s.batch(a)
    return {}, {"counts": s.index.count_batch(v, offsets=o)}


def op_prob(s: ServedIndex, p: dict, a: Arrays) -> Result:
    v, o = s.batch(a)
    r = s.index.infgram_prob_batch(v, _array(a, "tokens"), offsets=o, infinite=_flag(p, "infinite", True))
    return {}, _probs_arrays(r)


def op_ntd(s: ServedIndex, p: dict, a: Arrays) -> Result:
    v, o = s.batch(a)
    d = s.index.infgram_ntd_batch(v, offsets=o, infinite=_flag(p, "infinite", True),
                                  max_support=_opt_int(p, "max_support", 1, 1 << 40),
                                  max_entries=s.limits.max_ntd_entries)
    return {}, _ntd_arrays(d)


def op_score(s: ServedIndex, p: dict, a: Arrays) -> Result:
    v, o = s.batch(a)
    r = s.index.score_batch(v, offsets=o)
    return {}, {**_probs_arrays(r), "offsets": r.offsets}


def op_suffix_len(s: ServedIndex, p: dict, a: Arrays) -> Result:
    v, o = s.batch(a)
    return {}, {"suffix_len": np.array([s.index.infgram_suffix_len(v[o[i]:o[i + 1]]) for i in range(len(o) - 1)],
                                       dtype=np.int64)}


def _cached_or_plain(s: ServedIndex) -> Any:
    return s.cache() if hasattr(s.index, "suffix_cache") else None


def op_cache_ntd(s: ServedIndex, p: dict, a: Arrays) -> Result:
    """∞-gram distributions of decoding contexts through the server's SuffixCache: equal to
    op_ntd, about one binary search per new token of a context seen one step earlier."""
    v, o = s.batch(a)
    cache = _cached_or_plain(s)
    d = cache.ntd_batch(v, offsets=o) if cache is not None else s.index.infgram_ntd_batch(v, offsets=o)
    if len(d.token_ids) > s.limits.max_ntd_entries:
        raise ValueError(f"the distributions hold {len(d.token_ids)} entries, more than the server's "
                         f"{s.limits.max_ntd_entries} per request: send fewer rows")
    return {}, _ntd_arrays(d)


def op_cache_prob(s: ServedIndex, p: dict, a: Arrays) -> Result:
    v, o = s.batch(a)
    cache = _cached_or_plain(s)
    toks = _array(a, "tokens")
    r = cache.prob_batch(v, toks, offsets=o) if cache is not None else s.index.infgram_prob_batch(v, toks, offsets=o)
    return {}, _probs_arrays(r)


def op_states(s: ServedIndex, p: dict, a: Arrays) -> Result:
    v, o = s.batch(a)
    return {}, {"states": s.cache().states(v, offsets=o)}


def op_rows_ntd(s: ServedIndex, p: dict, a: Arrays) -> Result:
    """A decoding step of a batch whose client keeps the rows' states (`RemoteRowStates`): rows
    marked ``grown`` are the previous step's row plus one token, sent as their state and their
    tail (``tail_values``/``tail_offsets``: the matched suffix and the new token); the other rows
    are sent whole (``values``/``offsets``) and found through the server's cache. The answer is
    every row's new state and its next-token distribution: the same as op_cache_ntd on the whole
    contexts, for about one binary search per row and a few hundred bytes."""
    grown = _array(a, "grown", "bu").astype(bool)
    n, size = len(grown), s.index.state_size
    if n > s.limits.max_batch:
        raise ValueError(f"at most {s.limits.max_batch} rows per request (--max-batch), got {n}")
    all_grown = n > 0 and bool(grown.all())  # a decoding loop's usual step: no row to place or look up
    ext, other = (None, ()) if all_grown else (np.flatnonzero(grown), np.flatnonzero(~grown))
    n_ext = n if all_grown else len(ext)
    out = None if all_grown else np.zeros((n, size), dtype=np.int64)
    if n_ext:
        states = _array(a, "states", "i", ndim=2)
        if states.shape != (n_ext, size):
            raise ValueError(f"states must be ({n_ext}, {size}) for the {n_ext} grown rows, got {states.shape}")
        tv, to = s.batch(a, "tail_values", "tail_offsets")
        if len(to) != n_ext + 1:
            raise ValueError(f"tail_offsets must hold {n_ext + 1} values (one tail per grown row), got {len(to)}")
        extended = extend_states(s.index, states, tv, to)
        if all_grown:
            out = extended
        else:
            out[ext] = extended
    if len(other):
        values, offsets = s.batch(a)
        if len(offsets) != len(other) + 1:
            raise ValueError(f"offsets must hold {len(other) + 1} values (one context per other row), got {len(offsets)}")
        out[other] = s.cache().states(values, offsets=offsets)
    d = states_ntd(s.index, out, max_entries=s.limits.max_ntd_entries)
    return {}, {**_ntd_arrays(d), "states": out}


def _state(s: ServedIndex, a: Arrays) -> np.ndarray:
    st = _array(a, "state")
    size = s.index.state_size
    if len(st) != size:
        raise ValueError(f"state must hold {size} int64 values for this index, got {len(st)}")
    return np.array(st, dtype=np.int64)  # a writable copy: draft steps advance it in place


def op_draft_step(s: ServedIndex, p: dict, a: Arrays) -> Result:
    d = s.drafter(p.get("drafter", {}))
    seq = np.asarray(_array(a, "seq"), dtype=np.int64)
    state = _state(s, a) if "state" in a else None
    n_new = _opt_int(p, "n_new", 0, len(seq)) or 0
    limit = _opt_int(p, "limit", 0, 1 << 16) or 0
    caps = p.get("caps", [-1, -1])
    if not (isinstance(caps, list) and len(caps) == 2 and all(type(c) is int for c in caps)):
        raise ValueError(f"caps must be two ints, got {caps!r}")
    n, out, cnt, tot, match, src = d.step_call(seq, state, n_new, limit, tuple(caps))
    arrays = {"tokens": out[:n].copy(), "counts": cnt[:n].copy(), "totals": tot[:n].copy()}
    if state is not None:
        arrays["state"] = state
    return {"match": match, "src": src}, arrays


def op_draft_chain(s: ServedIndex, p: dict, a: Arrays) -> Result:
    d = s.drafter(p.get("drafter", {}))
    r = d.infgram_chain(_state(s, a), _opt_int(p, "max_tokens", 0, 1 << 16) or 0)
    return {"source": r.source, "match_len": r.match_len}, {"tokens": r.tokens, "counts": r.counts, "totals": r.totals}


def op_draft_children(s: ServedIndex, p: dict, a: Arrays) -> Result:
    d = s.drafter(p.get("drafter", {}))
    toks, cnts, child, total = d.children(_state(s, a), _opt_int(p, "k", 0, 1 << 16) or 0)
    return {"total": total}, {"tokens": toks, "counts": cnts, "states": child}


def op_draft_tree(s: ServedIndex, p: dict, a: Arrays) -> Result:
    d = s.drafter(p.get("drafter", {}))
    t = d.best_first(_state(s, a), max_nodes=p.get("max_nodes"), max_depth=p.get("max_depth"),
                     width=p.get("width", 3), min_prob=p.get("min_prob", 0.1))
    return {}, {"tokens": t.tokens, "parents": t.parents, "depth": t.depth}


def op_lm_score(s: ServedIndex, p: dict, a: Arrays) -> Result:
    method = p.get("method", "kn")
    opts = p.get("options", {})
    if not isinstance(opts, dict) or "smoothing" in opts:
        raise ValueError("options must be an object of JSON values (smoothing= is not available remotely)")
    r = s.lm().score(_array(a, "ids"), method, **opts)
    return {}, {"probs": r.probs, "suffix_len": r.suffix_len, "sparse": r.sparse}


def op_lm_distribution(s: ServedIndex, p: dict, a: Arrays) -> Result:
    opts = p.get("options", {})
    if not isinstance(opts, dict) or "smoothing" in opts:
        raise ValueError("options must be an object of JSON values (smoothing= is not available remotely)")
    return {}, {"probs": s.lm().distribution(_array(a, "ids"), p.get("method", "kn"), **opts)}


OPS: dict[str, Callable[[ServedIndex, dict, Arrays], Result]] = {
    "count": op_count, "prob": op_prob, "ntd": op_ntd, "score": op_score, "suffix_len": op_suffix_len,
    "cache_ntd": op_cache_ntd, "cache_prob": op_cache_prob, "states": op_states, "rows_ntd": op_rows_ntd,
    "draft_step": op_draft_step, "draft_chain": op_draft_chain, "draft_children": op_draft_children,
    "draft_tree": op_draft_tree, "lm_score": op_lm_score, "lm_distribution": op_lm_distribution,
}
# ops whose answer depends only on the request (all of them): the client may retry them
IDEMPOTENT = frozenset(OPS)
