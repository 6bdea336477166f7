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
                   b'{"arrays": "no"}', b'[1]', b'{"params": 3}'):
        bad.append(wire.MAGIC + len(header).to_bytes(4, "little") + header)
    for body in bad:
        with pytest.raises(wire.WireError):
            wire.decode(body)
    with pytest.raises(wire.WireError):
        wire.encode({}, {"o": np.array([object()])})
