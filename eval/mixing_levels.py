"""Issue 20: which orders a several-orders mixing model needs -- held-out perplexity and the
processor's cost of every subset of the default levels (L − 1, ⌊L/2⌋, 1), from the caches of
eval/mixing_table.py.

    nice -n 10 .venv-test/bin/python eval/mixing_levels.py --domain stdlib            # seeded samples
    nice -n 10 .venv-test/bin/python eval/mixing_levels.py --domain stdlib --whole    # whole splits
    nice -n 10 .venv-test/bin/python eval/mixing_levels.py --domain stdlib --whole --levels 2 3  # other levels

Every subset is an MLP 16 over the default features fitted on validation (the empty subset is
the two-way learned model), evaluated on held-out as is and decontaminated (documents with ≥ 80%
of their 13-grams in the full datastore removed), full datastore. The processor's cost is
eval/bench_mixing_processor.py's measure (CPU time of the calling thread per call, held-out
prefixes growing by one token, random 32k scores, each model called in turn with the two-λ
processor at every step, median of per-run ratios to it) for a model with the same levels.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mixing_processor as bench  # noqa: E402
import mixing_report  # noqa: E402
from mixing_table import domain_spec, load_cached, sample_docs  # noqa: E402

from infinigram_hf import fit_mixing, interpolate, tune_lambdas  # noqa: E402
from infinigram_hf.lm.learned_mixing import DEFAULT_FEATURES  # noqa: E402
from infinigram_hf.lm.orders import DEFAULT_LEVELS, check_levels  # noqa: E402


def subsets(levels=DEFAULT_LEVELS) -> list:
    return [c for k in range(len(levels) + 1) for c in itertools.combinations(levels, k)]


def processor_ratios(index, docs, subset_list, batches, runs, calls, prompt_len=64) -> dict:
    """{(subset, batch): (ms per call, median ratio to two-λ)} plus {("two-λ", batch): (ms, 1)}:
    each subset timed against the two λs alone, the two called in turn at every step
    (`bench_mixing_processor.one_run`)."""
    out = {}
    docs = [d for d in docs if len(d) >= prompt_len + calls]
    for b in batches:
        rows = np.stack([d[: prompt_len + calls] for d in docs[:b]]).astype(np.int64)
        base_all = []
        for s in subset_list:
            base, mine = [], []
            for _ in range(runs):
                got = bench.one_run(index, rows, prompt_len, calls,
                                    {"two-λ": None, s: bench.mlp(DEFAULT_FEATURES, levels=s)})
                base.append(got["two-λ"])
                mine.append(got[s])
            base_all += base
            out[(s, b)] = (1e3 * statistics.median(mine), statistics.median([t / a for t, a in zip(mine, base)]))
        out[("two-λ", b)] = (1e3 * statistics.median(base_all), 1.0)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--domain", choices=["stdlib", "linux"], required=True)
    ap.add_argument("--whole", action="store_true", help="the whole splits' caches (default: the seeded samples)")
    ap.add_argument("--runs", type=int, default=5, help="processor timing runs (0: no timing)")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--levels", nargs="+", default=list(DEFAULT_LEVELS),
                    help="the levels whose every subset is fitted (default: %(default)s)")
    args = ap.parse_args(argv)
    levels = check_levels(args.levels)
    import torch
    torch.set_num_threads(1)
    spec = domain_spec(args.domain)
    cap = (None, None) if args.whole else (15_000, 30_000)
    val_docs = sample_docs(spec["docs"]("validation"), cap[0], 1024)
    test_docs = sample_docs(spec["docs"]("heldout"), cap[1], 1024)
    index = spec["index"]("all")
    val = mixing_report.add_levels(load_cached(spec, "validation", args.whole), val_docs, index, levels)
    test = mixing_report.add_levels(load_cached(spec, "heldout", args.whole), test_docs, index, levels)
    dropped, _ = mixing_report.contaminated_docs(test_docs, index)
    deco = test.select(~np.isin(test.doc_index, dropped))
    two = tune_lambdas(val)
    rows = []
    for s in subsets(levels):
        model = fit_mixing(val, family="mlp", hidden=16, levels=s or None).model
        r, r_d = interpolate(test, mixing=model), interpolate(deco, mixing=model)
        rows.append((s, r, r_d))
    base, base_d = interpolate(test, two.lambda_sparse, two.lambda_dense), interpolate(deco, two.lambda_sparse,
                                                                                         two.lambda_dense)
    cost = processor_ratios(index, test_docs, subsets(levels), args.batches, args.runs, args.calls) if args.runs else {}
    print(f"{args.domain}, {'whole splits' if args.whole else 'seeded samples'}: {len(val):,} validation / "
          f"{len(test):,} held-out tokens ({len(deco):,} decontaminated); neural {base.neural_perplexity:.2f} / "
          f"{base_d.neural_perplexity:.2f}")
    head = "| levels | held-out PPL (improvement) | decontaminated |" + "".join(
        f" processor, batch {b}: ms / ratio |" for b in args.batches if cost)
    print(head)
    print("|---|---:|---:|" + "---:|" * (len(args.batches) if cost else 0))
    t = ["| two λs (tuned) |", f" {base.perplexity:.2f} ({base.relative_improvement:.1f}%) |",
         f" {base_d.perplexity:.2f} ({base_d.relative_improvement:.1f}%) |"]
    t += [f" {cost[('two-λ', b)][0]:.3f} / 1 |" for b in args.batches if cost]
    print("".join(t))
    for s, r, r_d in rows:
        name = ", ".join(s) if s else "none (two-way learned)"
        t = [f"| {name} |", f" {r.perplexity:.2f} ({r.relative_improvement:.1f}%) |",
             f" {r_d.perplexity:.2f} ({r_d.relative_improvement:.1f}%) |"]
        t += [f" {cost[(s, b)][0]:.3f} / {cost[(s, b)][1]:.2f} |" for b in args.batches if cost]
        print("".join(t), flush=True)


if __name__ == "__main__":
    main()
