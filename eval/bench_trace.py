#!/usr/bin/env python3
"""Tracing held-out text to the corpus (issue 18): how much of held-out standard-library code is
verbatim corpus text, the creativity-index curve, and the latency of our attribute() /
creativity() against the official engine's in the same run, answers compared.

    .venv/bin/python eval/bench_trace.py                 # stdlib.reference index, 40 held-out files
    .venv/bin/python eval/bench_trace.py --no-peer       # ours only

Corpus: stdlib.reference (eval/corpora.py; our index under <cache>/ours, the official one under
<cache>/official: `python3 eval/official_engine.py setup && ... build stdlib.reference`).
Texts: the first --files documents of stdlib.heldout with at least 200 tokens, each cut to
--max-tokens tokens (never in the index as a whole: files are split by path hash).

Figures:
  share of tokens in a verbatim corpus span of >= 8 / 16 / 32 tokens (token-weighted over texts);
  creativity index curve: mean over texts of the share of tokens in no corpus span of >= n tokens,
    n = 1..64 (eval/plots/creativity_stdlib.png);
  latency per 1,000 tokens, one text per call, engines taking turns text by text, --rounds rounds,
    median over rounds of the total over texts (wall clock and process CPU time):
      creativity: ours `index.creativity(ids)` vs official `creativity(input_ids=ids)`;
      attribute: min_len 8, max_count 1000, no delimiters or word rule; ours with every occurrence
        resolved to (document, offset) (max_docs=1000, no text window) vs official
        `attribute(input_ids, [], 8, 1000, False)` (its (shard, pointer) of every occurrence).
  exactness: every answer compared (spans: start, end, count; creativity: rs);
  generated text: the share of generated tokens in verbatim spans and the creativity curve
    (eval/plots/creativity_generated.png), the eval GPT-2 (eval/train_gpt2.py) alone, with the
    processor, and with the processor's memorisation guard (see samples()).
    .venv/bin/python eval/bench_trace.py --samples-only   # only this part, the rest kept
Results: eval/results/trace_bench.json; markdown on stdout for eval/RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import corpora  # noqa: E402
from bench_queries import load_official, our_index  # noqa: E402

RESULTS = HERE / "results"
PLOTS = HERE / "plots"
SPAN_LENS = (8, 16, 32)
CURVE_NS = list(range(1, 65))
MIN_LEN, MAX_COUNT = 8, 1000


def log(msg: str) -> None:
    print(f"[bench_trace {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def held_out_texts(n: int, max_tokens: int) -> List[List[int]]:
    tokens, offsets = corpora.load_tokens("stdlib.heldout")
    out = []
    for i in range(len(offsets) - 1):
        doc = np.asarray(tokens[offsets[i]:offsets[i + 1]])
        if len(doc) >= 200:
            out.append(doc[:max_tokens].astype(np.int64).tolist())
        if len(out) == n:
            break
    return out


def coverage(ix: Any, texts: List[List[int]]) -> Dict[str, Any]:
    cre = ix.creativity_batch(texts, n_threads=1)
    total = sum(len(t) for t in texts)
    share = {str(k): round(sum(int(c.covered(k).sum()) for c in cre) / total, 4) for k in SPAN_LENS}
    curve = {n: float(np.mean([c.index(n) for c in cre])) for n in CURVE_NS}
    longest = [int(c.match_len.max()) for c in cre]
    return {"tokens": total, "texts": len(texts), "share_in_spans_ge": share, "creativity_curve": curve,
            "longest_match_median": float(np.median(longest)), "longest_match_max": max(longest)}


def plot_curve(curve: Dict[int, float], out: Path, title: str) -> None:
    plot_curves({"held-out files": curve}, out, title)


def plot_curves(curves: Dict[str, Dict[int, float]], out: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, curve in curves.items():
        ns = [int(n) for n in curve]
        ax.plot(ns, list(curve.values()), marker=".", markersize=3, label=label)
    ax.set_xlabel("n (tokens)")
    ax.set_ylabel("creativity index (share of tokens\nin no corpus span of >= n tokens)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    if len(curves) > 1:
        ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def timed(fn: Any) -> tuple:
    c0, t0 = time.process_time(), time.perf_counter()
    r = fn()
    return r, time.perf_counter() - t0, time.process_time() - c0


def latency(ix: Any, peer: Any, texts: List[List[int]], rounds: int) -> Dict[str, Any]:
    calls = {
        "creativity": {"ours": lambda x: ix.creativity(x),
                       "official": (lambda x: peer.creativity(input_ids=x)) if peer else None},
        "attribute": {"ours": lambda x: ix.attribute(x, min_len=MIN_LEN, max_count=MAX_COUNT, max_docs=MAX_COUNT,
                                                     context=None),
                      "official": (lambda x: peer.attribute(input_ids=x, delim_ids=[], min_len=MIN_LEN,
                                                            max_cnt=MAX_COUNT, enforce_bow=False)) if peer else None},
    }
    total = sum(len(t) for t in texts)
    out: Dict[str, Any] = {}
    for kind, engines in calls.items():
        engines = {k: v for k, v in engines.items() if v is not None}
        wall = {k: [] for k in engines}
        cpu = {k: [] for k in engines}
        answers: Dict[str, list] = {k: [] for k in engines}
        for x in texts[:2]:  # warm the pages both engines touch
            for fn in engines.values():
                fn(x)
        for rnd in range(rounds):
            w = {k: 0.0 for k in engines}
            c = {k: 0.0 for k in engines}
            for i, x in enumerate(texts):
                order = list(engines) if (i + rnd) % 2 == 0 else list(reversed(engines))
                for k in order:
                    r, dw, dc = timed(lambda: engines[k](x))
                    w[k] += dw
                    c[k] += dc
                    if rnd == 0:
                        answers[k].append(r)
            for k in engines:
                wall[k].append(w[k])
                cpu[k].append(c[k])
        res = {k: {"ms_per_1000_tokens": round(1000 * float(np.median(wall[k])) / total * 1000, 3),
                   "cpu_ms_per_1000_tokens": round(1000 * float(np.median(cpu[k])) / total * 1000, 3)} for k in engines}
        if "official" in engines:
            res["speedup_wall"] = round(res["official"]["ms_per_1000_tokens"] / res["ours"]["ms_per_1000_tokens"], 1)
            res["speedup_cpu"] = round(res["official"]["cpu_ms_per_1000_tokens"]
                                       / res["ours"]["cpu_ms_per_1000_tokens"], 1)
            res["exact"] = compare(kind, texts, answers["ours"], answers["official"])
        out[kind] = res
        log(f"{kind}: {res}")
    out["tokens"] = total
    return out


def compare(kind: str, texts: List[List[int]], ours: list, theirs: list) -> Dict[str, int]:
    same = diff = diff_rank0 = 0
    for x, a, b in zip(texts, ours, theirs):
        if kind == "creativity":
            mine, other = a.rs.tolist(), list(b["rs"])
            bad = [l for l, (p, q) in enumerate(zip(mine, other)) if p != q]
        else:
            mine = [(s.start, s.end, s.count) for s in a.spans]
            other = [(s["l"], s["r"], s["count"]) for s in b["spans"]]
            bad = [l for l, _, _ in set(mine) ^ set(other)]
            # the occurrences too: the same number per span
            if mine == other:
                assert all(len(s.docs) == len(o["docs"]) for s, o in zip(a.spans, b["spans"]))
        if mine == other:
            same += 1
        else:
            diff += 1
            diff_rank0 += all(x[l] == min(x) for l in bad)
    return {"texts_equal": same, "texts_different": diff, "different_where_official_misses_smallest_id": diff_rank0}


def load_model(model_dir: Any) -> tuple:
    """(model, description): the eval GPT-2 (eval/train_gpt2.py, save_pretrained format) from
    model_dir, or, with None, an untrained stand-in (random weights)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = corpora.load_tokenizer()
    if model_dir is None:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=64, n_layer=2, n_head=2,
                                           bos_token_id=corpora.EOS_TOKEN_ID, eos_token_id=corpora.EOS_TOKEN_ID))
        return model.eval(), "untrained GPT-2 2x64"
    model = GPT2LMHeadModel.from_pretrained(str(model_dir)).eval()
    info_path = Path(model_dir) / "train_info.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    cfg = model.config
    desc = (f"eval GPT-2 {cfg.n_layer}x{cfg.n_embd} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
            f"parameters, eval/train_gpt2.py"
            + (f": {info['steps']} steps, {info['tokens_seen']:,} tokens seen, final train loss "
               f"{info['final_train_loss']:.2f}" if {"steps", "tokens_seen", "final_train_loss"} <= set(info) else "")
            + ")")
    return model, desc


