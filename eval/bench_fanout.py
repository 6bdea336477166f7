#!/usr/bin/env python3
"""Fan-out query latency: one shard's latency distribution, the router's overhead, and a small
tail-at-scale simulation for N shard groups (docs/SCALE.md).

1. In-process latency of single queries on one index (count of a 1-5-gram cut from the corpus;
   ∞-gram probability after a 10-50-token context from the corpus), --queries of each.
2. The same queries through `ShardRouter` on a local Ray runtime (1 group, then one group per
   shard): what the actor round trips and the two-round ∞-gram protocol add.
3. Simulation: a request fanned out to N groups waits for the slowest, so its latency is the
   max of N draws from the measured per-group distribution (router round trip included).

    .venv-test/bin/python eval/bench_fanout.py /tmp/ray-bench/ix20m-3shards
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpora  # noqa: E402

RESULTS = HERE / "results" / "fanout.json"


def pct(xs: np.ndarray) -> dict:
    return {f"p{q}": round(float(np.percentile(xs, q)) * 1e3, 3) for q in (50, 90, 99, 99.9)} | {
        "mean": round(float(np.mean(xs)) * 1e3, 3)}


def workload(n: int, num_tokens: int, seed: int = 0) -> tuple[list, list]:
    tokens, _ = corpora.load_tokens("linux")
    rng = np.random.default_rng(seed)
    counts, probs = [], []
    for _ in range(n):
        p = int(rng.integers(0, num_tokens - 60))
        counts.append([int(t) for t in tokens[p:p + int(rng.integers(1, 6))]])
        k = int(rng.integers(10, 51))
        probs.append(([int(t) for t in tokens[p:p + k]], int(tokens[p + k])))
    return counts, probs


def timed(index, counts, probs) -> dict:
    out = {}
    lat = []
    for q in counts:
        t = time.perf_counter()
        index.count(q)
        lat.append(time.perf_counter() - t)
    out["count"] = np.array(lat)
    lat = []
    for ctx, tok in probs:
        t = time.perf_counter()
        index.infgram_prob(ctx, tok)
        lat.append(time.perf_counter() - t)
    out["infgram_prob"] = np.array(lat)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("index")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--sim", type=int, default=20000, help="simulated requests per N")
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from infinigram_hf import InfiniGramIndex

    index = InfiniGramIndex.open(args.index)
    counts, probs = workload(args.queries, index.num_tokens)
    timed(index, counts[:200], probs[:200])  # (warm the page cache)
    local = timed(index, counts, probs)
    res: dict = {"date": time.strftime("%Y-%m-%d"), "index": args.index, "num_tokens": index.num_tokens,
                 "shards": index.num_shards, "queries": args.queries,
                 "in_process_ms": {k: pct(v) for k, v in local.items()}}

    import ray

    from infinigram_hf.distributed import ShardRouter

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 << 20, _node_ip_address="127.0.0.2",
             log_to_driver=False)
    routed = {}
    for groups in sorted({1, index.num_shards}):
        with ShardRouter.start(args.index, groups=groups, num_cpus=0.1) as r:
            timed(r, counts[:100], probs[:100])
            routed[groups] = timed(r, counts, probs)
        res[f"router_{groups}_groups_ms"] = {k: pct(v) for k, v in routed[groups].items()}
    ray.shutdown()

    # Tail at scale: per-group latency = one group's routed latency (1 group: round trips included)
    rng = np.random.default_rng(1)
    sim = {}
    for kind, lat in routed[1].items():
        sim[kind] = {}
        for n in (1, 8, 64, 512, 4096):
            draws = rng.choice(lat, size=(args.sim, n)).max(axis=1) if n <= 512 else \
                np.array([rng.choice(lat, size=n).max() for _ in range(args.sim // 10)])
            sim[kind][n] = pct(draws)
    res["simulated_fanout_ms"] = sim
    res["load_avg_at_end"] = os.getloadavg()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "simulated_fanout_ms"}, indent=1))
    print(json.dumps(sim, indent=1))


if __name__ == "__main__":
    main()
