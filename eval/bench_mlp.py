#!/usr/bin/env python3
"""Batched lookups before and after the interleaved searches (issue 19, memory-level parallelism):
the core of a base commit and the working tree's, side by side in one process, one thread.

    .venv-test/bin/python eval/bench_mlp.py --base a373dfe                 # linux200m (built on first use)
    .venv-test/bin/python eval/bench_mlp.py --base a373dfe --index stdlib  # the 7M-token stdlib index

Index: the first linux documents holding 200M tokens (`linux200m` of eval/bench_build.py, BPE
vocab 32k), one shard, built into <cache>/ours/linux200m if missing (≈3 min here). Queries come
from held-out text: the linux documents after those 200M tokens (seeded positions):

  count_batch 5-grams   ig_count_batch of 20,000 held-out 5-grams
  count single 5-grams  ig_count of 2,000 of them, one ctypes call each (the single path)
  prob batch, ∞-gram    ig_prob_batch (infinite) of 2,000 windows of 24 tokens and the next one
  ntd batch, ∞-gram     ig_ntd_batch_run (∞-gram) of the same 2,000 windows
  state extend batch    ig_state_extend_batch: the states of the 2,000 contexts by their next token
  state prob batch      ig_state_prob_batch: P(next token | state) of the same

Warm page cache: every workload runs once on both cores before timing. Cores take turns round by
round (base, new, new, base, ...); a workload's figure is its median round, per query, in CPU
time of the calling thread (the C work runs there) and in wall time. Every answer of the new
core is compared with the base core's. Results: eval/results/mlp.json and a table on stdout;
the machine's load average is printed with them (the machine is shared).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_c_api import Core, ptr  # noqa: E402
from bench_dense_backoff import base_sources, compile_core, shard_dirs  # noqa: E402

P, I64 = ctypes.c_void_p, ctypes.c_int64


def log(msg: str) -> None:
    print(f"[bench_mlp {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def count_batch(core: Core, ix: Any, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    out = np.zeros(len(offsets) - 1, np.uint64)
    core.ok(core.lib.ig_count_batch(ix, P(ptr(values)), I64(len(values)), P(ptr(offsets)), I64(len(out)),
                                    P(ptr(out)), ctypes.c_int(1), core.err, ctypes.c_size_t(1024)))
    return out


def count_single(core: Core, ix: Any, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    out, c = np.zeros(len(offsets) - 1, np.uint64), ctypes.c_uint64()
    f, base = core.lib.ig_count, ptr(values)
    for i in range(len(out)):
        core.ok(f(ix, P(base + 4 * int(offsets[i])), I64(int(offsets[i + 1] - offsets[i])), ctypes.byref(c),
                  core.err, ctypes.c_size_t(1024)))
        out[i] = c.value
    return out


def index_and_heldout(which: str) -> tuple[Path, np.ndarray]:
    import corpora
    if which == "stdlib":
        from bench_dense_backoff import built
        tokens, offsets = corpora.load_tokens("stdlib.reference")
        docs = (tokens[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1))
        path = built(corpora.cache_dir() / "ours" / "stdlib.reference.mlp", docs, 32000)
        return path, np.asarray(corpora.load_tokens("stdlib.heldout")[0])
    path = corpora.cache_dir() / "ours" / "linux200m"
    tokens, offsets = corpora.load_tokens("linux200m")
    if not (path / "meta.json").exists():
        from infinigram_hf.build.pipeline import build_index
        log(f"building {path} (once)")
        docs = (tokens[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1))
        build_index(docs, path, vocab_size=32000, memory_budget="8GiB", progress=False, overwrite=True).close()
    all_tokens = np.load(corpora.tokens_path("linux"), mmap_mode="r")
    return path, np.asarray(all_tokens[len(tokens):len(tokens) + 20_000_000])


def ragged(rows: List[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(rows) + 1, np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    return np.concatenate(rows).astype(np.uint32), offsets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="commit whose native/ is the baseline")
    ap.add_argument("--index", default="linux200m", choices=["linux200m", "stdlib"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--round-seconds", type=float, default=0.3)
    ap.add_argument("--only", nargs="*", help="workloads whose name starts with one of these")
    ap.add_argument("--index-dir", type=Path, help="a copy of the index to open instead (same queries)")
    ap.add_argument("--out", type=Path, help="results file (default eval/results/mlp_<index>.json)")
    args = ap.parse_args()

    index_dir, held = index_and_heldout(args.index)
    index_dir = args.index_dir or index_dir
    sep = 0  # <|endoftext|> (corpora.py): no query crosses a document
    rng = np.random.default_rng(19)

    def windows(n: int, k: int) -> List[np.ndarray]:
        out: List[np.ndarray] = []
        while len(out) < n:
            i = int(rng.integers(0, len(held) - k))
            w = held[i:i + k]
            if not (w == sep).any():
                out.append(np.asarray(w, np.uint32))
        return out

    grams = ragged(windows(20_000, 5))
    single = (grams[0], grams[1][:2_001])
    wins = windows(2_000, 25)
    ctx = ragged([w[:-1] for w in wins])
    full = ragged(wins)
    nxt = np.array([w[-1] for w in wins], np.uint32)

    with tempfile.TemporaryDirectory() as tmp:
        tmp_p = Path(tmp)
        log(f"compiling base {args.base} and the working tree")
        base = Core(compile_core(base_sources(args.base, tmp_p / "base"), tmp_p / "base.so"))
        new = Core(compile_core(ROOT / "native", tmp_p / "new.so"))
        cores = {"base": base, "new": new}
        key = (lambda c: "base" if c is base else "new")
        ixs = {k: c.open(shard_dirs(index_dir)) for k, c in cores.items()}
        states = {k: c.states(ixs[k], *ctx) for k, c in cores.items()}
        work: Dict[str, tuple[int, Callable[[Core, Any], Any]]] = {
            "count_batch 5-grams": (len(grams[1]) - 1, lambda c, ix: count_batch(c, ix, *grams)),
            "count single 5-grams": (len(single[1]) - 1, lambda c, ix: count_single(c, ix, *single)),
            "prob batch, ∞-gram": (len(nxt), lambda c, ix: c.prob_batch(ix, *ctx, nxt)),
            "ntd batch, ∞-gram": (len(nxt), lambda c, ix: c.ntd_run(ix, *ctx, 1)),
            "state extend batch": (len(nxt), lambda c, ix: c.extend_batch(ix, states[key(c)], *full)),
            "state prob batch": (len(nxt), lambda c, ix: c.state_prob_batch(ix, states[key(c)], nxt)),
        }
        results: Dict[str, Any] = {}
        for name, (n, fn) in work.items():
            if args.only and not any(name.startswith(o) for o in args.only):
                continue
            answers = {k: fn(c, ixs[k]) for k, c in cores.items()}  # warm the page cache, check equality
            a, b = answers["base"], answers["new"]
            a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
            assert all(np.array_equal(x, y) for x, y in zip(a, b)), f"{name}: answers differ"
            times: Dict[str, Dict[str, List[float]]] = {k: {"cpu": [], "wall": []} for k in cores}
            for r in range(args.rounds):
                order = ["base", "new"] if r % 2 == 0 else ["new", "base"]
                for k in order:
                    reps, c0, w0 = 0, time.thread_time(), time.perf_counter()
                    while True:
                        fn(cores[k], ixs[k])
                        reps += 1
                        if time.perf_counter() - w0 >= args.round_seconds:
                            break
                    times[k]["cpu"].append((time.thread_time() - c0) / reps / n * 1e6)
                    times[k]["wall"].append((time.perf_counter() - w0) / reps / n * 1e6)
            med = {k: {m: statistics.median(v) for m, v in t.items()} for k, t in times.items()}
            results[name] = {"queries": n, "us_per_query": med, "rounds": times,
                             "ratio_cpu": med["base"]["cpu"] / med["new"]["cpu"]}
            log(f"{name}: base {med['base']['cpu']:.3f} µs, new {med['new']['cpu']:.3f} µs CPU/query")
        for k, c in cores.items():
            c.lib.ig_close(ixs[k])
    load = os.getloadavg()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "base": args.base, "index": args.index,
            "index_dir": str(index_dir), "rounds": args.rounds, "loadavg": load}
    out = args.out or HERE / "results" / f"mlp_{args.index}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"\n{meta['date']}, index {args.index}, base {args.base}, {args.rounds} rounds, "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| workload | base µs/query (CPU) | new µs/query (CPU) | base wall | new wall | base/new (CPU) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        m = r["us_per_query"]
        print(f"| {name} | {m['base']['cpu']:.3f} | {m['new']['cpu']:.3f} | {m['base']['wall']:.3f} | "
              f"{m['new']['wall']:.3f} | {r['ratio_cpu']:.2f}x |")


if __name__ == "__main__":
    main()
