#!/usr/bin/env python3
"""Distributed build (infinigram_hf.distributed, Ray) vs the plain single-process build, one run.

The corpus is the first documents of the linux corpus (eval/corpora.py, pre-tokenized, u16) up
to --tokens tokens. The plain build streams them from the .npy file (as eval/bench_build.py
does); the Ray builds read the same documents from parquet files (written once, not timed) as a
user's pre-tokenized data set would be read, on a local Ray runtime with 1 or 2 CPUs (workers),
cut into --shards shards. Every configuration runs in a fresh process; orders alternate between
runs. Reported: wall time of the build (Ray's start-up apart), Ray's start-up, peak RSS of the
driver, of each shard task's worker process and of all Ray processes together, and the
per-shard build rate. All indexes must give the same counts for sampled n-grams.

    .venv-test/bin/python eval/bench_ray_build.py --tokens 200e6 --runs 1
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

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpora  # noqa: E402


def peak_rss() -> int:
    """This process's peak RSS: VmHWM (ru_maxrss would include the parent's peak: it survives exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0

RESULTS = HERE / "results" / "ray_build.json"
WORK = Path(os.environ.get("RAY_BENCH_DIR", "/tmp/ray-bench"))


def prefix(tokens_wanted: int) -> tuple[np.ndarray, np.ndarray]:
    tokens, offsets = corpora.load_tokens("linux")
    n_docs = int(np.searchsorted(offsets, tokens_wanted, side="left"))
    n_docs = min(n_docs, len(offsets) - 1)
    return tokens, offsets[: n_docs + 1].astype(np.int64)


def write_parquet(tokens_wanted: int, files: int) -> list[str]:
    """The prefix as `files` parquet files with an input_ids column (cached)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = WORK / f"linux-{tokens_wanted}"
    names = [str(d / f"part-{i:03d}.parquet") for i in range(files)]
    if all(Path(n).exists() for n in names):
        return names
    d.mkdir(parents=True, exist_ok=True)
    tokens, offsets = prefix(tokens_wanted)
    cuts = np.linspace(0, len(offsets) - 1, files + 1).round().astype(int)
    for name, a, b in zip(names, cuts[:-1], cuts[1:]):
        lo, hi = int(offsets[a]), int(offsets[b])
        values = pa.array(np.asarray(tokens[lo:hi]), type=pa.uint16())
        col = pa.ListArray.from_arrays(pa.array((offsets[a:b + 1] - lo).astype(np.int32)), values)
        pq.write_table(pa.table({"input_ids": col}), name + ".tmp")
        os.replace(name + ".tmp", name)
    return names


def descendants_rss() -> int:
    """Sum of VmRSS of this process's descendants (Ray's processes, for a local runtime)."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    total, todo = 0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def probe_counts(ix) -> list[int]:
    tokens, offsets = corpora.load_tokens("linux")
    rng = np.random.default_rng(0)
    out = []
    for _ in range(200):
        pos = int(rng.integers(0, ix.num_tokens - 10))
        out.append(ix.count([int(t) for t in tokens[pos:pos + int(rng.integers(1, 6))]]))
    return out


def run_plain(tokens_wanted: int, out: str) -> dict:
    from bench_build import iter_docs_streamed  # noqa: F401  (same streaming as the build bench)
    from infinigram_hf import build_index

    tokens, offsets = prefix(tokens_wanted)

    def docs():
        for a, b in zip(offsets[:-1], offsets[1:]):
            yield np.array(tokens[a:b])

    t0 = time.perf_counter()
    ix = build_index(docs(), out, vocab_size=corpora.VOCAB_SIZE, overwrite=True, progress=False)
    wall = time.perf_counter() - t0
    return {"wall_seconds": round(wall, 2), "tokens": ix.num_tokens, "shards": ix.num_shards,
            "driver_peak_rss_bytes": peak_rss(),
            "bytes_per_token": round(ix.disk_bytes() / ix.num_tokens, 4), "probe": probe_counts(ix)}


def run_ray(tokens_wanted: int, out: str, cpus: int, shards: int, files: list[str]) -> dict:
    import threading

    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, object_store_memory=512 << 20, _node_ip_address="127.0.0.2",
             log_to_driver=False)
    init = time.perf_counter() - t0
    from infinigram_hf.distributed import build_index

    peak = [descendants_rss()]
    idle_rss = peak[0]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.5):
            peak[0] = max(peak[0], descendants_rss())

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, offsets = prefix(tokens_wanted)
    longest = int(np.diff(offsets).max()) + 1
    shard_tokens = -(-int(offsets[-1] + len(offsets) - 1) // shards) + longest  # (the greedy cut: `shards` shards)
    t0 = time.perf_counter()
    ix = build_index([Path(f) for f in files], out, vocab_size=corpora.VOCAB_SIZE, shard_tokens=shard_tokens, overwrite=True,
                     progress=False)
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    stats = ix.meta["build"]["ray"]["shard_stats"]
    res = {"wall_seconds": round(wall, 2), "ray_init_seconds": round(init, 2), "tokens": ix.num_tokens,
           "shards": ix.num_shards, "driver_peak_rss_bytes": peak_rss(),
           "ray_processes_idle_rss_bytes": idle_rss, "ray_processes_peak_rss_bytes": peak[0],
           "shard_stats": stats,
           "shard_tokens_per_second": [round(s["num_tokens"] / st["seconds"]) for s, st in zip(ix.meta["shards"], stats)],
           "probe": probe_counts(ix)}
    t0 = time.perf_counter()
    ray.shutdown()
    res["ray_shutdown_seconds"] = round(time.perf_counter() - t0, 2)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=float, default=200e6)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--reverse", action="store_true", help="start with the last configuration")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    n = int(args.tokens)
    if args.worker:
        kind, out = args.worker[0], args.worker[1]
        if kind == "plain":
            res = run_plain(n, out)
        else:
            res = run_ray(n, out, int(kind[3:]), args.shards, write_parquet(n, args.files))
        print(json.dumps(res))
        return
    files = write_parquet(n, args.files)
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    configs = ["plain", "ray1", "ray2"]
    results: dict = {c: [] for c in configs}
    for run in range(args.runs):
        for c in (configs if (run + args.reverse) % 2 == 0 else configs[::-1]):
            out = str(WORK / f"ix-{c}")
            cmd = [sys.executable, __file__, "--tokens", str(n), "--shards", str(args.shards), "--files",
                   str(args.files), "--worker", c, out]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode:
                sys.exit(f"{c} failed:\n{proc.stderr[-3000:]}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            r["process_seconds"] = round(time.perf_counter() - t0, 2)
            results[c].append(r)
            print(c, {k: v for k, v in r.items() if k not in ("probe", "shard_stats")}, flush=True)
    probes = {c: results[c][0].pop("probe") for c in configs}
    for c in configs:
        for r in results[c][1:]:
            r.pop("probe", None)
    assert probes["ray1"] == probes["plain"] == probes["ray2"], "the indexes disagree"
    summary = {c: {"wall_median": statistics.median(r["wall_seconds"] for r in results[c])} for c in configs}
    out = {"date": time.strftime("%Y-%m-%d"), "tokens": n, "runs": args.runs, "load_avg_at_end": os.getloadavg(),
           "results": results, "summary": summary, "probes_equal": True}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1))
    print(json.dumps(summary), "probes equal")


if __name__ == "__main__":
    main()
