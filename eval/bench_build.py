#!/usr/bin/env python3
"""Index build, ours vs the official infini-gram 2.6.0 indexer, side by side in one run.

For each corpus (pre-tokenized u16 arrays from eval/corpora.py) both engines index the same
documents; we report wall time, peak RSS of the largest process and bytes per token on disk.

    .venv/bin/python eval/bench_build.py --corpora stdlib.reference linux200m --runs 3
    .venv/bin/python eval/bench_build.py --corpora linux200m --no-official --max-shard-tokens 100100000

`--max-shard-tokens` cuts the corpus into shards of that size; two of them fit the budget at
once, so each full shard is finished on a second thread while the next fills (a multi-shard
index: each query searches every shard). Results are kept under the corpus name plus
"@<shard size>" then. `--baseline DIR` also builds with another version of the package (a
source tree with its C core compiled in place, e.g. `git archive main | tar -x -C DIR` then
`python setup.py build_ext --inplace` there), alternating with ours run by run, and reports the
ratios of the medians. Wall and CPU seconds are both reported: on a machine shared with other
work the wall time of a two-thread build depends on their load, CPU time much less.

`linux200m` is the first documents of the linux corpus up to 200M tokens (made on first use).
Our build runs in a fresh subprocess each time (peak RSS = that process's ru_maxrss); tokens
are streamed from the .npy file in chunks, as a user's corpus iterator would, rather than
memory-mapped whole. The official build is measured by eval/official_engine.py.
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
from typing import Optional

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpora  # noqa: E402

RESULTS = HERE / "results" / "build.json"


def ensure_prefix_corpus(name: str) -> None:
    """linux200m -> the first linux documents holding at least 200M tokens."""
    if not name.startswith("linux") or name == "linux" or corpora.tokens_path(name).exists():
        return
    want = int(float(name[len("linux"):].rstrip("m")) * 1e6)
    tokens, offsets = corpora.load_tokens("linux")
    n_docs = int(np.searchsorted(offsets, want, side="left"))
    end = int(offsets[n_docs])
    np.save(corpora.tokens_path(name), np.asarray(tokens[:end]))
    np.save(corpora.offsets_path(name), np.asarray(offsets[: n_docs + 1]))


def iter_docs_streamed(name: str, chunk_tokens: int = 1 << 24):
    """Documents of a tokenized corpus, read sequentially in chunks (bounded memory).

    Chunks are read into one reused buffer (fresh memory per chunk would cost page faults and
    zeroing), and each document is yielded as its own copy, as a user's iterator would."""
    offsets = np.load(corpora.offsets_path(name)).astype(np.int64)
    with open(corpora.tokens_path(name), "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        _, _, dtype = read_header(f)
        dtype = np.dtype(dtype)
        longest = int(np.diff(offsets).max()) if len(offsets) > 1 else 0
        buf = np.empty(max(chunk_tokens, longest), dtype=dtype)
        lo = hi = 0  # buf[0:hi-lo] holds corpus tokens [lo, hi)
        for i in range(len(offsets) - 1):
            a, b = int(offsets[i]), int(offsets[i + 1])
            if b > hi:  # move the unread tail to the front and refill
                buf[:hi - a] = buf[a - lo:hi - lo]
                lo = a
                got = f.readinto(memoryview(buf[hi - a:]).cast("B")) // dtype.itemsize
                hi += got
            yield buf[a - lo:b - lo].copy()


def worker(name: str, out_dir: str, budget: str, max_shard_tokens: str = "0") -> None:
    """Runs in a fresh process: build, then print figures as JSON."""
    import resource

    from infinigram_hf import build_index

    t0 = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    ix = build_index(iter_docs_streamed(name), out_dir, vocab_size=corpora.VOCAB_SIZE,
                     memory_budget=budget, overwrite=True, progress=False,
                     max_shard_tokens=int(max_shard_tokens) or None)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)  # all threads: user + system CPU seconds
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    disk = ix.disk_bytes()
    core = sum(f.stat().st_size for f in Path(out_dir).rglob("*")
               if f.name in ("tokens.bin", "sa.bin"))
    print(json.dumps({
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "tokens": ix.num_tokens, "docs": ix.num_docs, "shards": ix.num_shards,
        "bytes_per_token_total": round(disk / ix.num_tokens, 4),
        "bytes_per_token_tokens_and_sa": round(core / ix.num_tokens, 4),
        "tokens_per_second": round(ix.num_tokens / wall),
    }))


