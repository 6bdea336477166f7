"""`infinigram-hf` subcommands that mix a neural LM with the ∞-gram: perplexity (neural vs
interpolated, with the two λs or a learned mixing model) and fit-mixing (fit either on
validation text and write it as JSON).

Example:
    $ infinigram-hf fit-mixing my_index --model ./gpt2 --data val.jsonl --out mixing.json   # level "3"
    $ infinigram-hf fit-mixing my_index --model ./gpt2 --data val.jsonl --levels L-1 L/2 1 --out orders.json
    $ infinigram-hf fit-mixing my_index --model ./gpt2 --data val.jsonl --levels none --out two_way.json
    $ infinigram-hf perplexity my_index --model ./gpt2 --data test.jsonl --mixing mixing.json
    $ infinigram-hf perplexity my_index --model ./gpt2 --data test.jsonl --lambda-sparse 0.6 --lambda-dense 0.3
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import CLIError, load_index_tokenizer, open_index, print_json, read_documents


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("index", nargs="+", help="index directory (built with the model's tokenizer)")
    p.add_argument("--model", required=True, help="a transformers causal LM directory")
    p.add_argument("--tokenizer", default=None, help="default: the model directory's, then the index's")
    p.add_argument("--data", nargs="+", required=True, help="text files / directories / .jsonl (one document each)")
    p.add_argument("--text-column", default="text")
    p.add_argument("--window", type=int, default=None)
    p.add_argument("--stride", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--device", default=None, help="e.g. cuda (default: cpu)")
    p.add_argument("--no-progress", action="store_true")


def _scores(args: argparse.Namespace, agreement: bool = False, levels: Any = None) -> Any:
    from transformers import AutoModelForCausalLM

    from ..hf.perplexity import token_scores

    index = open_index(args.index)
    source = args.tokenizer or (args.model if (Path(args.model) / "tokenizer_config.json").is_file() else None)
    if source is not None:
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as exc:
            raise CLIError(f"cannot load the tokenizer {source}: {exc}") from None
    else:
        tok = load_index_tokenizer(index, None)
    try:
        model = AutoModelForCausalLM.from_pretrained(args.model)
    except OSError as exc:
        raise CLIError(f"cannot load the model {args.model}: {exc}") from None
    if args.device:
        model = model.to(args.device)
    texts = [d["text"] for d in read_documents(args.data, args.text_column)]
    if not texts:
        raise CLIError("no documents in --data")
    return token_scores(model, tok, texts, index, window=args.window, stride=args.stride, batch_size=args.batch_size,
                        progress=not args.no_progress, agreement=agreement, levels=levels)


def add_perplexity(sub: Any) -> None:
    p = sub.add_parser("perplexity", help="a neural LM's perplexity alone and mixed with the ∞-gram",
                       description="Neural vs interpolated perplexity (paper §5) of a model on documents: "
                                   "the two λs, or a learned mixing model (--mixing, from fit-mixing).")
    _add_common(p)
    p.add_argument("--lambda-sparse", type=float, default=None)
    p.add_argument("--lambda-dense", type=float, default=None)
    p.add_argument("--mixing", default=None, help="a mixing-model JSON file (fit-mixing); replaces the λs")
    p.set_defaults(func=run_perplexity)


def run_perplexity(args: argparse.Namespace) -> int:
    from ..lm.learned_mixing import MixingModel, uses_agreement
    from ..lm.mixture import DEFAULT_LAMBDA_DENSE, DEFAULT_LAMBDA_SPARSE, check_lambda, interpolate

    if args.mixing is not None and (args.lambda_sparse is not None or args.lambda_dense is not None):
        raise CLIError("give --mixing or the λs (--lambda-sparse/--lambda-dense), not both")
    ls = check_lambda(DEFAULT_LAMBDA_SPARSE if args.lambda_sparse is None else args.lambda_sparse, "--lambda-sparse")
    ld = check_lambda(DEFAULT_LAMBDA_DENSE if args.lambda_dense is None else args.lambda_dense, "--lambda-dense")
    mixing = None
    if args.mixing is not None:
        if not Path(args.mixing).is_file():
            raise CLIError(f"mixing model not found: {args.mixing}")
        mixing = MixingModel.load(args.mixing)  # (checked before the model runs)
    res = interpolate(_scores(args, agreement=mixing is not None and uses_agreement(mixing.features),
                              levels=mixing.levels if mixing is not None else None), ls, ld, mixing=mixing)
    print_json({"perplexity": res.perplexity, "neural_perplexity": res.neural_perplexity,
                "relative_improvement": res.relative_improvement, "num_tokens": res.num_tokens,
                "sparse_fraction": res.sparse_fraction,
                "mixing": mixing.family if mixing is not None else "two_lambda",
                **({"levels": list(mixing.levels)} if mixing is not None and mixing.levels else {}),
                **({} if mixing is not None else {"lambda_sparse": ls, "lambda_dense": ld})})
    return 0


# What fit-mixing fits unless told: one level, the 4-gram estimate of the last three tokens. It is
# the model that meets every goal of issue 20 (eval/RESULTS.md): 68.9% on stdlib (67.1%
# decontaminated), above the two λs on Linux at every datastore size, as is and decontaminated,
# and a processor within 10% of the two λs' (1.03x / 1.06x at batch 1 / 8). Level "2" gains two
# points more for 1.13x at batch 8.
DEFAULT_FIT_LEVELS = ("3",)


def add_fit_mixing(sub: Any) -> None:
    p = sub.add_parser("fit-mixing", help="fit the mixing weights on validation text (two λs or learned)",
                       description="Fit a learned mixing model λ(features) (or, with --family two-lambda, the "
                                   "two λs) on validation documents and write it as JSON.")
    _add_common(p)
    p.add_argument("--family", choices=["mlp", "logistic", "two-lambda"], default="mlp")
    p.add_argument("--hidden", type=int, default=16, help="mlp: hidden width (default 16)")
    p.add_argument("--levels", nargs="+", default=None, metavar="LEVEL",
                   help="the orders mixed in besides the longest match, each L-1, L/2 or a suffix length "
                        "(see infinigram_hf.lm.orders). Default for mlp and logistic: 3 (the 4-gram estimate of "
                        "the last three tokens: it beats the two λs on both eval domains for a processor within "
                        "10%% of theirs); 'none': the two-way model (the ∞-gram against the model only)")
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.set_defaults(func=run_fit_mixing)


def run_fit_mixing(args: argparse.Namespace) -> int:
    from ..hf.fit_mixing import fit_mixing
    from ..lm.learned_mixing import MixingModel
    from ..lm.mixture import tune_lambdas

    from ..lm.orders import check_levels

    levels = None
    if args.levels == ["none"]:
        args.levels = []
    elif args.levels is None:
        args.levels = [] if args.family == "two-lambda" else list(DEFAULT_FIT_LEVELS)
    if args.levels:
        if args.family == "two-lambda":
            raise CLIError("--levels needs a learned family (mlp or logistic), not two-lambda")
        try:
            levels = check_levels(args.levels)
        except ValueError as exc:
            raise CLIError(f"--levels: {exc}") from None
    scores = _scores(args, levels=levels)
    if args.family == "two-lambda":
        fit = tune_lambdas(scores)
        model = MixingModel.two_lambda(fit.lambda_sparse, fit.lambda_dense)
        model.info.update(lambda_sparse=fit.lambda_sparse, lambda_dense=fit.lambda_dense)
        result = fit.result
    else:
        mf = fit_mixing(scores, family=args.family, hidden=args.hidden, levels=levels)
        model, result = mf.model, mf.result
    model.save(args.out)
    print_json({"out": args.out, "family": args.family, "features": list(model.features), "levels": list(model.levels),
                "fit_perplexity": result.perplexity, "neural_perplexity": result.neural_perplexity,
                "num_tokens": result.num_tokens})
    return 0


COMMANDS = [add_perplexity, add_fit_mixing]
