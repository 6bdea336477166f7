#!/usr/bin/env python3
"""Latency of document search (search_docs: an n-gram or a CNF) on the stdlib corpus, ours and
the official infini-gram engine side by side in one run, on the same query workload.

    .venv/bin/python eval/bench_search.py                   # stdlib.reference, 200 queries/type
    .venv/bin/python eval/bench_search.py --no-peer --queries 50

Workload (seeded; n-grams drawn from the held-out split, so counts range from 0 to millions):
  ngram     one n-gram, n in {1, 2, 3, 5}                        (official: search_docs)
  and       two 2-grams of one held-out document, AND            (official: no "anywhere" mode)
  or_and    (a OR b) AND (c OR d), 2-grams of one document
  and_win   `and` with max_diff_tokens=100                       (official: search_docs_cnf, its default 100)
Each query runs --runs times; a query's latency is its median; we report the median / p90 /
p99 over queries. "core" is the search alone (maxnum=0: count + all matching ids), "10 docs"
also fetches 10 documents with their spans (our Documents are whole; the official engine's are
cut to max_disp_len=1000 tokens). Both run pinned to one CPU (taskset -c 0) when available.
Results: eval/results/search_latency.json; a summary on stdout for eval/RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpora  # noqa: E402

MAX_DIFF = 100


# --------------------------------------------------------------------------- workload


def make_workload(n: int, seed: int) -> Dict[str, List[Any]]:
    tokens, offsets = corpora.load_tokens("stdlib.heldout")
    rng = np.random.default_rng(seed)
    lens = np.diff(offsets.astype(np.int64))
    docs = np.flatnonzero(lens >= 40)

    def gram(d: int, k: int) -> List[int]:
        a = int(offsets[d]) + int(rng.integers(0, lens[d] - k))
        return [int(t) for t in tokens[a:a + k]]

    work: Dict[str, List[Any]] = {"ngram": [], "and": [], "or_and": []}
    for i in range(n):
        d = int(rng.choice(docs))
        work["ngram"].append([[gram(d, [1, 2, 3, 5][i % 4])]])
        work["and"].append([[gram(d, 2)], [gram(d, 2)]])
        work["or_and"].append([[gram(d, 2), gram(d, 2)], [gram(d, 2), gram(d, 2)]])
    work["and_win"] = work["and"]
    return work


def summarize(per_query_s: List[float]) -> Dict[str, float]:
    ms = np.asarray(per_query_s) * 1e3
    return {"median_ms": round(float(np.median(ms)), 4), "p90_ms": round(float(np.percentile(ms, 90)), 4),
            "p99_ms": round(float(np.percentile(ms, 99)), 4), "mean_ms": round(float(ms.mean()), 4)}


def timed(fn, runs: int) -> tuple:
    best = []
    out = None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        best.append(time.perf_counter() - t0)
    return out, float(np.median(best))


# --------------------------------------------------------------------------- ours


def our_index(name: str) -> Path:
    """Our index of the corpus, with the tokenizer saved and each file's path as metadata."""
    out = corpora.cache_dir() / "ours-search" / name
    if (out / "meta.json").exists():
        return out
    import datasets

    from infinigram_hf.build import build_index

    tokens, offsets = corpora.load_tokens(name)
    files = corpora.load_file_list(name)
    ds = datasets.Dataset.from_dict({
        "input_ids": [np.asarray(tokens[offsets[i]:offsets[i + 1]], dtype=np.int32) for i in range(len(offsets) - 1)],
        "path": [f["path"] for f in files]})
    build_index(ds, out, tokenizer=corpora.load_tokenizer(), metadata_columns=["path"], progress=False).close()
    return out


def bench_ours(index_path: Path, work: Dict[str, List[Any]], runs: int) -> Dict[str, Any]:
    from infinigram_hf import InfiniGramIndex

    res: Dict[str, Any] = {}
    with InfiniGramIndex.open(index_path) as index:
        for kind, queries in work.items():
            diff = MAX_DIFF if kind == "and_win" else None
            core, full, counts, approx = [], [], [], 0
            for q in queries:
                r, t = timed(lambda: index.search_docs(q, maxnum=0, max_diff_tokens=diff), runs)
                core.append(t)
                counts.append(r.count)
                approx += r.approximate
                _, t = timed(lambda: index.search_docs(q, maxnum=10, max_diff_tokens=diff), runs)
                full.append(t)
            res[kind] = {"core": summarize(core), "10 docs": summarize(full),
                         "approximate_fraction": approx / len(queries),
                         "median_matching_docs": float(np.median(counts)), "counts": counts}
    return res


