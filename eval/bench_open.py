"""Opening latency: InfiniGramIndex.open() on warm and cold page caches (issue 2, item 4).

"Cold" evicts the index's files from the page cache first (posix_fadvise DONTNEED on each file,
no root needed, other files untouched); "warm" opens again right after. Medians of --runs.

    .venv/bin/python eval/bench_open.py ~/.cache/infinigram_hf_eval/ours/linux.prefix-100M ...
"""
import argparse
import gc
import os
import statistics
import time
from pathlib import Path
from infinigram_hf import InfiniGramIndex
def evict(p: str) -> None:
    """Drop the index's files from the page cache."""
    for f in Path(p).rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
ap = argparse.ArgumentParser(description="open() latency, cold and warm")
ap.add_argument("indexes", nargs="+")
ap.add_argument("--runs", type=int, default=7)
args = ap.parse_args()
for p in args.indexes:
    InfiniGramIndex.open(p).close()
    cold, warm = [], []
    for _ in range(args.runs):
        evict(p); gc.collect(); time.sleep(0.2)
        t = time.perf_counter(); ix = InfiniGramIndex.open(p); cold.append(time.perf_counter() - t)
        ix.close(); del ix; gc.collect()
        t = time.perf_counter(); ix = InfiniGramIndex.open(p); warm.append(time.perf_counter() - t)
        ix.close(); del ix; gc.collect()
    print(f"{p}: cold open median {statistics.median(cold)*1e3:.1f} ms {[round(c*1e3,1) for c in cold]}; warm {statistics.median(warm)*1e3:.1f} ms")
