"""Decoding states and the drafter's steps over shard groups, combined exactly.

A router state is ``[L, C, group 0's state, group 1's state, ...]``: each group's own decoding
state (``[L_g, c_g, ranges of its shards]``: the longest suffix of the context that occurs in
that group), and in front the union's suffix length L = max L_g and count C = the sum of c_g over
the groups with L_g = L (the *active* groups: a suffix occurs in the union iff it occurs in some
group, and a group where L_g < L holds no occurrence of the length-L suffix). Distributions and
probabilities at a state add up the active groups' answers. Each group extends its own state with
its C core (`SuffixCache`, `ig_draft_step`), so a decoding step costs each group what it costs a
single index; the router only takes maxima and sums.

The drafter's C calls (`ig_draft_step`, `ig_draft_chain`, `ig_draft_children`, `ig_draft_tree`,
native/src/draft.c) are re-stated here over router states, decision for decision: candidates are
listed exactly up to IG_DRAFT_EXACT_MAX occurrences and sampled at the same suffix-array ranks
above, ties go to the smaller id, thresholds and caps are the C code's. A chain narrows the
active groups by the chosen token; a group whose occurrences do not continue with it is marked
unknown (L_g = -1) and searched afresh from the context at the next step that has one.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

import numpy as np

from .._core.ids import as_ids, one_per_row
from .._core.native import ffi, lib, ptr
from ..index.batch import as_batch
from ..index.results import BatchNextTokenDistributions, BatchProbResult, NextTokenDistribution, ProbResult
from ..index.states import DecodingState
from . import combine

if TYPE_CHECKING:
    from .serving import ShardRouter

EXACT_MAX = int(lib.IG_DRAFT_EXACT_MAX)
SAMPLES = int(lib.IG_DRAFT_SAMPLES)
UNKNOWN = -1  # L_g of a group whose state a chain left behind (searched again from the context)


class StateLayout:
    """Where each group's state sits in a router state."""

    def __init__(self, groups: Sequence[Sequence[int]]):
        self.groups = [list(g) for g in groups]
        sizes = [2 + 2 * len(g) for g in self.groups]
        self.starts = [2 + int(s) for s in np.concatenate([[0], np.cumsum(sizes)[:-1]])]
        self.sizes = sizes
        self.size = 2 + int(sum(sizes))
        # (global shard, group, its place in the group), in shard order
        self.by_shard = sorted((s, g, k) for g, shards in enumerate(self.groups) for k, s in enumerate(shards))

    def check(self, states: Any) -> np.ndarray:
        arr = np.asarray(states.values if isinstance(states, DecodingState) else states, dtype=np.int64)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] != self.size:
            raise ValueError(f"states must be router states of {self.size} int64 values, got shape {arr.shape}")
        return arr

    def part(self, states: np.ndarray, g: int) -> np.ndarray:
        return np.ascontiguousarray(states[:, self.starts[g]:self.starts[g] + self.sizes[g]])

    def join(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """Router states from every group's states (rows alike)."""
        n = len(parts[0])
        out = np.zeros((n, self.size), dtype=np.int64)
        for g, p in enumerate(parts):
            out[:, self.starts[g]:self.starts[g] + self.sizes[g]] = p
        return self.summarize(out)

    def summarize(self, states: np.ndarray) -> np.ndarray:
        """Fill in L and C from the groups' states (in place; returned)."""
        lens = np.stack([states[:, s] for s in self.starts], axis=1)
        counts = np.stack([states[:, s + 1] for s in self.starts], axis=1)
        states[:, 0] = lens.max(axis=1)
        states[:, 1] = np.where(lens == states[:, :1], counts, 0).sum(axis=1)
        return states

    def active(self, states: np.ndarray) -> np.ndarray:
        """(rows, groups): the groups holding each row's union suffix."""
        lens = np.stack([states[:, s] for s in self.starts], axis=1)
        counts = np.stack([states[:, s + 1] for s in self.starts], axis=1)
        return (lens == states[:, :1]) & (counts > 0)


def keep_rows(offsets: np.ndarray, tokens: np.ndarray, counts: np.ndarray, keep: np.ndarray
              ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CSR of distributions with the rows not kept emptied."""
    sizes = np.diff(offsets) * keep
    sel = np.repeat(keep, np.diff(offsets))
    new = np.zeros(len(offsets), dtype=np.int64)
    np.cumsum(sizes, out=new[1:])
    return new, tokens[sel], counts[sel]


def merge_active(parts: Sequence[Tuple[np.ndarray, ...]], active: np.ndarray, lens: np.ndarray
                 ) -> BatchNextTokenDistributions:
    """One batch of distributions from the groups' (offsets, tokens, counts, totals), each
    counted only in the rows where the group is active."""
    n = len(lens)
    kept = [keep_rows(np.asarray(p[0], dtype=np.int64), p[1], p[2], active[:, g]) for g, p in enumerate(parts)]
    o, t, c = combine.merge_ntd(kept, n)
    total = np.zeros(n, dtype=np.uint64)
    for g, p in enumerate(parts):
        total += np.where(active[:, g], np.asarray(p[3], dtype=np.uint64), 0).astype(np.uint64)
    return BatchNextTokenDistributions(offsets=o, token_ids=t, counts=c, total=total, suffix_len=lens.astype(np.int64),
                                       sparse=np.diff(o) == 1, approximate=np.zeros(n, dtype=bool))


def combine_probs(parts: Sequence[Tuple[np.ndarray, ...]]) -> BatchProbResult:
    """P_∞ from every group's (suffix_len, counts, prompt counts, single next token) at its own
    suffix: the longest suffix over the groups, counts of the groups that hold it."""
    lens = np.stack([np.asarray(p[0], dtype=np.int64) for p in parts], axis=1)
    top = lens.max(axis=1) if len(lens) else np.zeros(0, dtype=np.int64)
    act = lens == top[:, None]
    counts = sum(np.where(act[:, g], np.asarray(p[1], dtype=np.uint64), 0) for g, p in enumerate(parts))
    prompt = [np.where(act[:, g], np.asarray(p[2], dtype=np.uint64), 0) for g, p in enumerate(parts)]
    sparse = combine.combine_sparse(prompt, [p[3] for p in parts])
    return BatchProbResult.from_counts(np.asarray(counts, dtype=np.uint64), np.sum(prompt, axis=0).astype(np.uint64),
                                       top, sparse)


class RoutedSuffixCache:
    """What `InfiniGramIndex.suffix_cache()` gives decoders, over shard groups: every group
    keeps its own `SuffixCache` (states by context, extended one token at a time), the router
    combines (one fan-out per call, whatever the batch size)."""

    max_support = None

    def __init__(self, router: "ShardRouter"):
        self.router = router
        self.stats = {"requests": 0}

    def __len__(self) -> int:
        return 0

    def clear(self) -> None:
        """Nothing is kept on this side (each group's cache is keyed by context)."""

    def _batch(self, contexts: Any, kw: dict) -> Tuple[np.ndarray, np.ndarray]:
        self.stats["requests"] += 1
        return as_batch(contexts, name="contexts", **{k: kw[k] for k in ("offsets", "lengths", "padding_side")
                                                      if k in kw})

    def states(self, contexts: Any, **batch_kw: Any) -> np.ndarray:
        """Router states of a batch of contexts."""
        values, offs = self._batch(contexts, batch_kw)
        return self.router.layout.join(self.router._fanout("cache_states", values, offs))

    def state(self, context: Any) -> DecodingState:
        return DecodingState(self.states([as_ids(context, "context")])[0])

    def ntd_batch(self, contexts: Any, **batch_kw: Any) -> BatchNextTokenDistributions:
        values, offs = self._batch(contexts, batch_kw)
        parts = self.router._fanout("cache_ntd", values, offs)
        lens = np.stack([np.asarray(p[0], dtype=np.int64) for p in parts], axis=1)
        top = lens.max(axis=1) if len(lens) else np.zeros(0, dtype=np.int64)
        return merge_active([p[1:] for p in parts], lens == top[:, None], top)

    def ntd(self, context: Any) -> NextTokenDistribution:
        return self.ntd_batch([as_ids(context, "context")])[0]

    def prob_batch(self, contexts: Any, tokens: Any, **batch_kw: Any) -> BatchProbResult:
        values, offs = self._batch(contexts, batch_kw)
        toks = one_per_row(tokens, len(offs) - 1)
        return combine_probs(self.router._fanout("cache_prob", values, offs, toks))

    def prob(self, context: Any, token: int) -> ProbResult:
        return self.prob_batch([as_ids(context, "context")], [token])[0]


# ---------------------------------------------------------------------------- the drafter's steps


def draft_cap(max_draft: int, match_ratio: float, match: int, limit: int) -> int:
    """ig_draft_step's cap: ceil(match_ratio * match) at most max_draft, and at most limit."""
    cap = max_draft
    if match_ratio > 0:
        c = math.ceil(match_ratio * match)
        if c < cap:
            cap = int(c)
    return min(cap, limit)


def _one_request(fn: Any) -> Any:
    """A draft call's fan-outs share one deadline (the router's per-request one)."""
    import functools

    @functools.wraps(fn)
    def wrapped(self: "RoutedDraftCalls", *args: Any, **kw: Any) -> Any:
        with self.router.one_request():
            return fn(self, *args, **kw)
    return wrapped


def _by_count(pairs: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """(token, count) most frequent first, ties to the smaller id (draft.c's by_cnt_desc)."""
    return sorted(pairs, key=lambda tc: (-tc[1], tc[0]))


class RoutedDraftCalls:
    """`ig_draft_step`, `ig_draft_chain`, `ig_draft_children` and `ig_draft_tree` over router
    states (see the module docstring); the interface of `RemoteDraftCalls`."""

    def __init__(self, router: "ShardRouter", options: dict):
        self.router, self.layout = router, router.layout
        self.o = dict(options)
        self.eos = -1 if options.get("eos_token_id") is None else int(options["eos_token_id"])
        self.separator = router.separator_id

    # ------------------------------------------------------------ primitives over groups

    def _ntd_at(self, state: np.ndarray) -> Tuple[List[Tuple[int, int]], int]:
        """Exact (token, count) after the union suffix of one state, and its count."""
        act = self.layout.active(state[None, :])[0]
        only = [g for g in range(len(act)) if act[g]]
        parts = self.router._fanout_each("state_ntd", {g: (self.layout.part(state[None, :], g),) for g in only})
        pairs: dict = {}
        for p in parts.values():
            for t, c in zip(p[1].tolist(), p[2].tolist()):
                pairs[t] = pairs.get(t, 0) + int(c)
        return list(pairs.items()), int(state[1])

    def _counts_of(self, state: np.ndarray, tokens: Sequence[int]) -> List[int]:
        """count(union suffix + t) for each token."""
        act = self.layout.active(state[None, :])[0]
        only = [g for g in range(len(act)) if act[g]]
        toks = np.asarray(tokens, dtype=np.uint32)
        reps = {g: (np.repeat(self.layout.part(state[None, :], g), len(toks), axis=0), toks) for g in only}
        parts = self.router._fanout_each("state_counts", reps)
        out = np.zeros(len(toks), dtype=np.uint64)
        for p in parts.values():
            out += np.asarray(p, dtype=np.uint64)
        return [int(x) for x in out]

    def _sampled(self, state: np.ndarray, cap: int, total: int) -> List[Tuple[int, int]]:
        """draft.c's candidates() above IG_DRAFT_EXACT_MAX: evenly spaced ranks of every shard
        in proportion to its share (in shard order), the best few counted exactly."""
        act = self.layout.active(state[None, :])[0]
        asks: dict = {}
        h, room = 0, SAMPLES + 64
        for shard, g, k in self.layout.by_shard:  # (shard order: the room left depends on it)
            if h >= room:
                break
            if not act[g]:
                continue
            base = self.layout.starts[g] + 2
            lo, hi = int(state[base + 2 * k]), int(state[base + 2 * k + 1])
            size = hi - lo
            if size <= 0:
                continue
            s = max(1, int(float(SAMPLES) * float(size) / float(total) + 0.5))
            s = min(s, room - h)
            asks.setdefault(g, ([], []))
            asks[g][0].extend([k] * s)
            asks[g][1].extend(lo + int((float(j) + 0.5) * float(size) / float(s)) for j in range(s))
            h += s
        hits: dict = {}
        got = self.router._fanout_each("rank_tokens", {g: (np.asarray(a[0]), np.asarray(a[1], dtype=np.int64),
                                                           int(state[0])) for g, a in asks.items()})
        for toks in got.values():
            for t in np.asarray(toks).tolist():
                hits[t] = hits.get(t, 0) + 1
        ranked = _by_count(list(hits.items()))
        want = ranked[:min(cap + 2, len(ranked))]
        exact = self._counts_of(state, [t for t, _ in want])
        return _by_count([(t, c) for (t, _), c in zip(want, exact)])[:cap]

    def candidates(self, state: np.ndarray, cap: int) -> Tuple[List[Tuple[int, int]], int]:
        total = int(state[1])
        if total == 0 or cap <= 0:
            return [], total
        if total <= EXACT_MAX:
            pairs, _ = self._ntd_at(state)
            return _by_count(pairs)[:cap], total
        return self._sampled(state, cap, total), total

    def narrow(self, state: np.ndarray, token: int) -> np.ndarray:
        """The state of the union suffix + token (some occurrence continues with it): the active
        groups narrowed by it, those where it does not follow (and the inactive) unknown."""
        out = state.copy()
        act = self.layout.active(state[None, :])[0]
        ask = {g: (self.layout.part(state[None, :], g), np.array([token], dtype=np.uint32))
               for g in range(len(act)) if act[g]}
        got = self.router._fanout_each("narrow", ask)
        for g in range(len(self.layout.groups)):
            s, size = self.layout.starts[g], self.layout.sizes[g]
            if g in got:
                out[s:s + size] = np.asarray(got[g])[0]
            else:
                out[s:s + size] = 0
                out[s] = UNKNOWN
        out[0] = state[0] + 1
        out[1] = sum(int(out[self.layout.starts[g] + 1]) for g in range(len(self.layout.groups))
                     if out[self.layout.starts[g]] == out[0])
        return out

    def advance(self, state: np.ndarray, seq: np.ndarray, n_new: int) -> np.ndarray:
        """The state after the last n_new ids of seq (each group as ig_draft_step advances it)."""
        per = {g: (self.layout.part(state[None, :], g)[0], seq, int(n_new), self.eos)
               for g in range(len(self.layout.groups))}
        got = self.router._fanout_each("advance", per)
        return self.layout.join([np.asarray(got[g])[None, :] for g in range(len(self.layout.groups))])[0]

    # ------------------------------------------------------------ the C calls, re-stated

    def _chain(self, state: np.ndarray, cap: int) -> Tuple[List[int], List[int], List[int]]:
        """draft.c's greedy_chain."""
        o = self.o
        joint, toks, cnts, tots = 1.0, [], [], []
        cur = state.copy()
        while cur[0] > 0 and len(toks) < cap:
            best, total = self.candidates(cur, 1)
            if not best:
                break
            tok, cnt = best[0]
            share = cnt / total
            if cnt < o["min_count"] or share < o["min_share"] or joint * share < o["min_joint"]:
                break
            ends = tok == self.separator
            if ends and self.eos < 0:
                break
            toks.append(self.eos if ends else tok)
            cnts.append(cnt)
            tots.append(total)
            if ends:
                break
            joint *= share
            cur = self.narrow(cur, tok)
        return toks, cnts, tots

    @_one_request
    def chain(self, state: np.ndarray, max_tokens: int) -> tuple:
        """(tokens, source, match_len, counts, totals) of the ∞-gram chain draft."""
        st = self.layout.check(state)[0]
        toks, cnts, tots = self._chain(st, int(max_tokens))
        return (np.asarray(toks, dtype=np.int64), "infgram", int(st[0]), np.asarray(cnts, dtype=np.uint64),
                np.asarray(tots, dtype=np.uint64))

    @_one_request
    def children(self, state: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        st = self.layout.check(state)[0]
        best, total = self.candidates(st, int(k))
        child = np.zeros((len(best), self.layout.size), dtype=np.int64)
        for j, (t, _) in enumerate(best):
            child[j] = st if t == self.separator else self.narrow(st, t)
        return (np.asarray([t for t, _ in best], dtype=np.int64), np.asarray([c for _, c in best], dtype=np.uint64),
                child, total)

    @_one_request
    def tree(self, state: np.ndarray, *, max_nodes: int, max_depth: int, width: int, min_prob: float) -> tuple:
        """draft.c's ig_draft_tree: (tokens, parents, depth)."""
        st = self.layout.check(state)[0]
        tokens: List[int] = []
        parents: List[int] = []
        depth: List[int] = []
        probs: List[float] = []
        states: List[np.ndarray] = []
        if st[0] == 0 or max_nodes == 0 or max_depth == 0 or width == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        cap = (max_nodes + 1) * width
        heap: List[Tuple[float, int, int]] = []  # (p, parent, token), in draft.c's array order
        node = -1
        while True:
            if node >= -1:
                r = st if node < 0 else states[node]
                base = 1.0 if node < 0 else probs[node]
                cands, total = self.candidates(r, width)
                for t, c in cands:
                    if len(heap) >= cap:
                        break
                    p = base * c / total
                    if p >= min_prob:
                        heap.append((p, node, t))
            if len(tokens) >= max_nodes or not heap:
                break
            best = 0
            for j in range(1, len(heap)):
                if heap[j][0] > heap[best][0]:
                    best = j
            p, parent, t = heap[best]
            heap[best] = heap[-1]
            heap.pop()
            node = -2
            if t == self.separator and self.eos < 0:
                continue
            pd = 0 if parent < 0 else depth[parent]
            pr = st if parent < 0 else states[parent]
            parents.append(parent)
            probs.append(p)
            depth.append(pd + 1)
            if t == self.separator:
                tokens.append(self.eos)
                states.append(pr)
                continue
            tokens.append(t)
            states.append(self.narrow(pr, t))
            if depth[-1] < max_depth:
                node = len(tokens) - 1
        return (np.asarray(tokens, dtype=np.int64), np.asarray(parents, dtype=np.int64),
                np.asarray(depth, dtype=np.int64))

    @_one_request
    def step(self, seq: np.ndarray, state: Optional[np.ndarray], n_new: int, limit: int,
             caps: tuple) -> Tuple[int, np.ndarray, np.ndarray, np.ndarray, int, int]:
        """draft.c's ig_draft_step: advance `state` in place through the new ids, then draft."""
        o = self.o
        seq = np.ascontiguousarray(seq, dtype=np.int64)
        n = len(seq)
        if n_new < 0 or n_new > n:
            raise ValueError(f"bad lengths n={n} n_new={n_new}")
        max_tokens = max(0, min(int(limit), o["max_draft"]))
        src = ["longest", "lookup_first", "infgram_first", "infgram", "lookup"].index(o["source"])
        lookup_min = o["lookup_min_match"] if o["prompt_lookup"] else 0
        infgram_cap, lookup_cap = int(caps[0]), int(caps[1])
        use_look = lookup_min > 0 and src != lib.IG_DRAFT_INFGRAM and lookup_cap != 0
        use_inf = src != lib.IG_DRAFT_LOOKUP
        l = 0
        if use_inf:
            if state is None:
                raise ValueError("NULL state")
            st = self.layout.check(state)[0]
            if n_new > 0:
                st = self.advance(st, seq, n_new)
                state[:] = st
            l = int(st[0])
        out = np.zeros(max(max_tokens, 1), dtype=np.int64)
        look_len = look_n = 0
        if use_look and max_tokens > 0:
            n_out = ffi.new("int64_t *")
            look_len = int(lib.ig_draft_lookup(ptr(seq, "int64_t"), n, lookup_min, o["lookup_max_match"], max_tokens,
                                               ptr(out, "int64_t"), n_out, ffi.NULL))
            look_n = draft_cap(o["max_draft"], o["match_ratio"], look_len, int(n_out[0])) if look_len else 0
            if lookup_cap > 0 and look_n > lookup_cap:
                look_n = lookup_cap
        take_look = look_n > 0 and (src in (lib.IG_DRAFT_LOOKUP_FIRST, lib.IG_DRAFT_LOOKUP) or
                                    (src == lib.IG_DRAFT_LONGEST and look_len > l))
        inf_cap = draft_cap(o["max_draft"], o["match_ratio"], l, max_tokens)
        if infgram_cap >= 0 and inf_cap > infgram_cap:
            inf_cap = infgram_cap
        toks: List[int] = []
        cnts = np.zeros(max(max_tokens, 1), dtype=np.uint64)
        tots = np.zeros(max(max_tokens, 1), dtype=np.uint64)
        if use_inf and not take_look and inf_cap > 0 and l >= o["min_match"]:
            toks, c, t = self._chain(st, inf_cap)
            cnts[:len(c)], tots[:len(t)] = c, t
        if toks:
            out[:len(toks)] = toks
            return len(toks), out, cnts, tots, l, int(lib.IG_DRAFT_INFGRAM)
        if look_n > 0 and src != lib.IG_DRAFT_INFGRAM:
            return look_n, out, cnts, tots, look_len, int(lib.IG_DRAFT_LOOKUP)
        return 0, out, cnts, tots, 0, -1
