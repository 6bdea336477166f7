"""Issue 20: per-call time of InfiniGramLogitsProcessor with learned mixing (mixing=, an MLP over
all features) vs the two λs, same index, same inputs, interleaved runs in one process.

Each call sees held-out stdlib prefixes growing by one token (teacher forcing, so both variants
see identical contexts) and random (batch, 32000) scores standing in for the model's logits;
a fresh processor per run (cold cache). Reports the median per-call CPU time of the calling
thread (torch on 1 thread: on a loaded shared machine wall time mostly measures preemption) and the
ratio learned / two-λ per run, and their median.

    nice -n 10 .venv-test/bin/python eval/bench_mixing_processor.py
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
import ppl_setup  # noqa: E402

from infinigram_hf import InfiniGramLogitsProcessor, MixingModel  # noqa: E402
from infinigram_hf.lm.learned_mixing import FEATURES  # noqa: E402


def mlp(hidden: int = 16) -> MixingModel:
    rng = np.random.default_rng(0)
    k = len(FEATURES)
    return MixingModel("mlp", tuple(FEATURES), np.zeros(k), np.ones(k),
                       [(rng.normal(size=(hidden, k)) * 0.3, np.zeros(hidden)), (rng.normal(size=(1, hidden)), [0.0])])


def one_run(index, rows: np.ndarray, start: int, calls: int, mixing) -> float:
    proc = InfiniGramLogitsProcessor(index, 0.5, 0.3, mixing=mixing, eos_token_id=0)
    gen = torch.Generator().manual_seed(0)
    times = []
    for t in range(start, start + calls):
        ids = torch.from_numpy(rows[:, :t])
        scores = torch.randn(rows.shape[0], 32000, generator=gen)
        t0 = time.thread_time()
        proc(ids, scores)
        times.append(time.thread_time() - t0)
    return statistics.median(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    index = ppl_setup.reference_index("all", progress=False)
    docs = [d for d in ppl_setup.split_docs("heldout") if len(d) >= args.prompt_len + args.calls]
    model = mlp()
    for b in args.batches:
        rows = np.stack([d[: args.prompt_len + args.calls] for d in docs[:b]]).astype(np.int64)
        two, learned, ratios = [], [], []
        for _ in range(args.runs):
            a = one_run(index, rows, args.prompt_len, args.calls, None)
            m = one_run(index, rows, args.prompt_len, args.calls, model)
            two.append(a); learned.append(m); ratios.append(m / a)
        print(f"batch {b}: two-λ {1e3 * statistics.median(two):.3f} ms CPU/call, learned (mlp 16, 7 features) "
              f"{1e3 * statistics.median(learned):.3f} ms CPU/call, ratio median {statistics.median(ratios):.3f} "
              f"(runs: {', '.join(f'{r:.3f}' for r in ratios)})", flush=True)


if __name__ == "__main__":
    main()