# --------------------------------------------------------------------------- the official engine


def peer_worker(work_path: str, out_path: str, runs: int) -> None:
    """Runs inside the official engine's venv."""
    import official_engine

    engine = official_engine.load_engine(os.environ["BENCH_OFFICIAL_INDEX"])
    work = json.loads(Path(work_path).read_text())
    res: Dict[str, Any] = {}
    for kind, queries in work.items():
        if kind == "and":
            continue  # the official CNF search always requires co-occurrence within max_diff_tokens
        core, full, counts, approx = [], [], [], 0
        for q in queries:
            if kind == "ngram":
                r, t = timed(lambda: engine.count(q[0][0]), runs)
                core.append(t)
                _, t = timed(lambda: engine.search_docs(q[0][0], maxnum=10, max_disp_len=1000), runs)
            else:
                r, t = timed(lambda: engine.count_cnf(q, max_clause_freq=50000, max_diff_tokens=MAX_DIFF), runs)
                core.append(t)
                _, t = timed(lambda: engine.search_docs_cnf(q, maxnum=10, max_disp_len=1000, max_clause_freq=50000,
                                                            max_diff_tokens=MAX_DIFF), runs)
            full.append(t)
            if "error" in r:
                raise RuntimeError(f"official engine: {r['error']} on {q}")
            counts.append(int(r["count"]))
            approx += bool(r.get("approx"))
        res[kind] = {"core": summarize(core), "10 docs": summarize(full),
                     "approximate_fraction": approx / len(queries),
                     "median_count": float(np.median(counts)), "counts": counts}
    Path(out_path).write_text(json.dumps(res))


def bench_peer(name: str, work: Dict[str, List[Any]], runs: int, pin: List[str]) -> Dict[str, Any]:
    import official_engine

    py = official_engine.official_python()
    if not Path(py).exists():
        raise SystemExit(f"{py} missing: run `python3 eval/official_engine.py setup` and `build {name}`, or --no-peer")
    with tempfile.TemporaryDirectory() as tmp:
        wp, op = Path(tmp) / "work.json", Path(tmp) / "out.json"
        wp.write_text(json.dumps(work))
        env = dict(os.environ, BENCH_OFFICIAL_INDEX=str(official_engine.index_dir(name)))
        subprocess.run(pin + [py, __file__, "--peer-worker", str(wp), str(op), "--runs", str(runs)],
                       check=True, env=env)
        return json.loads(op.read_text())


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="stdlib.reference")
    ap.add_argument("--queries", type=int, default=200, help="queries per type")
    ap.add_argument("--runs", type=int, default=5, help="runs per query (median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-peer", action="store_true", help="skip the official engine")
    ap.add_argument("--no-pin", action="store_true", help="do not pin to one CPU")
    ap.add_argument("--peer-worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(HERE / "results" / "search_latency.json"))
    args = ap.parse_args()
    if args.peer_worker:
        peer_worker(*args.peer_worker, args.runs)
        return
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") and not args.no_pin else []
    if pin and not os.environ.get("_BENCH_PINNED"):
        os.environ["_BENCH_PINNED"] = "1"
        os.execvp("taskset", pin + [sys.executable, __file__] + sys.argv[1:])
    work = make_workload(args.queries, args.seed)
    path = our_index(args.corpus)
    ours = bench_ours(path, work, args.runs)
    peer = None if args.no_peer else bench_peer(args.corpus, work, args.runs, pin)
    result = {"date": time.strftime("%Y-%m-%d"), "corpus": args.corpus, "queries_per_type": args.queries,
              "runs": args.runs, "pinned": bool(pin), "max_diff_tokens_for_and_win": MAX_DIFF,
              "ours": ours, "official": peer}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{'query':8} {'engine':9} {'core med/p90/p99 ms':>24} {'10 docs med/p90/p99 ms':>26} {'approx':>7}")
    for kind in work:
        for eng, res in (("ours", ours), ("official", peer or {})):
            if kind not in res:
                continue
            r = res[kind]
            c, f = r["core"], r["10 docs"]
            print(f"{kind:8} {eng:9} {c['median_ms']:8.3f}/{c['p90_ms']:7.3f}/{c['p99_ms']:7.3f} "
                  f"{f['median_ms']:9.3f}/{f['p90_ms']:7.3f}/{f['p99_ms']:7.3f} {r['approximate_fraction']:7.2f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
