#!/usr/bin/env python3
"""InfiniGramLogitsProcessor at GPU-sized batches (issue 19): CPU per row per step at batch 64 with
a 32k vocabulary on held-out prefixes, the package of a base commit against the working tree's.

    .venv-test/bin/python eval/bench_processor_batch.py --base a373dfe
    .venv-test/bin/python eval/bench_processor_batch.py --base a373dfe --batch 64 --steps 32 --rounds 5

Index: the stdlib reference split (7.2M tokens, BPE vocab 32k; eval/corpora.py), built into
<cache>/ours/stdlib.reference if missing. Rows: the first --prefix tokens of --batch held-out
files (stdlib.heldout), growing by the files' own next token at every step (as decoding does
when the model agrees with the text); scores: fixed normal noise of shape (batch, 32000).

Each round runs one engine in a child process (the base package is exported with git archive and
uses the working tree's compiled core: the C API did not change), engines alternating
(base, new, new, base, ...). Per step it takes the calling process's CPU time (all threads) of
  * the call: the whole processor call (log_softmax, the ∞-gram part, the mixing), torch held to
    one thread (on this shared 2-core machine torch's thread pool spins and its ops cost several
    ms each, whatever the processor does);
  * the ∞-gram part: the processor's _p_inf alone on the same rows, what stays on the host when
    the scores live on a GPU (the mixing then runs there).
A round's figure is the median over steps 2.. (step 1 finds every row from scratch, reported
apart); the table gives the median over rounds, per row. Every step's output of the two engines
is compared (max abs difference). Results: eval/results/processor_batch.json.
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


def child(pkg_root: str, batch: int, prefix: int, steps: int, out_path: str) -> None:
    sys.path.insert(0, pkg_root)
    sys.path.insert(0, str(HERE))
    import numpy as np
    import torch
    torch.set_num_threads(1)
    import corpora
    from infinigram_hf import InfiniGramIndex, InfiniGramLogitsProcessor
    from bench_dense_backoff import built
    assert Path(sys.modules["infinigram_hf"].__file__).is_relative_to(pkg_root), "wrong package imported"
    tokens, offsets = corpora.load_tokens("stdlib.reference")
    docs = (tokens[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1))
    ix = InfiniGramIndex.open(str(built(corpora.cache_dir() / "ours" / "stdlib.reference", docs, 32000)))
    held, hoffs = corpora.load_tokens("stdlib.heldout")
    files = [held[hoffs[i]:hoffs[i + 1]] for i in range(len(hoffs) - 1) if hoffs[i + 1] - hoffs[i] > prefix + steps]
    files = [files[i % len(files)][(i // len(files)) * 7:] for i in range(batch)]  # reuse files, shifted, if few
    scores = torch.randn(batch, 32000, generator=torch.Generator().manual_seed(0))
    proc = InfiniGramLogitsProcessor(ix, eos_token_id=0)
    probe = InfiniGramLogitsProcessor(ix, eos_token_id=0)  # the ∞-gram part, timed on its own
    call, inf, outs = [], [], []
    for s in range(steps):
        ids = torch.from_numpy(np.stack([f[:prefix + s] for f in files]).astype(np.int64))
        t0 = time.process_time()
        out = proc(ids, scores)
        call.append(time.process_time() - t0)
        t0 = time.process_time()
        probe._p_inf(ids.numpy(), 32000)
        inf.append(time.process_time() - t0)
        outs.append(out[:, :2000].clone())
    torch.save(torch.stack(outs), out_path + ".pt")
    Path(out_path).write_text(json.dumps({"call": call, "inf": inf}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="commit whose infinigram_hf/ is the baseline")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prefix", type=int, default=128)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", nargs=2, metavar=("PKG_ROOT", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.batch, args.prefix, args.steps, args.child[1])
        return
    import torch
    with tempfile.TemporaryDirectory() as tmp:
        base_root = Path(tmp) / "base"
        base_root.mkdir()
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", args.base, "infinigram_hf"], check=True,
                             capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base_root)], input=tar, check=True)
        for so in (ROOT / "infinigram_hf" / "_core").glob("_lib*.so"):
            (base_root / "infinigram_hf" / "_core" / so.name).write_bytes(so.read_bytes())
        roots = {"base": str(base_root), "new": str(ROOT)}
        per: Dict[str, Dict[str, List[float]]] = {k: {"call": [], "inf": [], "first_call": []} for k in roots}
        maxdiff = 0.0
        for r in range(args.rounds):
            outs = {}
            for k in (["base", "new"] if r % 2 == 0 else ["new", "base"]):
                out = Path(tmp) / f"{k}{r}.json"
                subprocess.run([sys.executable, __file__, "--batch", str(args.batch), "--prefix", str(args.prefix),
                                "--steps", str(args.steps), "--child", roots[k], str(out)], check=True)
                t = json.loads(out.read_text())
                per[k]["call"].append(statistics.median(t["call"][1:]) / args.batch * 1e6)
                per[k]["inf"].append(statistics.median(t["inf"][1:]) / args.batch * 1e6)
                per[k]["first_call"].append(t["call"][0] / args.batch * 1e6)
                outs[k] = torch.load(str(out) + ".pt")
            d = (outs["base"] - outs["new"]).abs().nan_to_num(0.0, 0.0, 0.0).max().item()
            assert torch.equal(torch.isneginf(outs["base"]), torch.isneginf(outs["new"])), "masks differ"
            maxdiff = max(maxdiff, d)
            print(f"[round {r}] " + ", ".join(f"{k}: call {per[k]['call'][-1]:.1f} µs/row, ∞-gram "
                                               f"{per[k]['inf'][-1]:.1f} µs/row" for k in roots), file=sys.stderr)
    med = {k: {m: statistics.median(v) for m, v in t.items()} for k, t in per.items()}
    load = os.getloadavg()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "base": args.base, "batch": args.batch,
            "prefix": args.prefix, "steps": args.steps, "rounds": args.rounds, "loadavg": load,
            "max_abs_diff": maxdiff}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "processor_batch.json").write_text(json.dumps({"meta": meta, "median": med, "rounds": per},
                                                                        indent=1))
    print(f"\n{meta['date']}, batch {args.batch}, prefix {args.prefix}, {args.steps} steps, {args.rounds} rounds, "
          f"base {args.base}, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
          f"max |base - new| {maxdiff:.2g}\n")
    print("| µs CPU per row per step | base | new | base/new |")
    print("|---|---:|---:|---:|")
    for m, label in (("inf", "∞-gram part (host side)"), ("call", "whole call (torch 1 thread)"),
                     ("first_call", "whole call, first step")):
        print(f"| {label} | {med['base'][m]:.1f} | {med['new'][m]:.1f} | {med['base'][m] / med['new'][m]:.2f}x |")


if __name__ == "__main__":
    main()
