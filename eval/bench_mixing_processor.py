"""Issue 20: per-call time of InfiniGramLogitsProcessor with learned mixing (mixing=, an MLP over
all features; and a model mixing several orders, `levels`) vs the two λs, same index, same
inputs, interleaved runs in one process.

Each call sees held-out stdlib prefixes growing by one token (teacher forcing, so both variants
see identical contexts) and random (batch, 32000) scores standing in for the model's logits;
a fresh processor per run (cold caches; --warm N: first N untimed calls over other held-out
documents, as a long-lived processor's caches would be). Reports the median per-call CPU time of
the calling thread (torch on 1 thread: on a loaded shared machine wall time mostly measures
preemption) and the ratio learned / two-λ per run, and their median.

    nice -n 10 .venv-test/bin/python eval/bench_mixing_processor.py
    nice -n 10 .venv-test/bin/python eval/bench_mixing_processor.py --variants "default features" "several orders"
    nice -n 10 .venv-test/bin/python eval/bench_mixing_processor.py --warm 400   # long-lived processors
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
from infinigram_hf.lm.learned_mixing import DEFAULT_FEATURES, FEATURES  # noqa: E402
from infinigram_hf.lm.orders import DEFAULT_LEVELS  # noqa: E402


def mlp(features=tuple(FEATURES), hidden: int = 16, levels=()) -> MixingModel:
    """A random MLP (the time does not depend on the weights: every row is queried alike)."""
    rng = np.random.default_rng(0)
    k, out = len(features) + len(levels), 2 + len(levels) if levels else 1
    return MixingModel("mlp", tuple(features), np.zeros(k), np.ones(k),
                       [(rng.normal(size=(hidden, k)) * 0.3, np.zeros(hidden)), (rng.normal(size=(out, hidden)),
                                                                                 np.zeros(out))], levels=levels)


def one_run(index, rows: np.ndarray, start: int, calls: int, mixing, warm_rows=None) -> float:
    """Median CPU time per call of a fresh processor over rows' prefixes start .. start + calls;
    with warm_rows, the processor first runs untimed over those (other documents' prefixes, so its
    caches hold what a long-lived processor's would, not these contexts)."""
    proc = InfiniGramLogitsProcessor(index, 0.5, 0.3, mixing=mixing, eos_token_id=0)
    gen = torch.Generator().manual_seed(0)
    if warm_rows is not None:
        for t in range(start, warm_rows.shape[1] + 1):
            proc(torch.from_numpy(warm_rows[:, :t]), torch.randn(warm_rows.shape[0], 32000, generator=gen))
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
    ap.add_argument("--variants", nargs="+", default=None, help="learned variants to time (default: all)")
    ap.add_argument("--warm", type=int, default=0,
                    help="untimed calls per processor first, over other held-out documents (0: cold caches)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    index = ppl_setup.reference_index("all", progress=False)
    docs = [d for d in ppl_setup.split_docs("heldout") if len(d) >= args.prompt_len + args.calls]
    models = {"default features": mlp(DEFAULT_FEATURES),
              "default + log_agreement": mlp(tuple(DEFAULT_FEATURES) + ("log_agreement",)),
              f"all {len(FEATURES)} features": mlp(tuple(FEATURES)),
              "several orders": mlp(DEFAULT_FEATURES, levels=DEFAULT_LEVELS),
              "level 1": mlp(DEFAULT_FEATURES, levels=("1",)),
              "level 2": mlp(DEFAULT_FEATURES, levels=("2",)),
              "level 3": mlp(DEFAULT_FEATURES, levels=("3",)),
              "level L/2": mlp(DEFAULT_FEATURES, levels=("L/2",))}
    if args.variants:
        models = {k: models[k] for k in args.variants}
    for b in args.batches:
        rows = np.stack([d[: args.prompt_len + args.calls] for d in docs[:b]]).astype(np.int64)
        warm = None
        if args.warm:
            others = [d for d in docs[b:] if len(d) >= args.prompt_len + args.warm]
            if len(others) < b:
                raise SystemExit(f"--warm {args.warm}: not enough other held-out documents")
            warm = np.stack([d[: args.prompt_len + args.warm] for d in others[:b]]).astype(np.int64)
        times: dict = {"two-λ": [], **{k: [] for k in models}}
        for _ in range(args.runs):  # interleaved: every run measures all variants
            times["two-λ"].append(one_run(index, rows, args.prompt_len, args.calls, None, warm))
            for k, m in models.items():
                times[k].append(one_run(index, rows, args.prompt_len, args.calls, m, warm))
        base = times["two-λ"]
        line = [f"batch {b}: two-λ {1e3 * statistics.median(base):.3f} ms CPU/call"]
        for k in models:
            ratios = [m / a for m, a in zip(times[k], base)]
            line.append(f"learned mlp 16, {k} {1e3 * statistics.median(times[k]):.3f} ms (ratio median "
                        f"{statistics.median(ratios):.2f}; runs {', '.join(f'{r:.2f}' for r in ratios)})")
        print("; ".join(line), flush=True)


if __name__ == "__main__":
    main()
