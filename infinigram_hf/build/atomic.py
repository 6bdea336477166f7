"""Atomic replacement of a directory by another (Linux renameat2 with RENAME_EXCHANGE).

build_index(..., overwrite=True) swaps the finished build with the existing index in one step,
so a reader opening the index at that moment finds the old one or the new one, never none, and
a build killed at any moment leaves a complete index at the target. Where the call is missing
(other systems, old C libraries) or the filesystem refuses it, exchange() returns False and the
caller falls back to two renames.

Example:
    >>> exchange(Path("idx.tmp"), Path("idx"))   # doctest: +SKIP
    True
"""
from __future__ import annotations

import ctypes
import errno
import os
import sys
from pathlib import Path
from typing import Any, Optional

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2: Optional[Any] = None


def _function() -> Optional[Any]:
    global _renameat2
    if _renameat2 is None and sys.platform.startswith("linux"):
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
        except (OSError, AttributeError):
            fn = False
        else:
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
        _renameat2 = fn
    return _renameat2 or None


def exchange(a: Path, b: Path) -> bool:
    """Swap the directory entries a and b atomically (both must exist). False when unsupported;
    OSError for any other failure (nothing was changed then)."""
    fn = _function()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False  # the kernel or the filesystem does not do exchanges
    raise OSError(err, os.strerror(err), str(b))
