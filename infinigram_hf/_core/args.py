"""Argument checks shared by the public entry points.

Every size, count or index argument is an int (bools refused) inside a stated range, checked
before anything is allocated from it; every float is finite and inside its range. A bad one is
a ValueError naming the argument -- never an OverflowError from the C binding, a MemoryError
from an allocation sized by it, or a value silently replaced.

Example:
    >>> int_arg("max_draft", 8, 0, MAX_DRAFT)
    8
    >>> float_arg("temperature", float("nan"), 0.0, 1e6)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be a finite number in [0.0, 1000000.0], got nan
"""
from __future__ import annotations

import math
import reprlib
from typing import Any, Optional

import numpy as np

INT32_MAX = 2**31 - 1


class _Unset:
    """The default of an option whose absence means something else than None."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
INT64_MAX = 2**63 - 1
# The most tokens one draft may hold (drafts of more than a few dozen tokens are never accepted
# whole; each token costs buffers of 8-byte entries).
MAX_DRAFT = 1 << 16


def int_arg(name: str, value: Any, lo: int, hi: int = INT64_MAX, note: str = "") -> int:
    """`value` as an int in [lo, hi], else a ValueError naming `name` (`note` says more)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        more = f" ({note})" if note else ""
        raise ValueError(f"{name} must be an int in [{lo}, {_bound(hi)}]{more}, got {short_repr(value)}")
    return int(value)


def opt_int_arg(name: str, value: Any, lo: int, hi: int = INT64_MAX, none_means: str = "") -> Optional[int]:
    """None, or `value` as an int in [lo, hi] (`none_means` says what None stands for)."""
    if value is None:
        return None
    try:
        return int_arg(name, value, lo, hi)
    except ValueError:
        what = f" ({none_means})" if none_means else ""
        raise ValueError(f"{name} must be None{what} or an int in [{lo}, {_bound(hi)}], got {short_repr(value)}") from None


def float_arg(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False, note: str = "") -> float:
    """`value` as a finite float in [lo, hi] (or (lo, hi] with lo_open), else a ValueError."""
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
    if ok:
        try:
            v = float(value)
        except OverflowError:  # an int beyond the float range
            ok = False
        else:
            ok = math.isfinite(v) and (lo < v if lo_open else lo <= v) and v <= hi
    if not ok:
        left, more = "(" if lo_open else "[", f" ({note})" if note else ""
        raise ValueError(f"{name} must be a finite number in {left}{lo}, {hi}]{more}, got {short_repr(value)}")
    return v


def _bound(hi: int) -> str:
    return {INT64_MAX: "2**63 - 1", INT32_MAX: "2**31 - 1"}.get(hi, f"{hi:,}" if hi >= 10**5 else str(hi))


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxstring, _REPR.maxother = 3, 8, 8, 60, 60
_REPR.maxlong = 40


def short_repr(value: Any) -> str:
    """repr of a value for an error message: cut short, so that a 4,000-digit integer, a
    100,000-deep or a self-referential list print in a line (and never recurse)."""
    try:
        return _REPR.repr(value)
    except Exception:  # a broken __repr__
        return f"<{type(value).__name__}>"


def n_threads_arg(n_threads: Any) -> int:
    """0 = automatic; more threads than IG_MAX_THREADS (256) or than the work needs are clamped."""
    return int_arg("n_threads", n_threads, 0, INT32_MAX, "0 = automatic")


def max_support_arg(max_support: Optional[int]) -> int:
    """None = exact distributions (0 for the C core); an int caps the occurrences walked."""
    return opt_int_arg("max_support", max_support, 1, INT64_MAX, "exact") or 0


def max_entries_arg(max_entries: Optional[int]) -> int:
    """None = no cap on a distribution batch's size (0 for the C core)."""
    return opt_int_arg("max_entries", max_entries, 1, INT64_MAX, "no cap") or 0
