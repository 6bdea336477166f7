"""Random rows of next-token distributions for the mixing tests, with their HOST_COLUMNS written
out by brute force: empty and single-token rows among them, and which rows are active."""
from __future__ import annotations

import numpy as np

from infinigram_hf.index.results import BatchNextTokenDistributions


def random_rows(rng: np.random.Generator, n: int = 9) -> tuple:
    """(distributions, host columns (n, 6), active) of n random rows: row 0 empty, row 1 one token."""
    width = rng.integers(0, 6, n)
    width[0], width[1] = 0, 1
    offsets = np.concatenate([[0], np.cumsum(width)]).astype(np.int64)
    counts = rng.integers(1, 50, offsets[-1]).astype(np.uint64)
    total = np.array([counts[a:b].sum() for a, b in zip(offsets[:-1], offsets[1:])], dtype=np.uint64)
    suffix_len = rng.integers(0, 30, n).astype(np.int64)
    d = BatchNextTokenDistributions(offsets, np.arange(offsets[-1], dtype=np.uint32), counts, total, suffix_len,
                                    width == 1, np.zeros(n, bool))
    top = [counts[a:b].max() / max(int(t), 1) if b > a else 0.0 for a, b, t in zip(offsets[:-1], offsets[1:], total)]
    host = np.stack([suffix_len + 1, width == 1, total, width, top, np.full(n, -1)], axis=1).astype(np.float64)
    active = (rng.random(n) < 0.8) & (total > 0)
    return d, host, active
