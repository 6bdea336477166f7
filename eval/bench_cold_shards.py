"""Cold multi-shard fan-out (issue 19): one shard vs four searched one after another vs four at
once (native/src/shard_pool.c), warm and cold, in one run.

    python eval/bench_cold_shards.py build [--tokens 60000000] [--corpus linux|stdlib] [--ntd-cache-min-cost 0]
    python eval/bench_cold_shards.py measure --queries 40 --rounds 3 --out eval/results/cold_shards/run1.json
    python eval/bench_cold_shards.py combine eval/results/cold_shards/run*.json   # medians over runs, markdown

Two indexes of the same tokens: one shard (`s1`) and four equal shards (`s4`, max_shard_tokens),
from eval/growth_corpus.py's documents (Linux first; queries from its held-out last documents)
or, with --corpus stdlib, the stdlib corpus (queries from its heldout split), in
$COLDSHARDS_DIR (default <eval cache>/coldshards). `s4` is opened
three times, one handle per `parallel_shards` setting: False (serial), True (the pool) and
"auto" (the default: the pool while steps are slow).

Warm: one untimed pass, then bench_queries.interleaved (each query once more untimed, then
`rounds` rounds taking turns); median over queries of the per-query median, CPU time of the whole
process (the pool's threads included) and wall clock. `pool_steps`: steps a handle ran on its
pool during the kind's measured part (for "4 auto" warm: how often the policy chose the pool). Cold: before every call the queried index's files are evicted
(bench_cold.py: our mappings MADV_DONTNEED, then POSIX_FADV_DONTNEED; mincore counts what is
left), the configurations take turns query by query (same disk, same load); wall-clock p50 / p99
and KiB read. Every configuration's answers are compared with the one-shard answers.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpora  # noqa: E402
from bench_cold import cold_call, evict, files_under, resident_pages, stats  # noqa: E402
from bench_queries import interleaved, make_workload, summarize  # noqa: E402

from infinigram_hf import InfiniGramIndex, build_index  # noqa: E402

CONFIGS = {"1 shard": ("s1", "auto"), "4 serial": ("s4", False), "4 parallel": ("s4", True), "4 auto": ("s4", "auto")}


def log(msg: str) -> None:
    print(f"[bench_cold_shards {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def base_dir() -> Path:
    return Path(os.environ.get("COLDSHARDS_DIR") or corpora.cache_dir() / "coldshards")


def held_out(corpus: str):
    """(tokens, offsets, documents for the index, held-out document ids for queries)."""
    if corpus == "linux":
        import growth_corpus
        tokens, offsets, n_docs = growth_corpus.linux_parts()
        return tokens, offsets, np.arange(n_docs, len(offsets) - 1)
    tokens, offsets = corpora.load_tokens("stdlib.heldout")
    return tokens, np.asarray(offsets, dtype=np.int64), np.arange(len(offsets) - 1)


def documents(corpus: str, limit: int):
    if corpus == "linux":
        import growth_corpus
        yield from growth_corpus.documents(limit)
        return
    tokens, offsets = corpora.load_tokens("stdlib.reference")
    for i in range(len(offsets) - 1):
        yield np.asarray(tokens[offsets[i]:offsets[i + 1]])


def build(a: argparse.Namespace) -> None:
    info = {"corpus": a.corpus, "ntd_cache_min_cost": a.ntd_cache_min_cost}
    for name, shards in (("s1", 1), ("s4", 4)):
        kw = {} if shards == 1 else {"max_shard_tokens": -(-a.tokens // 4) + 200_000 if a.corpus == "linux"
                                     else 2_000_000}
        if a.ntd_cache_min_cost is not None:
            kw["ntd_cache_min_cost"] = a.ntd_cache_min_cost
        t0 = time.perf_counter()
        ix = build_index(documents(a.corpus, a.tokens), base_dir() / name, vocab_size=corpora.VOCAB_SIZE,
                         progress=True, overwrite=True, **kw)
        info[name] = {"tokens": ix.num_tokens, "docs": ix.num_docs, "shards": ix.num_shards,
                      "disk_bytes": ix.disk_bytes(), "build_s": round(time.perf_counter() - t0, 1)}
        log(f"{name}: {info[name]}")
        ix.close()
    (base_dir() / "info.json").write_text(json.dumps(info, indent=1))


def workload(corpus: str, n: int, seed: int) -> Dict[str, Any]:
    tokens, offsets, held = held_out(corpus)
    w = make_workload(tokens, offsets, n, 0, seed, docs=held)
    w["short"] = [(q[:-1], q[-1]) for q in w["count"]]
    w["long"] = list(zip(w["prompts"], w["conts"]))
    return w


def kinds(ix: InfiniGramIndex, w: Dict[str, Any]) -> Dict[str, tuple]:
    """kind -> (queries, fn(query) -> a comparable answer)."""
    return {
        "count": (w["count"], ix.count),
        "prob": (w["short"], lambda pc: ix.ngram_prob(pc[0], pc[1])),
        "ntd": ([p for p, _ in w["short"]], lambda p: ix.ngram_ntd(p).as_dict()),
        "infgram_prob": (w["long"], lambda pc: ix.infgram_prob(pc[0], pc[1])),
        "infgram_ntd": (w["prompts"], lambda p: ix.infgram_ntd(p).as_dict()),
    }


def pool_steps(ix: InfiniGramIndex) -> int:
    """Steps this handle ran on its shard pool so far (native/src/shard_pool.c)."""
    from infinigram_hf._core.native import lib
    with ix.native_handle() as h:
        return int(lib.ig_shard_pool_steps(h))


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def measure(a: argparse.Namespace) -> Dict[str, Any]:
    info = json.loads((base_dir() / "info.json").read_text())
    w = workload(info["corpus"], a.queries, a.seed)
    handles = {cfg: InfiniGramIndex.open(base_dir() / d, parallel_shards=mode) for cfg, (d, mode) in CONFIGS.items()}
    paths = {d: files_under(base_dir() / d) for d in ("s1", "s4")}
    fns = {cfg: kinds(ix, w) for cfg, ix in handles.items()}
    out: Dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "index": info,
                           "load_start": load_average(), "warm": {}, "cold": {}, "same_answers": {}}
    for kind in fns["1 shard"]:
        qs = fns["1 shard"][kind][0]
        for q in qs:  # every page these queries touch is read now: what follows is warm
            for cfg in CONFIGS:
                fns[cfg][kind][1](q)
        before = {cfg: pool_steps(ix) for cfg, ix in handles.items()}
        t = interleaved(qs, {cfg: fns[cfg][kind][1] for cfg in CONFIGS}, a.rounds)
        out["warm"][kind] = {cfg: {"wall_median_us": summarize(t[cfg])["median_us"],
                                   "cpu_median_us": summarize(t[cfg + "_cpu"])["median_us"],
                                   "pool_steps": pool_steps(handles[cfg]) - before[cfg]} for cfg in CONFIGS}
        log(f"warm {kind}: " + ", ".join(f"{c} {v['cpu_median_us']} us ({v['pool_steps']})" for c, v in out["warm"][kind].items()))
    # Steady state: every page is cached now; does "auto" still choose the pool? (it should not)
    auto = handles["4 auto"]
    s0, f0 = pool_steps(auto), resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    for kind, (qs, fn) in fns["4 auto"].items():
        for _ in range(3):
            for q in qs:
                fn(q)
    out["steady_warm_auto"] = {"pool_steps": pool_steps(auto) - s0,
                               "major_faults": resource.getrusage(resource.RUSAGE_SELF).ru_majflt - f0}
    log(f"steady warm, 4 auto: {out['steady_warm_auto']}")
    for kind in fns["1 shard"]:
        qs = fns["1 shard"][kind][0][:a.cold_queries]
        rows: Dict[str, List[tuple]] = {cfg: [] for cfg in CONFIGS}
        before = {cfg: pool_steps(ix) for cfg, ix in handles.items()}
        same = True
        order = list(CONFIGS)
        for i, q in enumerate(qs):
            answers = {}
            for cfg in order[i % len(order):] + order[:i % len(order)]:  # (a different one goes first each time)
                fn = fns[cfg][kind][1]
                box: list = []
                rows[cfg].append(cold_call(lambda: box.append(fn(q)), paths[CONFIGS[cfg][0]]))
                answers[cfg] = box[0]
            same &= all(v == answers["1 shard"] for v in answers.values())
        out["cold"][kind] = {cfg: dict(stats(np.array(r)), pool_steps=pool_steps(handles[cfg]) - before[cfg])
                             for cfg, r in rows.items()}
        out["same_answers"][kind] = bool(same)
        log(f"cold {kind}: " + ", ".join(f"{c} p50 {v['p50_ms']} ms ({v['pool_steps']})" for c, v in out["cold"][kind].items())
            + f"; same answers: {same}")
    for d in paths.values():
        evict(d)
    out["resident_after_evict_pages"] = sum(resident_pages(p) for p in paths.values())
    out["load_end"] = load_average()
    for ix in handles.values():
        ix.close()
    return out


def combine(files: List[str]) -> str:
    runs = [json.loads(Path(f).read_text()) for f in files]
    cfgs = list(CONFIGS)
    lines = [f"runs: {len(runs)} ({', '.join(r['date'] + ' load ' + r['load_start'] + ' -> ' + r['load_end'] for r in runs)}); "
             f"same answers in every run: {all(all(r['same_answers'].values()) for r in runs)}; pages left after "
             f"eviction: {[r['resident_after_evict_pages'] for r in runs]}; \"4 auto\" pool steps / major faults in "
             f"3 more warm passes: {[(r['steady_warm_auto']['pool_steps'], r['steady_warm_auto']['major_faults']) for r in runs if 'steady_warm_auto' in r]}", "",
             "Cold, wall-clock ms p50 / p99 (KiB read at p50), median over runs:", "",
             "| query | " + " | ".join(cfgs) + " | 4 parallel / 4 serial (p50) | 4 parallel / 1 shard (p50) |",
             "|---|" + "---:|" * (len(cfgs) + 2)]
    med = lambda xs: float(np.median(xs))  # noqa: E731
    for kind in runs[0]["cold"]:
        cell = {c: (med([r["cold"][kind][c]["p50_ms"] for r in runs]), med([r["cold"][kind][c]["p99_ms"] for r in runs]),
                    med([r["cold"][kind][c]["read_kib_p50"] for r in runs])) for c in cfgs}
        lines.append(f"| {kind} | " + " | ".join(f"{cell[c][0]:.2f} / {cell[c][1]:.1f} ({cell[c][2]:.0f})" for c in cfgs)
                     + f" | {cell['4 parallel'][0] / cell['4 serial'][0]:.2f}x | {cell['4 parallel'][0] / cell['1 shard'][0]:.2f}x |")
    lines += ["", "Warm, CPU-time median µs per query (wall clock in brackets), median over runs:", "",
              "| query | " + " | ".join(cfgs) + " | 4 auto / 4 serial (CPU) |", "|---|" + "---:|" * (len(cfgs) + 1)]
    for kind in runs[0]["warm"]:
        cell = {c: (med([r["warm"][kind][c]["cpu_median_us"] for r in runs]),
                    med([r["warm"][kind][c]["wall_median_us"] for r in runs])) for c in cfgs}
        lines.append(f"| {kind} | " + " | ".join(f"{cell[c][0]:.2f} ({cell[c][1]:.2f})" for c in cfgs)
                     + f" | {cell['4 auto'][0] / cell['4 serial'][0]:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--tokens", type=int, default=60_000_000)
    b.add_argument("--corpus", choices=["linux", "stdlib"], default="linux")
    b.add_argument("--ntd-cache-min-cost", type=int, default=None,
                   help="build_index's (0: no ntdcache.bin; default: the package's)")
    m = sub.add_parser("measure")
    m.add_argument("--queries", type=int, default=100, help="warm queries per kind")
    m.add_argument("--cold-queries", type=int, default=40)
    m.add_argument("--rounds", type=int, default=3)
    m.add_argument("--seed", type=int, default=19)
    m.add_argument("--out", required=True)
    c = sub.add_parser("combine")
    c.add_argument("files", nargs="+")
    a = p.parse_args()
    if a.cmd == "build":
        build(a)
    elif a.cmd == "measure":
        res = measure(a)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1))
        log(f"wrote {a.out}")
    else:
        print(combine(a.files))


if __name__ == "__main__":
    main()
