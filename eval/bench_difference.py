#!/usr/bin/env python3
"""Cost of removing documents by index difference instead of re-indexing, on the stdlib corpus.

    .venv/bin/python eval/bench_difference.py

full = stdlib.reference + stdlib.validation (one index), removed = stdlib.validation, and the
reference index built alone is what a re-index would give. The difference (full minus removed)
must answer exactly as the reference index (checked on every query), and we time both on the
same workload: prompts of 100-500 tokens from held-out documents (count of the last 5 tokens,
infgram_prob of the next token, infgram_ntd) and dense scoring of held-out documents. Each query
runs --runs times (median); median / p90 / p99 over queries. Pinned to one CPU when possible.
Results: eval/results/difference_latency.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpora  # noqa: E402


def build(name: str, parts: List[str]) -> Path:
    out = corpora.cache_dir() / "ours-diff" / name
    if (out / "meta.json").exists():
        return out
    from infinigram_hf.build import build_index

    def docs():
        for part in parts:
            tokens, offsets = corpora.load_tokens(part)
            for i in range(len(offsets) - 1):
                yield np.asarray(tokens[offsets[i]:offsets[i + 1]], dtype=np.uint32)

    build_index(docs(), out, vocab_size=corpora.VOCAB_SIZE, progress=False).close()
    return out


def stats(ts: List[float]) -> Dict[str, float]:
    ms = np.asarray(ts) * 1e3
    return {"median_ms": round(float(np.median(ms)), 4), "p90_ms": round(float(np.percentile(ms, 90)), 4),
            "p99_ms": round(float(np.percentile(ms, 99)), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--score-docs", type=int, default=20)
    ap.add_argument("--out", default=str(HERE / "results" / "difference_latency.json"))
    args = ap.parse_args()
    if shutil.which("taskset") and not os.environ.get("_BENCH_PINNED"):
        os.environ["_BENCH_PINNED"] = "1"
        os.execvp("taskset", ["taskset", "-c", "0", sys.executable, __file__] + sys.argv[1:])
    from infinigram_hf import InfiniGramIndex

    full, removed, kept = (build("full", ["stdlib.reference", "stdlib.validation"]),
                           build("removed", ["stdlib.validation"]), build("kept", ["stdlib.reference"]))
    tokens, offsets = corpora.load_tokens("stdlib.heldout")
    rng = np.random.default_rng(0)
    lens = np.diff(offsets.astype(np.int64))
    docs = np.flatnonzero(lens > 520)
    prompts = []
    for _ in range(args.queries):
        d = int(rng.choice(docs))
        n = int(rng.integers(100, 501))
        a = int(offsets[d]) + int(rng.integers(0, lens[d] - n - 1))
        prompts.append((np.asarray(tokens[a:a + n], dtype=np.uint32), int(tokens[a + n])))
    score_docs = [np.asarray(tokens[offsets[d]:offsets[d + 1]], dtype=np.uint32)
                  for d in rng.choice(docs, size=args.score_docs, replace=False)]

    t0 = time.perf_counter()
    diff = InfiniGramIndex.open(full, subtract=[removed])
    open_ms = (time.perf_counter() - t0) * 1e3
    ref = InfiniGramIndex.open(kept)
    assert (diff.num_tokens, diff.num_docs) == (ref.num_tokens, ref.num_docs)

    def query(ix: Any, kind: str) -> Callable[[Any], Any]:
        return {"count": lambda p: ix.count(p[0][-5:]),
                "infgram_prob": lambda p: ix.infgram_prob(*p),
                "infgram_ntd": lambda p: ix.infgram_ntd(p[0])}[kind]

    def run(ix: Any, kind: str) -> List[float]:
        call, out = query(ix, kind), []
        for p in prompts:
            ts = []
            for _ in range(args.runs):
                t = time.perf_counter()
                call(p)
                ts.append(time.perf_counter() - t)
            out.append(float(np.median(ts)))
        return out

    seconds = {k: json.loads((p / "meta.json").read_text())["build"]["seconds"]
               for k, p in (("full", full), ("removed", removed), ("reindexed", kept))}
    result: Dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "build_seconds": seconds,
                              "full_tokens": diff.index.num_tokens,
                              "removed_tokens": diff.removed.num_tokens, "kept_tokens": ref.num_tokens,
                              "open_difference_ms": round(open_ms, 2), "queries": args.queries, "runs": args.runs}
    for kind in ("count", "infgram_prob", "infgram_ntd"):
        for p in prompts[:50]:  # exactness on the workload itself
            a, b = query(diff, kind)(p), query(ref, kind)(p)
            if kind == "infgram_ntd":
                a, b = (a.as_dict(), a.suffix_len), (b.as_dict(), b.suffix_len)
            assert a == b, (kind, a, b)
        result[kind] = {"difference": stats(run(diff, kind)), "reindexed": stats(run(ref, kind))}
    rates = {}
    for name, ix in (("difference", diff), ("reindexed", ref)):
        total, secs = 0, []
        for doc in score_docs:
            ts = []
            for _ in range(3):
                t = time.perf_counter()
                ix.score(doc)
                ts.append(time.perf_counter() - t)
            secs.append(min(ts))
            total += len(doc)
        rates[name] = round(total / sum(secs))
    a, b = diff.score(score_docs[0]), ref.score(score_docs[0])
    assert np.array_equal(a.probs, b.probs) and np.array_equal(a.suffix_len, b.suffix_len)
    result["score_tokens_per_s"] = rates
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
