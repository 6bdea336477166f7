"""The writer reserves address space for the largest shard and faults pages in on background
threads (native/src/prefault.c). Where that reservation is refused (a strict overcommit policy,
an address-space limit), it falls back to growing ordinary allocations: same index, byte for byte."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import UNDER_ASAN
from infinigram_hf.build import build_index

DOCS = textwrap.dedent("""
    import numpy as np

    def docs():
        rng = np.random.default_rng(7)
        for i in range(3000):
            yield rng.integers(0, 40000, size=int(rng.integers(0, 400)), dtype=np.uint16)
            if i % 500 == 0:
                yield [5, 6, 7] * 200  # long repeats, as lists of ints
""")

CHILD = DOCS + textwrap.dedent("""
    import resource, sys
    from infinigram_hf.build import build_index

    # room for the interpreter and this build, not for an 8 GiB reservation
    with open("/proc/self/statm") as f:
        vm_bytes = int(f.read().split()[0]) * resource.getpagesize()
    limit = vm_bytes + (1536 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    build_index(docs(), sys.argv[1], vocab_size=40000, max_shard_tokens=300_000, progress=False)
    print("ok")
""")


def index_files(path: Path) -> dict:
    return {p.relative_to(path): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != "meta.json"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux")
@pytest.mark.skipif(UNDER_ASAN, reason="ASan needs more address space than the limit")
def test_build_without_address_space_reservation_is_identical(tmp_path) -> None:
    scope: dict = {}
    exec(DOCS, scope)
    ref = build_index(scope["docs"](), tmp_path / "ref", vocab_size=40000, max_shard_tokens=300_000, progress=False)
    assert ref.num_shards > 1
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "limited")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
    assert index_files(tmp_path / "limited") == index_files(tmp_path / "ref")


def test_large_shard_with_pages_ahead(tmp_path) -> None:
    """Documents arriving in many batches (pages faulted in ahead of the writer and released at
    the end): the index answers exactly as the corpus says."""
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 300, size=int(rng.integers(1, 5000)), dtype=np.uint16) for _ in range(400)]
    ix = build_index(iter(docs), tmp_path / "ix", vocab_size=300, batch_size=7, progress=False)
    flat = np.concatenate(docs)
    assert ix.num_tokens == len(flat) and ix.num_docs == len(docs)
    for t in (0, 17, 299):
        assert ix.count([t]) == int(np.sum(flat == t))
    a, b = int(docs[5][10]), int(docs[5][11])
    brute = sum(int(np.sum((d[:-1] == a) & (d[1:] == b))) for d in docs)
    assert ix.count([a, b]) == brute
