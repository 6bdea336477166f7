"""Issue 20, sizing the next step: what would the processor pay to mix several orders?

Mixing the model with the n-gram estimates of shorter suffixes (now `levels` in the package: fit_mixing(..., levels=...), eval/mixing_table.py) needs,
per row and decoding step, the next-token distributions of the suffixes of length L − 1, ⌊L/2⌋
and 1 besides the longest match's. This times those queries as one batched call each
(`infgram_ntd_batch(..., infinite=False)`), on held-out stdlib prefixes at the lengths a decoding
loop sees, and counts their entries (the host work of merging them grows with it).

    .venv-test/bin/python eval/bench_orders_ntd.py --rows 8 --steps 100 --runs 5
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ppl_setup  # noqa: E402


def contexts(rows: np.ndarray, lengths: np.ndarray):
    """CSR (flat, offsets) of the last lengths[i] tokens of every row."""
    offs = np.zeros(len(rows) + 1, np.int64)
    offs[1:] = np.cumsum(lengths)
    flat = np.concatenate([r[len(r) - k:] for r, k in zip(rows, lengths)]) if offs[-1] else np.zeros(0, np.int64)
    return flat.astype(np.int64), offs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    index = ppl_setup.reference_index("all", progress=False)
    docs = [d for d in ppl_setup.split_docs("heldout") if len(d) >= args.prompt_len + args.steps][:args.rows]
    levels = ("longest (L)", "L-1", "L/2", "1")
    times = {k: [] for k in levels}
    entries = {k: [] for k in levels}
    for _ in range(args.runs):
        per = {k: 0.0 for k in levels}
        for t in range(args.prompt_len, args.prompt_len + args.steps):
            rows = [np.asarray(d[:t], np.int64) for d in docs]
            flat, offs = contexts(rows, np.full(len(rows), t))
            longest = index.infgram_ntd_batch(flat, offsets=offs).suffix_len
            for name, m in zip(levels, (longest, longest - 1, longest // 2, np.ones_like(longest))):
                m = np.clip(m, 0, None)
                f, o = contexts(rows, m)
                t0 = time.perf_counter()
                d = index.infgram_ntd_batch(f, offsets=o, infinite=False)
                per[name] += time.perf_counter() - t0
                entries[name].append(len(d.token_ids) / len(rows))
        for k in levels:
            times[k].append(per[k] / args.steps)
    print(f"{len(docs)} rows, {args.steps} steps from prompt length {args.prompt_len}, {args.runs} runs "
          f"(median wall time per batched call, mean entries per row):")
    print("| suffix | ms per call | µs per row | entries per row |\n|---|---:|---:|---:|")
    for k in levels:
        ms = 1e3 * statistics.median(times[k])
        print(f"| {k} | {ms:.3f} | {1e3 * ms / len(docs):.0f} | {np.mean(entries[k]):.0f} |")


if __name__ == "__main__":
    main()
