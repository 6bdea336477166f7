"""Speculative decoding with ∞-gram drafts vs plain greedy and HF prompt lookup, side by side.

Two parts, one run:

1. **Acceptance on real continuations** (no model): prompts cut from held-out standard-library
   files (in-domain) and from a text far from the index (out-of-domain, e.g. Tiny
   Shakespeare); at every step the drafter proposes, the "model" is the real held-out text
   (a model that writes like the corpus), the longest agreeing prefix plus one token is
   accepted. Tokens per verification step, drafted tokens per step, drafting cost. Peers in
   the same loop: HF prompt lookup (transformers' own PromptLookupCandidateGenerator,
   prompt_lookup_num_tokens=10), our prompt lookup alone, the ∞-gram alone, both combined
   (default) and token trees.
2. **Decoding with the eval GPT-2** (eval/train_gpt2.py) at batch 1 and batch 8, greedy:
   plain `generate`, HF prompt lookup (`prompt_lookup_num_tokens=10`; batch 8 = the 8 prompts
   one after another, as transformers refuses batches), ours (chain, tree, lookup only) and
   transformers' assisted loop with our drafter. Wall time (median over repetitions, methods
   interleaved so they share the machine's load), speedup vs greedy and vs HF prompt lookup in
   the same repetition, model forward passes per generated token (counted by a hook), tokens
   per verification step (= acceptance against the model's own greedy continuation), and
   whether the output equals plain greedy.

    nice -n 10 .venv/bin/python eval/bench_speculative.py --ood-text /work/shared/data/tinyshakespeare.txt

Writes eval/results/bench_speculative.json and prints the tables (markdown).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402
import ppl_setup  # noqa: E402

from infinigram_hf.candidate import hf_assisted_generate  # noqa: E402
from infinigram_hf import Draft, DraftTree, InfiniGramDrafter  # noqa: E402
from infinigram_hf import speculative_generate  # noqa: E402

Pair = Tuple[np.ndarray, np.ndarray]  # (prompt ids, real continuation ids)
DRAFT_DEFAULTS: Dict[str, Any] = {}  # the drafter's own defaults
TREE = {"width": 3, "max_nodes": 12, "min_prob": 0.15}


# ---------------------------------------------------------------------------- prompts


def cut_pairs(docs: List[np.ndarray], n: int, prompt_len: int, cont_len: int, seed: int) -> List[Pair]:
    """n (prompt, continuation) pairs at random cut points of random documents long enough."""
    docs = [d for d in docs if len(d) >= prompt_len + cont_len + 1]
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.choice(len(docs), size=n, replace=len(docs) < n):
        d = docs[int(i)]
        a = int(rng.integers(prompt_len, len(d) - cont_len + 1))
        out.append((np.asarray(d[a - prompt_len:a], dtype=np.int64), np.asarray(d[a:a + cont_len], dtype=np.int64)))
    return out


def text_docs(path: Path, chunk_chars: int = 6000) -> List[np.ndarray]:
    """A plain-text file cut into chunks, tokenized with the eval tokenizer."""
    text = path.read_text(encoding="utf-8", errors="replace")
    tok = corpora.load_raw_tokenizer()
    pieces = [text[i:i + chunk_chars] for i in range(0, len(text), chunk_chars)]
    return [np.asarray(e.ids, dtype=np.int64) for e in tok.encode_batch(pieces)]


# ---------------------------------------------------------------------------- part 1: simulation


def hf_prompt_lookup(k: int = 10) -> Callable[[np.ndarray, int], np.ndarray]:
    """transformers' PromptLookupCandidateGenerator as a draft function."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    def draft(ctx: np.ndarray, room: int) -> np.ndarray:
        gen = PromptLookupCandidateGenerator(eos_token_id=None, num_output_tokens=k, max_matching_ngram_size=2,
                                             max_length=len(ctx) + room + 1)
        x = torch.from_numpy(ctx)[None]
        cand, _ = gen.get_candidates(x)
        return cand[0, len(ctx):len(ctx) + room].numpy()  # its loop cuts drafts at max_length too
    return draft


