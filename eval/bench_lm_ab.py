"""Same-run A/B of the plain standalone LM: InfiniGramLM.score() under two builds of the package.

Each side is a directory holding a built `infinigram_hf` package (a worktree after
`setup.py build_ext --inplace`, or a copy of one). Round after round, a fresh subprocess per side
(A, B, A, B, ...) scores the same held-out texts with every method on the same index (a synthetic
3M-token corpus, Zipf-like ids over 5,000 types with copied passages, built once into the cache
dir), clearing the continuation-count cache before each timed pass. Figures are CPU seconds of
the process (time.process_time: less disturbed by other jobs on a shared machine than wall
time), median over passes and then over rounds; the B / A ratio of the medians says whether B is
slower (> 1).

    python eval/bench_lm_ab.py --a /tmp/base_tree --b . --rounds 6   # -> eval/results/lm_ab.json

--callgrind also counts the instructions inside ig_lm_score per method (one pass each, under
valgrind): a deterministic figure where the timings are noise.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("INFINIGRAM_EVAL_CACHE", Path.home() / ".cache" / "infinigram_hf_eval")) / "lm_ab"
METHODS = ("kn", "backoff", "infgram", "wb")


def make_corpus(out: Path) -> None:
    """The index and 80 held-out documents (numpy object array), once."""
    import numpy as np

    from infinigram_hf.build import build_index

    if (out / "held.npy").exists():
        return
    rng = np.random.default_rng(1)
    base = rng.zipf(1.3, size=3_000_000) % 5000
    docs, i = [], 0
    while i < len(base):
        n = int(rng.integers(50, 2000))
        d = base[i:i + n].copy()
        if len(docs) > 10 and rng.random() < 0.3:  # copy the start of an earlier document: long matches
            src = docs[int(rng.integers(0, len(docs)))]
            k = min(len(src), n // 2)
            d[:k] = src[:k]
        docs.append(d)
        i += n
    build_index(docs[:-80], out / "ix", vocab_size=5000, progress=False)
    np.save(out / "held.npy", np.array(docs[-80:], dtype=object), allow_pickle=True)


def one_side(out: Path, passes: int, methods) -> dict:
    """CPU seconds per pass of score() over 20 held-out texts of 400 tokens, median over passes."""
    import numpy as np

    from infinigram_hf import InfiniGramIndex
    from infinigram_hf.lm import InfiniGramLM

    docs = np.load(out / "held.npy", allow_pickle=True)
    texts = [docs[i][:400] for i in range(0, 60, 3)]
    lm = InfiniGramLM(InfiniGramIndex.open(out / "ix"), max_context=100)
    res = {}
    for method in methods:
        for t in texts:  # warm: smoothing estimated, pages mapped
            lm.score(t, method)
        times = []
        for _ in range(passes):
            lm.clear_cache()
            t0 = time.process_time()
            for t in texts:
                lm.score(t, method)
            times.append(time.process_time() - t0)
        res[method] = statistics.median(times)
    return res


def run_side(tree: str, passes: int, methods, callgrind: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    cmd = [sys.executable, __file__, "--side", "--passes", str(passes), "--methods", ",".join(methods)]
    if callgrind:
        res = {}
        for m in methods:
            log = CACHE / "callgrind.log"
            subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=ig_lm_score",
                            f"--callgrind-out-file={CACHE / 'callgrind.out'}", f"--log-file={log}",
                            *cmd[:-1], m], env=env, check=True, stdout=subprocess.DEVNULL)
            line = [x for x in log.read_text().splitlines() if "Collected" in x][-1]
            res[m] = int(line.split(":")[-1].strip())
        return res
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", help="directory holding the built package A (the baseline)")
    ap.add_argument("--b", help="directory holding the built package B")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--callgrind", action="store_true", help="instructions in ig_lm_score instead of CPU time")
    ap.add_argument("--out", default=str(HERE / "results" / "lm_ab.json"))
    ap.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--make", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    methods = args.methods.split(",")
    if args.make:
        make_corpus(CACHE)
        return
    if args.side:
        print(json.dumps(one_side(CACHE, args.passes, methods)))
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, __file__, "--make"], env={**os.environ, "PYTHONPATH": args.a}, check=True)
    rounds = 1 if args.callgrind else args.rounds
    runs = {"a": [], "b": []}
    for _ in range(rounds):
        for side in ("a", "b"):
            runs[side].append(run_side(getattr(args, side), args.passes, methods, args.callgrind))
            print(side, runs[side][-1], flush=True)
    summary = {m: {"a": statistics.median(r[m] for r in runs["a"]), "b": statistics.median(r[m] for r in runs["b"])}
               for m in methods}
    for m, s in summary.items():
        s["b/a"] = s["b"] / s["a"]
        unit = "instructions" if args.callgrind else "s CPU"
        print(f"{m:8s} A {s['a']:.6g} {unit}  B {s['b']:.6g}  B/A {s['b/a']:.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"a": args.a, "b": args.b, "callgrind": args.callgrind, "rounds": rounds,
                                          "passes": args.passes, "runs": runs, "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
