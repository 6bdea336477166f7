"""The binary body of the batched HTTP endpoints (`infinigram-hf serve`, `RemoteIndex`).

One message is::

    b"IGW1" | uint32 LE header length H | H bytes of UTF-8 JSON header | array bytes

The JSON header is ``{"params": {...}, "arrays": [{"name", "dtype", "shape"}, ...]}``; the array
bytes follow in that order, each C-contiguous and little-endian, with no padding. Requests and
responses use the same framing. Only plain numeric dtypes are accepted (never pickled objects),
and the declared shapes must add up to exactly the bytes received, so a message is checked
before any array is made from it. Arrays are zero-copy views of the received bytes.
"""
from __future__ import annotations

import json
import math
from typing import Any, Mapping

import numpy as np

MAGIC = b"IGW1"
CONTENT_TYPE = "application/x-infinigram-arrays"
# little-endian numeric dtypes only: a message never carries objects
DTYPES = {"u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f4", "f8", "b1"}
# the little-endian numpy dtype of each code, made once (a decode is on every decoding step)
_NP = {c: np.dtype("?" if c == "b1" else c).newbyteorder("<") for c in DTYPES}
_CODE = {(dt.kind, dt.itemsize): c for c, dt in _NP.items()}
MAX_HEADER = 1 << 20
MAX_ARRAYS = 64
MAX_DIMS = 4


class WireError(ValueError):
    """A message that does not follow the format (the server answers 400 with this text)."""


def _code(dtype: np.dtype) -> str:
    code = _CODE.get((dtype.kind, dtype.itemsize))
    if code is None:
        raise WireError(f"dtype {dtype} cannot be sent (numeric dtypes only)")
    return code


def encode(params: Mapping[str, Any], arrays: Mapping[str, Any] = {}) -> bytes:
    """One message from JSON-able params and named numpy arrays."""
    specs, blobs = [], []
    for name, arr in arrays.items():
        a = np.asarray(arr)
        code = _code(a.dtype)
        a = np.asarray(a, dtype=_NP[code], order="C")
        specs.append({"name": name, "dtype": code, "shape": list(a.shape)})
        blobs.append(a.tobytes())
    header = json.dumps({"params": dict(params), "arrays": specs}, separators=(",", ":")).encode()
    return b"".join([MAGIC, len(header).to_bytes(4, "little"), header, *blobs])


def decode(body: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(params, arrays) of a message; WireError when it is malformed in any way."""
    mv = memoryview(body)
    if len(mv) < 8 or bytes(mv[:4]) != MAGIC:
        raise WireError(f"the body is not an {CONTENT_TYPE} message (it must start with {MAGIC!r})")
    hlen = int.from_bytes(mv[4:8], "little")
    if hlen > MAX_HEADER or 8 + hlen > len(mv):
        raise WireError(f"header length {hlen} does not fit the {len(mv)}-byte body")
    try:
        header = json.loads(bytes(mv[8:8 + hlen]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("params", {}), dict) \
            or not isinstance(header.get("arrays", []), list):
        raise WireError("the header must be {\"params\": {...}, \"arrays\": [...]}")
    specs = header.get("arrays", [])
    if len(specs) > MAX_ARRAYS:
        raise WireError(f"at most {MAX_ARRAYS} arrays, got {len(specs)}")
    arrays: dict[str, np.ndarray] = {}
    pos = 8 + hlen
    for spec in specs:
        if not isinstance(spec, dict):
            raise WireError("each array spec must be {\"name\", \"dtype\", \"shape\"}")
        name, code, shape = spec.get("name"), spec.get("dtype"), spec.get("shape")
        if not isinstance(name, str) or code not in DTYPES or not isinstance(shape, list) or len(shape) > MAX_DIMS \
                or not all(type(d) is int and d >= 0 for d in shape):
            raise WireError(f"bad array spec {spec!r} (dtype one of {sorted(DTYPES)}, shape a list of ints >= 0)")
        dt = _NP[code]
        n = math.prod(shape) * dt.itemsize
        if pos + n > len(mv):
            raise WireError(f"array {name!r} of shape {shape} needs {n} bytes; the body has {len(mv) - pos} left")
        arr = np.frombuffer(mv[pos:pos + n], dtype=dt).reshape(tuple(shape))
        # the body packs arrays back to back: one at an offset that is no multiple of its item
        # size is copied, since the C core reads its items as aligned values (UBSan: misaligned load)
        arrays[name] = arr if arr.ctypes.data % max(dt.itemsize, 1) == 0 else arr.copy()
        pos += n
    if pos != len(mv):
        raise WireError(f"{len(mv) - pos} bytes after the declared arrays")
    return header.get("params", {}), arrays