def samples(ix: Any, texts: List[List[int]], n_prompts: int, new_tokens: int, model_dir: Any = None) -> Dict[str, Any]:
    """Generated text traced back: a GPT-2 alone, with the ∞-gram processor, and with the
    processor and the memorisation guard (max_copy_len=16); share of generated tokens inside a
    verbatim corpus span of >= 8 / 16 / 32 tokens (spans inside the generated part), and the
    creativity curve of each."""
    import torch

    from infinigram_hf import InfiniGramLogitsProcessor

    tok = corpora.load_tokenizer()
    model, desc = load_model(model_dir)
    prompts = torch.tensor([t[:32] for t in texts[:n_prompts]])
    settings = {"model alone": None,
                "with the processor": dict(lambda_sparse=0.9, lambda_dense=0.5),
                "processor + guard (max_copy_len=16)": dict(lambda_sparse=0.9, lambda_dense=0.5, max_copy_len=16)}
    out: Dict[str, Any] = {"prompts": len(prompts), "new_tokens": new_tokens, "model": desc,
                           "sampling": "do_sample, top_k=50, seed 0"}
    for name, kw in settings.items():
        procs = [InfiniGramLogitsProcessor(ix, tokenizer=tok, **kw)] if kw else []
        torch.manual_seed(0)
        t0 = time.perf_counter()
        with torch.no_grad():
            gen = model.generate(prompts, attention_mask=torch.ones_like(prompts), logits_processor=procs,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True, top_k=50,
                                 pad_token_id=corpora.EOS_TOKEN_ID)[:, prompts.shape[1]:].tolist()
        cre = ix.creativity_batch(gen, n_threads=1)
        total = sum(len(g) for g in gen)
        out[name] = {str(k): round(sum(int(c.covered(k).sum()) for c in cre) / total, 4) for k in SPAN_LENS}
        out[name]["longest"] = max(int(c.match_len.max()) for c in cre)
        out[name]["creativity_curve"] = {n: float(np.mean([c.index(n) for c in cre])) for n in CURVE_NS}
        out[name]["generate_s"] = round(time.perf_counter() - t0, 1)
        log(f"samples, {name}: { {k: v for k, v in out[name].items() if k != 'creativity_curve'} }")
    return out


