"""Token ids as the C core reads them: contiguous uint32 (int64 for drafting sequences), with a
ValueError naming the argument -- and, in a batch, the query -- of a bad id.

Example:
    >>> as_ids([1, 2, 3])
    array([1, 2, 3], dtype=uint32)
    >>> as_token(7)
    array([7], dtype=uint32)
"""
from __future__ import annotations

import array
from typing import Any

import numpy as np

U32_MAX = 0xFFFFFFFF
# array.array's typecode for uint32 (4-byte "I" on every usual platform, else "L")
U32_CODE = "I" if array.array("I").itemsize == 4 else "L"
EMPTY_IDS = np.zeros(0, dtype=np.uint32)


def to_numpy(x: Any) -> Any:
    """A torch tensor as a numpy array (without importing torch); anything else unchanged."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return x


def as_ids(ids: Any, name: str = "ids") -> np.ndarray:
    """Token ids as a contiguous uint32 array; a clear ValueError for anything that is not."""
    if type(ids) is list and ids and type(ids[0]) is not bool:
        # Fast path for lists of ints: array.array converts in C (~10x faster than numpy's
        # inference) and refuses negatives, ids >= 2**32 and non-integers, which then take the
        # general path below for the error message.
        try:
            return np.frombuffer(array.array(U32_CODE, ids), dtype=np.uint32)
        except (OverflowError, TypeError):
            pass
    arr = np.asarray(to_numpy(ids))
    if arr.size == 0:
        return EMPTY_IDS
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.dtype == np.uint32:
        return np.ascontiguousarray(arr)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > U32_MAX:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name}: id {bad} is outside the vocabulary")
    return np.ascontiguousarray(arr, dtype=np.uint32)


def as_token(token: Any, name: str = "token") -> np.ndarray:
    """One token id (an int) as a 1-element uint32 array."""
    if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)):
        raise ValueError(f"{name} must be an int id, got {token!r}")
    return as_ids([int(token)], name)


def checked_u32(arr: np.ndarray, offsets: np.ndarray, name: str) -> np.ndarray:
    """Integer ids of a flat batch as contiguous uint32, with a ValueError naming the query
    (``name[row]``, found through ``offsets``) of a bad one."""
    if arr.dtype == np.uint32:
        return np.ascontiguousarray(arr)
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint32)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    bad = (arr < 0) | (arr > U32_MAX) if arr.dtype.kind == "i" else arr > U32_MAX
    if bad.any():
        j = int(np.argmax(bad))
        row = int(np.searchsorted(offsets, j, side="right") - 1)
        raise ValueError(f"{name}[{row}]: id {int(arr[j])} is outside the vocabulary")
    return np.ascontiguousarray(arr, dtype=np.uint32)


def one_per_row(tokens: Any, n: int, name: str = "tokens") -> np.ndarray:
    """One id per row of a batch of n (a scalar is repeated), as uint32."""
    t = np.asarray(to_numpy(tokens))
    if t.ndim == 0:
        t = np.full(n, t)
    if t.shape != (n,):
        raise ValueError(f"{name} must hold one id per prompt ({n}), got shape {t.shape}")
    return checked_u32(t, np.arange(n + 1), name)


def as_i64_ids(ids: Any, name: str = "ids") -> np.ndarray:
    """A 1-D sequence of ids as contiguous int64 (drafting reads sequences that may hold ids the
    index cannot: padding, or a larger model vocabulary)."""
    arr = np.asarray(to_numpy(ids))
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)
