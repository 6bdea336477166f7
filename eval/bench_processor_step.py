"""The processor's CPU step in one C call (`mix_step`, ig_mix_step_f32) against the numpy path
it replaced (still the path on other devices), for the two λs and a two-way learned model (an
MLP 16 over the default features), same index, same inputs.

Each call sees held-out stdlib prefixes growing by one token and random (batch, 32000) scores;
fresh processors per run, the two called in turn at every step on the same inputs (the numpy
path by turning the C step off). Reports the median per-call CPU time of the calling thread, the
per-run ratios C / numpy and their median.

    nice -n 10 .venv-test/bin/python eval/bench_processor_step.py
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mixing_processor as bench  # noqa: E402
import ppl_setup  # noqa: E402

from infinigram_hf import InfiniGramLogitsProcessor  # noqa: E402
from infinigram_hf.lm.learned_mixing import DEFAULT_FEATURES  # noqa: E402


def one_run(index, rows: np.ndarray, start: int, calls: int, mixing, seed: int) -> tuple:
    """Median CPU time per call of the C step and of the numpy path, side by side."""
    procs = {"C": InfiniGramLogitsProcessor(index, 0.5, 0.3, mixing=mixing, eos_token_id=0),
             "numpy": InfiniGramLogitsProcessor(index, 0.5, 0.3, mixing=mixing, eos_token_id=0)}
    procs["numpy"]._fused = False
    times: dict = {k: [] for k in procs}
    gen = torch.Generator().manual_seed(seed)
    for i, t in enumerate(range(start, start + calls)):
        ids, scores = torch.from_numpy(rows[:, :t]), torch.randn(rows.shape[0], 32000, generator=gen)
        for k in ("C", "numpy") if i % 2 else ("numpy", "C"):
            t0 = time.thread_time()
            procs[k](ids, scores)
            times[k].append(time.thread_time() - t0)
    return statistics.median(times["C"]), statistics.median(times["numpy"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    index = ppl_setup.reference_index("all", progress=False)
    docs = [d for d in ppl_setup.split_docs("heldout") if len(d) >= args.prompt_len + args.calls]
    for b in args.batches:
        rows = np.stack([d[: args.prompt_len + args.calls] for d in docs[:b]]).astype(np.int64)
        for label, mixing in (("two λs", None), ("two-way learned", bench.mlp(DEFAULT_FEATURES))):
            got = [one_run(index, rows, args.prompt_len, args.calls, mixing, run) for run in range(args.runs)]
            ratios = [c / n for c, n in got]
            print(f"batch {b}, {label}: one C step {1e3 * statistics.median(c for c, _ in got):.3f} ms vs numpy "
                  f"path {1e3 * statistics.median(n for _, n in got):.3f} ms (ratio median "
                  f"{statistics.median(ratios):.2f}; runs {', '.join(f'{r:.2f}' for r in ratios)})", flush=True)


if __name__ == "__main__":
    main()
