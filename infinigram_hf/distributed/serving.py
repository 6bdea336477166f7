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
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._core import format as fmt
from .._core.ids import as_ids
from ..index import InfiniGramIndex
from ..index.batch import as_batch
from ..index.results import (BatchNextTokenDistributions, BatchProbResult, BatchScoreResult, Document,
                             NextTokenDistribution, ProbResult, ScoreResult)
from . import combine
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
        return self.index.get_doc(local_doc)

    def ping(self) -> bool:
        return True


_ShardGroupActor = ray.remote(ShardGroup)


def split_shards(num_shards: int, groups: int) -> List[List[int]]:
    """num_shards shards in `groups` contiguous groups of nearly equal size."""
    if groups < 1 or groups > num_shards:
        raise ValueError(f"groups must be between 1 and the {num_shards} shards, got {groups}")
    bounds = np.linspace(0, num_shards, groups + 1).round().astype(int)
    return [list(range(a, b)) for a, b in zip(bounds[:-1], bounds[1:])]


class _RouterCache:
    """What `InfiniGramIndex.suffix_cache()` gives the logits processor: batched ∞-gram
    distributions (each call goes to the groups; no state is kept across calls)."""

    def __init__(self, router: "ShardRouter"):
        self.router = router

    def ntd_batch(self, contexts: Any, **kw: Any) -> BatchNextTokenDistributions:
        return self.router.infgram_ntd_batch(contexts, **kw)

    def prob_batch(self, contexts: Any, tokens: Any, **kw: Any) -> BatchProbResult:
        return self.router.infgram_prob_batch(contexts, tokens, **kw)

    def states(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError("decoding states hold per-shard suffix-array ranges of one process; "
                                  "over shard groups use ntd_batch / prob_batch")

    def clear(self) -> None:
        pass


class ShardRouter:
    """The query API of `InfiniGramIndex` over shard groups held by Ray actors (exact, with a
    per-request deadline). Make one with `ShardRouter.start`."""

    def __init__(self, path: Union[str, os.PathLike], groups: List[List[int]], actors: List[Any],
                 deadline_s: float = DEFAULT_DEADLINE_S):
        self.paths = [Path(path)]
        self.meta = fmt.read_meta(Path(path))
        self.groups, self._actors = groups, actors
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

    def _fanout(self, method: str, *args: Any, until: Optional[float] = None) -> List[Any]:
        """Every group's answer to one call, or an error naming the group that failed."""
        until = until if until is not None else time.monotonic() + self.deadline_s
        if self._actors is None:
            raise ValueError("the router is closed")
        refs = [getattr(a, method).remote(*args) for a in self._actors]
        ready, missing = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, until - time.monotonic()))
        if missing:
            late = [g for g, r in enumerate(refs) if r in missing]
            for r in missing:
                ray.cancel(r)
            raise DeadlineExceeded(f"shard group(s) {late} (shards {[self.groups[g] for g in late]}) did not answer "
                                   f"{method} within the {self.deadline_s:g} s deadline")
        out = []
        for g, r in enumerate(refs):
            try:
                out.append(ray.get(r))
            except ray.exceptions.RayTaskError as exc:  # the group's own error (e.g. a bad id): as it was raised
                cause = getattr(exc, "cause", None)
                raise (cause if isinstance(cause, BaseException) else exc) from None
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                raise ShardGroupUnavailable(f"shard group {g} (shards {self.groups[g]}) is unavailable: "
                                            f"{type(exc).__name__}") from exc
        return out

    # ------------------------------------------------------------ what the index is

    @property
    def num_tokens(self) -> int:
        return int(self.meta["num_tokens"])

    @property
    def num_docs(self) -> int:
        return int(self.meta["num_docs"])

    @property
    def num_shards(self) -> int:
        return len(self.meta["shards"])

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def separator_id(self) -> int:
        return int(self.meta["separator_id"])

    @property
    def token_width(self) -> int:
        return int(self.meta["token_width"])

    @property
    def eos_token_id(self) -> Optional[int]:
        return self.meta.get("eos_token_id")

    @property
    def tokenizer_name(self) -> Optional[str]:
        return self.meta.get("tokenizer_name")

    @property
    def vocab_fingerprint(self) -> Optional[str]:
        return self.meta.get("vocab_fingerprint")

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

    def suffix_cache(self, **kw: Any) -> _RouterCache:
        """Batched ∞-gram distributions for the logits processor (no state kept across calls)."""
        return _RouterCache(self)

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

    def get_doc(self, doc_id: int) -> Document:
        """A document by its global id (asked of the group holding its shard)."""
        if isinstance(doc_id, bool) or not isinstance(doc_id, (int, np.integer)):
            raise ValueError(f"doc_id must be an int, got {doc_id!r}")
        if not 0 <= doc_id < self.num_docs:
            raise ValueError(f"doc_id {doc_id} out of range (the index has {self.num_docs} documents)")
        shard = int(np.searchsorted(self._shard_first_doc, doc_id, side="right") - 1)
        group, first = self._where[shard]
        local = first + int(doc_id - self._shard_first_doc[shard])
        ref = self._actors[group].get_doc.remote(local)
        try:
            doc = ray.get(ref, timeout=self.deadline_s)
        except ray.exceptions.GetTimeoutError:
            raise DeadlineExceeded(f"shard group {group} did not answer get_doc within {self.deadline_s:g} s") from None
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
            raise ShardGroupUnavailable(f"shard group {group} (shards {self.groups[group]}) is unavailable") from exc
        return Document(doc_id=int(doc_id), token_ids=doc.token_ids, metadata=doc.metadata, shard=shard)
