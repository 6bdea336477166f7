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

RESULTS = HERE / "results" / "ray_build_stream.json"  # (ray_build.json: the 2-shard runs of the first session)
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


def descendants_cpu() -> float:
    """CPU-seconds (user + system) of this process's descendants, the reaped children of each
    included (Ray's workers, raylet, GCS... for a local runtime)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            stats[int(p.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(p.name))
    total, todo = 0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        f = stats[pid]
        total += sum(int(x) for x in f[11:15])  # utime stime cutime cstime
    return total / tick


def self_cpu() -> float:
    r = os.times()
    return r.user + r.system


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
    c0 = self_cpu()
    ix = build_index(docs(), out, vocab_size=corpora.VOCAB_SIZE, overwrite=True, progress=False)
    wall = time.perf_counter() - t0
    return {"wall_seconds": round(wall, 2), "cpu_seconds": round(self_cpu() - c0, 2), "tokens": ix.num_tokens,
            "shards": ix.num_shards,
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

    # Ray's own processes burn CPU while idle (GCS, raylet, agents): their rate over 10 s
    cpu_idle0, t_idle0 = descendants_cpu(), time.perf_counter()
    time.sleep(10)
    idle_cpu_rate = (descendants_cpu() - cpu_idle0) / (time.perf_counter() - t_idle0)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, offsets = prefix(tokens_wanted)
    longest = int(np.diff(offsets).max()) + 1
    shard_tokens = -(-int(offsets[-1] + len(offsets) - 1) // shards) + longest  # (the greedy cut: `shards` shards)
    t0, c0, d0 = time.perf_counter(), descendants_cpu(), self_cpu()
    ix = build_index([Path(f) for f in files], out, vocab_size=corpora.VOCAB_SIZE, shard_tokens=shard_tokens, overwrite=True,
                     progress=False)
    wall = time.perf_counter() - t0
    ray_cpu, driver_cpu = descendants_cpu() - c0, self_cpu() - d0
    stop.set()
    th.join()
    info = ix.meta["build"]["ray"]
    stats = info["shard_stats"]
    shard_cpu = sum(st["cpu_seconds"] for st in stats)
    idle = idle_cpu_rate * wall
    res = {"wall_seconds": round(wall, 2), "ray_init_seconds": round(init, 2), "tokens": ix.num_tokens,
           "shards": ix.num_shards, "read_seconds": info["read_seconds"],
           "shards_begun_before_read_ended": sum(st["began"] - info["started"] < info["read_seconds"] for st in stats),
           "max_shards_at_once": max_overlap(stats),
           "cpu_seconds": {"driver": round(driver_cpu, 2), "ray_processes": round(ray_cpu, 2),
                           "shard_tasks": round(shard_cpu, 2), "ray_idle_rate": round(idle_cpu_rate, 3),
                           "ray_idle_over_build": round(idle, 2),
                           "read_and_convert": round(ray_cpu - shard_cpu - idle, 2)},
           "driver_peak_rss_bytes": peak_rss(),
           "ray_processes_idle_rss_bytes": idle_rss, "ray_processes_peak_rss_bytes": peak[0],
           "shard_stats": stats,
           "shard_tokens_per_second": [round(s["num_tokens"] / st["seconds"]) for s, st in zip(ix.meta["shards"], stats)],
           "probe": probe_counts(ix)}
    t0 = time.perf_counter()
    ray.shutdown()
    res["ray_shutdown_seconds"] = round(time.perf_counter() - t0, 2)
    return res


def max_overlap(stats: list[dict]) -> int:
    """Most shard tasks running at the same moment."""
    events = sorted([(st["began"], 1) for st in stats] + [(st["ended"], -1) for st in stats])
    best = cur = 0
    for _, step in events:
        cur += step
        best = max(best, cur)
    return best


def tokenize_rate(mb: float) -> dict:
    """CPU-seconds per token of the eval BPE tokenizer (HF tokenizers, batch encode, one
    process) on the first `mb` MB of the linux sources: the tokenizing stage's cost, which the
    pre-tokenized Ray bench does not pay."""
    tok = corpora.load_tokenizer()
    texts, size = [], 0
    for t in corpora.iter_texts("linux"):
        texts.append(t)
        size += len(t)
        if size >= mb * 1e6:
            break
    c0, t0 = self_cpu(), time.perf_counter()
    n = 0
    for i in range(0, len(texts), 256):
        n += sum(len(x) for x in tok(texts[i:i + 256])["input_ids"])
    cpu, wall = self_cpu() - c0, time.perf_counter() - t0
    return {"bytes": size, "tokens": n, "cpu_seconds": round(cpu, 2), "wall_seconds": round(wall, 2),
            "cpu_ns_per_token": round(cpu / n * 1e9, 1), "threads": os.environ.get("RAYON_NUM_THREADS", "default")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=float, default=200e6)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--shards", type=int, default=8, help="shards of the Ray builds (several per worker: "
                    "a shard task starts once its documents are tokenized, so tokenizing and building overlap)")
    ap.add_argument("--tokenize-mb", type=float, default=20, help="linux text for the tokenizer's rate (0: skip)")
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--reverse", action="store_true", help="start with the last configuration")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    n = int(args.tokens)
    if args.worker:
        kind, out = args.worker[0], args.worker[1]
        if kind == "plain":
            res = run_plain(n, out)
        elif kind == "tokenize":
            res = tokenize_rate(float(out))
        else:
            res = run_ray(n, out, int(kind[3:]), args.shards, write_parquet(n, args.files))
        print(json.dumps(res))
        return
    files = write_parquet(n, args.files)
    load_start = os.getloadavg()
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
            r["load_avg_after"] = os.getloadavg()
            print(c, {k: v for k, v in r.items() if k not in ("probe", "shard_stats")}, flush=True)
    probes = {c: results[c][0].pop("probe") for c in configs}
    for c in configs:
        for r in results[c][1:]:
            r.pop("probe", None)
    assert probes["ray1"] == probes["plain"] == probes["ray2"], "the indexes disagree"
    summary = {c: {"wall_median": statistics.median(r["wall_seconds"] for r in results[c])} for c in configs}
    tokenize = None
    if args.tokenize_mb > 0:
        proc = subprocess.run([sys.executable, __file__, "--worker", "tokenize", str(args.tokenize_mb)],
                              capture_output=True, text=True, env=env, check=True)
        tokenize = json.loads(proc.stdout.strip().splitlines()[-1])
        print("tokenize", tokenize, flush=True)
    out = {"date": time.strftime("%Y-%m-%d"), "tokens": n, "runs": args.runs, "shards": args.shards,
           "load_avg_at_start": load_start, "load_avg_at_end": os.getloadavg(), "results": results,
           "summary": summary, "tokenize": tokenize, "probes_equal": True}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(summary), "probes equal")


if __name__ == "__main__":
    main()
