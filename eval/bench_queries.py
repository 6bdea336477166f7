#!/usr/bin/env python3
"""Query latency and throughput: ours and the official infini-gram engine side by side, and our
latency as the corpus grows.

    .venv/bin/python eval/bench_queries.py side-by-side          # stdlib.reference vs official, pinned to CPU 1
    .venv/bin/python eval/bench_queries.py growth                # linux prefixes 10M/30M/100M/300M (ours)
    .venv/bin/python eval/bench_queries.py side-by-side --no-peer --queries 100   # quick, ours only

Both engines run in ONE process (the official package is imported from its venv,
`eval/official_engine.py setup`), pinned to one CPU (taskset -c 1), and take turns round by
round (ours, official, official, ours, ...; a round is one pass over the workload): the machine
is shared, so background load hits both engines alike. A query's latency is its median over
rounds; we report the median / p90 / p99 over queries, and ratios official / ours, both in wall
clock and in CPU time of the process (all threads; leaves out time the CPU gave other jobs).

Workload (seeded, drawn from the held-out split, so it is never in the index verbatim):
  count        one Python call per n-gram, n uniform in 1..10
  count batch  all count queries in one `count_batch` call (ours) vs one call per query (official)
  infgram_prob prompts of 100..500 tokens (one held-out document), continuation = the true next token
  infgram_ntd  the same prompts, exact (official: max_support = corpus size; also max_support=1000,
               which the official engine answers approximately above 1000 occurrences)
  ntd 1-token  a single held-out token as the prompt, exact
  dense score  every token of the held-out documents: ours `score` per document; the official
               engine token by token with `infgram_prob` (on a prefix, it is slow)
Every answer of ours is checked against the official engine's (ids: our end-of-document
separator is the official eos id 0); mismatches are counted and reported.

Results: eval/results/query_latency.json, eval/results/query_growth.json,
eval/plots/query_growth.png; a markdown summary on stdout for eval/RESULTS.md.
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
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
import corpora  # noqa: E402

from infinigram_hf import InfiniGramIndex  # noqa: E402
from infinigram_hf import build_index  # noqa: E402

RESULTS = HERE / "results"
PLOTS = HERE / "plots"
EOS = corpora.EOS_TOKEN_ID


# --------------------------------------------------------------------------- helpers


def log(msg: str) -> None:
    print(f"[bench_queries {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def summarize(seconds: Sequence[float]) -> Dict[str, float]:
    us = np.asarray(seconds, dtype=np.float64) * 1e6
    if not len(us):
        return {}
    return {"median_us": round(float(np.median(us)), 2), "p90_us": round(float(np.percentile(us, 90)), 2),
            "p99_us": round(float(np.percentile(us, 99)), 2), "max_us": round(float(us.max()), 2),
            "mean_us": round(float(us.mean()), 2), "n": int(len(us))}


def clock(fn: Callable[[], Any]) -> tuple[Any, float]:
    """(result, seconds) of one call."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def loop_rates(n: int, fns: Dict[str, Callable[[], Any]], rounds: int) -> Dict[str, Dict[str, int]]:
    """`rate` of several loops, taking turns round by round (the same background load)."""
    wall: Dict[str, List[float]] = {k: [] for k in fns}
    cpu: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            c0 = time.process_time()
            wall[k].append(clock(fn)[1])
            cpu[k].append(time.process_time() - c0)
    return {k: {"per_s": round(n / float(np.median(wall[k]))), "best_per_s": round(n / float(np.min(wall[k]))),
                "per_cpu_s": round(n / float(np.median(cpu[k])))} for k in fns}


def rate(n: int, fn: Callable[[], Any], rounds: int) -> Dict[str, int]:
    """Items per wall-clock second and per CPU-second of the process (medians over rounds)."""
    wall, cpu = [], []
    for _ in range(rounds):
        c0 = time.process_time()
        wall.append(clock(fn)[1])
        cpu.append(time.process_time() - c0)
    return {"per_s": round(n / float(np.median(wall))), "per_cpu_s": round(n / float(np.median(cpu)))}