def build_ours(name: str, out_dir: Path, budget: str, max_shard_tokens: int = 0,
               package_dir: Optional[Path] = None) -> dict:
    """One build in a fresh process; package_dir: import infinigram_hf from there instead."""
    cmd = [sys.executable, __file__, "--worker", name, str(out_dir), budget, str(max_shard_tokens)]
    env = dict(os.environ)
    if package_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(package_dir)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    res = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(res.stdout.strip().splitlines()[-1])


def build_official(name: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "official.json"
        subprocess.run([sys.executable, str(HERE / "official_engine.py"), "build", name, "--force",
                        "--no-smoke", "--results", str(out)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads(out.read_text())[name]["build"]


def summarize(runs: list) -> dict:
    """Medians of several builds' figures (the largest peak RSS), each run's kept too."""
    out = dict(runs[-1])
    for k in ("wall_seconds", "cpu_seconds"):
        out[f"{k}_runs"] = [r[k] for r in runs]
        out[k] = statistics.median(out[f"{k}_runs"])
    out["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in runs)
    out["peak_rss_bytes_per_token"] = round(out["peak_rss_bytes"] / out["tokens"], 3)
    out["tokens_per_second"] = round(out["tokens"] / out["wall_seconds"])
    out["loadavg_runs"] = [r["loadavg"] for r in runs]
    out.pop("loadavg")
    return out


def _git_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", nargs="+", default=["stdlib.reference", "linux200m"])
    ap.add_argument("--runs", type=int, default=3, help="builds of ours per corpus (median reported)")
    ap.add_argument("--budget", default="8GiB", help="our memory budget per shard")
    ap.add_argument("--no-official", action="store_true")
    ap.add_argument("--max-shard-tokens", type=int, default=0, help="shard size (0: as the budget allows)")
    ap.add_argument("--baseline", type=Path, help="source tree of another version to build with, alternating")
    ap.add_argument("--results", type=Path, default=RESULTS, help="JSON file the figures are merged into")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(*a.worker)
        return
    results = json.loads(a.results.read_text()) if a.results.exists() else {}
    for name in a.corpora:
        ensure_prefix_corpus(name)
        out_dir = corpora.cache_dir() / "ours-build" / name
        runs, base_runs = [], []
        for _ in range(a.runs):
            if a.baseline is not None:
                base_runs.append(dict(build_ours(name, out_dir, a.budget, a.max_shard_tokens, a.baseline),
                                      loadavg=os.getloadavg()))
            runs.append(dict(build_ours(name, out_dir, a.budget, a.max_shard_tokens), loadavg=os.getloadavg()))
        ours = summarize(runs)
        entry = {"date": time.strftime("%Y-%m-%d"), "time": time.strftime("%H:%M:%S"), "loadavg_before": os.getloadavg(),
                 "ours": ours, "git_commit": _git_head(),
                 "command": f".venv/bin/python eval/bench_build.py --corpora {name} --runs {a.runs} --budget {a.budget}"
                            + (f" --max-shard-tokens {a.max_shard_tokens}" if a.max_shard_tokens else "")
                            + (f" --baseline {a.baseline}" if a.baseline else "")
                            + (" --no-official" if a.no_official else "")}
        if base_runs:
            base = summarize(base_runs)
            entry["baseline"] = dict(base, package_dir=str(a.baseline))
            entry["speedup_over_baseline"] = {k: round(base[k] / ours[k], 2) for k in ("wall_seconds", "cpu_seconds")}
        if not a.no_official:
            off = build_official(name)
            entry["official"] = {k: off[k] for k in ("build_wall_seconds", "build_step_seconds", "build_cpu_seconds",
                                                    "peak_rss_largest_process_bytes", "bytes_per_token", "tokens")}
            entry["speedup"] = round(off["build_wall_seconds"] / ours["wall_seconds"], 2)
            # on a shared machine wall time depends on the other load; CPU time much less so
            off_cpu = sum(off.get("build_cpu_seconds", {}).values())
            if off_cpu:
                entry["cpu_ratio_official_over_ours"] = round(off_cpu / ours["cpu_seconds"], 2)
            entry["peak_rss_ratio_ours_over_official"] = round(
                ours["peak_rss_bytes"] / off["peak_rss_largest_process_bytes"], 2)
        entry["loadavg_after"] = os.getloadavg()
        results[name + (f"@{a.max_shard_tokens}" if a.max_shard_tokens else "")] = entry
        a.results.parent.mkdir(parents=True, exist_ok=True)
        a.results.write_text(json.dumps(results, indent=1) + "\n")
        print(json.dumps({name: entry}, indent=1), flush=True)


if __name__ == "__main__":
    main()
