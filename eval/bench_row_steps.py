#!/usr/bin/env python3
"""The drafter's step and perplexity()'s ∞-gram side at GPU-sized batches (issue 19): CPU per
row per step (drafter) and per token (perplexity) at batch 64 with a 32k vocabulary on held-out
text, the package of a base commit against the working tree's.

    .venv-test/bin/python eval/bench_row_steps.py --mode drafter --base 8a340eb
    .venv-test/bin/python eval/bench_row_steps.py --mode perplexity --base 8a340eb --rounds 5

Index: the stdlib reference split (7.2M tokens, BPE vocab 32k; eval/corpora.py), built into
<cache>/ours/stdlib.reference if missing (as eval/bench_processor_batch.py does).

drafter: --batch held-out files (stdlib.heldout), each row starting with its first --prefix
tokens. A step is what a batched speculative loop asks of the drafter: a draft for every row
(the adaptive caps, the ∞-gram state advanced through the tokens accepted last step, prompt
lookup, the greedy chain), the step's draft width, then every row's feedback and its accepted
tokens. The model is the text itself: a row keeps the longest prefix of its draft that equals the
file's next tokens, plus the file's next token (the model's own pick), as greedy verification
would if the model followed the text. Timed: the drafting (drafts + width) and the bookkeeping
(feedback + append), per row. The base drives the per-row API (start / draft_row / step_width /
feedback / append); the new package its batch API where it has one (DraftBatch). Every
step's drafts of the two engines are compared (they must be equal).

perplexity: the ∞-gram side of perplexity() (what token_scores computes before the model
runs: P_∞, sparse, effective n and the context features of learned mixing, for every token of
every document given its full prefix) over --batch held-out documents cut to --doc-len tokens;
CPU per token scored, with and without the distribution features. The arrays of the two engines
are compared (must be equal).

Each round runs one engine in a child process (the base package and its C core are exported
with git archive and built in a temporary directory), engines alternating (base, new, new,
base, ...). A round's drafter figure is the median over steps 2.. (step 1 is reported
apart); the table gives the median over rounds. Results: eval/results/row_steps_<mode>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def open_index(pkg_root: str) -> Any:
    sys.path.insert(0, pkg_root)
    sys.path.insert(0, str(HERE))
    import corpora
    from infinigram_hf import InfiniGramIndex
    from bench_dense_backoff import built
    assert Path(sys.modules["infinigram_hf"].__file__).is_relative_to(pkg_root), "wrong package imported"
    tokens, offsets = corpora.load_tokens("stdlib.reference")
    docs = (tokens[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1))
    return InfiniGramIndex.open(str(built(corpora.cache_dir() / "ours" / "stdlib.reference", docs, 32000)))


def held_out(batch: int, min_len: int) -> List[Any]:
    """`batch` held-out files of at least min_len tokens (reused, shifted, if there are too few)."""
    import numpy as np
    import corpora
    held, hoffs = corpora.load_tokens("stdlib.heldout")
    files = [np.asarray(held[hoffs[i]:hoffs[i + 1]], dtype=np.int64) for i in range(len(hoffs) - 1)
             if hoffs[i + 1] - hoffs[i] > min_len + 64]
    return [files[i % len(files)][(i // len(files)) * 7:] for i in range(batch)]


def drafter_child(pkg_root: str, batch: int, prefix: int, steps: int, out_path: str) -> None:
    import numpy as np
    ix = open_index(pkg_root)
    from infinigram_hf import InfiniGramDrafter
    drafter = InfiniGramDrafter(ix, eos_token_id=0)
    files = held_out(batch, prefix + steps * (drafter.max_draft + 1))
    pos = np.full(batch, prefix, dtype=np.int64)
    try:  # the batch API, where the package has it
        from infinigram_hf.lm.draft_batch import DraftBatch
        batched = True
    except ImportError:
        batched = False
    t_draft, t_book, drafts_log = [], [], []
    if batched:
        rows = DraftBatch(drafter, [f[:prefix] for f in files])
    else:
        rows = [drafter.start(f[:prefix]) for f in files]
    for _ in range(steps):
        t0 = time.process_time()
        if batched:
            d = rows.draft()
            d = d.cut(rows.width(d))
            toks, lens = d.tokens, d.lengths
        else:
            plans = [drafter.draft_row(r) for r in rows]
            w = drafter.step_width(rows, plans)
            plans = [p if len(p) <= w else type(p)(p.tokens[:w], p.source, p.match_len, p.counts[:w], p.totals[:w])
                     for p in plans]
        t1 = time.process_time()
        # the model (untimed): keep the draft's prefix that follows the text, then the text's token
        if not batched:
            lens = np.array([len(p) for p in plans], dtype=np.int64)
            toks = np.zeros((batch, max(1, int(lens.max()))), dtype=np.int64)
            for i, p in enumerate(plans):
                toks[i, :len(p)] = p.tokens
        text = np.stack([f[p:p + toks.shape[1] + 1] for f, p in zip(files, pos)])
        ok = (toks == text[:, :toks.shape[1]]) & (np.arange(toks.shape[1]) < lens[:, None])
        acc = np.cumprod(ok, axis=1).sum(axis=1)
        new = text[:, :acc.max() + 1]
        n_new = acc + 1
        drafts_log.append([toks[i, :lens[i]].tolist() for i in range(batch)])
        t2 = time.process_time()
        if batched:
            rows.accept(d, acc, new, n_new)
        else:
            for i, r in enumerate(rows):
                drafter.feedback(r, plans[i], int(acc[i]))
                drafter.append(r, new[i, :n_new[i]])
        t3 = time.process_time()
        pos += n_new
        t_draft.append(t1 - t0)
        t_book.append(t3 - t2)
    Path(out_path).write_text(json.dumps({"draft": t_draft, "book": t_book, "drafts": drafts_log,
                                          "batched": batched}))


def loop_child(pkg_root: str, batch: int, prefix: int, steps: int, out_path: str) -> None:
    """The whole speculative loop (speculative_generate) on a tiny random GPT-2 of the 32k
    vocabulary, its scores mixed with the ∞-gram (λ 0.9, so that drafts get accepted), on
    left-padded held-out prompts of different lengths; chains and trees. Returns the outputs, the
    loop's stats and the drafter's, and the loop's drafting time (draft_seconds, read as CPU
    time: the drafter and the loop's bookkeeping after verification) per row per step."""
    import numpy as np
    import torch
    torch.set_num_threads(1)
    ix = open_index(pkg_root)
    from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessorList
    from infinigram_hf import InfiniGramDrafter, InfiniGramLogitsProcessor, speculative_generate
    import infinigram_hf.hf.speculative as loop_module
    import types
    loop_module.time = types.SimpleNamespace(perf_counter=time.process_time)  # its stats in CPU seconds
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=32000, n_positions=1024, n_embd=32, n_layer=1, n_head=2,
                                       bos_token_id=0, eos_token_id=0, pad_token_id=0)).eval()
    files = held_out(batch, prefix + steps)
    rows = [f[:prefix - (i * 5) % (prefix // 2)] for i, f in enumerate(files)]
    width = max(len(r) for r in rows)
    ids = torch.zeros(batch, width, dtype=torch.long)
    mask = torch.zeros(batch, width, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r):] = torch.from_numpy(r)
        mask[b, width - len(r):] = 1
    procs = LogitsProcessorList([InfiniGramLogitsProcessor(ix, lambda_sparse=0.9, lambda_dense=0.9, eos_token_id=0)])
    res = {}
    for tree in (False, True):
        drafter = InfiniGramDrafter(ix, eos_token_id=0)
        out, st = speculative_generate(model, ids, attention_mask=mask, drafter=drafter, max_new_tokens=steps,
                                       do_sample=False, pad_token_id=0, logits_processor=procs, draft_tree=tree,
                                       suppress_tokens=[0], return_stats=True)  # (no EOS: rows run to the end)
        res[f"tree{int(tree)}"] = {
            "out": out.tolist(), "steps": st.steps, "row_steps": st.row_steps.tolist(),
            "generated": st.generated.tolist(), "drafted": st.drafted, "accepted": st.accepted,
            "drafter": drafter.stats, "draft_us": st.draft_seconds / max(1, int(st.row_steps.sum())) * 1e6}
    equal = {k: {m: v for m, v in r.items() if m != "draft_us"} for k, r in res.items()}
    Path(out_path).write_text(json.dumps({"equal": equal, "draft_us": {k: r["draft_us"] for k, r in res.items()}}))


def perplexity_child(pkg_root: str, batch: int, doc_len: int, out_path: str) -> None:
    import numpy as np
    ix = open_index(pkg_root)
    from infinigram_hf.hf import perplexity as ppl
    docs = [f[:doc_len] for f in held_out(batch, doc_len)]
    times, arrays = {}, {}
    for dist in (False, True):
        t0 = time.process_time()
        res = [ppl.infgram_features(ix, d, distributions=dist) for d in docs]  # as token_scores calls it
        times[f"dist{int(dist)}"] = time.process_time() - t0
        flat = [np.concatenate([r[k] for r in res]).tolist() for k in range(3)]
        flat += [np.concatenate([r[3][name] for r in res]).tolist() for name in sorted(res[0][3])]
        arrays[f"dist{int(dist)}"] = flat
    Path(out_path).write_text(json.dumps({"times": times, "tokens": sum(len(d) for d in docs), "arrays": arrays}))


def export_base(base: str, tmp: str) -> str:
    """The base commit's package with its own compiled core (built here: the C API version
    differs, so the working tree's core would be refused)."""
    base_root = Path(tmp) / "base"
    base_root.mkdir()
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", base, "infinigram_hf", "native", "setup.py",
                          "pyproject.toml"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base_root)], input=tar, check=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=base_root, check=True,
                   stdout=subprocess.DEVNULL)
    return str(base_root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("drafter", "perplexity", "loop"), required=True)
    ap.add_argument("--base", help="commit whose infinigram_hf/ is the baseline")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prefix", type=int, default=128)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--doc-len", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", nargs=2, metavar=("PKG_ROOT", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.mode == "drafter":
            drafter_child(args.child[0], args.batch, args.prefix, args.steps, args.child[1])
        elif args.mode == "loop":
            loop_child(args.child[0], args.batch, args.prefix, args.steps, args.child[1])
        else:
            perplexity_child(args.child[0], args.batch, args.doc_len, args.child[1])
        return
    metrics = {"drafter": ("draft", "book", "step", "first"), "perplexity": ("dist0", "dist1"),
               "loop": ("tree0", "tree1")}[args.mode]
    per: Dict[str, Dict[str, List[float]]] = {k: {m: [] for m in metrics} for k in ("base", "new")}
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"base": export_base(args.base, tmp), "new": str(ROOT)}
        for r in range(args.rounds):
            outs = {}
            for k in (["base", "new"] if r % 2 == 0 else ["new", "base"]):
                out = Path(tmp) / f"{k}{r}.json"
                subprocess.run([sys.executable, __file__, "--mode", args.mode, "--batch", str(args.batch),
                                "--prefix", str(args.prefix), "--steps", str(args.steps), "--doc-len",
                                str(args.doc_len), "--child", roots[k], str(out)], check=True)
                t = outs[k] = json.loads(out.read_text())
                if args.mode == "drafter":
                    step = [a + b for a, b in zip(t["draft"], t["book"])]
                    for m, v in (("draft", t["draft"]), ("book", t["book"]), ("step", step)):
                        per[k][m].append(statistics.median(v[1:]) / args.batch * 1e6)
                    per[k]["first"].append(step[0] / args.batch * 1e6)
                elif args.mode == "loop":
                    for m in metrics:
                        per[k][m].append(t["draft_us"][m])
                else:
                    for m in metrics:
                        per[k][m].append(t["times"][m] / t["tokens"] * 1e6)
            key = {"drafter": "drafts", "perplexity": "arrays", "loop": "equal"}[args.mode]
            assert outs["base"][key] == outs["new"][key], f"round {r}: base and new {key} differ"
            print(f"[round {r}] " + ", ".join(f"{k}: " + " ".join(f"{m} {per[k][m][-1]:.2f}" for m in metrics)
                                               for k in per), file=sys.stderr)
    med = {k: {m: statistics.median(v) for m, v in t.items()} for k, t in per.items()}
    load = os.getloadavg()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "mode": args.mode, "base": args.base,
            "batch": args.batch, "prefix": args.prefix, "steps": args.steps, "doc_len": args.doc_len,
            "rounds": args.rounds, "loadavg": load, "new_batched": outs["new"].get("batched")}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"row_steps_{args.mode}.json").write_text(json.dumps({"meta": meta, "median": med,
                                                                              "rounds": per}, indent=1))
    print(f"\n{meta['date']}, {args.mode}, batch {args.batch}, "
          + (f"{args.doc_len} tokens/doc" if args.mode == "perplexity" else f"prefix {args.prefix}, {args.steps} steps")
          + f", {args.rounds} rounds, base {args.base}, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
          "outputs equal\n")
    unit = "token" if args.mode == "perplexity" else "row per step"
    labels = {"draft": "drafts + width", "book": "feedback + append", "step": "the drafter's step",
              "first": "the drafter's step, first step", "dist0": "P_∞, sparse, effective n, context count",
              "dist1": "the same + distribution features (num_distinct, top P_∞)",
              "tree0": "speculative loop, chains: draft_seconds", "tree1": "speculative loop, trees: draft_seconds"}
    print(f"| µs CPU per {unit} | base | new | base/new |")
    print("|---|---:|---:|---:|")
    for m in metrics:
        print(f"| {labels[m]} | {med['base'][m]:.2f} | {med['new'][m]:.2f} | {med['base'][m] / med['new'][m]:.2f}x |")


if __name__ == "__main__":
    main()