def interleaved(queries: Sequence[Any], engines: Dict[str, Callable[[Any], Any]], rounds: int,
                rounds_of: Optional[Dict[str, int]] = None, warm: bool = True) -> Dict[str, List[float]]:
    """Per query, the median over rounds of each engine's single-call time. Engines take turns
    round by round (ours, official, official, ours, ...), each round a pass over all queries:
    both see the same background load over the run, and neither runs right after the other's
    call (per-query alternation measured each engine partly on caches the other had just
    evicted). Each query is run once untimed first. `rounds_of` lowers the rounds of a slow
    engine (its calls last long enough to time once)."""
    rounds_of = {name: min(rounds, (rounds_of or {}).get(name, rounds)) for name in engines}
    times = {name: np.zeros((rounds_of[name], len(queries))) for name in engines}
    cpu = {name: np.zeros((rounds_of[name], len(queries))) for name in engines}
    for q in queries if warm else ():  # warm the pages each query touches
        for fn in engines.values():
            fn(q)
    names = list(engines)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            if r >= rounds_of[name]:
                continue
            fn = engines[name]
            for i, q in enumerate(queries):
                c0, t0 = time.process_time(), time.perf_counter()
                fn(q)
                times[name][r, i] = time.perf_counter() - t0
                cpu[name][r, i] = time.process_time() - c0
    out = {name: np.median(t, axis=0).tolist() for name, t in times.items()}
    out.update({name + "_best": np.min(t, axis=0).tolist() for name, t in times.items()})
    out.update({name + "_cpu": np.median(t, axis=0).tolist() for name, t in cpu.items()})
    return out


def load_official(name: str) -> Any:
    """The official engine, imported from its venv into this process."""
    import official_engine
    site = Path(official_engine.official_venv()) / "lib"
    cands = sorted(site.glob("python3*/site-packages"))
    if not cands:
        raise SystemExit("official engine venv missing: run `python3 eval/official_engine.py setup` (or --no-peer)")
    sys.path.append(str(cands[0]))  # appended: our numpy etc. stay first
    if not (official_engine.index_dir(name) / "table.0").exists():
        raise SystemExit(f"no official index for {name}: run `python3 eval/official_engine.py build {name}` (or --no-peer)")
    return official_engine.load_engine(name)


def our_index(name: str, tokens_name: Optional[str] = None, limit: Optional[int] = None) -> InfiniGramIndex:
    """Our index of a tokenized corpus under <cache>/ours/<name> (built once; `limit` keeps the
    first documents up to that many tokens)."""
    out = corpora.cache_dir() / "ours" / name
    if (out / "meta.json").exists():
        return InfiniGramIndex.open(out)
    tokens, offsets = corpora.load_tokens(tokens_name or name)
    offsets = np.asarray(offsets, dtype=np.int64)
    n_docs = len(offsets) - 1
    if limit is not None:
        n_docs = int(np.searchsorted(offsets, limit, side="right") - 1)
    log(f"building our index {out} ({n_docs} documents, {int(offsets[n_docs]):,} tokens)")
    t0 = time.time()
    ix = build_index((np.asarray(tokens[offsets[i]:offsets[i + 1]]) for i in range(n_docs)), out,
                     vocab_size=corpora.VOCAB_SIZE, progress=False, memory_budget="6GiB")
    log(f"built in {time.time() - t0:.1f}s")
    return ix


# --------------------------------------------------------------------------- workload


def make_workload(tokens: np.ndarray, offsets: np.ndarray, n: int, n1: int, seed: int,
                  docs: Optional[np.ndarray] = None) -> Dict[str, Any]:
    rng = np.random.default_rng(seed)
    offsets = np.asarray(offsets, dtype=np.int64)
    lens = np.diff(offsets)
    docs = np.arange(len(lens)) if docs is None else docs

    def piece(min_len: int, max_len: int) -> List[int]:
        L = int(rng.integers(min_len, max_len + 1))
        ok = docs[lens[docs] >= L + 1]
        d = int(rng.choice(ok, p=lens[ok] / lens[ok].sum()))
        a = int(offsets[d]) + int(rng.integers(0, lens[d] - L))
        return [int(t) for t in tokens[a:a + L + 1]]

    count = [piece(1, 10)[:-1] for _ in range(n)]
    prompts = [piece(100, 500) for _ in range(n)]
    one = [piece(1, 1)[:1] for _ in range(n1)]
    return {"count": count, "prompts": [p[:-1] for p in prompts], "conts": [p[-1] for p in prompts], "one": one}


