"""Serving an index from several machines: shard groups held by Ray actors, a router in front.

    >>> router = ShardRouter.start("/shared/idx", groups=2)                     # doctest: +SKIP
    >>> router.count([464, 2068]), router.infgram_ntd([464]).as_dict()         # doctest: +SKIP

Each `ShardGroup` actor memory-maps some shards of an index directory (a path its node sees)
and answers fixed-context questions about them. `ShardRouter` has the query API of
`InfiniGramIndex` (counts, probabilities, next-token distributions, dense scoring, documents);
it fans every request out to all groups and combines the answers exactly (combine.py): the
∞-gram suffix is settled first (the longest over the groups), then every group counts at that
suffix. A request that misses its deadline raises `DeadlineExceeded`; a group that is gone
raises `ShardGroupUnavailable` -- never an answer from fewer shards.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._core import format as fmt
from .._core.ids import as_ids
from .._core.native import check, err_buffer, ffi, int64_len, lib, ptr
from ..index import InfiniGramIndex
from ..index.batch import as_batch
from ..index.facts import IndexFacts
from ..index.results import (BatchNextTokenDistributions, BatchProbResult, BatchScoreResult, Document,
                             NextTokenDistribution, ProbResult, ScoreResult)
from ..index.states import DecodingState, extend_state, states_ntd, states_prob
from . import combine
from .routed_states import RoutedDraftCalls, RoutedSuffixCache, StateLayout
from ._ray import connect, require_ray

ray = require_ray()

DEFAULT_DEADLINE_S = 30.0


class ShardGroupUnavailable(RuntimeError):
    """A shard group's actor died or cannot be reached: the index cannot answer in full."""


class DeadlineExceeded(TimeoutError):
    """A request did not get every shard group's answer within its deadline."""


def open_shards(path: Union[str, os.PathLike], shard_numbers: Sequence[int]) -> InfiniGramIndex:
    """The shards `shard_numbers` of the index at `path`, opened as one index."""
    root = Path(path)
    meta = fmt.read_meta(root)
    chosen = [meta["shards"][i] for i in shard_numbers]
    sub = dict(meta, shards=chosen, num_tokens=sum(s["num_tokens"] for s in chosen),
               num_docs=sum(s["num_docs"] for s in chosen))
    return InfiniGramIndex([root], [sub])


