"""Where the ∞-gram context of a sequence starts: after its leading padding and after its last
document boundary -- an EOS id, or an id the index cannot hold (>= its vocab size): documents are
separated in the index, so no indexed n-gram spans a boundary. The one rule of the logits
processor, the drafter and perplexity scoring (the C drafting step, ig_draft_step, applies it too).

Example:
    >>> context_start(np.array([5, 0, 7, 8]), vocab_size=10, eos_token_id=0)
    2
    >>> context_starts(np.array([[9, 9, 5, 6], [5, 12, 6, 7]]), vocab_size=10, pad_token_id=9).tolist()
    [2, 2]
"""
from __future__ import annotations

from typing import Optional

import numpy as np


def boundaries(ids: np.ndarray, vocab_size: int, eos_token_id: Optional[int] = None) -> np.ndarray:
    """Where `ids` (any shape) hold a document boundary: an id outside the index's vocabulary, or EOS."""
    bound = ids >= vocab_size
    if eos_token_id is not None:
        bound |= ids == eos_token_id
    return bound


def context_start(ids: np.ndarray, vocab_size: int, *, eos_token_id: Optional[int] = None,
                  pad_token_id: Optional[int] = None) -> int:
    """Where the ∞-gram context of one sequence of ids starts (see the module docstring; padding
    equal to EOS counts as a boundary, not as padding)."""
    start = 0
    if pad_token_id is not None and pad_token_id != eos_token_id and len(ids):
        real = np.flatnonzero(ids != pad_token_id)
        start = int(real[0]) if len(real) else len(ids)
    bound = np.flatnonzero(boundaries(ids, vocab_size, eos_token_id))
    if len(bound):
        start = max(start, int(bound[-1]) + 1)
    return start


def context_starts(rows: np.ndarray, vocab_size: int, *, eos_token_id: Optional[int] = None,
                   pad_token_id: Optional[int] = None) -> np.ndarray:
    """`context_start` of every row of a (batch, length) id array, as int64."""
    n, width = rows.shape
    start = np.zeros(n, dtype=np.int64)
    if pad_token_id is not None and pad_token_id != eos_token_id and width:
        real = rows != pad_token_id
        start = np.where(real.any(axis=1), real.argmax(axis=1), width)
    if width:
        rev = boundaries(rows, vocab_size, eos_token_id)[:, ::-1]
        last = width - 1 - rev.argmax(axis=1)
        start = np.where(rev.any(axis=1), np.maximum(start, last + 1), start)
    return start


def segments(ids: np.ndarray, vocab_size: int, eos_token_id: Optional[int] = None) -> list:
    """(begin, end) of the stretches of ids between boundaries (each scored as its own context)."""
    bound = np.flatnonzero(boundaries(ids, vocab_size, eos_token_id))
    starts = np.concatenate([[0], bound + 1])
    stops = np.concatenate([bound, [len(ids)]])
    return [(a, b) for a, b in zip(starts.tolist(), stops.tolist()) if b > a]