def plot_samples(res: Dict[str, Any]) -> None:
    sm = res["samples"]
    curves = {"held-out files": res["coverage"]["creativity_curve"]}
    curves.update({f"generated: {name}": sm[name]["creativity_curve"] for name in
                   ("model alone", "with the processor", "processor + guard (max_copy_len=16)")})
    plot_curves(curves, PLOTS / "creativity_generated.png",
                f"vs stdlib.reference ({res['index_tokens'] / 1e6:.1f}M tokens); {sm['model'].split(' (')[0]}")


def markdown(res: Dict[str, Any]) -> str:
    cov = res["coverage"]
    lines = [f"Held-out stdlib files vs the stdlib.reference index ({cov['texts']} files, {cov['tokens']:,} tokens):",
             "", "| verbatim span length | share of tokens inside one |", "|---|---|"]
    lines += [f"| >= {k} tokens | {v:.1%} |" for k, v in cov["share_in_spans_ge"].items()]
    lines += ["", f"Longest corpus match per file: median {cov['longest_match_median']:.0f}, max "
              f"{cov['longest_match_max']} tokens. Creativity index (mean over files): "
              + ", ".join(f"n={n}: {cov['creativity_curve'][n]:.2f}" for n in (4, 8, 16, 32, 64)), ""]
    lat = res["latency"]
    lines += ["| call | ours ms / 1k tokens (CPU) | official ms / 1k tokens (CPU) | speed-up wall (CPU) | answers equal |",
              "|---|---|---|---|---|"]
    for kind in ("creativity", "attribute"):
        r = lat[kind]
        o = r.get("official")
        eq = r.get("exact")
        lines.append(f"| {kind} | {r['ours']['ms_per_1000_tokens']} ({r['ours']['cpu_ms_per_1000_tokens']}) | "
                     + (f"{o['ms_per_1000_tokens']} ({o['cpu_ms_per_1000_tokens']}) | {r['speedup_wall']}x "
                        f"({r['speedup_cpu']}x) | {eq['texts_equal']}/{eq['texts_equal'] + eq['texts_different']}"
                        f" (differing: {eq['different_where_official_misses_smallest_id']} explained by the "
                        f"official rank-0 miss) |" if o else "- | - | - |"))
    if "samples" in res:
        sm = res["samples"]
        lines += ["", f"Generated text ({sm['prompts']} prompts of 32 held-out tokens, {sm['new_tokens']} new tokens each, "
                  f"{sm['model']}, {sm['sampling']}): share of generated tokens in a verbatim span of",
                  "", "| setting | >= 8 | >= 16 | >= 32 | longest span |", "|---|---|---|---|---|"]
        for name in ("model alone", "with the processor", "processor + guard (max_copy_len=16)"):
            r = sm[name]
            lines.append(f"| {name} | {r['8']:.1%} | {r['16']:.1%} | {r['32']:.1%} | {r['longest']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--prompts", type=int, default=16, help="generation prompts (0: no generation)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--model", type=Path, default=None,
                    help="the GPT-2 generating (save_pretrained directory; default: <cache>/gpt2-small-stdlib "
                         "from eval/train_gpt2.py when it is there, else an untrained stand-in)")
    ap.add_argument("--untrained", action="store_true", help="generate with an untrained stand-in GPT-2")
    ap.add_argument("--samples-only", action="store_true",
                    help="only the generation part, into the existing eval/results/trace_bench.json")
    args = ap.parse_args()
    model_dir = None
    if not args.untrained:
        from train_gpt2 import default_model_dir
        model_dir = args.model or default_model_dir()
        if not (Path(model_dir) / "config.json").is_file():
            if args.model:
                sys.exit(f"--model {args.model}: no config.json there")
            log(f"no trained model at {model_dir}: an untrained stand-in generates")
            model_dir = None
    ix = our_index("stdlib.reference")
    texts = held_out_texts(args.files, args.max_tokens)
    log(f"{len(texts)} texts, {sum(map(len, texts)):,} tokens; index {ix.num_tokens:,} tokens")
    if args.samples_only:
        res = json.loads((RESULTS / "trace_bench.json").read_text())
        cov = res["coverage"]
        cov["creativity_curve"] = {int(n): v for n, v in cov["creativity_curve"].items()}  # (JSON keys are strings)
        res["samples_command"] = " ".join(sys.argv)
        res["samples_date"] = time.strftime("%Y-%m-%d")
    else:
        peer = None if args.no_peer else load_official("stdlib.reference")
        res = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv),
               "index": "stdlib.reference", "index_tokens": ix.num_tokens, "args": vars(args)}
        res["args"]["model"] = str(model_dir) if model_dir else None
        res["coverage"] = coverage(ix, texts)
        plot_curve(res["coverage"]["creativity_curve"], PLOTS / "creativity_stdlib.png",
                   f"held-out stdlib files vs stdlib.reference ({ix.num_tokens / 1e6:.1f}M tokens)")
        res["latency"] = latency(ix, peer, texts, args.rounds)
    if args.prompts:
        res["samples"] = samples(ix, texts, args.prompts, args.new_tokens, model_dir)
        plot_samples(res)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "trace_bench.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    print(markdown(res))


if __name__ == "__main__":
    main()
