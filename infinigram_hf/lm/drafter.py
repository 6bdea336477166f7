"""The ∞-gram as a speculative-decoding drafter: cheap guesses of the next few tokens.

Two sources:

* the **∞-gram** (the index): take the longest suffix of the context that occurs in the corpus
  (a decoding state), propose its most frequent continuation, narrow the match by it and
  repeat. The draft stops when the continuation gets rare or uncertain (count, share of the
  context's occurrences, product of those shares) or reaches its cap; the cap grows with the
  match length, so a long match drafts long and a short one drafts little.
* **prompt lookup** (the sequence itself): the longest suffix of the sequence that also occurs
  earlier in it, and what followed — repeated identifiers, copied lines, a model looping.

By default the sequence's own continuation goes first and the ∞-gram fills in when it has none
(`source=` picks another rule). In a decoding loop (`start` / `draft_row` / `append` /
`feedback`) one C call per step advances the row's ∞-gram state through the tokens accepted
since the last draft and drafts (`ig_draft_step`, infinigram_draft.h), and each source's draft
length adapts to how well that source's drafts were accepted lately. When neither source
matches well the draft is empty and the loop runs a plain one-token step, so text the index
knows nothing about costs (almost) nothing. `tree` proposes several continuations at once.
A batched loop holds its rows in a `DraftBatch` (draft_batch.py) instead: the same rules, one C
call per step for all rows (`ig_draft_step_batch`), no Python per row.

Example:
    >>> drafter = InfiniGramDrafter(index, max_draft=8)             # doctest: +SKIP
    >>> d = drafter.draft(tokenizer.encode("import os\\nimport "))   # doctest: +SKIP
    >>> d.tokens, d.source, d.match_len                             # doctest: +SKIP
    (array([25064, 198]), 'infgram', 5)
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from .._core.args import MAX_DRAFT, float_arg, int_arg, opt_int_arg
from .._core.ids import as_i64_ids
from .._core.native import check, err_buffer, ffi, int64_len, lib, ptr
from ..index.difference import DifferenceIndex
from ..index.infinigram_index import as_index
from .drafter_remote import RemoteDraftCalls
from .context import context_start

SOURCES = ("longest", "lookup_first", "infgram_first", "infgram", "lookup")


@dataclass(frozen=True)
class Draft:
    """Proposed continuation of one sequence.

    tokens: int64 ids (possibly empty). source: "infgram", "lookup" or "none". match_len: length
    of the match it was drafted from (∞-gram suffix length, or prompt-lookup match length).
    counts / totals: for ∞-gram drafts, occurrences of each drafted continuation and of its
    context in the corpus (counts[i] / totals[i] = P_∞ of token i); empty otherwise.
    """

    tokens: np.ndarray
    source: str
    match_len: int
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    totals: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class DraftTree:
    """Several candidate continuations as a token tree (for one verification pass).

    tokens[i] is node i's token, parents[i] its parent node (-1 = the sequence's last token).
    Parents come before children; depth[i] = 1 + depth of its parent (1 for the root's children).
    """

    tokens: np.ndarray
    parents: np.ndarray
    depth: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    def path(self, node: int) -> list:
        """Tokens from the root's child down to `node` (inclusive)."""
        out = []
        while node >= 0:
            out.append(int(self.tokens[node]))
            node = int(self.parents[node])
        return out[::-1]

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]], max_nodes: int) -> "DraftTree":
        """A trie of the paths (shared prefixes merged), first paths first, at most max_nodes."""
        tokens: list[int] = []
        parents: list[int] = []
        depth: list[int] = []
        children: dict[tuple[int, int], int] = {}
        for path in paths:
            parent = -1
            for t in path:
                key = (parent, int(t))
                node = children.get(key)
                if node is None:
                    if len(tokens) >= max_nodes:
                        break
                    node = len(tokens)
                    children[key] = node
                    tokens.append(int(t))
                    parents.append(parent)
                    depth.append(1 if parent < 0 else depth[parent] + 1)
                parent = node
        return cls(np.asarray(tokens, dtype=np.int64), np.asarray(parents, dtype=np.int64),
                   np.asarray(depth, dtype=np.int64))


_EMPTY_I64 = np.zeros(0, dtype=np.int64)
_NONE = Draft(_EMPTY_I64, "none", 0)


MAX_TREE_NODES = 1 << 16  # a token tree verified in one forward pass is a few dozen nodes
MAX_TREE_WIDTH = 1 << 10


