"""The rows of a batched speculative-decoding loop, drafted for in one C call per step.

`InfiniGramDrafter.start` / `draft_row` / `feedback` / `append` serve one row each: at batch 64 a
step cost ~60 µs of CPU per row, most of it Python around an 11 µs C call. `DraftBatch` holds
all rows as arrays instead -- the ids in one 2-D buffer, the ∞-gram states in one (rows, state
size) array, the acceptance pseudo-counts in (rows, 2) arrays -- so that a step is one
`ig_draft_step_batch` call (every row's state advanced through its accepted tokens, then
drafted), one `ig_draft_adaptive_caps` call, and numpy for the feedback and the appends: no
Python runs per row. Every draft equals the one the per-row API gives the same row (tests).

Rows leave the batch with `select` (finished rows), as a decoding loop drops them from its cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from .._core.ids import as_i64_ids
from .._core.native import check, err_buffer, ffi, lib, ptr
from ..index.difference import DifferenceIndex
from .drafter import _NONE, Draft, DraftRow, DraftTree, InfiniGramDrafter, _tree_args

# source codes of BatchDrafts.sources (the C core's IG_DRAFT_INFGRAM / IG_DRAFT_LOOKUP are mapped)
NONE, INFGRAM, LOOKUP = -1, 0, 1
SOURCE_NAMES = {NONE: "none", INFGRAM: "infgram", LOOKUP: "lookup"}


@dataclass(frozen=True)
class BatchDrafts:
    """One step's drafts of the rows of a DraftBatch, as arrays (row i: tokens[i, :lengths[i]]).

    sources: INFGRAM (0), LOOKUP (1) or NONE (-1) per row; match_len: the match drafted from;
    counts / totals: for ∞-gram drafts, the counts of each drafted continuation and of its
    context (zeros otherwise)."""

    tokens: np.ndarray
    lengths: np.ndarray
    sources: np.ndarray
    match_len: np.ndarray
    counts: np.ndarray
    totals: np.ndarray

    def cut(self, width: int) -> "BatchDrafts":
        """At most `width` tokens per row (sources kept, as the per-row loop's cut does)."""
        w = max(0, int(width))
        return BatchDrafts(self.tokens[:, :w], np.minimum(self.lengths, w), self.sources, self.match_len,
                           self.counts[:, :w], self.totals[:, :w])

    def row(self, i: int) -> Draft:
        """Row i's draft as the per-row API's `Draft`."""
        n = int(self.lengths[i])
        src = SOURCE_NAMES[int(self.sources[i])]
        if src == "none":
            return _NONE
        if src == "lookup":
            return Draft(self.tokens[i, :n].copy(), src, int(self.match_len[i]))
        return Draft(self.tokens[i, :n].copy(), src, int(self.match_len[i]), self.counts[i, :n].copy(),
                     self.totals[i, :n].copy())


class DraftBatch:
    """Drafting state of the rows of a batched decoding loop (see the module's docstring).

    Args:
        drafter: the drafter whose rules and caps apply (its index, sources, adaptive caps).
        sequences: each row's real ids (no padding), in batch order.

    Example:
        >>> rows = DraftBatch(InfiniGramDrafter(index), prompts)       # doctest: +SKIP
        >>> d = rows.draft(); d = d.cut(rows.width(d))                  # doctest: +SKIP
        >>> rows.accept(d, accepted, new_tokens, n_new)                 # doctest: +SKIP
    """

    def __init__(self, drafter: InfiniGramDrafter, sequences: Sequence[Any]):
        self.drafter = drafter
        seqs = [as_i64_ids(s) for s in sequences]
        n = len(seqs)
        longest = max((len(s) for s in seqs), default=0)
        self.buf = np.zeros((n, max(64, 2 * longest)), dtype=np.int64)
        self.lens = np.zeros(n, dtype=np.int64)
        for i, s in enumerate(seqs):  # (once per row, at the start)
            self.buf[i, :len(s)] = s
            self.lens[i] = len(s)
        self.pending = np.zeros(n, dtype=np.int64)
        use_inf = drafter._use_inf
        size = drafter.index.state_size if use_inf else 0
        self.states = np.zeros((n, size), dtype=np.int64)
        if use_inf:
            for i, s in enumerate(seqs):
                self.states[i] = drafter.infgram_state(s)
        self.accepted = np.full((n, 2), drafter._PRIOR[0])  # per row: ∞-gram, lookup
        self.rejected = np.full((n, 2), drafter._PRIOR[1])
        md = max(drafter.max_draft, 1)
        self._out = np.zeros((n, md), dtype=np.int64)
        self._cnt = np.zeros((n, md), dtype=np.uint64)
        self._tot = np.zeros((n, md), dtype=np.uint64)

    def __len__(self) -> int:
        return len(self.lens)

    def ids(self, i: int) -> np.ndarray:
        """Row i's ids so far (a view)."""
        return self.buf[i, :self.lens[i]]

    # ------------------------------------------------------------ a step

    def caps(self) -> np.ndarray:
        """Every row's adaptive caps, (rows, 2): ∞-gram, lookup (-1 = none when not adaptive)."""
        d = self.drafter
        n = len(self)
        caps = np.full((n, 2), -1, dtype=np.int64)
        if d.adaptive and n:
            acc = np.ascontiguousarray(self.accepted.T)
            rej = np.ascontiguousarray(self.rejected.T)
            flat = np.zeros(2 * n, dtype=np.int64)
            lib.ig_draft_adaptive_caps(ptr(acc, "double"), ptr(rej, "double"), 2 * n, d.max_draft, d.verify_cost,
                                       ptr(flat, "int64_t"))
            caps[:, 0], caps[:, 1] = flat[:n], flat[n:]
        return caps

    def draft(self, max_tokens: Any = None, skip: Any = None) -> BatchDrafts:
        """Every row's draft (its state first catches up with the tokens accepted since the last
        draft), at most max_tokens (None, an int or one per row) tokens each: one C call.
        skip (a boolean per row): rows not drafted for at all this step (no draft, state left
        behind, not counted in the drafter's stats), as a loop that does not call draft_row."""
        d = self.drafter
        n = len(self)
        limit = np.full(n, d.max_draft, dtype=np.int64) if max_tokens is None else \
            np.clip(np.broadcast_to(np.asarray(max_tokens, dtype=np.int64), (n,)), 0, d.max_draft)
        skip = np.zeros(n, dtype=bool) if skip is None else np.asarray(skip, dtype=bool)
        limit = np.ascontiguousarray(np.where(skip, 0, limit), dtype=np.int64)
        # the tokens each state catches up with now; skipped rows keep theirs for a later step
        new = np.ascontiguousarray(np.where(skip, 0, self.pending), dtype=np.int64)
        self.pending = np.where(skip, self.pending, 0)
        caps = self.caps()
        n_out = np.zeros(n, dtype=np.int64)
        match = np.zeros(n, dtype=np.int64)
        src = np.zeros(n, dtype=np.intc)
        if type(d).draft_row is not InfiniGramDrafter.draft_row:  # a drafter with its own per-row rule
            self._draft_own(new, limit, skip, n_out, match, src)
        elif d._remote:
            self._draft_rows(new, limit, caps, n_out, match, src)
        else:
            self._draft_c(new, limit, caps, n_out, match, src)
        sources = np.where(n_out == 0, NONE, np.where(src == lib.IG_DRAFT_INFGRAM, INFGRAM, LOOKUP))
        counted = sources[~skip]
        with d._stats_lock:
            d.stats["drafts"] += len(counted)
            d.stats["tokens"] += int(n_out.sum())
            for code, name in SOURCE_NAMES.items():
                d.stats[name] += int(np.count_nonzero(counted == code))
        w = self._out.shape[1]
        keep = np.arange(w) < n_out[:, None]
        return BatchDrafts(np.where(keep, self._out[:n], 0), n_out, sources.astype(np.int8), match,
                           np.where(keep, self._cnt[:n], 0), np.where(keep, self._tot[:n], 0))

    def _draft_c(self, new: np.ndarray, limit: np.ndarray, caps: np.ndarray, n_out: np.ndarray, match: np.ndarray,
                 src: np.ndarray) -> None:
        d = self.drafter
        n, stride = self.buf.shape
        err = err_buffer()
        params = ffi.new("ig_draft_params *", d._param_values)
        st = self.states
        args = (ptr(st, "int64_t"), st.size, ptr(self.buf, "int64_t"), stride, ptr(self.lens, "int64_t"),
                ptr(new, "int64_t"), n, params, ptr(limit, "int64_t"), ptr(caps, "int64_t"),
                ptr(self._out, "int64_t"), ptr(self._cnt, "uint64_t"), ptr(self._tot, "uint64_t"), self._out.shape[1],
                ptr(n_out, "int64_t"), ptr(match, "int64_t"), ptr(src, "int"), 0, err, len(err))
        if not d._use_inf:
            rc = lib.ig_draft_step_batch(ffi.NULL, *args)
        elif isinstance(d.index, DifferenceIndex):
            with d.index.native_handles() as (plus, minus):
                rc = lib.ig_diff_draft_step_batch(plus, minus, *args)
        else:
            with d.index.native_handle() as ix:
                rc = lib.ig_draft_step_batch(ix, *args)
        check(rc, err)

    def _draft_rows(self, new: np.ndarray, limit: np.ndarray, caps: np.ndarray, n_out: np.ndarray, match: np.ndarray,
                    src: np.ndarray) -> None:
        """Over an index whose draft calls run elsewhere (a server, shard groups): row by row."""
        d = self.drafter
        for i in range(len(self)):
            state = self.states[i] if d._use_inf else None
            k, out, cnt, tot, m, s = d.step_call(self.ids(i), state, int(new[i]) if d._use_inf else 0,
                                                 int(limit[i]), (int(caps[i, 0]), int(caps[i, 1])))
            n_out[i], match[i], src[i] = k, m, s
            self._out[i, :k], self._cnt[i, :k], self._tot[i, :k] = out[:k], cnt[:k], tot[:k]

    def row_view(self, i: int) -> DraftRow:
        """Row i as the per-row API's DraftRow (ids and state are views; the rest copies), for
        drafters that bring their own per-row rules (subclasses overriding draft_row / tree_row)."""
        state = self.states[i] if self.drafter._use_inf else None
        return DraftRow(self.buf[i], int(self.lens[i]), int(self.pending[i]), state,
                        self.accepted[i].tolist(), self.rejected[i].tolist())

    def _draft_own(self, new: np.ndarray, limit: np.ndarray, skip: np.ndarray, n_out: np.ndarray,
                   match: np.ndarray, src: np.ndarray) -> None:
        """Row by row through the drafter's own draft_row."""
        for i in np.flatnonzero(~skip).tolist():
            view = self.row_view(i)
            view.pending = int(new[i])
            dr = self.drafter.draft_row(view, int(limit[i]))
            k = len(dr)
            n_out[i], match[i] = k, dr.match_len
            src[i] = lib.IG_DRAFT_INFGRAM if dr.source == "infgram" else lib.IG_DRAFT_LOOKUP
            self._out[i, :k] = dr.tokens
            self._cnt[i, :k] = dr.counts if len(dr.counts) else 0
            self._tot[i, :k] = dr.totals if len(dr.totals) else 0

    def width(self, drafts: BatchDrafts) -> int:
        """How many draft tokens the step's verification should take from each row
        (`InfiniGramDrafter.step_width`, from arrays)."""
        d = self.drafter
        longest = int(drafts.lengths.max()) if len(drafts.lengths) else 0
        if not d.adaptive or longest == 0:
            return longest
        j = np.clip(drafts.sources, 0, 1).astype(np.int64)
        r = np.arange(len(self))
        acc, rej = self.accepted[r, j], self.rejected[r, j]
        rates = np.where(drafts.sources >= 0, acc / (acc + rej), 0.0)
        return d.best_width(rates, drafts.lengths)

    def accept(self, drafts: BatchDrafts, accepted: Any, new: Any, n_new: Any) -> None:
        """After verification: row i kept accepted[i] tokens of its draft, and its ids grow by
        new[i, :n_new[i]] (`feedback` and `append` for every row)."""
        self.feedback(drafts, accepted)
        self.append(new, n_new)

    def feedback(self, drafts: BatchDrafts, accepted: Any, where: Any = None) -> None:
        """`InfiniGramDrafter.feedback` for every row (or the rows `where` is True), the same
        arithmetic on arrays."""
        d = self.drafter
        accepted = np.asarray(accepted, dtype=np.int64)
        rows = np.ones(len(self), dtype=bool) if where is None else np.asarray(where, dtype=bool)
        miss = (accepted < drafts.lengths).astype(np.float64)
        for j in (0, 1):
            hit = drafts.sources == j
            acc, rej = self.accepted[:, j], self.rejected[:, j]
            acc2 = np.where(hit, d._DECAY * acc + accepted, acc + d._RECOVER * (d._PRIOR[0] - acc))
            rej2 = np.where(hit, d._DECAY * rej + miss, rej + d._RECOVER * (d._PRIOR[1] - rej))
            self.accepted[:, j] = np.where(rows, acc2, acc)
            self.rejected[:, j] = np.where(rows, rej2, rej)

    def append(self, new: Any, n_new: Any) -> None:
        """Row i's ids grow by new[i, :n_new[i]] (`InfiniGramDrafter.append` for every row; the
        states catch up at the next draft)."""
        n_new = np.asarray(n_new, dtype=np.int64)
        new = np.asarray(new, dtype=np.int64).reshape(len(self), -1)
        need = int((self.lens + n_new).max()) if len(self) else 0
        if need > self.buf.shape[1]:
            grown = np.zeros((len(self), max(2 * self.buf.shape[1], need)), dtype=np.int64)
            grown[:, :self.buf.shape[1]] = self.buf
            self.buf = grown
        cols = np.arange(new.shape[1])
        mask = cols < n_new[:, None]
        rows = np.repeat(np.arange(len(self)), n_new)
        self.buf[rows, (self.lens[:, None] + cols)[mask]] = new[mask]
        self.lens += n_new
        if self.drafter._use_inf:
            self.pending += n_new

    def select(self, keep: Any) -> None:
        """Keep only these rows (indices, in their new order): finished rows leave the batch."""
        keep = np.asarray(keep, dtype=np.int64)
        self.buf, self.lens, self.pending = self.buf[keep], self.lens[keep], self.pending[keep]
        self.states = np.ascontiguousarray(self.states[keep])
        self.accepted, self.rejected = self.accepted[keep], self.rejected[keep]

    # ------------------------------------------------------------ trees

    def tree(self, i: int, *, width: int = 3, max_nodes: int = 12, min_prob: float = 0.15,
             max_tokens: Optional[int] = None) -> DraftTree:
        """`InfiniGramDrafter.tree_row` for row i."""
        d = self.drafter
        if type(d).tree_row is not InfiniGramDrafter.tree_row:  # a drafter with its own per-row rule
            view = self.row_view(i)
            self.pending[i] = 0
            return d.tree_row(view, width=width, max_nodes=max_nodes, min_prob=min_prob, max_tokens=max_tokens)
        width, max_nodes, min_prob = _tree_args(width, max_nodes, min_prob)
        limit = d._limit(max_tokens)
        seq = self.ids(i)
        state = self.states[i] if d._use_inf else None
        if self.pending[i] and state is not None:
            d._step(seq, state, int(self.pending[i]), 0, count=False)
        self.pending[i] = 0
        return d._tree(seq, limit, state, width, max_nodes, min_prob)


__all__ = ["BatchDrafts", "DraftBatch", "INFGRAM", "LOOKUP", "NONE"]
