"""`infinigram-hf` subcommands of the standalone ∞-gram LM: generate, lm-perplexity, lm-tune.

Example:
    $ infinigram-hf generate shakespeare_idx --prompt "First Citizen:" --max-new-tokens 300 --seed 0
    $ infinigram-hf generate names_idx --starts-with Mar --ends-with a --max-length 8 --num 5
    $ infinigram-hf lm-perplexity shakespeare_idx --text-file val.txt --method backoff --k all
    $ infinigram-hf lm-tune tune_idx --heldout heldout.txt --out kn.json
    $ infinigram-hf lm-perplexity shakespeare_idx --text-file val.txt --method kn --smoothing kn.json
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, List

from .._core.safe_text import printable_text
from .common import CLIError, load_index_tokenizer, open_index, parse_ids, print_json


# ------------------------------------------------------------------ shared


def _add_index(p: argparse.ArgumentParser) -> None:
    p.add_argument("index", nargs="+", help="index directory (several: queried as one index)")
    p.add_argument("--tokenizer", default=None, help="tokenizer (default: the one saved in the index, or bytes)")
    p.add_argument("--max-context", type=int, default=100, help="longest context used, in tokens (default 100)")


def _add_method(p: argparse.ArgumentParser) -> None:
    # One default for sampling and scoring, as InfiniGramLM has (the post's setting: --method backoff --k 2).
    p.add_argument("--method", choices=["infgram", "backoff", "kn", "wb"], default="kn",
                   help="∞-gram, selective back-off, Kneser-Ney, Witten-Bell (default kn)")
    p.add_argument("--k", default="all", help="back-off levels, or 'all' (default all)")
    p.add_argument("--decay", type=float, default=0.1, help="back-off level weight decay (default 0.1)")
    p.add_argument("--order", type=int, default=None, help="kn / wb: fixed order n (default: unbounded)")
    p.add_argument("--smoothing", default=None, help="kn: smoothing parameters JSON (from lm-tune)")


def _method_kwargs(args: argparse.Namespace) -> dict:
    from ..lm.smoothing import SmoothingParams

    kw: dict = {}
    if args.method == "backoff":
        kw["k"] = None if str(args.k).lower() in ("all", "-1", "none") else int(args.k)
        kw["decay"] = args.decay
    if args.method in ("kn", "wb"):
        kw["order"] = args.order
        if args.smoothing:
            if not Path(args.smoothing).is_file():
                raise CLIError(f"smoothing parameters not found: {args.smoothing}")
            kw["smoothing"] = SmoothingParams.load(args.smoothing)
    return kw


def _open_lm(args: argparse.Namespace) -> Any:
    from ..lm.model import InfiniGramLM

    index = open_index(args.index)
    tok = load_index_tokenizer(index, args.tokenizer) if (args.tokenizer or index.tokenizer_name) else None
    return InfiniGramLM(index, tok, max_context=args.max_context)


# ------------------------------------------------------------------ generate


def add_generate(sub: Any) -> None:
    p = sub.add_parser("generate", help="sample text from the index alone (∞-gram / back-off / KN)",
                       description="Sample a continuation from the standalone ∞-gram LM.")
    _add_index(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prompt", default="", help="prompt text")
    g.add_argument("--prompt-ids", default=None, help="prompt as comma-separated token ids")
    p.add_argument("--max-new-tokens", type=int, default=200)
    _add_method(p)
    p.add_argument("--greedy", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--num", type=int, default=1, help="number of samples (seeds seed, seed+1, ...)")
    p.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    p.add_argument("--no-eod", action="store_true", help="never end at an end of document")
    p.add_argument("--starts-with", default="")
    p.add_argument("--ends-with", default=None)
    p.add_argument("--contains", action="append", default=None, help="required substring (repeatable)")
    p.add_argument("--min-length", type=int, default=None)
    p.add_argument("--max-length", type=int, default=None)
    p.add_argument("--length-unit", choices=["chars", "tokens"], default="chars")
    p.add_argument("--max-tries", type=int, default=100)
    p.add_argument("--json", action="store_true", help="print JSON (text, ids, finish reason, statistics)")
    p.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    import numpy as np

    lm = _open_lm(args)
    prompt: Any = parse_ids(args.prompt_ids) if args.prompt_ids is not None else args.prompt
    kw = _method_kwargs(args)
    out, failed = [], 0
    for i in range(args.num):
        seed = None if args.seed is None else args.seed + i
        t0 = time.perf_counter()
        g = lm.generate(prompt, args.max_new_tokens, method=args.method, seed=seed, greedy=args.greedy,
                        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, stop=args.stop,
                        eod=not args.no_eod, starts_with=args.starts_with, ends_with=args.ends_with,
                        contains=args.contains, min_length=args.min_length, max_length=args.max_length,
                        length_unit=args.length_unit, max_tries=args.max_tries, **kw)
        secs = time.perf_counter() - t0
        if g is None:
            failed += 1
            print(f"sample {i}: no output satisfied the constraints in {args.max_tries} tries", file=sys.stderr)
            continue
        if args.json:
            out.append({"text": g.text, "token_ids": g.token_ids.tolist(), "finish_reason": g.finish_reason,
                        "tries": g.tries, "seconds": round(secs, 6),
                        "median_effective_n": float(np.median(g.suffix_len) + 1) if len(g.suffix_len) else None,
                        "median_matches": float(np.median(g.matches)) if len(g.matches) else None})
        else:
            text = str(g) + ("\n" if args.num > 1 or not str(g).endswith("\n") else "")
            sys.stdout.write(printable_text(text) if sys.stdout.isatty() else text)  # (the corpus's bytes)
    if args.json:
        print_json(out if args.num > 1 else (out[0] if out else None))
    return 1 if failed == args.num else 0


# ------------------------------------------------------------------ perplexity and tuning


def _texts(args: argparse.Namespace) -> List[Any]:
    texts: List[Any] = list(args.text or [])
    for f in args.text_file or []:
        if not Path(f).is_file():
            raise CLIError(f"file not found: {f}")
        texts.append(Path(f).read_text(encoding="utf-8"))
    if args.ids:
        texts.append(parse_ids(args.ids))
    if not texts:
        raise CLIError("give --text, --text-file or --ids")
    return texts


def add_lm_perplexity(sub: Any) -> None:
    p = sub.add_parser("lm-perplexity", help="perplexity of the standalone ∞-gram LM (smoothed)",
                       description="Perplexity of texts under the index alone: back-off (the post's), "
                                   "Kneser-Ney (unbounded or fixed order), Witten-Bell, or the raw ∞-gram.")
    _add_index(p)
    p.add_argument("--text", action="append", help="a text (repeatable)")
    p.add_argument("--text-file", action="append", help="a file holding one text (repeatable)")
    p.add_argument("--ids", default=None, help="a text as comma-separated ids")
    _add_method(p)
    p.add_argument("--start", type=int, default=1, help="first scored position of each text (default 1)")
    p.add_argument("--eod", action="store_true", help="count end of document as a continuation")
    p.set_defaults(func=run_lm_perplexity)


def run_lm_perplexity(args: argparse.Namespace) -> int:
    lm = _open_lm(args)
    kw = _method_kwargs(args)
    r = lm.perplexity(_texts(args), args.method, start=args.start, eod=args.eod, **kw)
    print_json({"method": args.method, "perplexity": r.perplexity, "nll": r.nll, "bits_per_token": r.bits_per_token,
                "tokens": r.num_tokens, "texts": r.num_texts, "seconds": round(r.seconds, 4),
                "tokens_per_second": round(r.tokens_per_second)})
    return 0


def add_lm_tune(sub: Any) -> None:
    p = sub.add_parser("lm-tune", help="tune unbounded Kneser-Ney on held-out text",
                       description="Tune per-depth Kneser-Ney discounts and concentrations on held-out text. "
                                   "INDEX must not contain the held-out text; the parameters then serve an "
                                   "index over the whole corpus (lm-perplexity --smoothing OUT).")
    _add_index(p)
    p.add_argument("--heldout", action="append", required=True, help="held-out text file (repeatable)")
    p.add_argument("--out", required=True, help="parameters JSON to write")
    p.add_argument("--depths", type=int, default=24, help="context lengths with their own parameters (default 24)")
    p.add_argument("--steps", type=int, default=6, help="L-BFGS rounds at most (default 6)")
    p.add_argument("--order", type=int, default=None, help="tune fixed-order KN instead (default: unbounded)")
    p.set_defaults(func=run_lm_tune)


def run_lm_tune(args: argparse.Namespace) -> int:
    from ..lm.smoothing import fit

    lm = _open_lm(args)
    texts = []
    for f in args.heldout:
        if not Path(f).is_file():
            raise CLIError(f"file not found: {f}")
        texts.append(Path(f).read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    params = fit(lm, texts, start=lm.smoothing(args.order), depths=args.depths, steps=args.steps)
    params.save(args.out)
    print_json({"out": args.out, "seconds": round(time.perf_counter() - t0, 2), "note": params.note})
    return 0


COMMANDS = [add_generate, add_lm_perplexity, add_lm_tune]
