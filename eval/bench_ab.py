"""Same-run A/B of two trees of the package: build time and the Python-overhead query paths.

Each tree (a git commit, or the working tree) is copied to a scratch directory and its C core
compiled there with the same flags; then, round after round, a fresh subprocess per tree (A, B,
A, B, ...) builds the stdlib reference index and times, on the same workload:

  build       build_index of stdlib.reference (7.2M tokens), wall seconds
  count       index.count(ngram), one Python call per n-gram of 1-10 tokens
  infgram_prob  index.infgram_prob(prompt, token), prompts of 100-500 tokens
  infgram_ntd   index.infgram_ntd(prompt), same prompts
  count_batch / infgram_prob_batch / infgram_ntd_batch   the same queries in one call each
  score       index.score(doc) of held-out files (µs per token)
  cache_step  SuffixCache.ntd(context) as a decoding loop grows the context one token a step
  processor_step  InfiniGramLogitsProcessor on (1, context) ids and 32k scores, growing context
  draft_step  InfiniGramDrafter draft_row + append, one step per held-out token

Every figure is the median over rounds of a per-round median (µs per call, s for the build);
the ratio B / A of the medians says whether B is slower (> 1). The C sources may differ between
trees; the point of this script is the Python around them.

    python eval/bench_ab.py --a b0c4dd5 --b WORKTREE --rounds 5      # -> eval/results/ab_<a>_<b>.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent


# --------------------------------------------------------------------------- the trees


def export_tree(rev: str, dest: Path) -> str:
    """Copy a commit (or the working tree for 'WORKTREE') to dest and compile its C core there."""
    dest.mkdir(parents=True, exist_ok=True)
    if rev == "WORKTREE":
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.split()
        for f in files:
            if (ROOT / f).is_file():
                (dest / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, dest / f)
        label = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.strip() + "+worktree"
    else:
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        label = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.strip()
    subprocess.run([sys.executable, "infinigram_hf/_cffi_build.py"], cwd=dest, check=True, capture_output=True)
    return label


# --------------------------------------------------------------------------- the worker


def _median_us(fn: Callable[[], Any], calls: int, passes: int = 5) -> float:
    """Median over passes of the mean µs per call of a pass of `calls` calls."""
    out = []
    for _ in range(passes):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) / max(calls, 1) * 1e6)
    return statistics.median(out)


def worker(tree: Path, scratch: Path, seed: int, n: int) -> Dict[str, float]:
    sys.path.insert(0, str(tree))
    sys.path.insert(1, str(HERE))
    import numpy as np

    import corpora
    import infinigram_hf
    from infinigram_hf import InfiniGramDrafter, InfiniGramIndex, build_index

    assert Path(infinigram_hf.__file__).resolve().is_relative_to(tree.resolve()), infinigram_hf.__file__
    tokens, offsets = corpora.load_tokens("stdlib.reference")
    offsets = np.asarray(offsets, dtype=np.int64)
    out_dir = scratch / "index"
    shutil.rmtree(out_dir, ignore_errors=True)
    t0 = time.perf_counter()
    build_index((np.asarray(tokens[offsets[i]:offsets[i + 1]]) for i in range(len(offsets) - 1)), out_dir,
                vocab_size=corpora.VOCAB_SIZE, progress=False, memory_budget="6GiB").close()
    res = {"build_s": time.perf_counter() - t0}
    ix = InfiniGramIndex.open(out_dir)

    held, hoff = corpora.load_tokens("stdlib.heldout")
    hoff = np.asarray(hoff, dtype=np.int64)
    rng = np.random.default_rng(seed)
    docs = [np.asarray(held[hoff[i]:hoff[i + 1]], dtype=np.int64) for i in range(len(hoff) - 1)]
    long_docs = [d for d in docs if len(d) > 700]

    def piece(lo: int, hi: int) -> List[int]:
        d = long_docs[int(rng.integers(len(long_docs)))]
        L = int(rng.integers(lo, hi + 1))
        a = int(rng.integers(0, len(d) - L))
        return [int(t) for t in d[a:a + L]]

    grams = [piece(1, 10) for _ in range(n)]
    prompts = [piece(101, 501) for _ in range(n)]
    ctxs, conts = [p[:-1] for p in prompts], [p[-1] for p in prompts]

    res["count_us"] = _median_us(lambda: [ix.count(g) for g in grams], n)
    res["infgram_prob_us"] = _median_us(lambda: [ix.infgram_prob(c, t) for c, t in zip(ctxs, conts)], n)
    res["infgram_ntd_us"] = _median_us(lambda: [ix.infgram_ntd(c) for c in ctxs], n)
    res["count_batch_us"] = _median_us(lambda: ix.count_batch(grams, n_threads=1), n)
    res["infgram_prob_batch_us"] = _median_us(lambda: ix.infgram_prob_batch(ctxs, conts, n_threads=1), n)
    res["infgram_ntd_batch_us"] = _median_us(lambda: ix.infgram_ntd_batch(ctxs, n_threads=1), n)
    scored = long_docs[:20]
    res["score_us_per_token"] = _median_us(lambda: [ix.score(d) for d in scored], sum(map(len, scored)), 3)

    # decoding loops: a held-out document fed one token a step after a 64-token prompt
    doc = long_docs[0][:64 + 200]
    steps = len(doc) - 64

    def cache_loop() -> None:
        cache = ix.suffix_cache()
        for k in range(64, len(doc)):
            cache.ntd(doc[:k])
    res["cache_step_us"] = _median_us(cache_loop, steps, 3)

    import torch

    from infinigram_hf import InfiniGramLogitsProcessor
    torch.set_num_threads(1)
    scores = torch.randn(1, corpora.VOCAB_SIZE + 16)
    ids = torch.from_numpy(doc).reshape(1, -1)

    def processor_loop() -> None:
        proc = InfiniGramLogitsProcessor(ix)
        for k in range(64, len(doc)):
            proc(ids[:, :k], scores)
    res["processor_step_us"] = _median_us(processor_loop, steps, 3)

    def draft_loop() -> None:
        drafter = InfiniGramDrafter(ix)
        row = drafter.start(doc[:64])
        for k in range(64, len(doc)):
            drafter.draft_row(row)
            drafter.append(row, doc[k:k + 1])
    res["draft_step_us"] = _median_us(draft_loop, steps, 3)
    ix.close()
    return res


# --------------------------------------------------------------------------- the driver


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default="HEAD", help="baseline: a commit, or WORKTREE")
    ap.add_argument("--b", default="WORKTREE", help="candidate: a commit, or WORKTREE")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSON results (default eval/results/ab_<a>_<b>.json)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--scratch", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(Path(args.worker), Path(args.scratch), args.seed, args.queries)))
        return
    tmp = Path(tempfile.mkdtemp(prefix="infinigram-ab-"))
    try:
        labels = {k: export_tree(rev, tmp / k) for k, rev in (("a", args.a), ("b", args.b))}
        runs: Dict[str, List[Dict[str, float]]] = {"a": [], "b": []}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        for r in range(args.rounds):
            for k in ("a", "b") if r % 2 == 0 else ("b", "a"):
                cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tmp / k), "--scratch",
                       str(tmp / f"scratch_{k}"), "--seed", str(args.seed), "--queries", str(args.queries)]
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
                if proc.returncode:
                    sys.exit(f"worker {k} failed:\n{proc.stderr[-3000:]}")
                runs[k].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1} {k} ({labels[k]}): " + ", ".join(f"{m}={v:.3g}" for m, v in runs[k][-1].items()),
                      flush=True)
        summary = {}
        for m in runs["a"][0]:
            a = statistics.median(x[m] for x in runs["a"])
            b = statistics.median(x[m] for x in runs["b"])
            summary[m] = {"a": round(a, 3), "b": round(b, 3), "b_over_a": round(b / a, 3)}
        result = {"a": labels["a"], "b": labels["b"], "rounds": args.rounds, "queries": args.queries,
                  "date": time.strftime("%Y-%m-%d"), "load_avg": os.getloadavg(), "median": summary, "runs": runs}
        out = Path(args.out) if args.out else HERE / "results" / f"ab_{labels['a']}_{labels['b']}.json"
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"{'metric':24} {'A ' + labels['a']:>14} {'B ' + labels['b']:>22} {'B/A':>6}")
        for m, v in summary.items():
            print(f"{m:24} {v['a']:>14.3f} {v['b']:>22.3f} {v['b_over_a']:>6.3f}")
        print(f"-> {out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
