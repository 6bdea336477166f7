#!/usr/bin/env python3
"""Query latency from 10M to 1B tokens, every query type, warm and cold, one shard vs four (issue 19).

    .venv-test/bin/python eval/growth_corpus.py build        # the indexes (see that file)
    .venv-test/bin/python eval/bench_growth.py measure       # -> eval/results/query_growth_1b.json + plot
    .venv-test/bin/python eval/bench_growth.py plot          # the plot again from the json

Indexes (eval/growth_corpus.py): Linux prefixes of 10M, 50M and 200M tokens, and a 1B-token
corpus (real Linux + stdlib, then a vocabulary-permuted copy of Linux); 200M and 1B also as four
shards of equal size, the same tokens: the difference is the cost of fanning a query out over
shards inside one process. Queries come from the held-out last Linux documents (no index holds
them), the same workload at every size (seeded):

  count         1-10-gram                      prob       P(last token | the rest of a 1-10-gram)
  ntd           exact ntd after a 0-9-token prompt (the same n-grams less their last token)
  infgram_prob  100-500-token prompt, its true next token
  infgram_ntd   exact, the same prompts        search_docs  documents holding both halves of a
                                                            2-10-gram (a CNF of two clauses), maxnum=1
                                                            (the first 60 such queries only)
  dense_score   `score` of a 100-token sequence, time per token
  count_batch   one `count_batch` call of all count queries, time per query
  infgram_prob_batch  one `infgram_prob_batch` call of all prompts, time per prompt

Warm: every query runs once untimed, then --rounds timed passes; a query's latency is its median
over rounds (CPU time of the process, all threads, and wall clock; pinned to CPU 1 like
bench_queries.py): the shared machine's other jobs inflate wall time, not CPU time.
Cold: before every query each file of the index is evicted from the page cache (bench_cold.py's
evict: madvise(MADV_DONTNEED) on our mappings, then posix_fadvise(DONTNEED)); wall time, major
faults and bytes read per query. Only one index is open at a time.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import growth_corpus  # noqa: E402
from bench_cold import cold_call, evict, files_under, resident_pages, stats  # noqa: E402
from bench_queries import interleaved, make_workload, summarize  # noqa: E402

from infinigram_hf import InfiniGramIndex  # noqa: E402

RESULTS = HERE / "results" / "query_growth_1b.json"
PLOT = HERE / "plots" / "query_growth_1b.png"
KINDS = ("count", "prob", "ntd", "infgram_prob", "infgram_ntd", "search_docs", "dense_score", "count_batch",
         "infgram_prob_batch")
BATCH = {"count_batch", "infgram_prob_batch"}
DENSE_LEN = 100
SEARCH_QUERIES = 60  # search_docs: the first 60 only (p90 0.6 s warm on 1B: a clause with ~10^7
#                      occurrences is sampled down to max_clause_freq=50,000, each one checked)


def log(msg: str) -> None:
    print(f"[bench_growth {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def workload(n: int, seed: int) -> Dict[str, Any]:
    tokens, offsets, n_docs = growth_corpus.linux_parts()
    held = np.arange(n_docs, len(offsets) - 1)
    w = make_workload(tokens, offsets, n, 0, seed, docs=held)
    w["short"] = [(q[:-1], q[-1]) for q in w["count"]]
    w["long"] = list(zip(w["prompts"], w["conts"]))
    w["cnf"] = [[[q[:len(q) // 2]], [q[len(q) // 2:]]] for q in w["count"] if len(q) >= 2][:SEARCH_QUERIES]
    rng = np.random.default_rng(seed + 1)
    lens = np.diff(offsets)
    docs = rng.choice(held[lens[held] > DENSE_LEN + 1], size=max(1, n // 10), replace=False)
    w["dense"] = [[int(t) for t in tokens[offsets[d]:offsets[d] + DENSE_LEN]] for d in docs]
    return w


def single_kinds(ix: InfiniGramIndex, w: Dict[str, Any]) -> Dict[str, Tuple[list, Callable[[Any], Any]]]:
    """kind -> (queries, fn(query)) for the one-call-per-query kinds."""
    return {
        "count": (w["count"], ix.count),
        "prob": (w["short"], lambda pc: ix.ngram_prob(pc[0], pc[1])),
        "ntd": ([p for p, _ in w["short"]], ix.ngram_ntd),
        "infgram_prob": (w["long"], lambda pc: ix.infgram_prob(pc[0], pc[1])),
        "infgram_ntd": (w["prompts"], ix.infgram_ntd),
        "search_docs": (w["cnf"], lambda q: ix.search_docs(q, maxnum=1)),
        "dense_score": (w["dense"], ix.score),
    }


def batch_kinds(ix: InfiniGramIndex, w: Dict[str, Any]) -> Dict[str, Tuple[int, Callable[[], Any]]]:
    """kind -> (items, fn()) for the one-call-for-all kinds (n_threads=1: one CPU, like the rest)."""
    return {
        "count_batch": (len(w["count"]), lambda: ix.count_batch(w["count"], n_threads=1)),
        "infgram_prob_batch": (len(w["prompts"]),
                               lambda: ix.infgram_prob_batch(w["prompts"], w["conts"], n_threads=1)),
    }


def per_item(summary: Dict[str, float], k: int) -> Dict[str, float]:
    return {key: (round(v / k, 3) if key.endswith("_us") else v) for key, v in summary.items()}


def measure_warm(ix: InfiniGramIndex, w: Dict[str, Any], rounds: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for kind, (qs, fn) in single_kinds(ix, w).items():
        t = interleaved(qs, {"q": fn}, rounds)
        k = DENSE_LEN if kind == "dense_score" else 1  # dense: per token
        out[kind] = {"wall": per_item(summarize(t["q"]), k), "cpu": per_item(summarize(t["q_cpu"]), k)}
        log(f"  warm {kind}: cpu median {out[kind]['cpu']['median_us']} us")
    for kind, (n, fn) in batch_kinds(ix, w).items():
        fn()
        wall, cpu = [], []
        for _ in range(rounds):
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        out[kind] = {"wall": {"median_us": round(float(np.median(wall)) * 1e6 / n, 3)},
                     "cpu": {"median_us": round(float(np.median(cpu)) * 1e6 / n, 3)}, "items": n}
        log(f"  warm {kind}: cpu {out[kind]['cpu']['median_us']} us per item")
    return out


def measure_cold(ix: InfiniGramIndex, w: Dict[str, Any], paths: List[str], n: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for kind, (qs, fn) in single_kinds(ix, w).items():
        qs = qs[:n // 4] if kind in ("dense_score", "search_docs") else qs[:n]  # (the slow kinds)
        rows = np.array([cold_call(lambda: fn(q), paths) for q in qs])
        if kind == "dense_score":
            rows[:, 0] /= DENSE_LEN  # per token; faults and bytes stay per sequence
        out[kind] = stats(rows)
        log(f"  cold {kind}: p50 {out[kind]['p50_ms']} ms, {out[kind]['read_kib_p50']} KiB")
    for kind, (items, fn) in batch_kinds(ix, w).items():
        rows = np.array([cold_call(fn, paths) for _ in range(3)])
        out[kind] = {"per_item_ms": round(float(np.median(rows[:, 0])) * 1e3 / items, 4),
                     "call_ms": round(float(np.median(rows[:, 0])) * 1e3, 2),
                     "read_kib_per_item": round(float(np.median(rows[:, 2])) / 1024 / items, 1), "items": items}
        log(f"  cold {kind}: {out[kind]['per_item_ms']} ms per item")
    evict(paths)
    out["resident_after_evict_pages"] = resident_pages(paths)
    return out


def measure(a: argparse.Namespace) -> Dict[str, Any]:
    w = workload(a.queries, a.seed)
    builds = json.loads(growth_corpus.BUILD_RESULTS.read_text()) if growth_corpus.BUILD_RESULTS.exists() else {}
    res = json.loads(a.out.read_text()) if a.out.exists() and a.only else {"points": []}
    res.update(date=time.strftime("%Y-%m-%d %H:%M"), queries=a.queries, cold_queries=a.cold_queries,
               rounds=a.rounds, pinned_cpu=None if a.no_pin else 1,
               command=" ".join(["eval/bench_growth.py"] + sys.argv[1:]))
    for label in (a.only.split(",") if a.only else growth_corpus.INDEXES):
        d = growth_corpus.index_dir(label)
        if not (d / "meta.json").exists():
            log(f"{label}: not built, skipped")
            continue
        ix = InfiniGramIndex.open(d)
        log(f"{label}: {ix.num_tokens:,} tokens, {ix.num_shards} shard(s)")
        point: Dict[str, Any] = {"index": label, "tokens": ix.num_tokens, "shards": ix.num_shards,
                                 "disk_bytes": ix.disk_bytes(), "build": builds.get(label),
                                 "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
        # the answers, to check that one shard and several give the same (same tokens)
        point["counts"] = [int(c) for c in ix.count_batch(w["count"])]
        r = ix.infgram_prob_batch(w["prompts"], w["conts"])
        point["infgram_probs"] = [[int(x) for x in row] for row in zip(r.counts, r.prompt_counts, r.suffix_len)]
        point["warm"] = measure_warm(ix, w, a.rounds)
        point["cold"] = measure_cold(ix, w, files_under(d), a.cold_queries)
        point["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        res["points"] = [p for p in res["points"] if p["index"] != label] + [point]
        res["points"].sort(key=lambda p: (p["tokens"], p["shards"]))
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=1) + "\n")
        ix.close()
        gc.collect()
    return res


def median_of(values: List[Any]) -> Any:
    """Leaf by leaf: the median of numbers, dicts merged key by key, anything else from the first."""
    if all(isinstance(v, dict) for v in values):
        return {k: median_of([v[k] for v in values if k in v]) for k in values[0]}
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return values[0] if len(set(values)) == 1 else round(float(np.median(values)), 4)
    return values[0]


def combine(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Several runs of `measure` -> one result whose every figure is the median over runs
    (answers and the run's details from the first run; dates and loads of every run kept)."""
    out = {k: v for k, v in runs[0].items() if k != "points"}
    out["dates"] = [r["date"] for r in runs]
    labels = [p["index"] for p in runs[0]["points"]]
    out["points"] = []
    for label in labels:
        pts = [p for r in runs for p in r["points"] if p["index"] == label]
        point = median_of(pts)
        point["loadavg_per_run"] = [p["loadavg_start"] + p["loadavg_end"] for p in pts]
        out["points"].append(point)
    return out


