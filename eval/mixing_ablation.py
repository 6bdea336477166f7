"""Issue 20: which features the learned mixing needs (full datastore, from the caches of
eval/mixing_table.py; run that first). Fits the MLP on validation with feature subsets and
reports held-out perplexity (as is); the neural entropy is the one feature that costs the
processor a pass over the vocabulary.

    nice -n 10 .venv-test/bin/python eval/mixing_ablation.py --domain stdlib
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mixing_table  # noqa: E402

from infinigram_hf import fit_mixing, interpolate, tune_lambdas  # noqa: E402
from infinigram_hf.lm.learned_mixing import FEATURES  # noqa: E402

INFGRAM5 = ("sparse", "log_effective_n", "log_context_count", "log_num_distinct", "top_infgram_prob")
SUBSETS = {
    f"all {len(FEATURES)}": tuple(FEATURES),
    "without neural_entropy": tuple(f for f in FEATURES if f != "neural_entropy"),
    "∞-gram only (5)": INFGRAM5,
    "∞-gram 5 + log_agreement": INFGRAM5 + ("log_agreement",),
    "∞-gram 5 + log_agreement + neural_logprob_infgram_top": INFGRAM5 + ("log_agreement", "neural_logprob_infgram_top"),
    "∞-gram 5 + neural_logprob_infgram_top": INFGRAM5 + ("neural_logprob_infgram_top",),
    "sparse + log_effective_n": ("sparse", "log_effective_n"),
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--domain", choices=["stdlib", "linux"], required=True)
    ap.add_argument("--full", action="store_true", help="the caches of the whole splits (else the samples)")
    ap.add_argument("--hidden", default="16", help="MLP hidden widths, comma-separated")
    args = ap.parse_args(argv)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    spec = mixing_table.domain_spec(args.domain)
    val = mixing_table.load_cached(spec, "validation", args.full)
    test = mixing_table.load_cached(spec, "heldout", args.full)
    print(f"validation {len(val):,} tokens, held-out {len(test):,} tokens")
    two = tune_lambdas(val)
    print(f"{args.domain}: neural {interpolate(test, 0, 0).perplexity:.2f}, two-λ "
          f"{interpolate(test, two.lambda_sparse, two.lambda_dense).perplexity:.2f}")
    print(f"| features | learned PPL (mlp {args.hidden}) | logistic |\n|---|---:|---:|")
    for name, feats in SUBSETS.items():
        m = fit_mixing(val, family="mlp", hidden=hidden, features=feats).model
        lg = fit_mixing(val, family="logistic", features=feats).model
        print(f"| {name} | {interpolate(test, mixing=m).perplexity:.2f} | {interpolate(test, mixing=lg).perplexity:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
