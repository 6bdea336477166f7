"""Speculative decoding with a larger local model as verifier: a stand-in for "verification
costs about one step" (issue 5), on the same prompts as eval/bench_speculative.py.

The verifier is `oracle_model.OracleGPT2`: a GPT-2 built from a config (default 12 layers ×
768, 12 heads, the 32k eval vocabulary: ~110M parameters, random weights) whose every forward
pass is real, but whose greedy choice at each position is the held-out file's real next token.
Every method therefore decodes the identical real continuation (checked: "identical to real"),
acceptance is measured against the real text, and wall time includes the real cost of a
~110M-parameter forward pass on this CPU. It is a stand-in for a model that writes like the
corpus, not a trained model.

Measured, side by side (methods interleaved, several repetitions, medians):

* the cost of verifying k drafted tokens (one forward pass over k + 1 tokens with a KV cache of
  the prompt) relative to a plain one-token decode step, for this model and for the eval
  GPT-2 (eval/train_gpt2.py, when trained), at batch 1 and batch 8;
* greedy decoding at batch 1 and 8: plain `generate`, HF prompt lookup
  (`prompt_lookup_num_tokens=10`; rows one after another), ours (chain and token tree; the
  loop times its own passes and sizes drafts by what they cost): wall-time speedup vs greedy
  and vs HF prompt lookup, forward passes per token, tokens per step.

    nice -n 10 .venv/bin/python eval/bench_speculative_large.py --ood-text /work/shared/data/tinyshakespeare.txt

Writes eval/results/bench_speculative_large.json and prints markdown tables.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ppl_setup  # noqa: E402
from bench_speculative import cut_pairs, left_pad, part_model, text_docs  # noqa: E402
from oracle_model import build_oracle  # noqa: E402

QS = (1, 2, 3, 5, 9, 11, 13)  # tokens per verification pass: last token + k drafted


def verify_cost_curve(model: Any, prompts: Sequence[np.ndarray], batch: int, qs: Sequence[int] = QS,
                      reps: int = 5) -> dict:
    """Seconds of one forward pass over q new tokens per row (batch rows, a KV cache of the
    prompts), median over reps (q values interleaved), and relative to q = 1."""
    from transformers import DynamicCache

    if hasattr(model, "set_documents"):
        model.set_documents(None)  # the plain network: the oracle's override is not part of the cost
    ids, mask = left_pad(list(prompts[:batch]))
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    rng = np.random.default_rng(0)
    times: Dict[int, List[float]] = {q: [] for q in qs}
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True,
              logits_to_keep=1)
        start = pos[:, -1:] + 1
        for _ in range(reps + 1):  # the first round warms up
            for q in rng.permutation(list(qs)):
                q = int(q)
                x = torch.from_numpy(rng.integers(1, model.config.vocab_size, size=(len(ids), q)))
                m = torch.cat([mask, torch.ones(len(ids), q, dtype=mask.dtype)], 1)
                t0 = time.perf_counter()
                model(input_ids=x, attention_mask=m, position_ids=start + torch.arange(q)[None], past_key_values=cache,
                      use_cache=True)
                times[q].append(time.perf_counter() - t0)
                cache.crop(-q)
    med = {q: statistics.median(v[1:]) for q, v in times.items()}
    base = med[min(qs)]
    q_arr = np.array(sorted(med), dtype=float)
    slope = float(np.polyfit(q_arr, [med[int(q)] for q in q_arr], 1)[0])  # seconds per extra token
    return {"batch": batch, "seconds": {str(q): med[q] for q in sorted(med)},
            "relative_to_one_step": {str(q): med[q] / base for q in sorted(med)},
            "per_token_cost_in_steps": slope / base}


def markdown(report: dict) -> str:
    """The report as markdown tables."""
    lines = ["### Cost of verifying k drafted tokens, relative to one decode step", "",
             "| model | batch | one step (ms) | " + " | ".join(f"k={int(q) - 1}" for q in QS[1:]) +
             " | per extra token (steps) |", "|---|---|---|" + "---|" * len(QS)]
    for name, curves in report["verify_cost"].items():
        for c in curves:
            rel = c["relative_to_one_step"]
            lines.append(f"| {name} | {c['batch']} | {c['seconds'][str(QS[0])] * 1e3:.1f} | " +
                         " | ".join(f"{rel[str(q)]:.2f}x" for q in QS[1:]) + f" | {c['per_token_cost_in_steps']:.3f} |")
    for key in sorted(k for k in report if k.startswith("batch_")):
        b = key.split("_")[1]
        lines += ["", f"### Greedy decoding with the {report['model']['params_m']:.0f}M-parameter oracle stand-in, batch {b}",
                  "", "| domain | method | seconds (median) | vs greedy (median, range) | vs HF prompt lookup | "
                  "forward passes / token | tokens / step | identical to real continuation |",
                  "|---|---|---|---|---|---|---|---|"]
        for domain, rows in report[key].items():
            for name, r in rows.items():
                lo, hi = r["speedup_vs_greedy_range"]
                tps = "—" if r["tokens_per_step"] is None else f"{r['tokens_per_step']:.2f}"
                lines.append(f"| {domain} | {name} | {r['seconds_median']:.2f} | {r['speedup_vs_greedy_median']:.2f}x "
                             f"({lo:.2f}–{hi:.2f}) | {r['speedup_vs_hf_pl_median']:.2f}x | "
                             f"{r['forward_passes_per_token']:.3f} | {tps} | {r.get('identical_to_real', '?')} |")
    return "\n".join(lines) + "\n"


def main(argv: Any = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ood-text", type=Path, default=None, help="plain text far from the index (e.g. tinyshakespeare.txt)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--small-model", type=Path, default=ppl_setup.model_dir(),
                    help="the eval GPT-2, for its cost curve (skipped when not trained)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per domain at batch 1")
    ap.add_argument("--prompts-batched", type=int, default=16, help="prompts per domain at batch > 1")
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cost-reps", type=int, default=7)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-decoding", action="store_true", help="only the verification cost curves")
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent / "results" / "bench_speculative_large.json")
    ap.add_argument("--markdown", type=Path, default=None, help="only print the tables of a saved report")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    torch.set_num_threads(args.threads)
    t_start = time.time()
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "args": {k: str(v) for k, v in vars(args).items()},
                    "loadavg_start": os.getloadavg(), "threads": args.threads}
    index = ppl_setup.reference_index("all", progress=False)
    held = ppl_setup.split_docs("heldout")
    n_max = max(args.prompts, args.prompts_batched)
    sets = {"in-domain": cut_pairs(held, n_max, args.prompt_len, args.new_tokens, seed=1)}
    if args.ood_text:
        sets["out-of-domain"] = cut_pairs(text_docs(args.ood_text), n_max, args.prompt_len, args.new_tokens, seed=1)
    model = build_oracle(layers=args.layers, embd=args.embd, heads=args.heads)
    params = sum(p.numel() for p in model.parameters())
    report["model"] = {"layers": args.layers, "embd": args.embd, "heads": args.heads, "params_m": params / 1e6,
                       "weights": "random (seed 0); argmax overridden to the real next token"}
    print(f"oracle GPT-2: {params / 1e6:.1f}M parameters, {args.threads} thread(s)", flush=True)

    # ---- cost of verification
    prompts = [p for p, _ in sets["in-domain"]]
    name = f"oracle GPT-2 {args.layers}x{args.embd} ({params / 1e6:.0f}M)"
    report["verify_cost"] = {name: [verify_cost_curve(model, prompts, b, reps=args.cost_reps) for b in args.batches]}
    if (args.small_model / "train_info.json").exists():
        small, _ = ppl_setup.load_model(args.small_model, train_if_missing=False)
        sp = sum(p.numel() for p in small.parameters())
        report["verify_cost"][f"eval GPT-2 ({sp / 1e6:.1f}M)"] = [
            verify_cost_curve(small, prompts, b, reps=args.cost_reps) for b in args.batches]
        del small
    for n, curves in report["verify_cost"].items():
        for c in curves:
            print(f"  cost {n} batch {c['batch']}: step {c['seconds']['1'] * 1e3:.1f} ms, "
                  + ", ".join(f"k={int(q) - 1} {r:.2f}x" for q, r in c["relative_to_one_step"].items() if q != "1")
                  + f"; per extra token {c['per_token_cost_in_steps']:.3f} steps", flush=True)

    # ---- decoding (our loop measures its own pass costs: no calibration needed)
    if not args.skip_decoding:
        def register(group: list) -> None:
            model.set_documents([np.concatenate([p, r]) for p, r in group])

        for b in args.batches:
            n = args.prompts if b == 1 else args.prompts_batched
            print(f"decoding, batch {b} ({n} prompts per domain)", flush=True)
            report[f"batch_{b}"] = part_model(model, index, {d: s[:n] for d, s in sets.items()}, args.new_tokens,
                                              args.reps, b, on_group=register, only=["ours (chain)", "ours (tree)"],
                                              check_real=True)
        report["oracle_stats"] = dict(model.oracle_stats)
    report["loadavg_end"] = os.getloadavg()
    report["wall_seconds"] = time.time() - t_start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(markdown(report))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
