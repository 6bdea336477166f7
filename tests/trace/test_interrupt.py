"""Ctrl-C inside a long attribute() / creativity() call: the C pass polls the cancel flag that
Ctrl-C sets (infinigram_hf._core.interrupt), so KeyboardInterrupt comes at once instead of when
the call would have returned, and the index answers correctly afterwards."""
from __future__ import annotations

import signal
import textwrap
import time

import pytest

from conftest import interruptible_python

_CHILD = textwrap.dedent("""
    import sys, time, numpy as np
    from infinigram_hf import build_index
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50, 1000).tolist() for _ in range(64)]
    # 64 shards: ~9 us a token, so the call below would run for about half a minute
    ix = build_index(docs, sys.argv[1], vocab_size=64, progress=False, max_shard_tokens=1001)
    q = rng.integers(0, 50, int(sys.argv[3])).astype(np.uint32)
    call = {"attribute": lambda: ix.attribute(q, min_len=2, max_docs=0),
            "attribute_docs": lambda: ix.attribute_batch([q[:len(q) // 2], q[len(q) // 2:]], min_len=2),
            "creativity": lambda: ix.creativity(q)}[sys.argv[2]]
    print("start", flush=True)
    t0 = time.monotonic()
    try:
        call()
        print("finished", time.monotonic() - t0, flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.monotonic() - t0, flush=True)
    # still healthy: the same index answers, exactly as a fresh call on a short text
    small = q[:300]
    a = ix.attribute(small, min_len=2, max_docs=1)
    c = ix.creativity(small)
    assert [s.end - s.start for s in a.spans] and all(s.count == ix.count(small[s.start:s.end]) for s in a.spans)
    assert all(ix.count(small[l:l + k]) > 0 for l, k in enumerate(c.match_len.tolist()))
    print("healthy", flush=True)
""")


@pytest.mark.parametrize("what, n", [("attribute", 3_000_000), ("attribute_docs", 1_000_000),
                                     ("creativity", 3_000_000)])
def test_ctrl_c_stops_a_long_trace_call(what, n, tmp_path):
    """SIGINT lands 0.5 s into a call that would run for many seconds: KeyboardInterrupt comes
    within seconds (before: only when the C call returned) and the process goes on answering."""
    proc = interruptible_python(_CHILD, str(tmp_path / "ix"), what, str(n))
    try:
        assert proc.stdout.readline().strip() == "start"
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        first = proc.stdout.readline()
        latency = time.monotonic() - sent
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert first.startswith("interrupted"), (first, out, err[-2000:])
    assert latency < 5, f"the interrupt took {latency:.1f} s to land"
    assert proc.returncode == 0 and out.strip() == "healthy", (out, err[-2000:])
