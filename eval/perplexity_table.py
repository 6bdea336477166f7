"""Table 1 analogue at our scale: neural vs +∞-gram perplexity of a small GPT-2 on held-out stdlib
files, λ tuned on validation files, and the datastore-size ablation (¼, ½, all of the reference
split; the paper's Figure 10 trend).

One command reproduces everything (trains the model first if it is not cached):

    nice -n 10 .venv/bin/python eval/perplexity_table.py

Writes eval/results/perplexity_table.json and eval/plots/datastore_ablation.png and prints a
Markdown table. The model is run once per split; the per-token scores are cached next to the
model (<cache>/gpt2-small-stdlib/scores-*.npz), so re-running with other λ or indexes is quick
(--rescore forces the model pass again).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402
import ppl_setup  # noqa: E402

from infinigram_hf import TokenScores, interpolate, tune_lambdas  # noqa: E402
from infinigram_hf import token_scores, with_index  # noqa: E402

HERE = Path(__file__).resolve().parent


def scores_for(split: str, model_dir: Path, model, tok, index, docs, args) -> TokenScores:
    """Token scores of a split against the full index (model pass cached on disk)."""
    n_tokens = sum(len(d) for d in docs)
    cache = model_dir / f"scores-{split}-w{args.window}-s{args.stride}-{len(docs)}docs-{n_tokens}tok.npz"
    if cache.exists() and not args.rescore:
        return TokenScores.load(cache)
    t = time.time()
    s = token_scores(model, tok, docs, index, window=args.window, stride=args.stride, batch_size=args.batch_size)
    print(f"{split}: {len(s):,} tokens scored in {time.time() - t:.0f} s", flush=True)
    s.save(cache)
    return s


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["datastore_tokens"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.axhline(rows[0]["neural_ppl"], ls="--", color="gray", label="neural only")
    ax.plot(x, [r["ppl"] for r in rows], "o-", color="C0", label="+ ∞-gram (λ tuned on validation)")
    for r in rows:
        ax.annotate(f"{r['improvement']:.0f}%", (r["datastore_tokens"], r["ppl"]), textcoords="offset points",
                    xytext=(0, 8), ha="center")
    ax.set_xscale("log")
    ax.set_xlabel("datastore size (tokens, stdlib reference split)")
    ax.set_ylabel("held-out perplexity")
    ax.set_title("∞-gram datastore ablation (GPT-2 ~11.5M, stdlib)")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--window", type=int, default=None, help="default: the model's context (512)")
    ap.add_argument("--stride", type=int, default=None, help="default: window / 2")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--val-tokens", type=int, default=150_000, help="validation tokens used to tune λ")
    ap.add_argument("--test-tokens", type=int, default=None, help="cap on held-out tokens (default: all)")
    ap.add_argument("--model-dir", type=Path, default=None, help="default: <cache>/gpt2-small-stdlib")
    ap.add_argument("--no-write", action="store_true", help="print only (smoke runs)")
    ap.add_argument("--rescore", action="store_true", help="run the model again even if scores are cached")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch
    torch.set_num_threads(args.threads)
    model_dir = args.model_dir or ppl_setup.model_dir()
    model, tok = ppl_setup.load_model(model_dir)
    args.window = args.window or model.config.n_positions
    args.stride = args.stride or args.window // 2
    indexes = {f: ppl_setup.reference_index(f) for f in ppl_setup.FRACTIONS}
    full = indexes["all"]
    val_docs = ppl_setup.split_docs("validation", args.val_tokens)
    test_docs = ppl_setup.split_docs("heldout", args.test_tokens)
    val = scores_for("validation", model_dir, model, tok, full, val_docs, args)
    test = scores_for("heldout", model_dir, model, tok, full, test_docs, args)

    rows = []
    for name, index in indexes.items():
        v = val if index is full else with_index(val, tok, val_docs, index)
        t = test if index is full else with_index(test, tok, test_docs, index)
        fit = tune_lambdas(v)
        res = interpolate(t, fit.lambda_sparse, fit.lambda_dense)
        rows.append(dict(datastore=name, datastore_tokens=index.num_tokens, datastore_docs=index.num_docs,
                         lambda_sparse=round(fit.lambda_sparse, 4), lambda_dense=round(fit.lambda_dense, 4),
                         val_neural_ppl=fit.result.neural_perplexity, val_ppl=fit.result.perplexity,
                         neural_ppl=res.neural_perplexity, ppl=res.perplexity, improvement=res.relative_improvement,
                         sparse_fraction=res.sparse_fraction, tokens=res.num_tokens,
                         by_effective_n=res.by_effective_n.rows() if index is full else None))
    info = json.loads((model_dir / "train_info.json").read_text())
    out = {"date": datetime.date.today().isoformat(), "model": info, "window": args.window, "stride": args.stride,
           "val_docs": len(val_docs), "val_tokens": len(val), "test_docs": len(test_docs), "rows": rows}
    if not args.no_write:
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "perplexity_table.json").write_text(json.dumps(out, indent=1) + "\n")
        plot(rows, HERE / "plots" / "datastore_ablation.png")

    print(f"\nheld-out: {len(test_docs)} files, {len(test):,} tokens; λ tuned on {len(val_docs)} validation files "
          f"({len(val):,} tokens); window {args.window}, stride {args.stride}; model {info['params'] / 1e6:.1f}M params\n")
    print("| datastore | tokens | λ_sparse | λ_dense | neural PPL | +∞-gram PPL | improvement | sparse |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['datastore']} | {r['datastore_tokens']:,} | {r['lambda_sparse']:.3f} | {r['lambda_dense']:.3f} | "
              f"{r['neural_ppl']:.1f} | {r['ppl']:.1f} | {r['improvement']:.1f}% | {100 * r['sparse_fraction']:.0f}% |")
    print("\nby effective n (full datastore):")
    print("| n | tokens | neural PPL | +∞-gram PPL | sparse |")
    print("|---|---:|---:|---:|---:|")
    for b in rows[-1]["by_effective_n"]:
        print(f"| {b['n']} | {b['tokens']:,} | {b['neural_ppl']:.1f} | {b['ppl']:.1f} | {100 * b['sparse']:.0f}% |")


if __name__ == "__main__":
    main()
