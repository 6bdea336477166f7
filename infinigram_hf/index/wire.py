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


_JSON_NAMES: dict = {}  # array name -> its JSON string (a decoding loop sends the same few names)


def _json_name(name: str) -> str:
    s = _JSON_NAMES.get(name)
    if s is None:
        if not isinstance(name, str):
            raise WireError(f"array names must be strings, got {name!r}")
        s = json.dumps(name)
        if len(_JSON_NAMES) < 1024:
            _JSON_NAMES[name] = s
    return s


def encode(params: Mapping[str, Any], arrays: Mapping[str, Any] = {}) -> bytes:
    """One message from JSON-able params and named numpy arrays.

    Written for a decoding loop's small messages (one per step, issue 16): the header is built
    as text from the specs (json.dumps of the nested dicts cost more than the arrays), and each
    array's bytes are joined straight from its buffer (no tobytes copy)."""
    specs, blobs = [], []
    for name, arr in arrays.items():
        a = arr if type(arr) is np.ndarray else np.asarray(arr)
        dt = _NP[_code(a.dtype)]
        if a.dtype != dt or not a.flags.c_contiguous:
            a = np.ascontiguousarray(a, dtype=dt)
        specs.append('{"name":%s,"dtype":"%s","shape":[%s]}'
                     % (_json_name(name), _CODE[(dt.kind, dt.itemsize)], ",".join(map(str, a.shape))))
        blobs.append(a)
    head = json.dumps(dict(params), separators=(",", ":")) if params else "{}"
    header = ('{"params":%s,"arrays":[%s]}' % (head, ",".join(specs))).encode()
    return b"".join([MAGIC, len(header).to_bytes(4, "little"), header, *blobs])


def decode(body: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(params, arrays) of a message; WireError when it is malformed in any way.

    Arrays are views of one uint8 array over the body (a view per array is cheaper than
    np.frombuffer per array); one whose offset is no multiple of its item size is copied."""
    size = len(body)
    if size < 8 or body[:4] != MAGIC:
        raise WireError(f"the body is not an {CONTENT_TYPE} message (it must start with {MAGIC!r})")
    hlen = int.from_bytes(body[4:8], "little")
    if hlen > MAX_HEADER or 8 + hlen > size:
        raise WireError(f"header length {hlen} does not fit the {size}-byte body")
    try:
        header = json.loads(bytes(body[8:8 + hlen]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"the header is not JSON: {exc}") from None
    if type(header) is not dict:
        raise WireError("the header must be {\"params\": {...}, \"arrays\": [...]}")
    params, specs = header.get("params", {}), header.get("arrays", [])
    if type(params) is not dict or type(specs) is not list:
        raise WireError("the header must be {\"params\": {...}, \"arrays\": [...]}")
    if len(specs) > MAX_ARRAYS:
        raise WireError(f"at most {MAX_ARRAYS} arrays, got {len(specs)}")
    arrays: dict[str, np.ndarray] = {}
    pos = 8 + hlen
    if specs:
        buf = np.frombuffer(body, dtype=np.uint8)
        base = buf.ctypes.data
    for spec in specs:
        if type(spec) is not dict:
            raise WireError("each array spec must be {\"name\", \"dtype\", \"shape\"}")
        name, code, shape = spec.get("name"), spec.get("dtype"), spec.get("shape")
        dt = _NP.get(code) if type(code) is str else None
        count = 1
        if type(shape) is list and len(shape) <= MAX_DIMS:
            for d in shape:
                if type(d) is not int or d < 0:
                    count = -1
                    break
                count *= d
        else:
            count = -1
        if type(name) is not str or dt is None or count < 0:
            raise WireError(f"bad array spec {spec!r} (dtype one of {sorted(DTYPES)}, shape a list of ints >= 0)")
        n = count * dt.itemsize
        if pos + n > size:
            raise WireError(f"array {name!r} of shape {shape} needs {n} bytes; the body has {size - pos} left")
        arr = buf[pos:pos + n].view(dt)
        if len(shape) != 1:
            arr = arr.reshape(shape)
        # the body packs arrays back to back: one at an offset that is no multiple of its item
        # size is copied, since the C core reads its items as aligned values (UBSan: misaligned load)
        arrays[name] = arr.copy() if (base + pos) % dt.itemsize else arr
        pos += n
    if pos != size:
        raise WireError(f"{size - pos} bytes after the declared arrays")
    return params, arrays
