"""The compiled core and the one place that turns its return codes into Python exceptions."""
from __future__ import annotations

from typing import Any

import numpy as np

from .safe_text import printable
from .errors import IndexFormatError, InfiniGramError

try:
    from . import _lib  # the compiled core (cffi, built by _cffi_build.py)
except ImportError as exc:  # pragma: no cover - only when the package was not built
    raise ImportError(
        "infinigram_hf's C core is not compiled; install the package with `pip install .` "
        "(or `pip install -e .`) so that cffi builds it"
    ) from exc
ffi, lib = _lib.ffi, _lib.lib

# The C API this Python code calls: IG_API_VERSION of native/include/infinigram.h.
C_API_VERSION = 10


def check_api_version(core_lib, expected: int = C_API_VERSION) -> None:
    """Refuse a compiled core built from other headers than this Python code expects (a stale
    build left by an editable install, say): the version compiled into the binding, the one the
    library reports and `expected` must agree."""
    built = getattr(core_lib, "IG_API_VERSION", None)
    reported = core_lib.ig_api_version() if hasattr(core_lib, "ig_api_version") else None
    if built == reported == expected:
        return
    raise ImportError(
        f"infinigram_hf's compiled C core does not match this Python code: it was built from C API "
        f"version {built if built is not None else 'unknown (older than versioning)'} (the library "
        f"reports {reported if reported is not None else 'none'}), this code needs version {expected}. "
        "Rebuild it: `pip install -e .` (or `make native`) in the source tree, or reinstall the package")


check_api_version(lib)

ERR_LEN = 1024


def err_buffer():
    return ffi.new("char[]", ERR_LEN)


def check(rc: int, err) -> None:
    """Raise the exception that matches a C return code (0 returns None)."""
    if rc == lib.IG_OK:
        return
    msg = ffi.string(err).decode("utf-8", "replace") or ffi.string(lib.ig_strerror(rc)).decode()
    msg = printable(msg)  # (messages name files and may quote their bytes)
    if rc == lib.IG_ERR_ARG:
        raise ValueError(msg)
    if rc == lib.IG_ERR_FORMAT:
        raise IndexFormatError(msg)
    if rc == lib.IG_ERR_NOMEM:
        raise MemoryError(msg)
    raise InfiniGramError(msg)


def int64_len(array: np.ndarray) -> int:
    """The int64 values a buffer holds (its bytes / 8): the length passed with a decoding state's
    pointer, which the C calls check against the index's state size (a shorter or narrower array
    is refused, never read past its end)."""
    return array.nbytes // 8


def ptr(array: np.ndarray, ctype: str) -> Any:
    """A typed pointer into a contiguous numpy array (zero-copy), for any argument of type
    ``ctype *`` ("void": raw bytes); an empty array gets a valid one-element buffer (never NULL).
    The one pointer idiom of the package."""
    if ctype == "void":
        return ffi.from_buffer(array) if array.size else ffi.new("char[1]")
    if array.size == 0:
        return ffi.new(ctype + "[1]")
    if not array.flags.aligned:  # (numpy's flag: cheaper than reading array.ctypes.data, a step calls this often)
        # a view at an odd offset (np.frombuffer of a packed buffer): C reads aligned items, so
        # it gets an aligned copy (only inputs can be misaligned: outputs are allocated here)
        array = array.copy()
    return ffi.from_buffer(ctype + "[]", array)