def official_ntd_dict(r: Dict[str, Any]) -> Dict[int, int]:
    return {int(t): int(v["cont_cnt"]) for t, v in r["result_by_token_id"].items()}


def ours_ntd_dict(d: Any, sep: int) -> Dict[int, int]:
    return {(EOS if t == sep else t): c for t, c in zip(d.token_ids.tolist(), d.counts.tolist())}


# --------------------------------------------------------------------------- side by side


def side_by_side(args: argparse.Namespace) -> Dict[str, Any]:
    name = args.corpus
    ix = our_index(name)
    sep = ix.separator_id
    peer = None if args.no_peer else load_official(name)
    tokens, offsets = corpora.load_tokens(args.queries_from)
    work = make_workload(tokens, offsets, args.queries, args.one_token, args.seed)
    res: Dict[str, Any] = {"corpus": name, "index_tokens": ix.num_tokens, "queries_from": args.queries_from,
                           "queries": args.queries, "rounds": args.rounds, "seed": args.seed}
    big = ix.num_tokens + ix.num_docs + 10  # official max_support meaning "exact"
    mism: Dict[str, int] = {}

    def both(kind: str, queries: List[Any], ours: Callable, theirs: Optional[Callable], rounds: int,
             official_rounds: Optional[int] = None, warm: bool = True) -> None:
        log(f"{kind}: {len(queries)} queries x {rounds} rounds")
        eng = {"ours": ours} if theirs is None else {"ours": ours, "official": theirs}
        t = interleaved(queries, eng, rounds, {"official": official_rounds or rounds}, warm=warm)
        res[kind + "_rounds"] = {"ours": rounds, "official": min(rounds, official_rounds or rounds)}
        res[kind] = {e: summarize(v) for e, v in t.items()}
        if theirs is not None:
            for sfx in ("", "_best", "_cpu"):
                res[kind]["median_ratio_official_over_ours" + sfx] = round(
                    res[kind]["official" + sfx]["median_us"] / res[kind]["ours" + sfx]["median_us"], 2)
                res[kind]["p99_ratio_official_over_ours" + sfx] = round(
                    res[kind]["official" + sfx]["p99_us"] / res[kind]["ours" + sfx]["p99_us"], 2)

    # ---- count: single calls, then batched throughput
    both("count", work["count"], ix.count, peer.count if peer else None, args.rounds)
    if peer:
        mism["count"] = sum(ix.count(q) != peer.count(q)["count"] for q in work["count"])
    ix.count_batch(work["count"][:2], n_threads=1)  # warm-up (first import of the batch module)
    ragged = __import__("infinigram_hf.index.batch", fromlist=["Ragged"]).Ragged.from_sequences(work["count"])
    nq = len(work["count"])
    loops = {"ours_batch": lambda: ix.count_batch(work["count"], n_threads=1),
             "ours_batch_from_numpy": lambda: ix.count_batch(ragged, n_threads=1),
             "ours_single_calls": lambda: [ix.count(q) for q in work["count"]]}
    if peer:
        loops["official_single_calls"] = lambda: [peer.count(q) for q in work["count"]]
    res["count_batch"] = loop_rates(nq, loops, 3 * args.rounds)  # queries per second, engines taking turns
    if peer:
        for k in ("per_s", "best_per_s", "per_cpu_s"):
            res["count_batch"]["ratio_ours_batch_over_official_" + k] = round(
                res["count_batch"]["ours_batch"][k] / res["count_batch"]["official_single_calls"][k], 1)

    # ---- infgram_prob on 100-500-token prompts
    pc = list(zip(work["prompts"], work["conts"]))
    both("infgram_prob", pc, lambda x: ix.infgram_prob(x[0], x[1]),
         (lambda x: peer.infgram_prob(x[0], x[1])) if peer else None, args.rounds)
    if peer:
        bad = 0
        for p, c in pc:
            a, b = ix.infgram_prob(p, c), peer.infgram_prob(p, c)
            bad += (a.suffix_len, a.prompt_count, a.count) != (b["suffix_len"], b["prompt_cnt"], b["cont_cnt"])
        mism["infgram_prob"] = bad
    res["infgram_prob"]["ours_batch_prompts"] = rate(len(pc), lambda: ix.infgram_prob_batch(
        work["prompts"], work["conts"], n_threads=1), args.rounds)
    res["infgram_prob"]["ours_single_calls_prompts"] = rate(len(pc), lambda: [ix.infgram_prob(p, c) for p, c in pc], 3)

    # ---- infgram_ntd, exact (and the official engine's default-ish max_support=1000); the
    # exactness check runs first and doubles as the warm-up (official calls take up to seconds)
    if peer:
        bad = 0
        for p in work["prompts"]:
            a, b = ix.infgram_ntd(p), peer.infgram_ntd(p, max_support=big)
            bad += (a.suffix_len != b["suffix_len"] or a.total != b["prompt_cnt"] or b["approx"]
                    or ours_ntd_dict(a, sep) != official_ntd_dict(b))
        mism["infgram_ntd"] = bad
    both("infgram_ntd", work["prompts"], ix.infgram_ntd,
         (lambda p: peer.infgram_ntd(p, max_support=big)) if peer else None, args.rounds, args.official_ntd_rounds,
         warm=peer is None)
    if peer:
        approx, t1000 = [], []
        for p in work["prompts"]:
            r, dt = clock(lambda: peer.infgram_ntd(p, max_support=1000))
            approx.append(r["approx"])
            t1000.append(dt)
        res["infgram_ntd"]["official_max_support_1000"] = summarize(t1000)
        res["infgram_ntd"]["official_max_support_1000_approx_fraction"] = round(float(np.mean(approx)), 3)
    res["infgram_ntd"]["ours_batch_prompts"] = rate(len(work["prompts"]), lambda: ix.infgram_ntd_batch(
        work["prompts"], n_threads=1), args.rounds)
    res["infgram_ntd"]["ours_single_calls_prompts"] = rate(len(work["prompts"]), lambda: [ix.infgram_ntd(p) for p in work["prompts"]], 3)

    # ---- 1-token prompts, exact ntd (the official engine walks millions of positions here)
    if peer:
        mism["ntd_1token"] = sum(ours_ntd_dict(ix.infgram_ntd(p), sep) != official_ntd_dict(peer.infgram_ntd(p, max_support=big))
                                 for p in work["one"])  # also the warm-up
    both("ntd_1token", work["one"], ix.infgram_ntd,
         (lambda p: peer.infgram_ntd(p, max_support=big)) if peer else None, args.rounds, args.official_ntd_rounds,
         warm=peer is None)
    res["ntd_1token"]["support_median"] = float(np.median([len(ix.infgram_ntd(p)) for p in work["one"]]))
    res["ntd_1token"]["count_median"] = float(np.median([ix.count(p) for p in work["one"]]))

    # ---- dense scoring
    seqs = [np.asarray(tokens[offsets[i]:offsets[i + 1]], dtype=np.uint32) for i in range(len(offsets) - 1)]
    n_tok = sum(len(s) for s in seqs)
    rates, cpu_rates = [], []
    for _ in range(args.rounds):
        c0 = time.process_time()
        _, dt = clock(lambda: [ix.score(s) for s in seqs])
        rates.append(n_tok / dt)
        cpu_rates.append(n_tok / (time.process_time() - c0))
    batch_rates = [n_tok / clock(lambda: ix.score_batch(seqs, n_threads=1))[1] for _ in range(args.rounds)]
    res["dense_score"] = {"tokens": n_tok, "ours_tokens_per_s": round(float(np.median(rates))),
                          "ours_tokens_per_cpu_s": round(float(np.median(cpu_rates))),
                          "ours_batch_tokens_per_s": round(float(np.median(batch_rates))),
                          "ours_mean_effective_n": round(float(np.mean(np.concatenate(
                              [ix.score(s).suffix_len for s in seqs]))) + 1, 2)}
    if peer:
        doc = max(seqs, key=len)[:args.official_dense_tokens].tolist()
        c0 = time.process_time()
        _, dt = clock(lambda: [peer.infgram_prob(doc[:i], doc[i]) for i in range(len(doc))])
        res["dense_score"]["official_tokens_per_cpu_s"] = round(len(doc) / (time.process_time() - c0))
        res["dense_score"]["official_tokens_per_s"] = round(len(doc) / dt)
        res["dense_score"]["official_tokens_measured"] = len(doc)
        res["dense_score"]["ratio_ours_over_official"] = round(res["dense_score"]["ours_tokens_per_s"] / (len(doc) / dt), 1)
        ours_doc = ix.score(doc)
        mism["dense_score"] = sum(int(ours_doc.counts[i]) != peer.infgram_prob(doc[:i], doc[i])["cont_cnt"]
                                  for i in range(0, len(doc), 7))
    res["mismatches_vs_official"] = mism
    return res


