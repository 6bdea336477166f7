"""`RemoteRowStates`: `RowStates` over a `RemoteIndex` -- the decoding states of a batch's rows
kept by the client, so that a step sends only what it needs.

A state is plain data (the matched suffix's length, its count and suffix-array ranges: see
infinigram_hf.index.states), the same in every worker of a server that maps the same files. The
client keeps each row's state from the previous step's answer; a row that grew by one token is
sent as that state plus its tail (the matched suffix and the new token), every other row whole.
One request per step (the server's op ``rows_ntd``) returns the new states and the next-token
distributions, equal to ``RemoteSuffixCache.ntd_batch`` on the whole contexts. The server checks
every state it is sent (a forged one is a 400, never a read out of bounds).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .._core.errors import InfiniGramError
from .batch import as_batch
from .results import BatchNextTokenDistributions
from .row_states import Prev, grown_rows, state_tails

OP = "rows_ntd"


class RemoteRowStates:
    """The rows' states of a decoding batch across steps, for a `RemoteIndex` (see the module's
    docstring); ``ntd(rows, starts)`` as `RowStates.ntd`."""

    def __init__(self, index: Any):  # a RemoteIndex (remote.py imports this module)
        self.index = index
        self._prev: Prev = None
        self.stats = {"extended": 0, "looked_up": 0, "requests": 0}

    def reset(self) -> None:
        self._prev = None

    def ntd(self, rows: np.ndarray, starts: np.ndarray) -> BatchNextTokenDistributions:
        """Exact ∞-gram next-token distributions of the contexts rows[i, starts[i]:], one request."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        starts = np.asarray(starts, dtype=np.int64)
        n, width = rows.shape
        grown = grown_rows(self._prev, rows, starts)
        if n and grown.all():  # a decoding loop's usual step: every row grew by one token
            ext, other = np.arange(n), ()
            prev_states = self._prev[2]  # type: ignore[index]
        else:
            ext, other = np.flatnonzero(grown), np.flatnonzero(~grown)
            prev_states = self._prev[2][ext] if len(ext) else None  # type: ignore[index]
        arrays: dict[str, Any] = {"grown": grown}
        if len(ext):
            tails, tail_offsets = state_tails(rows, starts, ext, prev_states)
            arrays.update(states=prev_states, tail_values=tails, tail_offsets=tail_offsets)
        if len(other):
            values, offsets = as_batch(rows[other], lengths=width - starts[other], padding_side="left", name="contexts")
            arrays.update(values=values, offsets=offsets)
        answer = self.index.call(OP, {}, arrays)[1]
        states = answer.pop("states", None)
        if states is None or states.shape != (n, self.index.state_size):
            raise InfiniGramError(f"{self.index.url}: a malformed answer to {OP}: no ({n}, state size) states")
        self.stats["requests"] += 1
        self.stats["extended"] += len(ext)
        self.stats["looked_up"] += len(other)
        self._prev = (rows, starts, np.asarray(states, dtype=np.int64))
        return ntd_result(answer)


def ntd_result(a: dict) -> BatchNextTokenDistributions:
    """The distributions of an answer's arrays (ops ntd, cache_ntd, rows_ntd)."""
    return BatchNextTokenDistributions(offsets=a["offsets"].astype(np.int64), token_ids=a["token_ids"],
                                       counts=a["counts"], total=a["total"], suffix_len=a["suffix_len"],
                                       sparse=a["sparse"].astype(bool), approximate=a["approximate"].astype(bool))
