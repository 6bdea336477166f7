#!/usr/bin/env python3
"""The Tiny Shakespeare table of the standalone ∞-gram LM (character level), with timings.

Split as in N. Barry's post: the first int(0.9 N) characters are the corpus (one document, one
byte-level index), the rest is validation; each split is scored on its own from its 2nd
character. Rows: the post's selective back-off (k = 1, 2, 3, 5, all; validation and training
perplexity, next to the post's numbers), the plain ∞-gram, fixed-order modified Kneser-Ney
n = 3..12 (discounts from count-of-counts), Witten-Bell, and unbounded-order KN -- with discounts
from count-of-counts, and tuned on held-out text: an index over the first 90% of the corpus
split, the last 10% held out (validation is never used for tuning).

Timings are CPU seconds of this process (time.process_time; the medians of --reps runs) and
wall seconds; the machine may be shared, CPU time is the fairer "one core" figure.

    python eval/shakespeare_table.py /path/to/tinyshakespeare.txt [--work DIR] [--reps 3]

Writes eval/results/shakespeare_table.json and eval/results/shakespeare_kn_tuned.json and prints
a markdown table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from infinigram_hf import build_index
from infinigram_hf.index import InfiniGramIndex
from infinigram_hf.lm import InfiniGramLM
from infinigram_hf.smoothing import SmoothingParams, fit

HERE = Path(__file__).resolve().parent
POST = {1: (1.00, 4036.19), 2: (1.17, 97.73), 3: (1.28, 18.24), 5: (1.42, 7.10), None: (1.45, 6.06)}


def timed(fn: Callable[[], Any], reps: int) -> tuple[Any, float, float]:
    """(result, median CPU seconds, median wall seconds) over reps runs."""
    cpu, wall, out = [], [], None
    for _ in range(reps):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return out, statistics.median(cpu), statistics.median(wall)


def open_or_build(text: str, path: Path) -> InfiniGramIndex:
    if path.exists():
        idx = InfiniGramIndex.open(path)
        if idx.num_tokens == len(text.encode()):
            return idx
        idx.close()
    t0 = time.perf_counter()
    idx = build_index([text], path, overwrite=True, progress=False)
    print(f"built {path} ({idx.num_tokens} tokens) in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return idx


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="tinyshakespeare.txt")
    ap.add_argument("--work", default=os.path.join(os.environ.get("INFINIGRAM_EVAL_CACHE", os.path.expanduser(
        "~/.cache/infinigram_hf_eval")), "shakespeare"), help="where the indexes go")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tune-steps", type=int, default=6)
    ap.add_argument("--json", default=str(HERE / "results" / "shakespeare_table.json"))
    args = ap.parse_args(argv)

    text = Path(args.path).read_text(encoding="utf-8")
    n = int(0.9 * len(text))
    train, val = text[:n], text[n:]
    m = int(0.9 * len(train))
    work = Path(args.work)
    t0 = time.perf_counter()
    lm = InfiniGramLM(open_or_build(train, work / "train"))
    lm_tune = InfiniGramLM(open_or_build(train[:m], work / "train90"))
    build_s = time.perf_counter() - t0
    val_ids, train_ids = lm.encode(val), lm.encode(train)
    rows: List[Dict[str, Any]] = []

    def row(name: str, method: str, ppl_train: bool = False, **kw: Any) -> Dict[str, Any]:
        res, cpu, wall = timed(lambda: lm.perplexity([val_ids], method, **kw), args.reps)
        r = {"method": name, "val_ppl": res.perplexity, "cpu_s": cpu, "wall_s": wall,
             "tok_per_s_cpu": res.num_tokens / cpu, "tok_per_s_wall": res.num_tokens / wall,
             "tokens": res.num_tokens}
        if ppl_train:
            r["train_ppl"] = lm.perplexity([train_ids], method, **kw).perplexity
        rows.append(r)
        print(f"{name:42s} val {r['val_ppl']:10.4f}  {r['tok_per_s_cpu']:>10,.0f} tok/s cpu", file=sys.stderr)
        return r

    for k in (1, 2, 3, 5, None):
        r = row(f"back-off k={'all' if k is None else k}", "backoff", ppl_train=True, k=k)
        r["post_train_ppl"], r["post_val_ppl"] = POST[k]
    r = row("∞-gram (no smoothing)", "infgram")
    r["zero_prob_tokens"] = int((lm.score(val_ids, "infgram").probs[1:] == 0).sum())
    for order in range(3, 13):
        row(f"modified KN, n={order}", "kn", order=order)
    for order in (5, 7, None):
        row(f"Witten-Bell, n={'unbounded' if order is None else order}", "wb", order=order)
    row("modified KN, unbounded (count-of-counts discounts)", "kn")
    c0, w0 = time.process_time(), time.perf_counter()
    tuned = fit(lm_tune, [train[m:]], steps=args.tune_steps)
    tune_cpu, tune_wall = time.process_time() - c0, time.perf_counter() - w0
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    tuned.save(results / "shakespeare_kn_tuned.json")
    r = row("KN, unbounded, tuned on held-out corpus part", "kn", smoothing=tuned)
    r["tune_cpu_s"], r["tune_wall_s"] = tune_cpu, tune_wall

    # generation: the post's 500 characters, and throughput over 10k
    prompt = "First Citizen:\n"
    gen_rows = []
    for name, kw in (("back-off k=2", {"k": 2}), ("back-off k=all", {"k": None}), ("∞-gram", {"method": "infgram"}),
                     ("back-off k=2, top_p=0.9, T=0.8", {"k": 2, "top_p": 0.9, "temperature": 0.8})):
        g500, cpu500, wall500 = timed(lambda: lm.generate(prompt, 500, seed=0, eod=False, **kw), args.reps)
        g10k, cpu, wall = timed(lambda: lm.generate(prompt, 10000, seed=1, eod=False, **kw), args.reps)
        gen_rows.append({"method": name, "s_500_cpu": cpu500, "s_500_wall": wall500,
                         "tok_per_s_cpu": len(g10k.token_ids) / cpu, "tok_per_s_wall": len(g10k.token_ids) / wall,
                         "median_suffix_len": float(np.median(g10k.suffix_len)),
                         "median_matches": float(np.median(g10k.matches)), "sample": g500.text[:400]})
        print(f"generate {name:30s} 500 chars {cpu500:.4f} s cpu; {gen_rows[-1]['tok_per_s_cpu']:,.0f} tok/s cpu",
              file=sys.stderr)

    out = {"date": time.strftime("%Y-%m-%d"), "corpus_chars": len(train), "val_chars": len(val),
           "index_open_or_build_s": build_s, "rows": rows, "generation": gen_rows,
           "tuned_params": tuned.to_dict(), "machine_load": os.getloadavg()}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(markdown(out))


def markdown(out: Dict[str, Any]) -> str:
    lines = ["| method | val ppl | train ppl | post (train / val) | scoring tok/s (CPU) | wall tok/s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in out["rows"]:
        post = f"{r['post_train_ppl']:.2f} / {r['post_val_ppl']:.2f}" if "post_val_ppl" in r else ""
        tr = f"{r['train_ppl']:.2f}" if "train_ppl" in r else ""
        v = "inf" if math.isinf(r["val_ppl"]) else f"{r['val_ppl']:.4f}"
        lines.append(f"| {r['method']} | {v} | {tr} | {post} | {r['tok_per_s_cpu']:,.0f} | {r['tok_per_s_wall']:,.0f} |")
    lines += ["", "| generation | 500 chars (CPU s) | 500 chars (wall s) | tok/s (CPU) | tok/s (wall) | median n-1 / m |",
              "|---|---:|---:|---:|---:|---:|"]
    for g in out["generation"]:
        lines.append(f"| {g['method']} | {g['s_500_cpu']:.4f} | {g['s_500_wall']:.4f} | {g['tok_per_s_cpu']:,.0f} | "
                     f"{g['tok_per_s_wall']:,.0f} | {g['median_suffix_len']:.0f} / {g['median_matches']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