# --------------------------------------------------------------------------- growth


def parse_size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}.get(s[-1], 1)
    return int(float(s[:-1] if s[-1] in "KMG" else s) * mult)


def growth(args: argparse.Namespace) -> Dict[str, Any]:
    tokens, offsets = corpora.load_tokens("linux")
    offsets = np.asarray(offsets, dtype=np.int64)
    n_docs = len(offsets) - 1
    held = np.arange(n_docs - args.heldout_docs, n_docs)  # queries come from the last documents
    avail = int(offsets[n_docs - args.heldout_docs])
    work = make_workload(tokens, offsets, args.queries, args.one_token, args.seed, docs=held)
    dense = [np.asarray(tokens[offsets[i]:offsets[i + 1]], dtype=np.uint32) for i in held[:200]]
    dense_tok = sum(len(s) for s in dense)
    out: Dict[str, Any] = {"corpus": "linux prefixes", "heldout_docs": args.heldout_docs, "points": []}
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        if size > avail:
            log(f"skipping {size:,}: only {avail:,} tokens before the held-out documents")
            continue
        label = f"linux.prefix-{size // 10**6}M"
        ix = our_index(label, tokens_name="linux", limit=size)
        log(f"{label}: {ix.num_tokens:,} tokens")
        if args.build_only:
            ix.close()
            continue
        pc = list(zip(work["prompts"], work["conts"]))
        point: Dict[str, Any] = {"tokens": ix.num_tokens, "index": label}
        for kind, qs, fn, rounds in (
                ("count", work["count"], ix.count, args.rounds),
                ("infgram_prob", pc, lambda x: ix.infgram_prob(x[0], x[1]), args.rounds),
                ("infgram_ntd", work["prompts"], ix.infgram_ntd, args.rounds),
                ("ntd_1token", work["one"], ix.infgram_ntd, args.rounds)):
            t = interleaved(qs, {"ours": fn}, rounds)
            point[kind] = summarize(t["ours"])
            point[kind + "_best"] = summarize(t["ours_best"])
            point[kind + "_cpu"] = summarize(t["ours_cpu"])
        rates, cpu_rates = [], []
        for _ in range(args.rounds):
            c0 = time.process_time()
            rates.append(dense_tok / clock(lambda: [ix.score(s) for s in dense])[1])
            cpu_rates.append(dense_tok / (time.process_time() - c0))
        point["dense_score_tokens_per_s"] = round(float(np.median(rates)))
        point["dense_score_tokens_per_cpu_s"] = round(float(np.median(cpu_rates)))
        out["points"].append(point)
        log(json.dumps(point))
        ix.close()
        gc.collect()
    plot_growth(out)
    return out


