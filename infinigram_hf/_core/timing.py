"""Latency measurement shared by the CLI and the demo: the median of a few warm runs.

Example:
    >>> value, seconds = timed(lambda: sum(range(100)), runs=3)
    >>> value
    4950
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Tuple


def timed(fn: Callable[[], Any], runs: int = 5) -> Tuple[Any, float]:
    """Run `fn` `runs` times; return its (last) result and the median wall time in seconds."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    times = []
    result = None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return result, statistics.median(times)


def format_seconds(seconds: float) -> str:
    """A latency in the unit that reads best: '840 ns', '12.3 µs', '4.56 ms', '1.23 s'."""
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"