class ShardGroup:
    """Ray actor body: some shards of an index, asked about fixed contexts (arrays in, arrays out)."""

    def __init__(self, path: str, shard_numbers: Sequence[int]):
        self.shards = [int(s) for s in shard_numbers]
        self.index = open_shards(path, self.shards)
        self.path = Path(path)
        self._suffix_cache: Any = None
        self._tokens: Dict[int, np.ndarray] = {}

    def info(self) -> dict:
        return {"shards": self.shards, "num_tokens": self.index.num_tokens, "num_docs": self.index.num_docs,
                "node": ray.util.get_node_ip_address(), "pid": os.getpid()}

    def count_batch(self, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return self.index.count_batch(values, offsets=offsets)

    def suffix_lens(self, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Longest suffix of every row that occurs in these shards."""
        n = len(offsets) - 1
        return self.index.infgram_prob_batch(values, np.zeros(n, dtype=np.uint32), offsets=offsets).suffix_len

    def score_suffix_lens(self, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Per token of every sequence: the longest suffix of what precedes it that occurs here."""
        return self.index.score_batch(values, offsets=offsets).suffix_len

    def probs(self, values: np.ndarray, offsets: np.ndarray, tokens: np.ndarray) -> Tuple[np.ndarray, ...]:
        """count(context + token), count(context) and the one next token where every occurrence
        of the context continues alike (combine.NO_TOKEN elsewhere), for whole rows as contexts."""
        r = self.index.infgram_prob_batch(values, tokens, offsets=offsets, infinite=False)
        single = np.full(len(tokens), combine.NO_TOKEN, dtype=np.int64)
        sp = r.sparse & (r.prompt_counts > 0)
        hit = sp & (r.counts == r.prompt_counts)
        single[hit] = np.asarray(tokens, dtype=np.int64)[hit]
        other = np.flatnonzero(sp & ~hit)  # (rare: ask which token it is)
        if len(other):
            cv, co = combine.cut_rows(values, np.concatenate([[0], offsets[1:][other]]), np.diff(offsets)[other])
            d = self.index.infgram_ntd_batch(cv, offsets=co, infinite=False)
            single[other] = d.token_ids[d.offsets[:-1]].astype(np.int64)
        return r.counts, r.prompt_counts, single

    def ntd(self, values: np.ndarray, offsets: np.ndarray) -> Tuple[np.ndarray, ...]:
        d = self.index.infgram_ntd_batch(values, offsets=offsets, infinite=False)
        return d.offsets, d.token_ids, d.counts, d.total

    def get_doc(self, local_doc: int) -> Document:
        return self.index.get_doc(local_doc, decode=False)

    # ---------------------------------------------------------------- decoding states (routed_states.py)

    def _cache(self) -> Any:
        if self._suffix_cache is None:
            self._suffix_cache = self.index.suffix_cache(max_states=1 << 18, max_distributions=1 << 14, lookback=16)
        return self._suffix_cache

    def cache_states(self, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """This group's own states of the contexts (its SuffixCache: extended from a context one
        token shorter when it saw one)."""
        return self._cache().states(values, offsets=offsets)

    def cache_ntd(self, values: np.ndarray, offsets: np.ndarray) -> Tuple[np.ndarray, ...]:
        d = self._cache().ntd_batch(values, offsets=offsets)
        return d.suffix_len, d.offsets, d.token_ids, d.counts, d.total

    def cache_prob(self, values: np.ndarray, offsets: np.ndarray, tokens: np.ndarray) -> Tuple[np.ndarray, ...]:
        """(suffix_len, counts, prompt counts, single next token) at this group's own suffix."""
        r = self._cache().prob_batch(values, tokens, offsets=offsets)
        single = np.full(len(tokens), combine.NO_TOKEN, dtype=np.int64)
        sp = r.sparse & (r.prompt_counts > 0)
        hit = sp & (r.counts == r.prompt_counts)
        single[hit] = np.asarray(tokens, dtype=np.int64)[hit]
        other = np.flatnonzero(sp & ~hit)
        if len(other):
            cv, co = combine.cut_rows(values, np.concatenate([[0], offsets[1:][other]]), np.diff(offsets)[other])
            d = self._cache().ntd_batch(cv, offsets=co)
            single[other] = d.token_ids[d.offsets[:-1]].astype(np.int64)
        return r.suffix_len, r.counts, r.prompt_counts, single

    def state_ntd(self, states: np.ndarray) -> Tuple[np.ndarray, ...]:
        d = states_ntd(self.index, states)
        return d.offsets, d.token_ids, d.counts, d.total

    def state_counts(self, states: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """count(state's suffix + token) per row."""
        return states_prob(self.index, states, tokens).counts

    def narrow(self, states: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Each state's suffix extended by its token where the token follows in this group (a
        growth: only the token is read, so the context before it is not needed), else the
        unknown state (suffix_len -1)."""
        out = np.zeros_like(states)
        out[:, 0] = -1
        counts = self.state_counts(states, tokens)
        for i in np.flatnonzero(counts > 0):
            ctx = np.zeros(int(states[i, 0]) + 1, dtype=np.uint32)
            ctx[-1] = tokens[i]
            out[i] = extend_state(self.index, DecodingState(states[i]), ctx).values
        return out

    def advance(self, state: np.ndarray, seq: np.ndarray, n_new: int, eos_id: int) -> np.ndarray:
        """ig_draft_step's advance of this group's state through the last n_new ids of seq (it
        drafts nothing: at most 0 tokens); an unknown state (suffix_len -1) is searched from the
        sequence's context instead (after its last document boundary, as the drafter cuts it)."""
        seq = np.ascontiguousarray(seq, dtype=np.int64)
        if state[0] < 0:
            bound = np.flatnonzero((seq < 0) | (seq >= self.index.vocab_size) | (seq == eos_id))
            start = int(bound[-1]) + 1 if len(bound) else 0
            return self._cache().state(seq[start:]).values.copy()
        st = np.array(state, dtype=np.int64)
        params = ffi.new("ig_draft_params *", {
            "max_draft": 0, "min_match": 1, "match_ratio": 0.0, "min_count": 1, "min_share": 0.0, "min_joint": 0.0,
            "lookup_min": 0, "lookup_max": 1, "source": int(lib.IG_DRAFT_INFGRAM), "eos_id": int(eos_id),
            "infgram_cap": -1, "lookup_cap": -1})
        out = np.zeros(1, dtype=np.int64)
        cnt, tot = np.zeros(1, dtype=np.uint64), np.zeros(1, dtype=np.uint64)
        n_out, match, src = ffi.new("int64_t *"), ffi.new("int64_t *"), ffi.new("int *")
        err = err_buffer()
        with self.index.native_handle() as ix:
            rc = lib.ig_draft_step(ix, ptr(st, "int64_t"), int64_len(st), ptr(seq, "int64_t"), len(seq), int(n_new),
                                   params, 0, ptr(out, "int64_t"), ptr(cnt, "uint64_t"), ptr(tot, "uint64_t"), n_out,
                                   match, src, err, len(err))
        check(rc, err)
        return st

    def rank_tokens(self, shard_places: np.ndarray, ranks: np.ndarray, depth: int) -> np.ndarray:
        """The token at `depth` of the suffix ranked ranks[i] in shard shard_places[i] of this
        group (the separator past a document's end): draft.c's tok_rank, for sampled candidates."""
        out = np.zeros(len(ranks), dtype=np.int64)
        pos = ffi.new("int64_t *")
        err = err_buffer()
        for i, (k, r) in enumerate(zip(np.asarray(shard_places).tolist(), np.asarray(ranks).tolist())):
            with self.index.native_handle() as ix:
                check(lib.ig_sa_position(ix, k, r, pos, err, len(err)), err)
            toks = self._shard_tokens(k)
            p = int(pos[0]) + int(depth)
            out[i] = int(toks[p]) if p < len(toks) else self.index.separator_id
        return out

    def _shard_tokens(self, k: int) -> np.ndarray:
        if k not in self._tokens:
            meta = fmt.read_meta(self.path)["shards"][self.shards[k]]
            f = self.path / meta.get("dir", fmt.shard_dir_name(self.shards[k])) / "tokens.bin"
            self._tokens[k] = np.memmap(f, dtype=np.dtype(f"<u{self.index.token_width}"), mode="r",
                                        offset=fmt.HEADER_SIZE)
        return self._tokens[k]

    def search(self, cnf: Any, max_clause_freq: int, max_diff_tokens: Optional[int], seed: int) -> Tuple[Any, ...]:
        """Local ids of this group's documents matching a CNF of ids (exact: the router asks
        only when no clause needs sampling), with the search's counts."""
        r = self.index.search_docs(cnf, 0, max_clause_freq=max_clause_freq, max_diff_tokens=max_diff_tokens, seed=seed)
        return r.doc_ids, r.approximate

    def document_match(self, local_doc: int, cnf: Any, limit: int) -> Tuple[Any, ...]:
        """A document with the spans of a CNF's n-grams (at most `limit` rows; capped or not)."""
        from ..index.search import _flatten, _SpanFinder
        ids, term_off, _ = _flatten(cnf)
        spans, capped = _SpanFinder(self.index, cnf, ids, term_off)(local_doc, limit)
        return self.index.get_doc(local_doc, decode=False), spans, capped

    def ping(self) -> bool:
        return True


_ShardGroupActor = ray.remote(ShardGroup)


def split_shards(num_shards: int, groups: int) -> List[List[int]]:
    """num_shards shards in `groups` contiguous groups of nearly equal size."""
    if groups < 1 or groups > num_shards:
        raise ValueError(f"groups must be between 1 and the {num_shards} shards, got {groups}")
    bounds = np.linspace(0, num_shards, groups + 1).round().astype(int)
    return [list(range(a, b)) for a, b in zip(bounds[:-1], bounds[1:])]


class ShardRouter(IndexFacts):
    """The query API of `InfiniGramIndex` over shard groups held by Ray actors (exact, with a
    per-request deadline). Make one with `ShardRouter.start`."""

    is_routed = True

    def __init__(self, path: Union[str, os.PathLike], groups: List[List[int]], actors: List[Any],
                 deadline_s: float = DEFAULT_DEADLINE_S):
        self.paths = [Path(path)]
        self.meta = fmt.read_meta(Path(path))
        self.groups, self._actors = groups, actors
        self.layout = StateLayout(groups)
        self._tls = threading.local()
        self.deadline_s = float(deadline_s)
        shard_docs = [s["num_docs"] for s in self.meta["shards"]]
        self._shard_first_doc = np.concatenate([[0], np.cumsum(shard_docs)]).astype(np.int64)
        self._where: Dict[int, Tuple[int, int]] = {}  # shard -> (group, first local doc of the shard)
        for g, shards in enumerate(groups):
            first = 0
            for s in shards:
                self._where[s] = (g, first)
                first += shard_docs[s]
        self.infos = self._fanout("info")
        for g, info in enumerate(self.infos):
            want = sum(self.meta["shards"][s]["num_tokens"] for s in groups[g])
            if info["num_tokens"] != want:
                raise ShardGroupUnavailable(f"shard group {g} holds {info['num_tokens']} tokens, the index says {want}")

    @classmethod
    def start(cls, path: Union[str, os.PathLike], groups: Union[int, Sequence[Sequence[int]]] = 1, *,
              placement: Optional[Sequence[Dict[str, Any]]] = None, deadline_s: float = DEFAULT_DEADLINE_S,
              address: Optional[str] = None, num_cpus: float = 1) -> "ShardRouter":
        """Start one actor per shard group and return the router.

        Args:
            path: the index directory, at the same path on every node.
            groups: a number of contiguous groups, or the shard numbers of each group (every
                shard exactly once).
            placement: Ray options per group, e.g. ``{"resources": {"node_a": 0.01}}`` or
                ``{"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}``;
                default: spread over the nodes.
            deadline_s: the default per-request deadline (seconds).
            address: the cluster, when this process is not connected yet.
            num_cpus: CPUs Ray reserves for each group's actor.
        """
        connect(address)
        meta = fmt.read_meta(Path(path))
        n = len(meta["shards"])
        plan = split_shards(n, groups) if isinstance(groups, int) else [[int(s) for s in g] for g in groups]
        if sorted(s for g in plan for s in g) != list(range(n)) or any(not g for g in plan):
            raise ValueError(f"groups must hold every shard 0..{n - 1} exactly once, in non-empty groups, got {plan}")
        if placement is not None and len(placement) != len(plan):
            raise ValueError(f"placement has {len(placement)} entries for {len(plan)} groups")
        actors = []
        for g, shards in enumerate(plan):
            opts = dict(placement[g]) if placement is not None else {"scheduling_strategy": "SPREAD"}
            opts.setdefault("num_cpus", num_cpus)
            opts.setdefault("name", None)
            opts.pop("name")
            actors.append(_ShardGroupActor.options(**opts).remote(str(Path(path).resolve()), shards))
        return cls(path, plan, actors, deadline_s)

    # ------------------------------------------------------------ fan-out

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Requests made inside use this deadline (seconds) instead of `deadline_s`."""
        old, self.deadline_s = self.deadline_s, float(seconds)
        try:
            yield
        finally:
            self.deadline_s = old

    @contextlib.contextmanager
    def one_request(self) -> Iterator[None]:
        """The fan-outs made inside (a draft step's several rounds) share one deadline."""
        outer = getattr(self._tls, "until", None)
        if outer is None:
            self._tls.until = time.monotonic() + self.deadline_s
        try:
            yield
        finally:
            if outer is None:
                self._tls.until = None

    def _fanout(self, method: str, *args: Any, until: Optional[float] = None) -> List[Any]:
        """Every group's answer to one call, or an error naming the group that failed."""
        if self._actors is None:
            raise ValueError("the router is closed")
        got = self._fanout_each(method, {g: args for g in range(len(self._actors))}, until=until)
        return [got[g] for g in range(len(self._actors))]

    def _fanout_each(self, method: str, calls: Dict[int, Tuple[Any, ...]], until: Optional[float] = None
                     ) -> Dict[int, Any]:
        """The answers of the groups named in `calls` (group -> its arguments), within the
        deadline; an error naming the group that failed or was late."""
        if until is None:
            until = getattr(self._tls, "until", None) or time.monotonic() + self.deadline_s
        if self._actors is None:
            raise ValueError("the router is closed")
        order = sorted(calls)
        refs = [getattr(self._actors[g], method).remote(*calls[g]) for g in order]
        if not refs:
            return {}
        ready, missing = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, until - time.monotonic()))
        if missing:
            late = [g for g, r in zip(order, refs) if r in missing]
            for r in missing:
                ray.cancel(r)
            raise DeadlineExceeded(f"shard group(s) {late} (shards {[self.groups[g] for g in late]}) did not answer "
                                   f"{method} within the {self.deadline_s:g} s deadline")
        out = {}
        for g, r in zip(order, refs):
            try:
                out[g] = ray.get(r)
            except ray.exceptions.RayTaskError as exc:  # the group's own error (e.g. a bad id): as it was raised
                cause = getattr(exc, "cause", None)
                raise (cause if isinstance(cause, BaseException) else exc) from None
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                raise ShardGroupUnavailable(f"shard group {g} (shards {self.groups[g]}) is unavailable: "
                                            f"{type(exc).__name__}") from exc
        return out

    # ------------------------------------------------------------ what the index is

    def _facts(self) -> dict:
        return self.meta

    @property
    def num_shards(self) -> int:
        return len(self.meta["shards"])

    @property
    def metas(self) -> list[dict]:
        return [self.meta]

    @property
    def closed(self) -> bool:
        return self._actors is None

    def close(self) -> None:
        """Stop the shard group actors."""
        actors, self._actors = self._actors, None
        for a in actors or []:
            ray.kill(a)

    def __enter__(self) -> "ShardRouter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ShardRouter({self.paths[0]}: {len(self.groups)} shard groups, {self.num_tokens} tokens)"

    # ------------------------------------------------------------ queries

    def count_batch(self, queries: Any, **kw: Any) -> np.ndarray:
        values, offs = as_batch(queries, name="queries", **kw)
        return np.sum(self._fanout("count_batch", values, offs), axis=0).astype(np.int64)

    def count(self, ids: Any) -> int:
        q = as_ids(ids)
        return int(self.count_batch(q, offsets=np.array([0, len(q)], dtype=np.int64))[0])

    def _suffix_lens(self, values: np.ndarray, offs: np.ndarray, until: float) -> np.ndarray:
        return np.max(self._fanout("suffix_lens", values, offs, until=until), axis=0).astype(np.int64)

    def _probs_at(self, values: np.ndarray, ends: np.ndarray, lens: np.ndarray, tokens: np.ndarray,
                  until: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Summed counts of context + token with context = the lens[i] values before ends[i]."""
        cv, co = combine.cut_rows(values, np.concatenate([[0], ends]).astype(np.int64), lens)
        parts = self._fanout("probs", cv, co, np.asarray(tokens, dtype=np.uint32), until=until)
        counts = np.sum([p[0] for p in parts], axis=0).astype(np.uint64)
        prompt = np.sum([p[1] for p in parts], axis=0).astype(np.uint64)
        sparse = combine.combine_sparse([p[1] for p in parts], [p[2] for p in parts])
        return counts, prompt, sparse

    def infgram_prob_batch(self, prompts: Any, tokens: Any, *, infinite: bool = True, offsets: Any = None,
                           lengths: Any = None, padding_side: str = "right", n_threads: int = 0) -> BatchProbResult:
        """P(tokens[i] | prompt i), ∞-gram (or fixed n with infinite=False), exact over all groups."""
        values, offs = as_batch(prompts, offsets=offsets, lengths=lengths, padding_side=padding_side, name="prompts")
        n = len(offs) - 1
        toks = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if len(toks) != n:
            raise ValueError(f"tokens: {len(toks)} tokens for {n} prompts")
        if n and (toks.min() < 0 or toks.max() >= self.vocab_size):
            raise ValueError(f"tokens: ids must be in [0, {self.vocab_size})")
        until = time.monotonic() + self.deadline_s
        lens = self._suffix_lens(values, offs, until) if infinite else np.diff(offs)
        counts, prompt, sparse = self._probs_at(values, offs[1:], lens, toks, until)
        return BatchProbResult.from_counts(counts, prompt, lens, sparse)

    def _prob(self, prompt: Any, token: int, infinite: bool) -> ProbResult:
        q = as_ids(prompt, "prompt")
        return self.infgram_prob_batch(q, [token], offsets=np.array([0, len(q)], dtype=np.int64), infinite=infinite)[0]

    def ngram_prob(self, prompt: Any, token: int) -> ProbResult:
        return self._prob(prompt, token, False)

    def infgram_prob(self, prompt: Any, token: int) -> ProbResult:
        return self._prob(prompt, token, True)

    def infgram_suffix_len(self, prompt: Any) -> int:
        q = as_ids(prompt, "prompt")
        return int(self._suffix_lens(q, np.array([0, len(q)], dtype=np.int64), time.monotonic() + self.deadline_s)[0])

    def infgram_ntd_batch(self, prompts: Any, *, infinite: bool = True, max_support: Optional[int] = None,
                          offsets: Any = None, lengths: Any = None, padding_side: str = "right",
                          n_threads: int = 0, **_: Any) -> BatchNextTokenDistributions:
        """Exact next-token distributions of a batch, summed over the groups."""
        if max_support is not None:
            raise ValueError("max_support: the router answers exactly only (max_support=None)")
        values, offs = as_batch(prompts, offsets=offsets, lengths=lengths, padding_side=padding_side, name="prompts")
        n = len(offs) - 1
        until = time.monotonic() + self.deadline_s
        lens = self._suffix_lens(values, offs, until) if infinite else np.diff(offs)
        cv, co = combine.cut_rows(values, offs, lens)
        parts = self._fanout("ntd", cv, co, until=until)
        o, t, c = combine.merge_ntd([(p[0], p[1], p[2]) for p in parts], n)
        total = np.sum([p[3] for p in parts], axis=0).astype(np.uint64) if n else np.zeros(0, dtype=np.uint64)
        return BatchNextTokenDistributions(offsets=o, token_ids=t, counts=c, total=total, suffix_len=lens,
                                           sparse=np.diff(o) == 1, approximate=np.zeros(n, dtype=bool))

    def _ntd(self, prompt: Any, infinite: bool) -> NextTokenDistribution:
        q = as_ids(prompt, "prompt")
        return self.infgram_ntd_batch(q, offsets=np.array([0, len(q)], dtype=np.int64), infinite=infinite)[0]

    def ngram_ntd(self, prompt: Any) -> NextTokenDistribution:
        return self._ntd(prompt, False)

    def infgram_ntd(self, prompt: Any, *, max_support: Optional[int] = None) -> NextTokenDistribution:
        if max_support is not None:
            raise ValueError("max_support: the router answers exactly only (max_support=None)")
        return self._ntd(prompt, True)

    def suffix_cache(self, **kw: Any) -> RoutedSuffixCache:
        """Decoding-loop queries (states, distributions, probabilities by context), each group
        through its own SuffixCache (arguments accepted for compatibility)."""
        return RoutedSuffixCache(self)

    def draft_calls(self, options: dict) -> RoutedDraftCalls:
        """The drafter's C calls over the groups (`InfiniGramDrafter` uses this)."""
        return RoutedDraftCalls(self, options)

    @property
    def state_size(self) -> int:
        """Values of a router decoding state (routed_states.py)."""
        return self.layout.size

    def score_batch(self, sequences: Any, *, offsets: Any = None, lengths: Any = None, padding_side: str = "right",
                    n_threads: int = 0) -> BatchScoreResult:
        """Dense ∞-gram scoring: every token given what precedes it in its sequence, exact."""
        values, offs = as_batch(sequences, offsets=offsets, lengths=lengths, padding_side=padding_side,
                                name="sequences")
        until = time.monotonic() + self.deadline_s
        lens = np.max(self._fanout("score_suffix_lens", values, offs, until=until), axis=0).astype(np.int64)
        ends = np.arange(len(values), dtype=np.int64)  # token j's context ends just before it
        counts, prompt, sparse = self._probs_at(values, ends, lens, values, until)
        return BatchScoreResult.from_counts(counts, prompt, lens, sparse, offsets=offs)

    def score(self, ids: Any) -> ScoreResult:
        q = as_ids(ids)
        return self.score_batch(q, offsets=np.array([0, len(q)], dtype=np.int64))[0]

    def get_doc(self, doc_id: int, *, decode: bool = True) -> Document:
        """A document by its global id (asked of the group holding its shard), with its text
        decoded here as `InfiniGramIndex.get_doc` decodes it: the saved tokenizer (read without
        transformers), raw bytes for a byte-level index; None without one or with decode=False."""
        if isinstance(doc_id, bool) or not isinstance(doc_id, (int, np.integer)):
            raise ValueError(f"doc_id must be an int, got {doc_id!r}")
        if not 0 <= doc_id < self.num_docs:
            raise ValueError(f"doc_id {doc_id} out of range (the index has {self.num_docs} documents)")
        shard = int(np.searchsorted(self._shard_first_doc, doc_id, side="right") - 1)
        group, first = self._where[shard]
        local = first + int(doc_id - self._shard_first_doc[shard])
        doc = self._fanout_each("get_doc", {group: (local,)})[group]
        text = None
        if decode:
            from .._core import tokenization as tk

            try:
                tok = tk.index_tokenizer(self, light=True)
            except ImportError:  # a saved tokenizer.json, but `tokenizers` is not installed
                tok = None
            text = tok.decode(doc.token_ids.tolist()) if tok is not None else None
        return Document(doc_id=int(doc_id), token_ids=doc.token_ids, metadata=doc.metadata, shard=shard, text=text)

    def _to_global(self, group: int, local: np.ndarray) -> np.ndarray:
        """A group's local document ids -> global ids."""
        shards = self.groups[group]
        docs = np.array([self.meta["shards"][s]["num_docs"] for s in shards], dtype=np.int64)
        first_local = np.concatenate([[0], np.cumsum(docs)])
        k = np.searchsorted(first_local, local, side="right") - 1
        return self._shard_first_doc[np.asarray(shards)[k]] + (local - first_local[k])

    def search_docs(self, query: Any, maxnum: int = 10, *, max_clause_freq: int = 50_000,
                    max_diff_tokens: Optional[int] = None, seed: int = 0, tokenizer: Any = None,
                    decode: Optional[bool] = None, max_spans: int = 1_000_000, **_: Any) -> Any:
        """`InfiniGramIndex.search_docs` over the groups, exactly: the anchor (the rarest clause)
        is chosen over the whole index, every group lists its matching documents, the first
        `maxnum` come back with their spans. A search the single index would sample (the
        rarest clause occurs more than max_clause_freq times) raises ValueError rather than
        answer differently: pass a larger max_clause_freq."""
        from .._core import tokenization as tk
        from .._core.args import int_arg
        from ..index import search as S

        maxnum = int_arg("maxnum", maxnum, 0, S.MAX_MAXNUM)
        max_clause_freq = int_arg("max_clause_freq", max_clause_freq, 1, S.MAX_CLAUSE_FREQ)
        if max_diff_tokens is not None:
            max_diff_tokens = int_arg("max_diff_tokens", max_diff_tokens, 0, 2 ** 62)
        seed = int_arg("seed", seed, 0, 2 ** 64 - 1)
        budget = int_arg("max_spans", max_spans, 0, 10 ** 8)
        has_text = S._has_text(query)
        tok = tk.index_tokenizer(self, tokenizer) if (tokenizer is not None or has_text) else None
        cnf = S.parse_query(query, (lambda t: tok.encode(t, add_special_tokens=False)) if tok is not None else None,
                            self.vocab_size)
        ids, term_off, clause_off = S._flatten(cnf)
        with self.one_request():
            term_counts = self.count_batch(ids, offsets=term_off)
            clause_counts = np.add.reduceat(term_counts, clause_off[:-1]) if len(term_counts) else np.zeros(1, np.int64)
            anchor = int(np.argmin(clause_counts))
            n_anchor = int(clause_counts[anchor])
            if n_anchor > max_clause_freq:
                raise ValueError(f"clause {anchor}, the rarest, occurs {n_anchor:,} times, more than max_clause_freq = "
                                 f"{max_clause_freq:,}: a single index would sample it, the router answers exactly "
                                 f"only; pass max_clause_freq >= {n_anchor}")
            found = self._fanout("search", cnf, max_clause_freq, max_diff_tokens, seed) if n_anchor else []
            doc_ids = np.sort(np.concatenate([self._to_global(g, np.asarray(f[0], dtype=np.int64))
                                              for g, f in enumerate(found)] or [np.zeros(0, np.int64)]))
            want_text = has_text if decode is None else bool(decode)
            if want_text and tok is None:
                tok = tk.index_tokenizer(self, light=True)
            docs = []
            for d in doc_ids[:maxnum].tolist():
                shard = int(np.searchsorted(self._shard_first_doc, d, side="right") - 1)
                group, first = self._where[shard]
                local = first + int(d - self._shard_first_doc[shard])
                doc, spans, capped = self._fanout_each("document_match", {group: (local, cnf, budget)})[group]
                budget -= len(spans)
                docs.append(S.DocumentMatch(doc_id=d, token_ids=doc.token_ids, metadata=doc.metadata, shard=shard,
                                            text=tok.decode(doc.token_ids.tolist()) if want_text and tok else None,
                                            spans=spans, spans_capped=capped))
        return S.SearchResult(count=len(doc_ids), approximate=False, doc_ids=doc_ids, documents=tuple(docs), cnf=cnf,
                              estimate=float(len(doc_ids)), anchor_clause=anchor, anchor_count=n_anchor,
                              anchor_used=n_anchor, spans_capped=any(x.spans_capped for x in docs))