def plot_growth(out: Dict[str, Any]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = out["points"]
    if not pts:
        return
    x = [p["tokens"] for p in pts]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 5.4))
    for kind, label in (("count", "count (1-10 gram)"), ("infgram_prob", "infgram_prob (100-500 tok prompt)"),
                        ("infgram_ntd", "infgram_ntd exact (same prompts)"), ("ntd_1token", "ntd, 1-token prompt")):
        k = kind + "_cpu" if kind + "_cpu" in pts[0] else kind
        a.plot(x, [p[k]["median_us"] for p in pts], "o-", label=f"{label}: median")
        a.plot(x, [p[k]["p99_us"] for p in pts], "x--", alpha=0.5, color=a.lines[-1].get_color(), label="  p99")
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("corpus tokens (linux C prefixes)")
    a.set_ylabel("CPU time per Python call (µs)")
    a.set_title("query latency vs corpus size (1 CPU, CPU time)")
    a.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    b.plot(x, [p.get("dense_score_tokens_per_cpu_s", p["dense_score_tokens_per_s"]) / 1e3 for p in pts], "o-",
           label="per CPU-second")
    b.plot(x, [p["dense_score_tokens_per_s"] / 1e3 for p in pts], "x--", alpha=0.6, label="per wall-clock second")
    b.legend(fontsize=8)
    b.set_xscale("log")
    b.set_xlabel("corpus tokens (linux C prefixes)")
    b.set_ylabel("dense scoring (k tokens/s)")
    b.set_ylim(bottom=0)
    b.set_title("dense scoring throughput (1 CPU)")
    b.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    PLOTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOTS / "query_growth.png", dpi=120)
    log(f"wrote {PLOTS / 'query_growth.png'}")


