#!/usr/bin/env python3
"""docs/SCALE.md's numbers, derived from the measured ones (eval/results/*.json), printed as
markdown. Every input is a measurement named below; the assumptions are the arguments.

    .venv-test/bin/python eval/scale_model.py > /tmp/scale.md

Measured inputs:
  build_ours_latest.json  quiet 200M-token single-shard build: wall, CPU-seconds, peak RSS, bytes/token
  ray_build.json          the first session's same-run plain vs Ray builds (Ray's fixed costs)
  ray_build_stream.json   streamed Ray builds: CPU-seconds per token of each stage (shard tasks,
                          Ray Data's reading, Ray's idle processes) and the BPE tokenizer's CPU cost
  fanout.json             per-group query latency through the router, and the fan-out simulation
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

R = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard-tokens", type=float, default=2 ** 31, help="tokens per shard (SA stays 4 bytes < 2^32)")
    ap.add_argument("--node-ram-gib", type=float, default=512, help="RAM of a serving node")
    ap.add_argument("--page-cache-share", type=float, default=0.8, help="share of it for the index's pages")
    ap.add_argument("--node-cores", type=int, default=64, help="cores of a build node")
    ap.add_argument("--build-node-ram-gib", type=float, default=256)
    ap.add_argument("--tok-rate", type=float, default=None,
                    help="tokenization, tokens/s per core (default: measured, ray_build_stream.json)")
    ap.add_argument("--node-hour-usd", type=float, default=4.0, help="price of a node-hour (assumption)")
    a = ap.parse_args()

    quiet = json.loads((R / "build_ours_latest.json").read_text())["linux200m"]["ours"]
    bpt = quiet["bytes_per_token_total"]
    rate_wall = quiet["tokens"] / quiet["wall_seconds"]          # tokens/s per shard task (wall)
    cpu_per_tok = quiet["cpu_seconds"] / quiet["tokens"]          # core-seconds per token
    peak_per_tok = 8.0  # ig_writer_peak_bytes(n, 2) / n for n >= 2e8 (the C core's own budget formula)
    fan = json.loads((R / "fanout.json").read_text()) if (R / "fanout.json").exists() else None
    stream = json.loads((R / "ray_build_stream.json").read_text()) if (R / "ray_build_stream.json").exists() else None
    read_cpu_per_tok = 0.0
    tok_measured = False
    if stream:
        runs = [r for c in ("ray1", "ray2") for r in stream["results"][c]]
        read_cpu_per_tok = sorted(r["cpu_seconds"]["read_and_convert"] / r["tokens"] for r in runs)[len(runs) // 2]
        if a.tok_rate is None and stream.get("tokenize"):
            a.tok_rate = 1e9 / stream["tokenize"]["cpu_ns_per_token"]
            tok_measured = True
    if a.tok_rate is None:
        a.tok_rate = 1.0e6

    print(f"Inputs: {bpt:.2f} bytes/token on disk; shard build {rate_wall / 1e6:.2f}M tokens/s wall, "
          f"{cpu_per_tok * 1e9:.0f} core-ns/token; build peak {peak_per_tok:.1f} bytes/token; "
          f"tokenization {a.tok_rate / 1e6:.2f}M tokens/s/core ({'measured' if tok_measured else 'assumed'}); "
          f"moving token ids through Ray Data {read_cpu_per_tok * 1e9:.0f} core-ns/token (measured); "
          f"shard {a.shard_tokens / 1e9:.2f}B tokens\n")
    print("| | 1T tokens | 5T tokens |\n|---|---:|---:|")
    rows: dict = {}
    for T in (1e12, 5e12):
        shards = math.ceil(T / a.shard_tokens)
        disk = T * bpt
        shard_peak = a.shard_tokens * peak_per_tok
        tasks_per_node = max(1, min(a.node_cores // 2, int(a.build_node_ram_gib * 2 ** 30 * 0.8 // shard_peak)))
        build_core_s = T * cpu_per_tok
        tok_core_s = T / a.tok_rate + T * read_cpu_per_tok
        shard_wall = a.shard_tokens / rate_wall
        serve_nodes = math.ceil(disk / (a.node_ram_gib * 2 ** 30 * a.page_cache_share))
        r = rows.setdefault(T, {})
        r["shards of %.2fB tokens" % (a.shard_tokens / 1e9)] = f"{shards:,}"
        r["disk (tokens + SA + docs + ntdcache)"] = f"{disk / 1e12:.1f} TB"
        r["build peak per shard task"] = f"{shard_peak / 2 ** 30:.0f} GiB"
        r["one shard task (wall, linear from 200M)"] = f"{shard_wall / 60:.1f} min"
        r["reading + tokenization, core-hours"] = f"{tok_core_s / 3600:,.0f}"
        r["shard builds, core-hours"] = f"{build_core_s / 3600:,.0f}"
        for nodes in (16, 64):
            wall_h = (tok_core_s / (nodes * a.node_cores) + max(shards / (nodes * tasks_per_node), 1) * shard_wall) / 3600
            r[f"build wall on {nodes} nodes x {a.node_cores} cores"] = f"{wall_h:.1f} h (${wall_h * nodes * a.node_hour_usd:,.0f})"
        r[f"serving nodes, all in page cache ({a.node_ram_gib:.0f} GiB)"] = f"{serve_nodes}"
        r["serving cost per month"] = f"${serve_nodes * a.node_hour_usd * 730:,.0f}"
        if fan:
            sim = fan["simulated_fanout_ms"]["infgram_prob"]
            n_key = min(sim, key=lambda k: abs(math.log(int(k)) - math.log(max(serve_nodes, 1))))
            r["infgram_prob p50 / p99, fan-out to one group per serving node (sim: N)"] = \
                f"{sim[n_key]['p50']:.1f} / {sim[n_key]['p99']:.1f} ms (N={n_key})"
    keys = list(rows[1e12])
    for k in keys:
        print(f"| {k} | {rows[1e12][k]} | {rows[5e12][k]} |")
    if fan:
        print("\nFan-out simulation (ms; max of N draws from one group's routed latency):\n")
        print("| N groups | count p50 | p99 | infgram_prob p50 | p99 | p99.9 |\n|---:|---:|---:|---:|---:|---:|")
        c, p = fan["simulated_fanout_ms"]["count"], fan["simulated_fanout_ms"]["infgram_prob"]
        for n in c:
            print(f"| {n} | {c[n]['p50']:.2f} | {c[n]['p99']:.2f} | {p[n]['p50']:.2f} | {p[n]['p99']:.2f} | "
                  f"{p[n]['p99.9']:.2f} |")


if __name__ == "__main__":
    main()
