"""Issue 20: per-call time of InfiniGramLogitsProcessor with learned mixing (mixing=, an MLP over
all features; and a model mixing several orders, `levels`) vs the two λs, same index, same
inputs, in one process.

Each call sees held-out stdlib prefixes growing by one token (teacher forcing, so both variants
see identical contexts) and random (batch, 32000) scores standing in for the model's logits.
Each learned variant is timed against the two λs alone: fresh processors per run (cold caches;
--warm N: first N untimed calls over other held-out documents, as a long-lived processor's
caches would be), the two called in turn at every step on the same inputs. Reports the median
per-call CPU time of the calling thread (torch on 1 thread: on a loaded shared machine wall
time mostly measures preemption), the ratio learned / two-λ per run, and their median.

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


def one_run(index, rows: np.ndarray, start: int, calls: int, models: dict, warm_rows=None) -> dict:
    """Median CPU time per call of a fresh processor per variant (models: name -> mixing, None for
    the two λs) over rows' prefixes start .. start + calls. The variants take turns at every
    call, on the same inputs, in a rotating order: on a shared machine, conditions change
    within a run, and a ratio of two variants timed call by call side by side is steadier than
    one of two variants timed one after the other (run to run: 0.64-1.66 for one pair at batch
    8, 0.92-1.02 side by side). With warm_rows, each processor first runs
    untimed over those (other documents' prefixes, so its caches hold what a long-lived
    processor's would, not these contexts)."""
    procs = {k: InfiniGramLogitsProcessor(index, 0.5, 0.3, mixing=m, eos_token_id=0) for k, m in models.items()}
    gen = torch.Generator().manual_seed(0)
    if warm_rows is not None:
        for t in range(start, warm_rows.shape[1] + 1):
            ids, scores = torch.from_numpy(warm_rows[:, :t]), torch.randn(warm_rows.shape[0], 32000, generator=gen)
            for proc in procs.values():
                proc(ids, scores)
    names = list(procs)
    times: dict = {k: [] for k in names}
    for i, t in enumerate(range(start, start + calls)):
        ids = torch.from_numpy(rows[:, :t])
        scores = torch.randn(rows.shape[0], 32000, generator=gen)
        for k in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.thread_time()
            procs[k](ids, scores)
            times[k].append(time.thread_time() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


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
        line = [f"batch {b}"]
        for k, m in models.items():  # each variant against the two λs alone: two learned variants
            # timed side by side would warm each other's suffixes (levels in common)
            base, mine = [], []
            for _ in range(args.runs):
                got = one_run(index, rows, args.prompt_len, args.calls, {"two-λ": None, k: m}, warm)
                base.append(got["two-λ"])
                mine.append(got[k])
            ratios = [x / y for x, y in zip(mine, base)]
            line.append(f"learned mlp 16, {k} {1e3 * statistics.median(mine):.3f} ms vs two-λ "
                        f"{1e3 * statistics.median(base):.3f} ms (ratio median {statistics.median(ratios):.2f}; "
                        f"runs {', '.join(f'{r:.2f}' for r in ratios)})")
        print("; ".join(line), flush=True)


if __name__ == "__main__":
    main()
