#!/usr/bin/env python3
"""Does count_batch gain from huge pages? (issue 19: is the batched search bound by the TLB?)

    .venv-test/bin/python eval/bench_hugepages.py read  --index-dir /tmp/copy/linux200m
    .venv-test/bin/python eval/bench_hugepages.py fault --index-dir /tmp/copy/linux200m

The page cache of sa.bin and tokens.bin is emptied first, then refilled either through read()
(`read`: ext4 readahead allocates large folios, which the kernel maps with 2 MiB page-table
entries where the mapping allows) or by the queries' own faults (`fault`: the index maps these
files MADV_RANDOM, so 4 KiB folios). Two handles on the index: A as opened, B with
MADV_NORMAL + MADV_HUGEPAGE. Prints each handle's FilePmdMapped (kB of the mapping held by
2 MiB entries) and count_batch's CPU µs per query (20,000 held-out 5-grams, one thread, median of
9 rounds, A and B alternating). Use a private copy of the index: pages that another process maps
cannot be evicted. The two modes cannot share one process (one page cache), so compare runs
made back to back.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402
from bench_cold import advise, files_under, mappings  # noqa: E402

from infinigram_hf import InfiniGramIndex  # noqa: E402
from infinigram_hf.index.batch import Ragged  # noqa: E402

MADV_NORMAL, MADV_RANDOM, MADV_DONTNEED, MADV_HUGEPAGE = 0, 1, 4, 14


def drop(paths: list[str]) -> None:
    advise(mappings(paths), MADV_DONTNEED)
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def pmd_kb(maps: list[tuple]) -> int:
    starts, total, mine = {m[0] for m in maps}, 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                mine = int(line.split("-")[0], 16) in starts
            elif mine and line.startswith("FilePmdMapped"):
                total += int(line.split()[1])
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["read", "fault"])
    ap.add_argument("--index-dir", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    big = [p for p in files_under(a.index_dir) if p.endswith(("sa.bin", "tokens.bin"))]
    handles, maps = {}, {}
    for name in ("A", "B"):
        before = set(mappings(big))
        handles[name] = InfiniGramIndex.open(a.index_dir)
        maps[name] = sorted(set(mappings(big)) - before)
    advise(maps["B"], MADV_NORMAL)
    advise(maps["B"], MADV_HUGEPAGE)
    drop(big)
    if a.mode == "read":
        for p in big:
            with open(p, "rb", buffering=0) as f:
                while f.read(8 << 20):
                    pass
    toks, _ = corpora.load_tokens("linux200m")
    held = np.asarray(np.load(corpora.tokens_path("linux"), mmap_mode="r")[len(toks):len(toks) + 20_000_000])
    starts = np.random.default_rng(0).integers(0, len(held) - 5, 20_000)
    vals = np.stack([held[s:s + 5] for s in starts]).astype(np.uint32).reshape(-1)
    q = Ragged(vals, np.arange(0, len(vals) + 1, 5, dtype=np.int64))
    answers = {n: np.asarray(ix.count_batch(q, n_threads=1)) for n, ix in handles.items()}  # warms
    assert np.array_equal(answers["A"], answers["B"])
    us: dict[str, list[float]] = {"A": [], "B": []}
    for r in range(a.rounds):
        for n in ("A", "B") if r % 2 == 0 else ("B", "A"):
            c0 = time.thread_time()
            handles[n].count_batch(q, n_threads=1)
            us[n].append((time.thread_time() - c0) / len(starts) * 1e6)
    print(f"{time.strftime('%Y-%m-%d %H:%M')} mode {a.mode} load {os.getloadavg()}")
    for n in ("A", "B"):
        print(f"{n} ({'as opened' if n == 'A' else 'MADV_HUGEPAGE'}): FilePmdMapped {pmd_kb(maps[n])} kB, "
              f"count_batch {np.median(us[n]):.3f} µs/query CPU")


if __name__ == "__main__":
    main()