def tree_accept(tree: DraftTree, real: np.ndarray) -> int:
    cur, acc = -1, 0
    while acc < len(real):
        nxt = [i for i in range(len(tree)) if tree.parents[i] == cur and tree.tokens[i] == real[acc]]
        if not nxt:
            break
        cur, acc = nxt[0], acc + 1
    return acc


def simulate(pairs: List[Pair], drafter: Any, mode: str) -> dict:
    """Decode every pair's real continuation with drafts verified against it.
    mode: "row" (our loop's per-row drafting), "tree", or "fn" (drafter(ctx, room) -> ids).
    Drafting cost is the thread's CPU time (a shared, oversubscribed CPU inflates wall time)."""
    steps = gen = drafted = 0
    t_draft = 0.0
    for prompt, real in pairs:
        full = np.concatenate([prompt, real])
        row = drafter.start(prompt) if mode in ("row", "tree") else None
        t = 0
        while t < len(real):
            room = len(real) - t - 1
            t0 = time.thread_time()
            if mode == "row":
                dd = drafter.draft_row(row, room)
                w = drafter.step_width([row], [dd])  # as the decoding loop does
                if w < len(dd):
                    dd = Draft(dd.tokens[:w], dd.source, dd.match_len)
                d = dd.tokens
            elif mode == "tree":
                d = drafter.tree_row(row, max_tokens=room, **TREE)
            else:
                d = drafter(full[:len(prompt) + t], room)
            t_draft += time.thread_time() - t0
            drafted += len(d)
            if mode == "tree":
                acc = tree_accept(d, real[t:])
            else:
                acc = 0
                while acc < len(d) and d[acc] == real[t + acc]:
                    acc += 1
            t0 = time.thread_time()
            if row is not None:
                if mode == "row":
                    drafter.feedback(row, dd, acc)
                drafter.append(row, real[t:t + acc + 1])
            t_draft += time.thread_time() - t0
            t += acc + 1
            steps += 1
        gen += len(real)
    return {"tokens_per_step": gen / steps, "drafted_per_step": drafted / steps,
            "draft_us_per_step": t_draft / steps * 1e6, "draft_us_per_drafted_token": t_draft / max(drafted, 1) * 1e6}


def part_simulation(index: Any, sets: Dict[str, List[Pair]]) -> dict:
    methods: Dict[str, Tuple[Callable[[], Any], str]] = {
        "HF prompt lookup (k=10)": (lambda: hf_prompt_lookup(10), "fn"),
        "ours: prompt lookup only": (lambda: InfiniGramDrafter(None), "row"),
        "ours: ∞-gram only": (lambda: InfiniGramDrafter(index, source="infgram"), "row"),
        "ours: longer match wins": (lambda: InfiniGramDrafter(index, source="longest"), "row"),
        "ours: default chain (lookup first, ∞-gram fallback)": (lambda: InfiniGramDrafter(index), "row"),
        "ours: default chain, fixed caps (adaptive=False)": (lambda: InfiniGramDrafter(index, adaptive=False), "row"),
        "ours: token tree (best-first, 12 nodes)": (lambda: InfiniGramDrafter(index), "tree"),
    }
    out: dict = {}
    for domain, pairs in sets.items():
        for name, (make, mode) in methods.items():
            r = simulate(pairs, make(), mode)
            out.setdefault(domain, {})[name] = r
            print(f"  sim {domain:14s} {name:52s} {r['tokens_per_step']:.3f} tok/step  "
                  f"{r['drafted_per_step']:.2f} drafted/step  {r['draft_us_per_drafted_token']:.1f} CPU µs/drafted",
                  flush=True)
    return out


# ---------------------------------------------------------------------------- part 2: the model


class ForwardCounter:
    """Counts the model's forward calls (a pre-hook on the top module)."""

    def __init__(self, model: Any):
        self.n = 0
        model.register_forward_pre_hook(self._hook)

    def _hook(self, *a: Any) -> None:
        self.n += 1


