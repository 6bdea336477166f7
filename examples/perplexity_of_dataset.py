"""Perplexity of a model on a dataset, alone and interpolated with the ∞-gram (paper §5).

    python examples/perplexity_of_dataset.py                   # offline: tiny GPT-2, held-out stdlib files
    python examples/perplexity_of_dataset.py --model path/to/model --index path/to/index --files a.py b.py
    python examples/perplexity_of_dataset.py --dataset-dir my_saved_dataset --text-column content
    python examples/perplexity_of_dataset.py --model gpt2 --hub-dataset wikitext --hub-config wikitext-2-raw-v1
    python examples/perplexity_of_dataset.py --metric           # the same through evaluate.load(...)

λ_sparse and λ_dense are tuned on the first --tune-docs documents (EM on cached per-token
probabilities: the model runs once) and the perplexity is reported on the rest.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import datasets

import _neural_setup
from infinigram_hf import interpolate, token_scores, tune_lambdas


def load_texts(args, heldout) -> list:
    if args.files:
        return [Path(f).read_text(encoding="utf-8", errors="replace") for f in args.files]
    if args.dataset_dir:
        ds = datasets.load_from_disk(args.dataset_dir)
    elif args.hub_dataset:
        ds = datasets.load_dataset(args.hub_dataset, args.hub_config, split=args.split)
    else:
        return [f.read_text(encoding="utf-8", errors="replace") for f in heldout[: args.max_docs]]
    if isinstance(ds, datasets.DatasetDict):
        ds = ds[args.split]
    texts = [t for t in ds[args.text_column] if t and t.strip()]
    return texts[: args.max_docs]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _neural_setup.add_arguments(p)
    p.add_argument("--files", nargs="*", help="text files, one document each")
    p.add_argument("--dataset-dir", help="a dataset saved with Dataset.save_to_disk")
    p.add_argument("--hub-dataset", help="a hub dataset name (needs the hub)")
    p.add_argument("--hub-config", default=None)
    p.add_argument("--split", default="test")
    p.add_argument("--text-column", default="text")
    p.add_argument("--max-docs", type=int, default=40)
    p.add_argument("--tune-docs", type=int, default=10, help="documents used to tune λ (0: use the λ given)")
    p.add_argument("--lambda-sparse", type=float, default=0.5)
    p.add_argument("--lambda-dense", type=float, default=0.3)
    p.add_argument("--window", type=int, default=None, help="default: the model's context length")
    p.add_argument("--stride", type=int, default=None, help="default: window / 2")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--metric", action="store_true", help="compute through the evaluate metric module")
    args = p.parse_args()
    model, tok, index, heldout = _neural_setup.load(args)
    texts = load_texts(args, heldout)
    window = args.window or min(getattr(model.config, "n_positions", 1024) or 1024, 1024)
    stride = args.stride or window // 2
    ls, ld = args.lambda_sparse, args.lambda_dense
    tune, test = (texts[: args.tune_docs], texts[args.tune_docs:]) if 0 < args.tune_docs < len(texts) else ([], texts)
    if tune:
        fit = tune_lambdas(token_scores(model, tok, tune, index, window=window, stride=stride,
                                        batch_size=args.batch_size))
        ls, ld = fit.lambda_sparse, fit.lambda_dense
        print(f"tuned on {len(tune)} documents: λ_sparse={ls:.3f}, λ_dense={ld:.3f}")
    if args.metric:
        import evaluate
        from infinigram_hf.metrics import PERPLEXITY_METRIC_PATH

        metric = evaluate.load(PERPLEXITY_METRIC_PATH)
        out = metric.compute(predictions=test, model=model, tokenizer=tok, index=index, window=window,
                             stride=stride, lambda_sparse=ls, lambda_dense=ld, batch_size=args.batch_size)
        print({k: v for k, v in out.items() if not isinstance(v, list)})
        return
    scores = token_scores(model, tok, test, index, window=window, stride=stride, batch_size=args.batch_size)
    res = interpolate(scores, ls, ld)
    print(f"\n{len(test)} documents, window {window}, stride {stride}\n{res.summary()}\n")
    print(f"{'effective n':>12} {'tokens':>8} {'neural PPL':>11} {'+∞-gram PPL':>12} {'sparse':>7}")
    for row in res.by_effective_n.rows():
        print(f"{row['n']:>12} {row['tokens']:>8,} {row['neural_ppl']:>11.1f} {row['ppl']:>12.1f} "
              f"{row['sparse']:>7.0%}")


if __name__ == "__main__":
    main()
