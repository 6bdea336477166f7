"""The memorisation guard's query: which next tokens would make the end of a context a verbatim
corpus copy longer than max_copy_len tokens.

The longest corpus match ending at a new token t is longer than K exactly when the last K tokens
of the context followed by t occur (a longer match holds that (K + 1)-gram, and that (K + 1)-gram
is such a match). So the forbidden tokens of a context are the support of the fixed-n next-token
distribution of its last K tokens: one exact query per row, never a scan of the vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..index.batch import ntd_batch


@dataclass(frozen=True)
class CopyStep:
    """One decoding step of a batch: per row, `copy_len` = the longest verbatim corpus copy
    ending at the row's last token (the ∞-gram's matched suffix; counts from the start of the
    context, prompt included), and `masked` = the next tokens the guard forbade."""

    copy_len: np.ndarray
    masked: np.ndarray


def forbidden_next(index: Any, rows: np.ndarray, starts: np.ndarray, max_copy_len: int) -> tuple:
    """(row, token) pairs of every next token that would end a verbatim copy longer than
    max_copy_len (rows: (batch, length) ids, left-aligned contexts starting at starts[i]).
    Rows whose context is shorter than max_copy_len forbid nothing."""
    n, width = rows.shape
    long_enough = np.flatnonzero(width - starts >= max_copy_len)
    if len(long_enough) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    tails = rows[long_enough, width - max_copy_len:]
    d = ntd_batch(index, np.ascontiguousarray(tails), infinite=False)
    keep = d.token_ids != index.separator_id  # the end of a document is no token to forbid
    return long_enough[d.rows[keep]].astype(np.int64), d.token_ids[keep].astype(np.int64)