# --------------------------------------------------------------------------- report


def _row(name: str, d: Dict[str, Any], sfx: str = "") -> str:
    o, p = d.get("ours" + sfx, {}), d.get("official" + sfx, {})
    cells = [f"{o.get(k, float('nan')):,.1f}" for k in ("median_us", "p90_us", "p99_us")]
    cells += [f"{p.get(k, float('nan')):,.1f}" if p else "–" for k in ("median_us", "p90_us", "p99_us")]
    ratio = d.get("median_ratio_official_over_ours" + sfx)
    return f"| {name} | " + " | ".join(cells) + f" | {ratio if ratio else '–'}× |"


def markdown(sbs: Optional[Dict[str, Any]], gr: Optional[Dict[str, Any]]) -> str:
    lines = []
    if sbs:
        for sfx, title in (("", "wall clock: a query's latency = its median over rounds"),
                           ("_cpu", "CPU time of the process (all its threads): a query's = its median over rounds; "
                                    "time the shared CPU spent on other jobs is left out")):
            lines += ["", f"*{title}*", "",
                      "| query (one Python call) | ours median µs | p90 | p99 | official median µs | p90 | p99 | official/ours (median) |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|"]
            for k, name in (("count", "count, 1–10-gram"), ("infgram_prob", "infgram_prob, 100–500-token prompt"),
                            ("infgram_ntd", "infgram_ntd exact, same prompts"), ("ntd_1token", "ntd exact, 1-token prompt")):
                if k in sbs and "ours" + sfx in sbs[k]:
                    lines.append(_row(name, sbs[k], sfx))
        cb, ds = sbs.get("count_batch", {}), sbs.get("dense_score", {})
        def qps(k: str) -> str:
            v = cb.get(k, {})
            return f"{v.get('per_s', 0):,} / {v.get('best_per_s', 0):,} / {v.get('per_cpu_s', 0):,}"
        lines += ["", "- count throughput, queries per second (median round / best round / per CPU-second): ours one "
                  f"`count_batch` call from Python lists {qps('ours_batch')}, from numpy offsets {qps('ours_batch_from_numpy')}, "
                  f"ours one call per query {qps('ours_single_calls')}; official one call per query "
                  f"{qps('official_single_calls')} → batched / official: "
                  f"**{cb.get('ratio_ours_batch_over_official_per_s', '–')}× / {cb.get('ratio_ours_batch_over_official_best_per_s', '–')}× / "
                  f"{cb.get('ratio_ours_batch_over_official_per_cpu_s', '–')}×**",
                  f"- dense scoring: ours {ds.get('ours_tokens_per_s', 0):,} tokens/s ({ds.get('ours_tokens_per_cpu_s', 0):,} per "
                  f"CPU-second; `score` per document, `score_batch` {ds.get('ours_batch_tokens_per_s', 0):,}/s; mean effective n "
                  f"{ds.get('ours_mean_effective_n', '–')}), official token-by-token infgram_prob "
                  f"{ds.get('official_tokens_per_s', 0):,} tokens/s ({ds.get('official_tokens_per_cpu_s', 0):,} per CPU-second) → "
                  f"**{ds.get('ratio_ours_over_official', '–')}×**",
                  f"- official infgram_ntd with max_support=1000 (approximate on "
                  f"{100 * sbs.get('infgram_ntd', {}).get('official_max_support_1000_approx_fraction', 0):.0f}% of prompts): "
                  f"{sbs.get('infgram_ntd', {}).get('official_max_support_1000', {})}",
                  "- ours, 1 thread, prompts per wall-clock second (per CPU-second): " + ", ".join(
                      f"{k} {v.get('per_s', 0):,} ({v.get('per_cpu_s', 0):,})" for k, v in (
                          ("infgram_prob batched", sbs.get("infgram_prob", {}).get("ours_batch_prompts", {})),
                          ("one call each", sbs.get("infgram_prob", {}).get("ours_single_calls_prompts", {})),
                          ("infgram_ntd batched", sbs.get("infgram_ntd", {}).get("ours_batch_prompts", {})),
                          ("one call each", sbs.get("infgram_ntd", {}).get("ours_single_calls_prompts", {})))),
                  f"- answers differing from the official engine's: {sbs.get('mismatches_vs_official')}"]
    if gr and gr.get("points"):
        lines += ["", "Wall clock (median over rounds per query; median / p99 over queries), and in brackets the CPU-time medians:", "",
                  "| corpus tokens | count µs | infgram_prob µs | infgram_ntd µs | 1-token ntd µs | dense k tok/s (per CPU-s) |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for p in gr["points"]:
            cells = [f"{p[k]['median_us']:.1f} / {p[k]['p99_us']:.1f} ({p.get(k + '_cpu', p[k])['median_us']:.1f})"
                     for k in ("count", "infgram_prob", "infgram_ntd", "ntd_1token")]
            lines.append(f"| {p['tokens']:,} | " + " | ".join(cells) + f" | {p['dense_score_tokens_per_s'] / 1e3:,.0f} "
                         f"({p.get('dense_score_tokens_per_cpu_s', 0) / 1e3:,.0f}) |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["side-by-side", "growth", "report"])
    ap.add_argument("--corpus", default="stdlib.reference")
    ap.add_argument("--queries-from", default="stdlib.heldout")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--one-token", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--official-ntd-rounds", type=int, default=1,
                    help="timed rounds of the official engine's exact ntd (slow: ms to s per call)")
    ap.add_argument("--official-dense-tokens", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", default="10M,30M,100M,300M")
    ap.add_argument("--heldout-docs", type=int, default=500)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--build-only", action="store_true", help="growth: only build the prefix indexes")
    ap.add_argument("--no-pin", action="store_true")
    args = ap.parse_args()
    if args.mode != "report" and not args.no_pin and shutil.which("taskset") and not os.environ.get("_BENCH_PINNED"):
        os.environ["_BENCH_PINNED"] = "1"
        os.execvp("taskset", ["taskset", "-c", "1", sys.executable, __file__] + sys.argv[1:])
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = {"date": time.strftime("%Y-%m-%d %H:%M"), "command": " ".join(["eval/bench_queries.py"] + sys.argv[1:]),
             "pinned_cpu": None if args.no_pin else 1, "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    sbs_path, gr_path = RESULTS / "query_latency.json", RESULTS / "query_growth.json"
    if args.mode == "side-by-side":
        res = side_by_side(args)
        res.update(stamp, loadavg_end=[round(x, 2) for x in os.getloadavg()])
        sbs_path.write_text(json.dumps(res, indent=1) + "\n")
    elif args.mode == "growth" and args.build_only:
        growth(args)
        return
    elif args.mode == "growth":
        res = growth(args)
        res.update(stamp, loadavg_end=[round(x, 2) for x in os.getloadavg()])
        gr_path.write_text(json.dumps(res, indent=1) + "\n")
    sbs = json.loads(sbs_path.read_text()) if sbs_path.exists() else None
    gr = json.loads(gr_path.read_text()) if gr_path.exists() else None
    if args.mode == "report" and gr:
        plot_growth(gr)
    print(markdown(sbs if args.mode != "growth" else None, gr if args.mode != "side-by-side" else None))


if __name__ == "__main__":
    main()
