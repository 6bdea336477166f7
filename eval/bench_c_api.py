#!/usr/bin/env python3
"""The C query paths that issue 14's C API work touched, before and after: the core of a base
commit and the working tree's, side by side in one process.

    .venv-test/bin/python eval/bench_c_api.py --base b0c4dd5          # the recorded run
    .venv-test/bin/python eval/bench_c_api.py --base b0c4dd5 --rounds 3

Both cores are compiled here (gcc -O2, as the package builds them; bench_dense_backoff.py's
helpers) into shared libraries and called through ctypes with the same arguments, one thread
per call. A core from before the API version (no ig_api_version) is called with the old
signatures of the folded calls (no max_entries); one before API version 5, without the state
lengths that the state and draft calls take since. Index: tinyshakespeare as words (whitespace
split, ids by first appearance), the first 90% in two shards of 200-word documents; queries are
2,000 windows of 24 words of the held-out 10% (seeded). Workloads:

  ntd batch, ∞-gram     ig_ntd_batch_run over the 2,000 windows (their longest occurring suffix)
  ntd batch, 2-grams    ig_ntd_batch_run, fixed n, over 500 two-word contexts (large rows)
  ntd batch, states     ig_ntd_batch_states over the states of the windows minus their last word
  state extend batch    ig_state_extend_batch by the last word of each window
  state prob batch      ig_state_prob_batch of the last word of each window
  prob batch, ∞-gram    ig_prob_batch of the last word of each window given the rest
  draft step loop       ig_draft_step over 20,000 held-out words, 1-3 new words a step (~10,000
                        calls: advance the state, prompt lookup, greedy chain of up to 8)
  draft chain           ig_draft_chain of up to 8 words from each of the 2,000 states

Engines take turns round by round (base, new, new, base, ...); a round repeats a short workload
until it lasts about 50 ms; a workload's time is its median round (per call), in wall clock and
in CPU time of the calling thread (which runs the C work: one thread per call), the steadier of
the two on a shared machine. Every answer of the new core is compared with the base core's. Results:
eval/results/c_api.json and a markdown table on stdout.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
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

from bench_dense_backoff import base_sources, built, compile_core, shard_dirs, timed  # noqa: E402

RESULTS = HERE / "results"
N_QUERIES, QUERY_LEN, DRAFT_WORDS = 2_000, 24, 20_000
P, I64, U64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64
NTD_INFGRAM, NTD_NGRAM, DRAFT_LONGEST = 1, 0, 0


def log(msg: str) -> None:
    print(f"[bench_c_api {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class DraftParams(ctypes.Structure):
    """ig_draft_params (infinigram_draft.h; the same at both commits)."""
    _fields_ = [("max_draft", I64), ("min_match", I64), ("match_ratio", ctypes.c_double), ("min_count", U64),
                ("min_share", ctypes.c_double), ("min_joint", ctypes.c_double), ("lookup_min", I64),
                ("lookup_max", I64), ("source", ctypes.c_int), ("eos_id", I64), ("infgram_cap", I64),
                ("lookup_cap", I64)]


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


class Core:
    """The calls measured, on one compiled core."""

    def __init__(self, lib_path: Path):
        self.lib = lib = ctypes.CDLL(str(lib_path))
        self.versioned = hasattr(lib, "ig_api_version")
        # API version 5: every state (or n states) is passed with its length in int64 values
        self.sized = self.versioned and lib.ig_api_version() >= 5
        lib.ig_open.argtypes = [ctypes.POINTER(P), ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_char_p,
                                ctypes.c_size_t]
        lib.ig_state_size.argtypes, lib.ig_state_size.restype = [P], I64
        lib.ig_ntd_batch_entries.argtypes, lib.ig_ntd_batch_entries.restype = [P], I64
        lib.ig_ntd_batch_free.argtypes = [P]
        n = [I64] if self.sized else []
        lib.ig_draft_step.argtypes = [P, P, *n, P, I64, I64, ctypes.POINTER(DraftParams), I64, P, P, P, P, P, P,
                                      ctypes.c_char_p, ctypes.c_size_t]
        lib.ig_draft_chain.argtypes = [P, P, *n, I64, U64, ctypes.c_double, ctypes.c_double, I64, P, P, P, P,
                                       ctypes.c_char_p, ctypes.c_size_t]
        self.err = ctypes.create_string_buffer(1024)

    def length(self, states: np.ndarray) -> tuple:
        """The state-length argument of the state and draft calls (none before API version 5)."""
        return (I64(states.size),) if self.sized else ()

    def ok(self, rc: int) -> None:
        if rc:
            raise RuntimeError(self.err.value.decode())

    def open(self, dirs: List[Path]) -> Any:
        arr = (ctypes.c_char_p * len(dirs))(*[os.fsencode(d) for d in dirs])
        out = ctypes.c_void_p()
        self.ok(self.lib.ig_open(ctypes.byref(out), arr, len(dirs), self.err, 1024))
        return out

    def collect(self, handle: ctypes.c_void_p, rows: int) -> tuple:
        m = self.lib.ig_ntd_batch_entries(handle)
        ro, sl = np.zeros(rows + 1, np.int64), np.zeros(rows, np.int64)
        tok, cnt, tot = np.zeros(max(m, 1), np.uint32), np.zeros(max(m, 1), np.uint64), np.zeros(rows, np.uint64)
        rc = self.lib.ig_ntd_batch_copy(handle, P(ptr(ro)), P(ptr(tok)), P(ptr(cnt)), I64(m), P(ptr(sl)),
                                        P(ptr(tot)), None, None, self.err, 1024)
        self.lib.ig_ntd_batch_free(handle)
        self.ok(rc)
        return ro, tok[:m], cnt[:m], sl, tot

    def ntd_run(self, ix: Any, values: np.ndarray, offsets: np.ndarray, mode: int) -> tuple:
        out, n = ctypes.c_void_p(), len(offsets) - 1
        cap = (I64(0),) if self.versioned else ()  # max_entries: 0 = no cap
        self.ok(self.lib.ig_ntd_batch_run(ix, P(ptr(values)), I64(len(values)), P(ptr(offsets)), I64(n),
                                          ctypes.c_int(mode), I64(0), *cap, ctypes.c_int(1), ctypes.byref(out),
                                          self.err, ctypes.c_size_t(1024)))
        return self.collect(out, n)

    def ntd_states(self, ix: Any, states: np.ndarray) -> tuple:
        out, n = ctypes.c_void_p(), len(states)
        cap = (I64(0),) if self.versioned else ()
        self.ok(self.lib.ig_ntd_batch_states(ix, P(ptr(states)), *self.length(states), I64(n), I64(0), *cap,
                                             ctypes.c_int(1), ctypes.byref(out), self.err, ctypes.c_size_t(1024)))
        return self.collect(out, n)

    def states(self, ix: Any, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        size = self.lib.ig_state_size(ix)
        st = np.zeros((len(offsets) - 1, size), np.int64)
        for i in range(len(offsets) - 1):
            self.ok(self.lib.ig_state_init(ix, P(ptr(values) + 4 * int(offsets[i])),
                                           I64(int(offsets[i + 1] - offsets[i])), P(ptr(st[i])), *self.length(st[i]),
                                           self.err, ctypes.c_size_t(1024)))
        return st

    def extend_batch(self, ix: Any, states: np.ndarray, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        out = np.zeros_like(states)
        self.ok(self.lib.ig_state_extend_batch(ix, P(ptr(states)), *self.length(states), P(ptr(values)),
                                               I64(len(values)), P(ptr(offsets)), I64(len(states)), P(ptr(out)),
                                               ctypes.c_int(1),
                                               self.err, ctypes.c_size_t(1024)))
        return out

    def prob_outputs(self, n: int) -> tuple:
        return np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.zeros(n, np.int64), np.zeros(n, np.uint8)

    def state_prob_batch(self, ix: Any, states: np.ndarray, tokens: np.ndarray) -> tuple:
        o = self.prob_outputs(len(states))
        self.ok(self.lib.ig_state_prob_batch(ix, P(ptr(states)), *self.length(states), I64(len(states)),
                                             P(ptr(tokens)), *[P(ptr(a)) for a in o], ctypes.c_int(1), self.err,
                                             ctypes.c_size_t(1024)))
        return o

    def prob_batch(self, ix: Any, values: np.ndarray, offsets: np.ndarray, tokens: np.ndarray) -> tuple:
        o = self.prob_outputs(len(tokens))
        self.ok(self.lib.ig_prob_batch(ix, P(ptr(values)), I64(len(values)), P(ptr(offsets)), I64(len(tokens)),
                                       P(ptr(tokens)), ctypes.c_int(1), *[P(ptr(a)) for a in o], ctypes.c_int(1),
                                       self.err, ctypes.c_size_t(1024)))
        return o

    def draft_loop(self, ix: Any, seq: np.ndarray) -> np.ndarray:
        """A decoding loop: the sequence grows by 1-3 words a step, each step one ig_draft_step."""
        params = DraftParams(8, 1, 0.0, 2, 0.1, 0.0, 2, 8, DRAFT_LONGEST, -1, -1, -1)
        st = np.zeros(self.lib.ig_state_size(ix), np.int64)
        self.ok(self.lib.ig_state_init(ix, None, I64(0), P(ptr(st)), *self.length(st), self.err,
                                       ctypes.c_size_t(1024)))
        out, counts, totals = np.zeros(8, np.int64), np.zeros(8, np.uint64), np.zeros(8, np.uint64)
        n_out, match, source = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int()
        got, length, step = [], 0, 0
        while length < len(seq):
            add = min(1 + step % 3, len(seq) - length)
            length, step = length + add, step + 1
            self.ok(self.lib.ig_draft_step(ix, ptr(st), *self.length(st), ptr(seq), length, add, ctypes.byref(params),
                                           8, ptr(out), ptr(counts), ptr(totals), ctypes.addressof(n_out),
                                           ctypes.addressof(match), ctypes.addressof(source), self.err, 1024))
            got.append((st[0], n_out.value, match.value, source.value, *out[:n_out.value]))
        return np.array([sum(hash(g) for g in got)])

    def chains(self, ix: Any, states: np.ndarray) -> np.ndarray:
        toks, counts = np.zeros((len(states), 8), np.uint32), np.zeros((len(states), 8), np.uint64)
        n_out = np.zeros(len(states), np.int64)
        for i in range(len(states)):
            self.ok(self.lib.ig_draft_chain(ix, ptr(states[i]), *self.length(states[i]), 8, 1, 0.0, 0.0, -1,
                                            ptr(toks[i]), ptr(counts[i]), None, ptr(n_out[i:]), self.err, 1024))
        return np.concatenate([n_out, toks.ravel(), counts.ravel()])


def words(path: Path) -> np.ndarray:
    ids: Dict[str, int] = {}
    return np.array([ids.setdefault(w, len(ids)) for w in path.read_text(encoding="utf-8").split()], np.uint32)


def index_and_queries(cache: Path) -> Dict[str, Any]:
    text = ROOT.parent.parent / "shared" / "data" / "tinyshakespeare.txt"
    text = text if text.exists() else Path("/work/shared/data/tinyshakespeare.txt")
    ids = words(text)
    vocab, cut = int(ids.max()) + 1, len(ids) * 9 // 10
    docs = [ids[a:min(a + 200, cut)] for a in range(0, cut, 200)]
    path = cache / "shakespeare_words"
    if not (path / "meta.json").exists():
        from infinigram_hf.build import build_index
        build_index(docs, path, vocab_size=vocab, progress=False, overwrite=True,
                    max_shard_tokens=cut // 2 + 1000).close()
    held = ids[cut:]
    rng = np.random.default_rng(12345)
    starts = rng.integers(0, len(held) - QUERY_LEN, N_QUERIES)
    windows = np.stack([held[s:s + QUERY_LEN] for s in starts])
    pairs = windows[:N_QUERIES // 4, :2]
    return {"index": path, "windows": windows, "pairs": pairs,
            "seq": held[:DRAFT_WORDS].astype(np.int64)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="commit of the core to compare with")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--cache", default=os.environ.get("INFINIGRAM_EVAL_CACHE", str(Path.home() / ".cache" /
                                                                                    "infinigram_hf_eval")))
    args = ap.parse_args()
    cache = Path(args.cache) / "c_api"
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="c-api-"))
    log(f"compiling {args.base} and the working tree")
    cores = {"base": Core(compile_core(base_sources(args.base, tmp / "base"), tmp / "base.so")),
             "new": Core(compile_core(ROOT / "native", tmp / "new.so"))}
    w = index_and_queries(cache)
    dirs = shard_dirs(w["index"])
    ixs = {who: c.open(dirs) for who, c in cores.items()}
    win, pairs = w["windows"], w["pairs"]
    flat = np.ascontiguousarray(win.ravel())
    offs = np.arange(0, len(flat) + 1, QUERY_LEN, dtype=np.int64)
    pflat, poffs = np.ascontiguousarray(pairs.ravel()), np.arange(0, 2 * len(pairs) + 1, 2, dtype=np.int64)
    ctx = np.ascontiguousarray(win[:, :-1].ravel())
    coffs = np.arange(0, len(ctx) + 1, QUERY_LEN - 1, dtype=np.int64)
    last = np.ascontiguousarray(win[:, -1])
    states = {who: cores[who].states(ixs[who], ctx, coffs) for who in cores}
    assert np.array_equal(states["base"], states["new"])
    st = states["new"]
    work: Dict[str, Callable[[str], Any]] = {
        "ntd batch, ∞-gram (2,000 windows)": lambda who: cores[who].ntd_run(ixs[who], flat, offs, NTD_INFGRAM),
        "ntd batch, 2-grams (500 contexts)": lambda who: cores[who].ntd_run(ixs[who], pflat, poffs, NTD_NGRAM),
        "ntd batch, states (2,000)": lambda who: cores[who].ntd_states(ixs[who], st),
        "state extend batch (2,000)": lambda who: cores[who].extend_batch(ixs[who], st, flat, offs),
        "state prob batch (2,000)": lambda who: cores[who].state_prob_batch(ixs[who], st, last),
        "prob batch, ∞-gram (2,000)": lambda who: cores[who].prob_batch(ixs[who], ctx, coffs, last),
        f"draft step loop ({DRAFT_WORDS:,} words)": lambda who: cores[who].draft_loop(ixs[who], w["seq"]),
        "draft chain (2,000 states)": lambda who: cores[who].chains(ixs[who], st),
    }
    res: Dict[str, Any] = {"base": args.base, "date": time.strftime("%Y-%m-%d"), "rounds": args.rounds,
                           "workloads": {}}
    for name, fn in work.items():
        got, want = fn("new"), fn("base")
        same = all(np.array_equal(a, b) for a, b in zip(got, want)) if isinstance(got, tuple) else \
            bool(np.array_equal(got, want))
        reps = max(1, int(0.05 / max(timed(lambda: fn("base"))[1], 1e-6)))  # a round lasts >= ~50 ms
        wall: Dict[str, List[float]] = {"base": [], "new": []}
        cpu: Dict[str, List[float]] = {"base": [], "new": []}
        for r in range(args.rounds):
            for who in (("base", "new") if r % 2 == 0 else ("new", "base")):
                c0 = time.thread_time()
                wall[who].append(timed(lambda: [fn(who) for _ in range(reps)])[1] / reps)
                cpu[who].append((time.thread_time() - c0) / reps)
        rec: Dict[str, Any] = {"same_answers": same, "calls_per_round": reps}
        for who in ("base", "new"):
            rec[who] = {"ms": round(float(np.median(wall[who])) * 1e3, 3),
                        "cpu_ms": round(float(np.median(cpu[who])) * 1e3, 3)}
        rec["new_over_base"] = round(rec["new"]["ms"] / rec["base"]["ms"], 3)
        rec["cpu_new_over_base"] = round(rec["new"]["cpu_ms"] / rec["base"]["cpu_ms"], 3)
        res["workloads"][name] = rec
        log(f"{name}: base {rec['base']['ms']} ms, new {rec['new']['ms']} ms, x{rec['new_over_base']} "
            f"(CPU x{rec['cpu_new_over_base']}), same={same}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "c_api.json").write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    print("| workload | base ms | new ms | new / base | base CPU ms | new CPU ms | CPU new / base | same answers |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, rec in res["workloads"].items():
        b, n = rec["base"], rec["new"]
        print(f"| {name} | {b['ms']:,} | {n['ms']:,} | {rec['new_over_base']} | {b['cpu_ms']:,} | {n['cpu_ms']:,} | "
              f"{rec['cpu_new_over_base']} | {rec['same_answers']} |")


if __name__ == "__main__":
    main()
