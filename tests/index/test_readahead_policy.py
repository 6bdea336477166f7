"""The readahead policy chosen by eval/bench_cold.py (docs/PERFORMANCE.md): files over 8 MiB are
mapped MADV_RANDOM (the kernel marks such a mapping `rr` in /proc/self/smaps), smaller ones are
not; a document read sequentially from a MADV_RANDOM mapping is still exact."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf.build import build_index

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")


def _vm_flags(path: Path) -> list[set[str]]:
    """VmFlags of each of this process's mappings of `path`."""
    out, current = [], None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's first line
                current = path if len(head) >= 6 and head[5] == str(path) else None
            elif line.startswith("VmFlags:") and current is not None:
                out.append(set(head[1:]))
    return out


def test_big_files_random_small_ones_not(scratch_dir: Path) -> None:
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 300, size=n, dtype=np.uint32) for n in (2_500_000, 2_000_000, 7)]  # tokens.bin > 8 MiB
    with build_index(docs, scratch_dir / "big", vocab_size=300, progress=False) as ix:
        shard = scratch_dir / "big" / "shard_00000"
        assert (shard / "tokens.bin").stat().st_size > 8 << 20
        for name, random in (("tokens.bin", True), ("sa.bin", True), ("docs.bin", False), ("unigram.bin", False)):
            flags = _vm_flags((shard / name).resolve())
            assert flags, name
            assert all(("rr" in f) == random for f in flags), (name, flags)
        got = ix.get_doc(0, decode=False).token_ids  # 5 MB read through MADV_WILLNEED
        assert np.array_equal(got, docs[0])
        assert np.array_equal(ix.get_doc(2, decode=False).token_ids, docs[2])
