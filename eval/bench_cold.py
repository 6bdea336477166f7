#!/usr/bin/env python3
"""Every query type on a cold page cache: ours vs the official engine, same run (issue 19).

    python eval/bench_cold.py --queries 40 --rounds 3
    python eval/bench_cold.py --advice normal,random --official-prefetch 0,default

Before every single query each index file is evicted from the page cache: first this process's
own page-table entries to it are dropped (madvise MADV_DONTNEED on each mapping of the file
listed in /proc/self/maps; the kernel's fadvise skips pages a process still maps), then
posix_fadvise(POSIX_FADV_DONTNEED) on the file. No root needed. Pages another process maps
stay cached; the residue is measured with mincore() and reported (`resident_after_evict`).

Per query: wall time, major page faults (getrusage ru_majflt, all threads) and bytes read from
storage (/proc/self/io read_bytes, readahead included). Engines take turns query by query (each
query evicts everything first, so neither warms the other). Engines:

* ours_200m: our index of the first 200M Linux-source tokens (<cache>/ours/linux200m);
* ours_100m: our index of the very tokens of the official index (<cache>/ours/official15_linux100m);
* official_100m: the official engine (infini-gram 2.6.0) on its 100M-token index of the same
  source (<cache>/official/official15_linux100m), at each --official-prefetch setting.

`--advice` opens our indexes once per value and applies madvise(MADV_NORMAL | MADV_RANDOM |
MADV_SEQUENTIAL) to that handle's mappings (`own`: the engine's policy, MADV_RANDOM on files
over 8 MiB since this measurement): the readahead policy is chosen by this measurement. The
official engine's mappings keep its own.
`--keep-small` leaves files <= 16 MiB out of the eviction (a server that keeps its small top-level
structures resident). Query workload: bench_queries.make_workload over Linux documents not in
either index. Results: eval/results/cold.json.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402
import official_engine  # noqa: E402
from bench_queries import load_official, make_workload  # noqa: E402

from infinigram_hf import InfiniGramIndex  # noqa: E402
from infinigram_hf.index.attribution import _window  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "cold.json"
ADVICE = {"normal": 0, "random": 1, "sequential": 2}
MADV_DONTNEED = 4
SMALL = 16 << 20
PAGE = mmap.PAGESIZE

libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def files_under(d: Path) -> List[str]:
    return sorted(str(p.resolve()) for p in Path(d).rglob("*") if p.is_file())


def mappings(paths: Sequence[str]) -> List[tuple]:
    """(start, length) of this process's mappings of the given files."""
    want, out = set(paths), []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip() in want:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi - lo))
    return out


def advise(maps: Sequence[tuple], advice: int) -> None:
    for lo, n in maps:
        if libc.madvise(lo, n, advice) != 0:
            raise OSError(ctypes.get_errno(), f"madvise({advice})")


def evict(paths: Sequence[str]) -> None:
    advise(mappings(paths), MADV_DONTNEED)  # our own page-table entries first: fadvise skips mapped pages
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_pages(paths: Sequence[str]) -> int:
    """Pages of these files in the page cache (mincore over a fresh mapping)."""
    total = 0
    for p in paths:
        size = os.path.getsize(p)
        if size == 0:
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), "mmap")
            n = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * n)()
            libc.mincore(addr, size, vec)
            total += int(np.count_nonzero(np.frombuffer(vec, dtype=np.uint8) & 1))
            libc.munmap(addr, size)
        finally:
            os.close(fd)
    return total


def read_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def cold_call(fn: Callable[[], Any], evict_paths: Sequence[str]) -> tuple:
    evict(evict_paths)
    rb, mf = read_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return dt, resource.getrusage(resource.RUSAGE_SELF).ru_majflt - mf, read_bytes() - rb