class _Scratch:
    """One thread's C output buffers and draft parameters: the C calls write them with the GIL
    released, so threads sharing a drafter each get their own (thread-local, made on first use)."""

    def __init__(self, size: int, params: dict):
        self.params = ffi.new("ig_draft_params *", params)
        self.out = np.zeros(size, dtype=np.int64)
        self.tok = np.zeros(size, dtype=np.uint32)
        self.cnt = np.zeros(size, dtype=np.uint64)
        self.tot = np.zeros(size, dtype=np.uint64)
        self.look = np.zeros(size, dtype=np.int64)
        self.n = ffi.new("int64_t *")
        self.match = ffi.new("int64_t *")
        self.src = ffi.new("int *")
        self.err = err_buffer()


class InfiniGramDrafter:
    """Drafts continuations from an ∞-gram index and from the sequence itself.

    Args:
        index: the InfiniGramIndex (built with the model's tokenizer). None: prompt lookup only.
        max_draft: most tokens drafted at once.
        min_match: the ∞-gram drafts only when the context's longest matched suffix has at
            least this many tokens (the off-switch: out-of-domain text matches short).
        match_ratio: the draft cap grows with the match: ceil(match_ratio * match_len) tokens
            (at most max_draft). 0 = always max_draft.
        min_count, min_share, min_joint: an ∞-gram draft stops before a continuation seen fewer
            than min_count times, or holding less than min_share of its context's occurrences,
            or when the product of shares along the draft would fall below min_joint.
        prompt_lookup: also draft from the sequence itself.
        lookup_min_match / lookup_max_match: match lengths considered by prompt lookup.
        source: how the two sources combine: "lookup_first" (the sequence's own continuation
            when it has one, else the ∞-gram; best on held-out code here), "longest" (the longer
            match wins; ties go to the ∞-gram), "infgram_first", "infgram" or "lookup" (one
            source only).
        eos_token_id: the id a document end in the corpus is drafted as (default: the index's);
            also a document boundary: the ∞-gram context starts after the last one.
        cache: a SuffixCache to reuse (default: a new one on the index).
        adaptive: in decoding loops (`draft_row` + `feedback`), cap each source's drafts by how
            well its drafts were accepted lately in that row: with a per-token acceptance rate a,
            token i of a draft is worth a**i accepted tokens and costs verify_cost model steps,
            so drafts stop at i = log(verify_cost) / log(a); a source whose rate falls below
            verify_cost is switched off (and retried now and then). This is what keeps text the
            index knows nothing about at plain greedy speed.
        verify_cost: cost of verifying one more drafted token, in model steps (about 0.05 for
            a small model on a CPU, where the output layer dominates; smaller on a GPU).

    Example:
        >>> drafter = InfiniGramDrafter(index)                       # doctest: +SKIP
        >>> drafter.draft([1, 2, 3]).tokens                          # doctest: +SKIP
    """

    def __init__(self, index: Any, *, max_draft: int = 8, min_match: int = 2,
                 match_ratio: float = 2.0, min_count: int = 1, min_share: float = 0.2, min_joint: float = 0.05,
                 prompt_lookup: bool = True, lookup_min_match: int = 2, lookup_max_match: int = 64,
                 source: str = "lookup_first", eos_token_id: Optional[int] = None, cache: Any = None,
                 adaptive: bool = True, verify_cost: float = 0.05):
        if index is not None:
            index = as_index(index)
        self.index = index
        # sizes are checked before the buffers sized by them are made (max_draft=10**9 was 7.45 GiB)
        self.max_draft = int_arg("max_draft", max_draft, 0, MAX_DRAFT)
        self.min_match = int_arg("min_match", min_match, 1)
        self.match_ratio = float_arg("match_ratio", match_ratio, 0.0, 1e9)
        self.min_count = int_arg("min_count", min_count, 1)
        self.min_share = float_arg("min_share", min_share, 0.0, 1.0)
        self.min_joint = float_arg("min_joint", min_joint, 0.0, 1.0)
        self.prompt_lookup = bool(prompt_lookup)
        self.lookup_min_match = int_arg("lookup_min_match", lookup_min_match, 1)
        self.lookup_max_match = int_arg("lookup_max_match", lookup_max_match, self.lookup_min_match)
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        if index is None and source in ("infgram", "infgram_first"):
            raise ValueError(f"source={source!r} needs an index")
        self.source = source
        self.adaptive = bool(adaptive)
        self.verify_cost = float_arg("verify_cost", verify_cost, 1e-6, 1.0)
        if eos_token_id is None and index is not None:
            eos_token_id = index.eos_token_id
        self.eos_token_id = opt_int_arg("eos_token_id", eos_token_id, 0)
        self.cache = cache if cache is not None else (index.suffix_cache(lookback=max(16, self.max_draft + 2))
                                                      if index is not None else None)
        self._param_values = {
            "max_draft": self.max_draft, "min_match": self.min_match, "match_ratio": self.match_ratio,
            "min_count": self.min_count, "min_share": self.min_share, "min_joint": self.min_joint,
            "lookup_min": self.lookup_min_match if self.prompt_lookup else 0, "lookup_max": self.lookup_max_match,
            "source": SOURCES.index(source), "eos_id": -1 if self.eos_token_id is None else self.eos_token_id,
            "infgram_cap": -1, "lookup_cap": -1}
        self._use_inf = index is not None and source != "lookup"
        # over a RemoteIndex the four C calls below run on the server, with these same arguments;
        # over an index that brings its own (a ShardRouter: across shard groups), through those
        self._remote = RemoteDraftCalls(index, self._ctor_options()) if getattr(index, "is_remote", False) else \
            index.draft_calls(self._ctor_options()) if hasattr(index, "draft_calls") else None
        self._tls = threading.local()  # per-thread C buffers (_Scratch): a drafter may be shared
        self._stats_lock = threading.Lock()
        self.stats = {"drafts": 0, "infgram": 0, "lookup": 0, "none": 0, "tokens": 0}

    def _scratch(self) -> _Scratch:
        """This thread's buffers (made on its first call)."""
        b = getattr(self._tls, "b", None)
        if b is None:
            b = self._tls.b = _Scratch(max(self.max_draft, 1), self._param_values)
        return b

    def _state_arg(self, state: Any) -> np.ndarray:
        """A decoding state as the C calls read it: exactly state_size int64 values. The C calls
        refuse any other length too (they take the buffer's length with its pointer); this check
        comes first for its message, which names the shape given."""
        st = np.ascontiguousarray(state, dtype=np.int64)
        size = self.index.state_size
        if st.shape != (size,):
            raise ValueError(f"state must hold {size} int64 values for this index, got shape {st.shape}")
        return st

    def _c(self, name: str, *args: Any) -> int:
        """``lib.ig_<name>(index, *args)``, or over a DifferenceIndex ``lib.ig_diff_<name>(index,
        removed, *args)``: the same draft rules in C, on net counts."""
        if isinstance(self.index, DifferenceIndex):
            with self.index.native_handles() as (plus, minus):
                return getattr(lib, "ig_diff_" + name)(plus, minus, *args)
        with self.index.native_handle() as ix:
            return getattr(lib, "ig_" + name)(ix, *args)

    # ------------------------------------------------------------ pieces

    def _ctor_options(self) -> dict:
        """The arguments that shape the C calls' drafts (sent to a server for a remote index)."""
        return {"max_draft": self.max_draft, "min_match": self.min_match, "match_ratio": self.match_ratio,
                "min_count": self.min_count, "min_share": self.min_share, "min_joint": self.min_joint,
                "prompt_lookup": self.prompt_lookup, "lookup_min_match": self.lookup_min_match,
                "lookup_max_match": self.lookup_max_match, "source": self.source, "eos_token_id": self.eos_token_id}

    def cap_for(self, match_len: int, limit: Optional[int] = None) -> int:
        """Draft cap for a match of match_len tokens (and at most `limit`)."""
        cap = self.max_draft if self.match_ratio == 0 else min(self.max_draft, math.ceil(self.match_ratio * match_len))
        return cap if limit is None else max(0, min(cap, limit))

    def context(self, ids: np.ndarray) -> np.ndarray:
        """The part of a sequence the ∞-gram conditions on: after its last document boundary
        (EOS, or an id the index cannot hold)."""
        return ids[context_start(ids, self.index.vocab_size, eos_token_id=self.eos_token_id):]

    def infgram_state(self, ids: np.ndarray) -> np.ndarray:
        """The decoding state (suffix_len, count, ranges) of the sequence's ∞-gram context."""
        return self.cache.state(self.context(ids)).values

    def copy_len(self, ids: Any) -> int:
        """How much of the sequence's end is a verbatim corpus copy: the longest corpus match
        ending at its last token (since its last document boundary). A draft of k ∞-gram tokens
        would make it copy_len + k; call it per step for a copy report."""
        seq = ids if isinstance(ids, np.ndarray) and ids.dtype == np.int64 else as_i64_ids(ids)
        return int(self.infgram_state(seq)[0])

    def infgram_chain(self, state: np.ndarray, max_tokens: int) -> Draft:
        """Greedy ∞-gram draft of at most max_tokens from a decoding state (thresholds applied)."""
        max_tokens = min(max_tokens, self.max_draft)
        if max_tokens <= 0 or state[0] <= 0:
            return _NONE
        if self._remote:
            return Draft(*self._remote.chain(state, max_tokens))
        st = self._state_arg(state)
        eos = -1 if self.eos_token_id is None else self.eos_token_id
        b = self._scratch()
        rc = self._c("draft_chain", ptr(st, "int64_t"), int64_len(st), max_tokens, self.min_count, self.min_share,
                     self.min_joint, eos, ptr(b.tok, "uint32_t"), ptr(b.cnt, "uint64_t"), ptr(b.tot, "uint64_t"), b.n,
                     b.err, len(b.err))
        check(rc, b.err)
        n = int(b.n[0])
        return Draft(b.tok[:n].astype(np.int64), "infgram", int(state[0]), b.cnt[:n].copy(), b.tot[:n].copy())

    def lookup(self, ids: np.ndarray, max_tokens: Optional[int] = None) -> Draft:
        """Prompt-lookup draft: the continuation of the longest earlier match of the sequence's
        suffix (at least lookup_min_match tokens), capped by the match length rule."""
        seq = np.ascontiguousarray(ids, dtype=np.int64)
        cap = self._limit(max_tokens)
        if cap <= 0 or len(seq) < 2:
            return _NONE
        b = self._scratch()
        m = lib.ig_draft_lookup(ptr(seq, "int64_t"), len(seq), self.lookup_min_match,
                                self.lookup_max_match, cap, ptr(b.look, "int64_t"), b.n, ffi.NULL)
        if m <= 0:
            return _NONE
        k = min(int(b.n[0]), self.cap_for(int(m)))
        return Draft(b.look[:k].copy(), "lookup", int(m))

    # ------------------------------------------------------------ the draft

    def draft(self, ids: Any, max_tokens: Optional[int] = None) -> Draft:
        """A draft continuing `ids` (1-D real token ids, no padding), at most max_tokens long.
        Stateless: the ∞-gram state comes from the SuffixCache (keyed by context)."""
        seq = ids if isinstance(ids, np.ndarray) and ids.dtype == np.int64 else as_i64_ids(ids)
        state = self.infgram_state(seq).copy() if self._use_inf else None
        return self._step(seq, state, 0, self._limit(max_tokens))

    def _limit(self, max_tokens: Optional[int]) -> int:
        if max_tokens is None:
            return self.max_draft
        if isinstance(max_tokens, (bool, np.bool_)) or not isinstance(max_tokens, (int, np.integer)):
            raise ValueError(f"max_tokens must be None or an int, got {max_tokens!r}")
        return max(0, min(int(max_tokens), self.max_draft))

    def _step(self, seq: np.ndarray, state: Optional[np.ndarray], n_new: int, limit: int, count: bool = True,
              caps: tuple = (-1, -1)) -> Draft:
        """One C call: advance `state` (in place) through the last n_new ids of seq, then draft
        (caps: the adaptive caps of the ∞-gram and lookup drafts, -1 = none)."""
        n, out, cnt, tot, match, src_code = self.step_call(seq, state, n_new, limit, caps)
        if not count:
            return _NONE
        src = "none" if not n else "infgram" if src_code == lib.IG_DRAFT_INFGRAM else "lookup"
        with self._stats_lock:
            self.stats["drafts"] += 1
            self.stats["tokens"] += n
            self.stats[src] += 1
        if not n:
            return _NONE
        if src == "lookup":
            return Draft(out[:n].copy(), src, match)
        return Draft(out[:n].copy(), src, match, cnt[:n].copy(), tot[:n].copy())

    def step_call(self, seq: np.ndarray, state: Optional[np.ndarray], n_new: int, limit: int,
                  caps: tuple) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, int, int]:
        """`ig_draft_step` wherever the index answers it (here, a server, or shard groups)."""
        return self._remote.step(seq, state, n_new, limit, caps) if self._remote else \
            self._step_raw(seq, state, n_new, limit, caps)

    def _step_raw(self, seq: np.ndarray, state: Optional[np.ndarray], n_new: int, limit: int,
                  caps: tuple) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, int, int]:
        """`ig_draft_step` itself: (n, tokens, counts, totals, match length, source code); the
        arrays are this thread's buffers (copy what is kept)."""
        seq = np.ascontiguousarray(seq, dtype=np.int64)
        if state is not None and np.shape(state) != (self.index.state_size,):
            self._state_arg(state)  # raises, naming the shape (C would refuse the length too)
        st, st_len = (ptr(state, "int64_t"), int64_len(state)) if state is not None else (ffi.NULL, 0)
        b = self._scratch()
        b.params.infgram_cap, b.params.lookup_cap = caps
        args = (st, st_len, ptr(seq, "int64_t"), len(seq), n_new, b.params, limit, ptr(b.out, "int64_t"),
                ptr(b.cnt, "uint64_t"), ptr(b.tot, "uint64_t"), b.n, b.match, b.src, b.err, len(b.err))
        rc = self._c("draft_step", *args) if self._use_inf else lib.ig_draft_step(ffi.NULL, *args)
        check(rc, b.err)
        return int(b.n[0]), b.out, b.cnt, b.tot, int(b.match[0]), int(b.src[0])

    # ------------------------------------------------------------ decoding loops

    def start(self, ids: Any) -> "DraftRow":
        """Per-sequence drafting state for a decoding loop that adds tokens with `append`: the
        ∞-gram state is carried along (advanced inside the next draft's C call; no hashing)."""
        seq = as_i64_ids(ids)
        row = DraftRow(np.zeros(max(64, 2 * len(seq)), dtype=np.int64), len(seq), 0, None)
        row.buf[:len(seq)] = seq
        if self._use_inf:
            row.state = self.infgram_state(seq).copy()
        return row

    def append(self, row: "DraftRow", tokens: Any) -> None:
        """Add tokens the loop accepted to a row (its state catches up at the next draft)."""
        new = np.asarray(tokens, dtype=np.int64)
        k = len(new)
        if not k:
            return
        if row.n + k > len(row.buf):
            buf = np.zeros(max(2 * len(row.buf), row.n + k), dtype=np.int64)
            buf[:row.n] = row.buf[:row.n]
            row.buf = buf
        row.buf[row.n:row.n + k] = new
        row.n += k
        row.pending += k

    def sync(self, row: "DraftRow") -> None:
        """Bring a row's ∞-gram state up to date (drafting does it by itself)."""
        if row.pending and row.state is not None:
            self._step(row.buf[:row.n], row.state, row.pending, 0, count=False)
        row.pending = 0

    def draft_row(self, row: "DraftRow", max_tokens: Optional[int] = None) -> Draft:
        """The draft continuing a row started with `start` (adaptive caps: see `feedback`)."""
        caps = (-1, -1)
        if self.adaptive:
            caps = (self._adaptive_cap(row.accepted[0], row.rejected[0]),
                    self._adaptive_cap(row.accepted[1], row.rejected[1]))
        d = self._step(row.buf[:row.n], row.state, row.pending if row.state is not None else 0,
                       self._limit(max_tokens), caps=caps)
        row.pending = 0
        return d

    # pseudo-counts of the acceptance rate: a prior of 0.6 worth 2 drafts, new drafts weigh 1/4
    _PRIOR = (1.2, 0.8)
    _DECAY = 0.75
    _RECOVER = 0.03

    def _adaptive_cap(self, acc: float, rej: float) -> int:
        a = acc / (acc + rej) if acc + rej > 0 else 1.0
        if a >= 0.999:
            return self.max_draft
        if a <= self.verify_cost:
            return 0
        return min(self.max_draft, int(math.log(self.verify_cost) / math.log(a)))

    def feedback(self, row: "DraftRow", draft: Draft, accepted: int) -> None:
        """Tell a row how many tokens of its last draft the model kept (updates the acceptance
        rate of the draft's source; the other source drifts back towards the prior)."""
        k = {"infgram": 0, "lookup": 1}.get(draft.source, -1)
        for j in (0, 1):
            if j == k:
                miss = 1.0 if accepted < len(draft) else 0.0
                row.accepted[j] = self._DECAY * row.accepted[j] + accepted
                row.rejected[j] = self._DECAY * row.rejected[j] + miss
            else:
                row.accepted[j] += self._RECOVER * (self._PRIOR[0] - row.accepted[j])
                row.rejected[j] += self._RECOVER * (self._PRIOR[1] - row.rejected[j])

    def rate(self, row: "DraftRow", source: str) -> float:
        """A row's recent per-token acceptance rate of drafts from `source`."""
        j = {"infgram": 0, "lookup": 1}.get(source)
        if j is None:
            return 0.0
        return row.accepted[j] / (row.accepted[j] + row.rejected[j])

    def step_width(self, rows: Sequence["DraftRow"], drafts: Sequence[Draft]) -> int:
        """How many draft tokens a batch verification step should take from each row.

        One forward pass over B rows and w draft columns costs about (1 + c_B * w) plain steps,
        where c_B = c * B / (1 + c * (B - 1)) (c = verify_cost: per token, a pass costs a fixed
        part plus a part proportional to the tokens fed, so batches pay more per column); it
        yields B + sum over rows of the expected accepted tokens, sum_{i <= w} rate**i. The
        width maximizes tokens per cost (0 = a plain step). With adaptive=False: the longest
        draft."""
        longest = max((len(d) for d in drafts), default=0)
        if not self.adaptive or longest == 0:
            return longest
        rates = np.array([self.rate(r, d.source) for r, d in zip(rows, drafts)], dtype=np.float64)
        return self.best_width(rates, np.array([len(d) for d in drafts], dtype=np.int64))

    def best_width(self, rates: np.ndarray, lengths: np.ndarray) -> int:
        """`step_width` from arrays: each row's acceptance rate of its draft's source and its
        draft's length (one implementation for the per-row and the batch API: same widths)."""
        longest = int(lengths.max()) if len(lengths) else 0
        b, c = len(lengths), self.verify_cost
        cb = c * b / (1.0 + c * (b - 1))
        best_w, best, gain = 0, float(b), 0.0
        for w in range(1, longest + 1):
            gain += float(np.power(rates[lengths >= w], w).sum())
            value = (b + gain) / (1.0 + cb * w)
            if value > best:
                best_w, best = w, value
        return best_w

    def _pick(self, seq: np.ndarray, limit: int, state: Optional[np.ndarray]) -> Draft:
        """The step's draft from an up-to-date state (a copy is advanced by nothing)."""
        return self._step(seq, None if state is None else state.copy(), 0, limit)

    def draft_batch(self, rows: Sequence[Any], max_tokens: Optional[Sequence[int]] = None) -> list[Draft]:
        """Drafts for several sequences (each 1-D real ids), with per-row caps."""
        if max_tokens is None:
            return [self.draft(r) for r in rows]
        return [self.draft(r, int(m)) for r, m in zip(rows, max_tokens)]

    # ------------------------------------------------------------ trees

    def children(self, state: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The k most frequent next tokens of a state's matched suffix: (tokens, counts, child
        states (k, state size), total occurrences of the suffix)."""
        k = int_arg("k", k, 0, MAX_TREE_WIDTH)
        if self._remote:
            return self._remote.children(state, k)
        st = self._state_arg(state)
        toks = np.zeros(max(k, 1), dtype=np.uint32)
        cnts = np.zeros(max(k, 1), dtype=np.uint64)
        child = np.zeros((max(k, 1), self.index.state_size), dtype=np.int64)
        total = ffi.new("uint64_t *")
        b = self._scratch()
        rc = self._c("draft_children", ptr(st, "int64_t"), int64_len(st), k, ptr(toks, "uint32_t"),
                     ptr(cnts, "uint64_t"), ptr(child, "int64_t"), total, b.n, b.err, len(b.err))
        check(rc, b.err)
        n = int(b.n[0])
        return toks[:n].astype(np.int64), cnts[:n].copy(), child[:n], int(total[0])

    def tree(self, ids: Any, *, width: int = 3, max_nodes: int = 12, min_prob: float = 0.15,
             max_tokens: Optional[int] = None) -> DraftTree:
        """Several candidate continuations as one token tree: the draft `draft()` would return,
        the other source's draft, and the ∞-gram's best-first tree (`best_first`: up to `width`
        continuations per node, nodes whose path probability is at least min_prob). At most
        max_nodes nodes; paths at most max_tokens (and the match-length cap) deep."""
        seq = ids if isinstance(ids, np.ndarray) and ids.dtype == np.int64 else as_i64_ids(ids)
        width, max_nodes, min_prob = _tree_args(width, max_nodes, min_prob)
        limit = self._limit(max_tokens)
        state = self.infgram_state(seq) if self._use_inf else None
        return self._tree(seq, limit, state, width, max_nodes, min_prob)

    def tree_row(self, row: "DraftRow", *, width: int = 3, max_nodes: int = 12, min_prob: float = 0.15,
                 max_tokens: Optional[int] = None) -> DraftTree:
        """`tree` for a row started with `start`."""
        width, max_nodes, min_prob = _tree_args(width, max_nodes, min_prob)
        limit = self._limit(max_tokens)
        self.sync(row)
        return self._tree(row.buf[:row.n], limit, row.state, width, max_nodes, min_prob)

    def best_first(self, state: np.ndarray, *, max_nodes: int, max_depth: int, width: int = 3,
                   min_prob: float = 0.1) -> DraftTree:
        """The ∞-gram's own token tree (`ig_draft_tree`): nodes added most probable first, a
        node's probability being the product of ∞-gram shares along its path."""
        width, max_nodes, min_prob = _tree_args(width, max_nodes, min_prob)
        max_depth = int_arg("max_depth", max_depth, 0)
        if self._remote:
            return DraftTree(*self._remote.tree(state, max_nodes=max_nodes, max_depth=max_depth, width=width,
                                                min_prob=min_prob))
        st = self._state_arg(state)
        toks = np.zeros(max(max_nodes, 1), dtype=np.int64)
        par = np.zeros(max(max_nodes, 1), dtype=np.int64)
        probs = np.zeros(max(max_nodes, 1), dtype=np.float64)
        eos = -1 if self.eos_token_id is None else self.eos_token_id
        b = self._scratch()
        rc = self._c("draft_tree", ptr(st, "int64_t"), int64_len(st), max_nodes, max_depth, width, min_prob, eos,
                     ptr(toks, "int64_t"), ptr(par, "int64_t"), ptr(probs, "double"), b.n, b.err, len(b.err))
        check(rc, b.err)
        n = int(b.n[0])
        depth = np.zeros(n, dtype=np.int64)
        for i in range(n):
            depth[i] = 1 if par[i] < 0 else depth[par[i]] + 1
        return DraftTree(toks[:n].copy(), par[:n].copy(), depth)

    def _tree(self, seq: np.ndarray, limit: int, state: Optional[np.ndarray], width: int, max_nodes: int,
              min_prob: float) -> DraftTree:
        if limit <= 0 or max_nodes <= 0:
            return DraftTree.from_paths([], 0)
        main = self._pick(seq, limit, state)
        paths = [main.tokens] if len(main) else []
        if main.source != "lookup" and self.prompt_lookup and self.source != "infgram":
            look = self.lookup(seq, limit)
            if len(look):
                paths.append(look.tokens)
        if state is not None and width > 0 and int(state[0]) >= self.min_match:
            t = self.best_first(state, max_nodes=max_nodes, max_depth=self.cap_for(int(state[0]), limit), width=width,
                                min_prob=min_prob)
            paths.extend(t.path(i) for i in range(len(t)))
        return DraftTree.from_paths(paths, max_nodes)


def _tree_args(width: Any, max_nodes: Any, min_prob: Any) -> tuple[int, int, float]:
    """Checked tree arguments (max_nodes sizes buffers: checked before they are made)."""
    return (int_arg("width", width, 0, MAX_TREE_WIDTH), int_arg("max_nodes", max_nodes, 0, MAX_TREE_NODES),
            float_arg("min_prob", min_prob, 0.0, 1.0))


@dataclass
class DraftRow:
    """One sequence of a decoding loop: its ids (buf[:n]) and the ∞-gram decoding state of
    buf[:n - pending] (None when the ∞-gram is not used); the next draft catches up."""

    buf: np.ndarray
    n: int
    pending: int
    state: Optional[np.ndarray]
    accepted: list = field(default_factory=lambda: list(InfiniGramDrafter._PRIOR[:1]) * 2)
    rejected: list = field(default_factory=lambda: list(InfiniGramDrafter._PRIOR[1:]) * 2)

    @property
    def ids(self) -> np.ndarray:
        return self.buf[:self.n]


__all__ = ["Draft", "DraftRow", "DraftTree", "InfiniGramDrafter"]