def load_model(path: Path, allow_checkpoint: bool) -> Tuple[Any, dict]:
    """The eval GPT-2; a training checkpoint (checkpoint.pt) when asked and no final model exists."""
    if (path / "train_info.json").exists():
        model, _ = ppl_setup.load_model(path, train_if_missing=False)
        return model, {"model": str(path), "train_info": json.loads((path / "train_info.json").read_text())}
    ckpt = path / "checkpoint.pt"
    if not (allow_checkpoint and ckpt.exists()):
        raise SystemExit(f"no trained model at {path} (run eval/train_gpt2.py, or --allow-checkpoint)")
    import train_gpt2
    ns = argparse.Namespace(seq_len=512, embd=256, layers=4, heads=4, dropout=0.0)
    model = train_gpt2.build_model(ns)
    state = torch.load(ckpt, weights_only=False, map_location="cpu")
    model.load_state_dict(state["model"])
    return model.eval(), {"model": str(ckpt), "checkpoint_step": int(state["step"]),
                          "train_loss_last10": float(np.mean(state["losses"][-10:]))}


def left_pad(rows: List[np.ndarray]) -> Tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r):] = torch.from_numpy(r)
        mask[b, width - len(r):] = 1
    return ids, mask


def part_model(model: Any, index: Any, sets: Dict[str, List[Pair]], new_tokens: int, reps: int, batch: int, *,
               on_group: Any = None, only: Any = None, extra: Any = None, check_real: bool = False) -> dict:
    """Greedy decoding of every domain's prompts (groups of `batch`) by each method, interleaved.

    on_group(pairs): called before a group is decoded (e.g. the oracle model registers its
    documents). only: names of the built-in methods to run (greedy and HF prompt lookup always
    run: they are the baselines). extra: {name: speculative_generate kwargs} more variants of
    ours. check_real: also count rows equal to the real continuation."""
    counter = ForwardCounter(model)
    gen_kw = dict(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    drafter = InfiniGramDrafter(index)
    look = InfiniGramDrafter(None)

    def run_greedy(ids, mask):
        return model.generate(ids, attention_mask=mask, **gen_kw), None

    def run_hf_pl(ids, mask):  # transformers refuses batches: one row at a time
        outs = []
        for b in range(len(ids)):
            x = ids[b:b + 1, mask[b].bool()]
            outs.append(model.generate(x, prompt_lookup_num_tokens=10, **gen_kw)[0])
        return outs, None

    def ours(**kw):
        def run(ids, mask):
            out, st = speculative_generate(model, ids, attention_mask=mask, return_stats=True, **kw, **gen_kw)
            return out, st
        return run

    def run_hf_loop(ids, mask):
        outs = []
        for b in range(len(ids)):
            x = ids[b:b + 1, mask[b].bool()]
            outs.append(model.generate(x, custom_generate=hf_assisted_generate, drafter=drafter, **gen_kw)[0])
        return outs, None

    methods = {"greedy": run_greedy, "HF prompt lookup": run_hf_pl, "ours (chain)": ours(drafter=drafter),
               "ours (tree)": ours(drafter=drafter, draft_tree=True, tree_options=TREE),
               "ours, prompt lookup only": ours(drafter=look),
               "ours, ∞-gram only (off-switch check)": ours(drafter=InfiniGramDrafter(index, source="infgram"))}
    if batch == 1:
        methods["HF assisted loop + our drafter"] = run_hf_loop
    if only is not None:
        methods = {m: f for m, f in methods.items() if m in ("greedy", "HF prompt lookup") or m in only}
    for name, kw in (extra or {}).items():
        methods[name] = ours(**kw)
    results: dict = {}
    for domain, pairs in sets.items():
        groups = [pairs[i:i + batch] for i in range(0, len(pairs) - batch + 1, batch)]
        times = {m: [[0.0] * len(groups) for _ in range(reps)] for m in methods}
        fwd = {m: 0 for m in methods}
        gen_tokens = {m: 0 for m in methods}
        steps = {m: [] for m in methods}
        split = {m: [0.0, 0.0, 0.0] for m in methods}  # ours: drafting + bookkeeping, forward passes, total
        rows_of: Dict[str, Dict[int, List[np.ndarray]]] = {m: {} for m in methods}
        order = list(methods)
        for rep in range(reps):
            for g, group in enumerate(groups):
                ids, mask = left_pad([p for p, _ in group])
                if on_group is not None:
                    on_group(group)
                rng = np.random.default_rng(rep * 1000 + g)
                for m in rng.permutation(order):  # interleaved: methods share the load of the moment
                    n0 = counter.n
                    t0 = time.perf_counter()
                    out, st = methods[m](ids, mask)
                    times[m][rep][g] = time.perf_counter() - t0
                    if rep:
                        continue
                    fwd[m] += counter.n - n0
                    rows = _rows(out, ids, mask)
                    gen_tokens[m] += sum(len(r) for r in rows)
                    if st is not None:
                        steps[m].append((int(st.generated.sum()), int(st.row_steps.sum()), st.tokens_per_step))
                        split[m] = [a + b for a, b in zip(split[m], (st.draft_seconds, st.model_seconds,
                                                                      st.total_seconds))]
                    rows_of[m][g] = rows
        same = {m: sum(int(np.array_equal(a, b)) for g in rows_of[m] for a, b in zip(rows_of[m][g], rows_of["greedy"][g]))
                for m in methods}
        real = {g: [r[:new_tokens] for _, r in group] for g, group in enumerate(groups)}
        same_real = {m: sum(int(np.array_equal(a, b)) for g in rows_of[m] for a, b in zip(rows_of[m][g], real[g]))
                     for m in methods}
        res = {}
        n_rows = len(groups) * batch
        tot = {m: [sum(times[m][r]) for r in range(reps)] for m in methods}
        for m in methods:
            ratio_g = [tot["greedy"][r] / tot[m][r] for r in range(reps)]
            ratio_pl = [tot["HF prompt lookup"][r] / tot[m][r] for r in range(reps)]
            res[m] = {
                "seconds_median": statistics.median(tot[m]),
                "speedup_vs_greedy_median": statistics.median(ratio_g),
                "speedup_vs_greedy_range": [min(ratio_g), max(ratio_g)],
                "speedup_vs_hf_pl_median": statistics.median(ratio_pl),
                "forward_passes_per_token": fwd[m] / max(gen_tokens[m], 1) * (batch if m not in (
                    "HF prompt lookup", "HF assisted loop + our drafter") else 1),
                # all rows' tokens over all rows' verification steps (a mean of per-row ratios would
                # let one looping row dominate); the per-row mean is kept beside it
                "tokens_per_step": (sum(s[0] for s in steps[m]) / max(1, sum(s[1] for s in steps[m]))
                                    if steps[m] else None),
                "tokens_per_step_row_mean": (float(np.mean([s[2] for s in steps[m]])) if steps[m] else None),
                "identical_to_greedy": f"{same[m]}/{n_rows}",
            }
            if check_real:
                res[m]["identical_to_real"] = f"{same_real[m]}/{n_rows}"
            if split[m][2] > 0:  # first repetition: where our loop's time went
                d, f, t = split[m]
                res[m]["time_split"] = {"drafting_and_bookkeeping": d / t, "forward_passes": f / t,
                                        "other_loop_overhead": max(0.0, 1 - (d + f) / t)}
            if m in ("HF prompt lookup", "HF assisted loop + our drafter"):
                res[m]["tokens_per_step"] = gen_tokens[m] / max(fwd[m], 1)
            if m == "greedy":
                res[m]["tokens_per_step"] = 1.0
            print(f"  batch {batch} {domain:14s} {m:32s} {res[m]['seconds_median']:7.2f} s  "
                  f"x{res[m]['speedup_vs_greedy_median']:.2f} vs greedy  x{res[m]['speedup_vs_hf_pl_median']:.2f} vs PL  "
                  f"{res[m]['forward_passes_per_token']:.3f} fwd/tok  "
                  f"{(res[m]['tokens_per_step'] or 0):.2f} tok/step  same {res[m]['identical_to_greedy']}", flush=True)
        results[domain] = res
    return results


def _rows(out: Any, ids: torch.Tensor, mask: torch.Tensor) -> List[np.ndarray]:
    """Generated tokens per row (prompt and trailing padding removed)."""
    if isinstance(out, list):
        return [o[int(mask[b].sum()):].numpy() for b, o in enumerate(out)]
    return [out[b, ids.shape[1]:].numpy() for b in range(len(ids))]


# ---------------------------------------------------------------------------- report


def markdown(report: dict) -> str:
    """The report as markdown tables."""
    lines = ["### Acceptance on real held-out continuations (no model)", "",
             "| domain | drafter | tokens / step | drafted / step | CPU µs / drafted token |", "|---|---|---|---|---|"]
    for domain, rows in report["simulation"].items():
        for name, r in rows.items():
            lines.append(f"| {domain} | {name} | {r['tokens_per_step']:.3f} | {r['drafted_per_step']:.2f} | "
                         f"{r['draft_us_per_drafted_token']:.1f} |")
    for key in sorted(k for k in report if k.startswith("batch_")):
        b = key.split("_")[1]
        lines += ["", f"### Greedy decoding with the eval GPT-2, batch {b}", "",
                  "| domain | method | seconds (median) | vs greedy (median, range) | vs HF prompt lookup | "
                  "forward passes / token | tokens / step | identical to greedy |", "|---|---|---|---|---|---|---|---|"]
        for domain, rows in report[key].items():
            for name, r in rows.items():
                lo, hi = r["speedup_vs_greedy_range"]
                tps = "—" if r["tokens_per_step"] is None else f"{r['tokens_per_step']:.2f}"
                lines.append(f"| {domain} | {name} | {r['seconds_median']:.2f} | {r['speedup_vs_greedy_median']:.2f}x "
                             f"({lo:.2f}–{hi:.2f}) | {r['speedup_vs_hf_pl_median']:.2f}x | "
                             f"{r['forward_passes_per_token']:.3f} | {tps} | {r['identical_to_greedy']} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- main


def main(argv: Any = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ood-text", type=Path, default=None, help="plain text far from the index (e.g. tinyshakespeare.txt)")
    ap.add_argument("--model", type=Path, default=ppl_setup.model_dir())
    ap.add_argument("--allow-checkpoint", action="store_true", help="use a training checkpoint if no final model")
    ap.add_argument("--sim-prompts", type=int, default=60)
    ap.add_argument("--prompts", type=int, default=24, help="prompts per domain for the model runs")
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--sim-len", type=int, default=128, help="real continuation tokens (simulation)")
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-model", action="store_true")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "bench_speculative.json")
    ap.add_argument("--markdown", type=Path, default=None, help="only print the tables of a saved report")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    torch.set_num_threads(args.threads)
    index = ppl_setup.reference_index("all", progress=False)
    held = ppl_setup.split_docs("heldout")
    sim_sets = {"in-domain": cut_pairs(held, args.sim_prompts, args.prompt_len, args.sim_len, seed=0)}
    run_sets = {"in-domain": cut_pairs(held, args.prompts, args.prompt_len, args.new_tokens, seed=1)}
    if args.ood_text:
        ood = text_docs(args.ood_text)
        sim_sets["out-of-domain"] = cut_pairs(ood, args.sim_prompts, args.prompt_len, args.sim_len, seed=0)
        run_sets["out-of-domain"] = cut_pairs(ood, args.prompts, args.prompt_len, args.new_tokens, seed=1)
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "args": {k: str(v) for k, v in vars(args).items()},
                    "index": str(index.paths[0]), "index_tokens": index.num_tokens, "threads": args.threads,
                    "loadavg_start": os.getloadavg()}
    t_start = time.time()
    print("part 1: acceptance on real continuations", flush=True)
    report["simulation"] = part_simulation(index, sim_sets)
    if not args.skip_model:
        model, info = load_model(args.model, args.allow_checkpoint)
        report["model_info"] = info
        for b in args.batches:
            print(f"part 2: decoding, batch {b}", flush=True)
            report[f"batch_{b}"] = part_model(model, index, run_sets, args.new_tokens, args.reps, b)
    report["loadavg_end"] = os.getloadavg()
    report["wall_seconds"] = time.time() - t_start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(markdown(report))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
