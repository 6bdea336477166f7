"""The drafter's C calls over a `RemoteIndex`: each runs on the server (op ``draft_*``) with the
drafter's own arguments, on decoding states that are the server's (suffix-array ranges of its
index). The drafter's Python side -- rows, prompt lookup, adaptive caps, trees -- stays local."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np


class RemoteDraftCalls:
    """`ig_draft_step`, `ig_draft_chain`, `ig_draft_children` and `ig_draft_tree` on a server."""

    def __init__(self, index: Any, options: dict):
        self.index, self.options = index, options

    def step(self, seq: np.ndarray, state: Optional[np.ndarray], n_new: int, limit: int,
             caps: tuple) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, int, int]:
        arrays = {"seq": np.asarray(seq, dtype=np.int64)}
        if state is not None:
            arrays["state"] = state
        p, a = self.index.call("draft_step", {"drafter": self.options, "n_new": int(n_new), "limit": int(limit),
                                              "caps": [int(caps[0]), int(caps[1])]}, arrays)
        if state is not None:
            state[:] = a["state"]  # advanced in place, as the local C call does
        return len(a["tokens"]), a["tokens"], a["counts"], a["totals"], int(p["match"]), int(p["src"])

    def chain(self, state: np.ndarray, max_tokens: int) -> tuple:
        """(tokens, source, match_len, counts, totals) of the ∞-gram chain draft."""
        p, a = self.index.call("draft_chain", {"drafter": self.options, "max_tokens": int(max_tokens)},
                               {"state": np.asarray(state, dtype=np.int64)})
        return (a["tokens"].astype(np.int64), str(p["source"]), int(p["match_len"]), a["counts"].copy(),
                a["totals"].copy())

    def children(self, state: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        p, a = self.index.call("draft_children", {"drafter": self.options, "k": int(k)},
                               {"state": np.asarray(state, dtype=np.int64)})
        return a["tokens"].astype(np.int64), a["counts"].copy(), a["states"].copy(), int(p["total"])

    def tree(self, state: np.ndarray, *, max_nodes: int, max_depth: int, width: int, min_prob: float) -> tuple:
        """(tokens, parents, depth) of the ∞-gram's best-first tree."""
        _, a = self.index.call("draft_tree", {"drafter": self.options, "max_nodes": int(max_nodes),
                                              "max_depth": int(max_depth), "width": int(width),
                                              "min_prob": float(min_prob)},
                               {"state": np.asarray(state, dtype=np.int64)})
        return a["tokens"].astype(np.int64), a["parents"].astype(np.int64), a["depth"].astype(np.int64)
