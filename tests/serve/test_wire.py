"""The binary body format (infinigram_hf.index.wire): round trips, and every malformed message
is a WireError (a ValueError) before any array is made."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from infinigram_hf.index import wire

DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64, np.float32, np.float64,
          np.bool_]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(0, 4), max_size=3)), max_size=5),
       st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5) | st.none(), max_size=3))
def test_round_trip(specs, params) -> None:
    rng = np.random.default_rng(0)
    arrays = {f"a{i}": (rng.integers(0, 2, size=shape) if dt is np.bool_ else rng.integers(0, 100, size=shape)).astype(dt)
              for i, (dt, shape) in enumerate(specs)}
    p, a = wire.decode(wire.encode(params, arrays))
    assert p == params and list(a) == list(arrays)
    for k in arrays:
        assert a[k].dtype == arrays[k].dtype and a[k].shape == arrays[k].shape and np.array_equal(a[k], arrays[k])


def test_malformed_messages_are_refused() -> None:
    good = wire.encode({"x": 1}, {"v": np.arange(4, dtype=np.uint32)})
    bad = [b"", b"IGW", b"XXXX\x00\x00\x00\x00", good[:-1], good + b"\x00", good[:8] + b"[" + good[9:],
           wire.MAGIC + (10 ** 9).to_bytes(4, "little")]
    for header in (b'{"arrays": [{"name": "v", "dtype": "O", "shape": [1]}]}',
                   b'{"arrays": [{"name": "v", "dtype": "u4", "shape": [-1]}]}',
                   b'{"arrays": [{"name": "v", "dtype": "u4", "shape": [1, 1, 1, 1, 1]}]}',
                   b'{"arrays": [{"name": "v", "dtype": "u4", "shape": [4294967296, 4294967296]}]}',
                   b'{"arrays": "no"}', b'[1]', b'{"params": 3}',
                   # regression: an unhashable dtype raised TypeError (not a WireError) in decode
                   b'{"arrays": [{"name": "v", "dtype": ["u4"], "shape": [4]}]}',
                   b'{"arrays": [{"name": "v", "dtype": "u4", "shape": [true]}]}',
                   b'{"arrays": [{"name": 3, "dtype": "u4", "shape": [4]}]}', b'{"arrays": [7]}'):
        bad.append(wire.MAGIC + len(header).to_bytes(4, "little") + header)
    for body in bad:
        with pytest.raises(wire.WireError):
            wire.decode(body)
    with pytest.raises(wire.WireError):
        wire.encode({}, {"o": np.array([object()])})


def test_encoded_bytes_are_those_of_the_format() -> None:
    """The header is built as text (not json.dumps of dicts) and arrays are joined from their
    buffers: the bytes must still be the documented format -- magic, header length, a JSON header
    naming each array's dtype code and shape, then the arrays in order, little-endian, C order."""
    import json

    arrays = {"a\"b": np.arange(6, dtype=np.int64).reshape(2, 3)[:, ::2],  # not contiguous
              "big": np.array([1, 2], dtype=">u4"), "flag": np.array([True, False]), "empty": np.zeros((0, 2), np.float32)}
    body = wire.encode({"k": [1, "x"]}, arrays)
    hlen = int.from_bytes(body[4:8], "little")
    assert body[:4] == wire.MAGIC
    header = json.loads(body[8:8 + hlen])
    assert header == {"params": {"k": [1, "x"]}, "arrays": [
        {"name": "a\"b", "dtype": "i8", "shape": [2, 2]}, {"name": "big", "dtype": "u4", "shape": [2]},
        {"name": "flag", "dtype": "b1", "shape": [2]}, {"name": "empty", "dtype": "f4", "shape": [0, 2]}]}
    assert body[8 + hlen:] == (np.array([[0, 2], [3, 5]], "<i8").tobytes() + np.array([1, 2], "<u4").tobytes()
                               + b"\x01\x00")


def test_arrays_at_odd_offsets_come_out_aligned() -> None:
    """A body packs arrays back to back, so an int64 array after 3 bytes of uint8 sits at an odd
    offset; the C core reads aligned items (UBSan found the misaligned load in the sanitized
    suite), so decode hands out aligned arrays, equal to what was sent."""
    sent = {"pad": np.array([1, 2, 3], np.uint8), "offsets": np.array([0, 3, 5], np.int64)}
    _, got = wire.decode(wire.encode({}, sent))
    assert got["offsets"].ctypes.data % 8 == 0
    np.testing.assert_array_equal(got["offsets"], sent["offsets"])


def test_native_pointers_of_misaligned_views_are_aligned_copies() -> None:
    from infinigram_hf._core.native import ffi, ptr

    buf = bytearray(8 * 4 + 1)
    view = np.frombuffer(buf, dtype=np.int64, offset=1, count=4)
    view_addr = view.ctypes.data
    assert view_addr % 8  # the case
    p = ptr(view, "int64_t")
    assert int(ffi.cast("uintptr_t", p)) % 8 == 0
