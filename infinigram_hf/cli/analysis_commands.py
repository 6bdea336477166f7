"""`infinigram-hf` subcommands that study or clean a corpus: analyze (the paper's §4 figures),
decontaminate (drop reference documents that overlap an evaluation set, before a build).

Example:
    $ infinigram-hf analyze stdlib_idx --texts heldout/ --model ./gpt2-tiny --out eval/plots --prefix stdlib
    $ infinigram-hf decontaminate --eval test/*.txt --input corpus.jsonl --output kept.jsonl
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .common import CLIError, load_index_tokenizer, open_index, print_json, read_documents


# ------------------------------------------------------------------ analyze


def add_analyze(sub: Any) -> None:
    p = sub.add_parser("analyze", help="the paper's §4 analyses: agreement by effective n, vs a neural LM",
                       description="Token-wise agreement of the ∞-gram (and an n-gram) with held-out text by "
                                   "effective n, the distribution of effective n, and agreement per bucket of a "
                                   "neural model's probability; writes PNG plots and a JSON summary.")
    p.add_argument("index", nargs="+", help="index directory")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--texts", nargs="+", required=True, help="held-out files / directories / .jsonl")
    p.add_argument("--text-column", default="text")
    p.add_argument("--out", default="eval/plots", help="output directory (default eval/plots)")
    p.add_argument("--prefix", default="analysis", help="file name prefix")
    p.add_argument("--n", type=int, default=5, help="the n-gram baseline's n (default 5)")
    p.add_argument("--max-tokens", type=int, default=1024, help="tokens per text (default 1024, as the paper)")
    p.add_argument("--threshold", type=float, default=0.5)
    p.add_argument("--model", default=None, help="a transformers causal LM (directory or hub name) for Figure 4")
    p.add_argument("--window", type=int, default=None, help="the model's sliding window (default its context)")
    p.add_argument("--title", default="")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_analyze)


def run_analyze(args: argparse.Namespace) -> int:
    import importlib.util

    # checked before any work: the plots come last, after minutes of scoring
    if importlib.util.find_spec("matplotlib") is None:
        raise CLIError("analyze writes plots with matplotlib, which is not installed: "
                       "pip install 'infinigram_hf[plots]'")
    from ..analysis import analyze, plot_analysis, save_summary
    from ..lm.model import InfiniGramLM

    index = open_index(args.index)
    tok = load_index_tokenizer(index, args.tokenizer)
    lm = InfiniGramLM(index, tok, max_context=max(args.n - 1, 1))
    model = None
    if args.model:
        from transformers import AutoModelForCausalLM

        try:
            model = AutoModelForCausalLM.from_pretrained(args.model)
        except OSError as exc:
            raise CLIError(f"could not load model {args.model!r}: {exc}") from None
    texts = [d[args.text_column] for d in read_documents(args.texts, args.text_column)]
    res = analyze(lm, texts, n=args.n, threshold=args.threshold, max_tokens=args.max_tokens, model=model,
                  window=args.window, progress=not args.no_progress)
    paths = plot_analysis(res, args.out, prefix=args.prefix, title=args.title)
    summary = save_summary(res, Path(args.out) / f"{args.prefix}_summary.json", index=[str(p) for p in args.index],
                           texts=len(texts), model=args.model)
    print_json({"plots": [str(p) for p in paths], "summary": str(Path(args.out) / f"{args.prefix}_summary.json"),
                "tokens": summary["tokens"], "infgram_agreement": summary["infgram"]["agreement"],
                f"{args.n}gram_agreement": summary[f"{args.n}gram"]["agreement"],
                "median_effective_n": summary["effective_n"]["median"]})
    return 0


# ------------------------------------------------------------------ decontaminate


def add_decontaminate(sub: Any) -> None:
    p = sub.add_parser("decontaminate", help="drop reference documents that overlap the evaluation set",
                       description="Drop reference documents with at least THRESHOLD of their n-grams in the "
                                   "evaluation texts (paper App. B / BFF: n=13, 80%%), before building an index.")
    p.add_argument("--eval", nargs="+", required=True, help="evaluation files / directories / .jsonl")
    p.add_argument("--input", nargs="+", required=True, help="reference files / directories / .jsonl")
    p.add_argument("--output", required=True, help="the kept documents as .jsonl (then: infinigram-hf build)")
    p.add_argument("--n", type=int, default=13)
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--unit", choices=["words", "whitespace", "chars"], default="words")
    p.add_argument("--lowercase", action="store_true")
    p.add_argument("--text-column", default="text")
    p.set_defaults(func=run_decontaminate)


def run_decontaminate(args: argparse.Namespace) -> int:
    from ..decontaminate import Decontaminator

    deco = Decontaminator((d[args.text_column] for d in read_documents(args.eval, args.text_column)), n=args.n,
                          threshold=args.threshold, unit=args.unit, lowercase=args.lowercase)
    report = deco.new_report()
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for doc in deco.filter(read_documents(args.input, args.text_column), report, args.text_column):
            fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
    tmp.replace(out)
    d = report.as_dict()
    d["dropped_indices"] = d["dropped_indices"][:100]
    print_json({"output": str(out), "eval_ngrams": len(deco), **d})
    return 0


COMMANDS = [add_analyze, add_decontaminate]