def stats(rows: np.ndarray) -> Dict[str, float]:
    """rows: (queries, 3) medians over rounds of (seconds, major faults, bytes read)."""
    ms, mf, kb = rows[:, 0] * 1e3, rows[:, 1], rows[:, 2] / 1024
    return {"p50_ms": round(float(np.median(ms)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "mean_ms": round(float(ms.mean()), 3), "majflt_p50": float(np.median(mf)),
            "majflt_mean": round(float(mf.mean()), 1), "read_kib_p50": round(float(np.median(kb)), 1),
            "read_kib_mean": round(float(kb.mean()), 1), "n": int(len(rows))}


def our_kinds(ix: InfiniGramIndex, work: Dict[str, Any]) -> Dict[str, tuple]:
    """kind -> (queries, fn(query)); the official engine's equivalents in official_kinds."""
    return {
        "count": (work["count"], ix.count),
        "prob": (work["short"], lambda pc: ix.ngram_prob(pc[0], pc[1])),
        "ntd": (work["short_prompts"], ix.ngram_ntd),
        "infgram_prob": (work["long"], lambda pc: ix.infgram_prob(pc[0], pc[1])),
        "infgram_ntd": (work["prompts"], ix.infgram_ntd),
        "search_doc": (work["count"], lambda q: our_doc_window(ix, q)),
        "dense_score": (work["dense"], ix.score),
    }


WINDOW = 1000  # tokens of the document around the first occurrence (the official max_disp_len)


def our_doc_window(ix: InfiniGramIndex, q: List[int]) -> Any:
    """Find the n-gram, locate its first suffix-array occurrence, read 1000 tokens around it."""
    hits = ix.positions(q, limit=1)
    if not hits:
        return None
    doc, off = ix.locate(*hits[0])
    shard, local = ix.doc_shard(doc)
    with ix.native_handle() as h:
        return _window(h, shard, local, off - WINDOW // 2, off + WINDOW // 2)


def official_doc_window(eng: Any, q: List[int]) -> Any:
    seg = eng.find(input_ids=q)["segment_by_shard"][0]
    if seg[1] <= seg[0]:
        return None
    return eng.get_doc_by_rank(s=0, rank=seg[0], max_disp_len=WINDOW)


def official_kinds(eng: Any, work: Dict[str, Any], max_support: int) -> Dict[str, tuple]:
    return {
        "count": (work["count"], lambda q: eng.count(input_ids=q)),
        "prob": (work["short"], lambda pc: eng.prob(prompt_ids=pc[0], cont_id=pc[1])),
        "ntd": (work["short_prompts"], lambda p: eng.ntd(prompt_ids=p, max_support=max_support)),
        "infgram_prob": (work["long"], lambda pc: eng.infgram_prob(prompt_ids=pc[0], cont_id=pc[1])),
        "infgram_ntd": (work["prompts"], lambda p: eng.infgram_ntd(prompt_ids=p, max_support=max_support)),
        "search_doc": (work["count"], lambda q: official_doc_window(eng, q)),
        # no dense scoring in the official engine: one infgram_prob per position
        "dense_score": (work["dense"], lambda s: [eng.infgram_prob(prompt_ids=s[:i], cont_id=s[i])
                                                 for i in range(len(s))]),
    }


def workload(n: int, n_dense: int, dense_len: int, seed: int) -> Dict[str, Any]:
    tokens, offsets = corpora.load_tokens("linux")
    offsets = np.asarray(offsets, dtype=np.int64)
    ours200 = json.loads((corpora.cache_dir() / "ours" / "linux200m" / "meta.json").read_text())
    held = np.arange(int(ours200["num_docs"]) + 1, len(offsets) - 1)  # in neither index
    w = make_workload(tokens, offsets, n, 0, seed, docs=held)
    rng = np.random.default_rng(seed + 1)
    w["short"] = [(q[:-1], q[-1]) if len(q) > 1 else (q, q[0]) for q in w["count"]]  # n-gram prob: last token
    w["short_prompts"] = [q[:-1] if len(q) > 1 else q for q in w["count"]]
    w["long"] = list(zip(w["prompts"], w["conts"]))
    lens = np.diff(offsets)
    ok = held[lens[held] > dense_len + 1]
    docs = rng.choice(ok, size=n_dense, replace=False)
    w["dense"] = [[int(t) for t in tokens[offsets[d]:offsets[d] + dense_len]] for d in docs]
    return w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dense", type=int, default=8, help="dense-scoring sequences")
    ap.add_argument("--dense-len", type=int, default=100)
    ap.add_argument("--advice", default="own,normal", help="comma list: own (the engine's), normal, random, sequential")
    ap.add_argument("--official-prefetch", default="0,default", help="comma list: 0 (depths 0) or default (1,3,3)")
    ap.add_argument("--official-max-support", type=int, default=1000, help="its default: sampled ntd")
    ap.add_argument("--kinds", default="count,prob,ntd,infgram_prob,infgram_ntd,search_doc,dense_score")
    ap.add_argument("--keep-small", action="store_true")
    ap.add_argument("--no-200m", action="store_true")
    ap.add_argument("--ours-200m", type=Path, help="a private copy of <cache>/ours/linux200m: pages another "
                    "process maps cannot be evicted (resident_after_evict_pages shows them)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()

    cache = corpora.cache_dir()
    dirs = {"ours_200m": cache / "ours" / "linux200m", "ours_100m": cache / "ours" / "official15_linux100m"}
    if a.ours_200m:
        dirs["ours_200m"] = a.ours_200m
    if a.no_200m:
        del dirs["ours_200m"]
    work = workload(a.queries, a.dense, a.dense_len, a.seed)
    engines: Dict[str, Dict[str, tuple]] = {}
    paths: Dict[str, List[str]] = {}
    handles = []
    for name, d in dirs.items():
        for adv in a.advice.split(","):  # one open index each: advice applies to its own mappings
            before = set(mappings(files_under(d)))
            ix = InfiniGramIndex.open(d)
            handles.append(ix)
            if adv != "own":
                advise(sorted(set(mappings(files_under(d))) - before), ADVICE[adv])
            engines[f"{name}[{adv}]"] = our_kinds(ix, work)
            paths[f"{name}[{adv}]"] = files_under(d)
    off_dir = official_engine.index_dir("official15_linux100m")
    depth0 = load_official("official15_linux100m")  # (also puts its venv on sys.path)
    for pf in a.official_prefetch.split(","):
        kw = {"ds_prefetch_depth": 1, "sa_prefetch_depth": 3, "od_prefetch_depth": 3}
        eng = depth0 if pf == "0" else official_engine.load_engine("official15_linux100m", **kw)
        handles.append(eng)
        engines[f"official_100m[prefetch={pf}]"] = official_kinds(eng, work, a.official_max_support)
        paths[f"official_100m[prefetch={pf}]"] = files_under(off_dir)
    o100 = next((n for n in engines if n.startswith("ours_100m")), None)
    if o100:  # same tokens, same answers (checked warm, untimed)
        mine, theirs = engines[o100]["count"], engines[f"official_100m[prefetch={a.official_prefetch.split(',')[0]}]"]["count"]
        bad = sum(mine[1](q) != theirs[1](q)["count"] for q in mine[0])
        if bad:
            raise SystemExit(f"{bad} counts differ between ours_100m and the official engine")
    all_paths = sorted({p for ps in paths.values() for p in ps})
    evict_paths = [p for p in all_paths if not (a.keep_small and os.path.getsize(p) <= SMALL)]
    out: Dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "loadavg": os.getloadavg(),
                           "queries": a.queries, "rounds": a.rounds, "keep_small": a.keep_small,
                           "read_ahead_kb": Path("/sys/block/vda/queue/read_ahead_kb").read_text().strip()
                           if Path("/sys/block/vda/queue/read_ahead_kb").exists() else None,
                           "official_max_support": a.official_max_support, "kinds": {}}
    for kind in a.kinds.split(","):
        names = list(engines)
        nq = len(engines[names[0]][kind][0])
        res = {n: np.zeros((a.rounds, nq, 3)) for n in names}
        residue = 0
        for r in range(a.rounds):
            for i in range(nq):
                order = names if (r + i) % 2 == 0 else names[::-1]
                for n in order:
                    qs, fn = engines[n][kind]
                    res[n][r, i] = cold_call(lambda: fn(qs[i]), evict_paths)
            evict(evict_paths)
            residue = max(residue, resident_pages(evict_paths))
        out["kinds"][kind] = {n: stats(np.median(v, axis=0)) for n, v in res.items()}
        out["kinds"][kind]["resident_after_evict_pages"] = residue
        print(kind, json.dumps(out["kinds"][kind]), flush=True)
    a.out.parent.mkdir(exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