# --------------------------------------------------------------------------- plot and table

LABELS = {"count": "count (1-10-gram)", "prob": "prob (n-gram)", "ntd": "ntd exact (0-9-token prompt)",
          "infgram_prob": "infgram_prob (100-500-token prompt)", "infgram_ntd": "infgram_ntd exact (same prompts)",
          "search_docs": "search_docs (AND of 2 clauses)", "dense_score": "dense score (per token)",
          "count_batch": "count_batch (per query)", "infgram_prob_batch": "infgram_prob_batch (per prompt)"}


def warm_us(p: Dict[str, Any], kind: str) -> float:
    return p["warm"][kind]["cpu"]["median_us"]


def cold_us(p: Dict[str, Any], kind: str) -> float:
    c = p["cold"][kind]
    return c["per_item_ms"] * 1e3 if kind in BATCH else c["p50_ms"] * 1e3


def plot(res: Dict[str, Any]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    one = [p for p in res["points"] if p["shards"] == 1]
    many = [p for p in res["points"] if p["shards"] > 1]
    if not one:
        return
    fig, axes = plt.subplots(3, 3, figsize=(13, 11.5), sharex=True)
    xs = np.array([p["tokens"] for p in one], dtype=float)
    ref_x = np.geomspace(xs.min(), xs.max(), 50)
    for ax, kind in zip(axes.flat, KINDS):
        for getter, color, name in ((warm_us, "C0", "warm (CPU time)"), (cold_us, "C3", "cold (wall clock, evicted)")):
            ys = np.array([getter(p, kind) for p in one])
            ax.plot(xs, ys, "o-", color=color, label=f"{name}, 1 shard")
            # c * log2(N), c fitted to the 1-shard points (least squares in log space)
            c = float(np.exp(np.mean(np.log(ys) - np.log(np.log2(xs)))))
            ax.plot(ref_x, c * np.log2(ref_x), ":", color=color, alpha=0.7, label=f"{name}: c·log N, fitted")
            if many:
                ax.plot([p["tokens"] for p in many], [getter(p, kind) for p in many], "D", mfc="none", ms=9,
                        color=color, label=f"{name}, {many[0]['shards']} shards (same tokens)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(LABELS[kind], fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylabel("µs (median over queries)", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("corpus tokens (up to 498M real; 1B: + a vocabulary-permuted copy)", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(f"∞-gram query latency, 10M to 1B tokens, warm and cold, 1 vs {many[0]['shards'] if many else '-'} "
                 f"shards (1 CPU; {', '.join(res.get('dates', [res.get('date', '')]))})", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    log(f"wrote {PLOT}")


def same_answers(res: Dict[str, Any]) -> Dict[str, bool]:
    """Per corpus size with several shard counts: whether every index gave the same answers."""
    out = {}
    for tokens in sorted({p["tokens"] for p in res["points"]}):
        ps = [p for p in res["points"] if p["tokens"] == tokens]
        if len(ps) > 1:
            out[f"{tokens:,} tokens, shards {[p['shards'] for p in ps]}"] = all(
                p["counts"] == ps[0]["counts"] and p["infgram_probs"] == ps[0]["infgram_probs"] for p in ps)
    return out


def cold_kib(p: Dict[str, Any], kind: str) -> float:
    c = p["cold"][kind]
    return c["read_kib_per_item"] if kind in BATCH else c["read_kib_p50"]


def growth_summary(res: Dict[str, Any]) -> str:
    """Per kind: latency ratios over the size range (against log N's) and of 4 shards over 1."""
    by = {(p["tokens"], p["shards"]): p for p in res["points"]}
    one = sorted(p["tokens"] for p in res["points"] if p["shards"] == 1)
    lo, lo_cold, hi = one[0], one[1], one[-1]  # cold from the 2nd size: see RESULTS.md (small files)
    many = max(p["shards"] for p in res["points"])
    logr = lambda a, b: np.log2(b) / np.log2(a)  # noqa: E731
    lines = [f"| query | warm {hi / lo:,.0f}x tokens (log N: {logr(lo, hi):.2f}x) | cold {hi / lo_cold:,.0f}x tokens "
             f"(log N: {logr(lo_cold, hi):.2f}x) | KiB read cold, {lo_cold / 1e6:,.0f}M → {hi / 1e6:,.0f}M | "
             f"warm {many} shards / 1 at {hi / 1e6:,.0f}M | cold {many} / 1 | KiB read cold, 1 → {many} shards |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for kind in KINDS:
        w1, wm = warm_us(by[(hi, 1)], kind), warm_us(by[(hi, many)], kind)
        c1, cm = cold_us(by[(hi, 1)], kind), cold_us(by[(hi, many)], kind)
        lines.append(f"| {kind} | {w1 / warm_us(by[(lo, 1)], kind):.2f}x | {c1 / cold_us(by[(lo_cold, 1)], kind):.2f}x | "
                     f"{cold_kib(by[(lo_cold, 1)], kind):,.0f} → {cold_kib(by[(hi, 1)], kind):,.0f} | "
                     f"{wm / w1:.2f}x (+{wm - w1:,.1f} µs) | {cm / c1:.2f}x (+{(cm - c1) / 1e3:,.1f} ms) | "
                     f"{cold_kib(by[(hi, 1)], kind):,.0f} → {cold_kib(by[(hi, many)], kind):,.0f} |")
    return "\n".join(lines)


def markdown(res: Dict[str, Any]) -> str:
    pts = res["points"]
    head = "| query | " + " | ".join(f"{p['tokens'] / 1e6:,.0f}M ×{p['shards']}" for p in pts) + " |"
    lines = ["Warm, CPU-time median µs per query (wall-clock median in brackets):", "", head,
             "|---|" + "---:|" * len(pts)]
    for kind in KINDS:
        lines.append(f"| {kind} | " + " | ".join(f"{warm_us(p, kind):,.2f} ({p['warm'][kind]['wall']['median_us']:,.1f})"
                                                 for p in pts) + " |")
    lines += ["", "Cold (index evicted before every query), wall-clock ms p50 / p99, and KiB read at p50 "
              "(batch kinds: ms per item of one cold call):", "", head, "|---|" + "---:|" * len(pts)]
    for kind in KINDS:
        cells = []
        for p in pts:
            c = p["cold"][kind]
            cells.append(f"{c['per_item_ms']:.3f} ({c['read_kib_per_item']} KiB)" if kind in BATCH
                         else f"{c['p50_ms']:.2f} / {c['p99_ms']:.1f} ({c['read_kib_p50']:.0f} KiB)")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += ["", growth_summary(res)]
    lines += ["", f"Counts and ∞-gram answers (count, prompt count, suffix length) identical across shard counts: {same_answers(res)}"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["measure", "combine", "plot"])
    ap.add_argument("--out", type=Path, default=RESULTS, help="measure: where the run's json goes")
    ap.add_argument("--runs", nargs="*", type=Path, default=[], help="combine: the runs' json files")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--cold-queries", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma list of index labels (others kept from the json)")
    ap.add_argument("--no-pin", action="store_true")
    a = ap.parse_args()
    if a.mode == "measure" and not a.no_pin and shutil.which("taskset") and not os.environ.get("_BENCH_PINNED"):
        os.environ["_BENCH_PINNED"] = "1"
        os.execvp("taskset", ["taskset", "-c", "1", sys.executable, __file__] + sys.argv[1:])
    if a.mode == "measure":
        res = measure(a)
    elif a.mode == "combine":
        res = combine([json.loads(p.read_text()) for p in a.runs])
        res["runs"] = [str(p.resolve().relative_to(HERE.parent)) for p in a.runs]
        RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    else:
        res = json.loads(RESULTS.read_text())
    plot(res)
    print(markdown(res))


if __name__ == "__main__":
    main()
