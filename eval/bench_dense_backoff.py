#!/usr/bin/env python3
"""Dense scoring's back-off, before and after (issue 12, finding 4): the C core of a base commit
and the working tree's, side by side in one process.

    .venv-test/bin/python eval/bench_dense_backoff.py --base e0e57c8          # the recorded run
    .venv-test/bin/python eval/bench_dense_backoff.py --base e0e57c8 --quick  # smaller, minutes

Both cores are compiled here from their sources (gcc -O2, as the package builds them) into
shared libraries and called through ctypes with the same arguments, on indexes built once by the
package (the file format did not change). Workloads:

  run        corpus: a run of R copies of one token (+ a short document); query: 2R copies
  periodic   corpus: a period-p pattern repeated to R tokens; query: the pattern to 2R tokens
  defects    corpus: a period-13 pattern with every 500th token replaced, R = 20,000; query:
             the pattern to 2R tokens
  stdlib     the 85 held-out stdlib files (305k tokens) on the stdlib.reference index (7.21M
             tokens, eval/corpora.py): ordinary held-out text, one `ig_score` call per file
  shakespeare  tinyshakespeare bytes: index of the first 90%, score the last 10% in 4 KB calls
  states     decoding states on the run corpus, one `ig_state_extend` call per token

Engines take turns round by round (base, new, new, base, ...); tokens/s = tokens / the median
round. A workload the base core would spend more than --base-budget seconds on is timed once.
Every answer of the new core is compared with the base core's (counts, suffix lengths, sparse).
Results: eval/results/dense_backoff.json and a markdown table on stdout.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
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

from infinigram_hf import build_index  # noqa: E402

RESULTS = HERE / "results"


def log(msg: str) -> None:
    print(f"[bench_dense_backoff {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the two cores


def compile_core(src_dir: Path, out: Path) -> Path:
    srcs = sorted(str(p) for p in (src_dir / "src").glob("*.c"))
    cmd = ["gcc", "-O2", "-std=c99", "-D_GNU_SOURCE", "-fPIC", "-shared", "-pthread", f"-I{src_dir / 'include'}",
           *srcs, "-lm", "-o", str(out)]
    subprocess.run(cmd, check=True)
    return out


def base_sources(commit: str, dest: Path) -> Path:
    """native/ of `commit`, exported with git archive."""
    dest.mkdir(parents=True, exist_ok=True)
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "native"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    return dest / "native"


class Core:
    """ig_open / ig_score / ig_state_* of one compiled core (ctypes releases the GIL)."""

    def __init__(self, lib_path: Path):
        self.lib = ctypes.CDLL(str(lib_path))
        P = ctypes.c_void_p
        self.lib.ig_open.argtypes = [ctypes.POINTER(P), ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_char_p,
                                     ctypes.c_size_t]
        self.lib.ig_score.argtypes = [P, P, ctypes.c_int64, P, P, P, P, ctypes.c_char_p, ctypes.c_size_t]
        # API version 5 passes each state with its length (int64 values); older cores do not
        self.sized = hasattr(self.lib, "ig_api_version") and self.lib.ig_api_version() >= 5
        n = [ctypes.c_int64] if self.sized else []
        self.lib.ig_state_init.argtypes = [P, P, ctypes.c_int64, P, *n, ctypes.c_char_p, ctypes.c_size_t]
        self.lib.ig_state_extend.argtypes = [P, P, *n, P, ctypes.c_int64, P, ctypes.c_char_p, ctypes.c_size_t]
        self.lib.ig_close.argtypes = [P]

    def open(self, shard_dirs: List[Path]) -> Any:
        arr = (ctypes.c_char_p * len(shard_dirs))(*[os.fsencode(d) for d in shard_dirs])
        out, err = ctypes.c_void_p(), ctypes.create_string_buffer(1024)
        if self.lib.ig_open(ctypes.byref(out), arr, len(shard_dirs), err, 1024):
            raise RuntimeError(err.value.decode())
        return out

    def score(self, ix: Any, q: np.ndarray) -> tuple:
        n = len(q)
        num, den = np.zeros(n, np.uint64), np.zeros(n, np.uint64)
        sl, sp = np.zeros(n, np.int64), np.zeros(n, np.uint8)
        err = ctypes.create_string_buffer(1024)
        rc = self.lib.ig_score(ix, q.ctypes.data, n, num.ctypes.data, den.ctypes.data, sl.ctypes.data, sp.ctypes.data,
                               err, 1024)
        if rc:
            raise RuntimeError(err.value.decode())
        return num, den, sl, sp

    def walk_states(self, ix: Any, q: np.ndarray, size: int, lookback: int) -> np.ndarray:
        """The state after every prefix of q, one ig_state_extend call per token."""
        st, out = np.zeros(size, np.int64), np.zeros(size, np.int64)
        err = ctypes.create_string_buffer(1024)
        n = (size,) if self.sized else ()
        self.lib.ig_state_init(ix, q.ctypes.data, 0, st.ctypes.data, *n, err, 1024)
        lens = np.zeros(len(q), np.int64)
        base = q.ctypes.data
        for i in range(len(q)):
            a = max(0, i - lookback)
            if self.lib.ig_state_extend(ix, st.ctypes.data, *n, base + 4 * a, i + 1 - a, out.ctypes.data, err, 1024):
                raise RuntimeError(err.value.decode())
            st, out = out, st
            lens[i] = st[0]
        return lens


# --------------------------------------------------------------------------- workloads


def shard_dirs(index_dir: Path) -> List[Path]:
    meta = json.loads((index_dir / "meta.json").read_text())
    return [index_dir / s["dir"] for s in meta["shards"]]


def built(path: Path, docs: Any, vocab_size: int) -> Path:
    if not (path / "meta.json").exists():
        build_index(docs, path, vocab_size=vocab_size, progress=False, overwrite=True).close()
    return path


def workloads(cache: Path, quick: bool) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    runs = [2_000, 5_000, 20_000] if not quick else [2_000, 5_000]
    for r in runs:
        ix = built(cache / f"run{r}", [[1] * r, [2, 3, 1, 4]], 8)
        out[f"run R={r:,}"] = {"index": ix, "queries": [np.ones(2 * r, np.uint32)]}
    for p in ([3, 37] if not quick else [3]):
        r = 5_000  # (the base core needs minutes for 20,000)
        pat = (np.arange(p) % 7 + 1).astype(np.uint32)
        ix = built(cache / f"periodic{p}-{r}", [np.resize(pat, r).tolist()], 8)
        out[f"periodic p={p}, R={r:,}"] = {"index": ix, "queries": [np.resize(pat, 2 * r)]}
    rng = np.random.default_rng(1)
    pat = rng.integers(0, 50, 13)
    corpus = np.resize(pat, 20_000)
    corpus[::500] = 60
    ix = built(cache / "defects", [corpus.tolist()], 64)
    out["defects every 500, p=13, R=20,000"] = {"index": ix, "queries": [np.resize(pat, 40_000).astype(np.uint32)]}
    try:
        import corpora
        tokens, offsets = corpora.load_tokens("stdlib.reference")
        held_t, held_o = corpora.load_tokens("stdlib.heldout")
    except Exception as exc:  # corpora not prepared: skip the workload, say so
        log(f"stdlib corpora missing ({exc}); run eval/corpora.py train-tokenizer && eval/corpora.py tokenize stdlib")
    else:
        offsets = np.asarray(offsets, np.int64)
        path = cache / "stdlib.reference"
        if not (path / "meta.json").exists():
            log("building stdlib.reference (7.2M tokens)")
            build_index((np.asarray(tokens[offsets[i]:offsets[i + 1]]) for i in range(len(offsets) - 1)), path,
                        vocab_size=corpora.VOCAB_SIZE, progress=False, overwrite=True).close()
        held_o = np.asarray(held_o, np.int64)
        qs = [np.asarray(held_t[held_o[i]:held_o[i + 1]], np.uint32) for i in range(len(held_o) - 1)]
        out["stdlib held-out (85 files)"] = {"index": path, "queries": qs if not quick else qs[:20]}
    text = (ROOT.parent.parent / "shared" / "data" / "tinyshakespeare.txt")
    text = text if text.exists() else Path("/work/shared/data/tinyshakespeare.txt")
    if text.exists():
        data = np.frombuffer(text.read_bytes(), np.uint8).astype(np.uint32)
        cut = len(data) * 9 // 10
        ix = built(cache / "shakespeare", [data[:cut]], 256)
        held = data[cut:]
        out["shakespeare held-out, 4 KB calls"] = {"index": ix, "queries": [held[a:a + 4096]
                                                                            for a in range(0, len(held), 4096)]}
    return out


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    r = fn()
    return r, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="commit of the core to compare with")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base-budget", type=float, default=30.0, help="seconds above which the base is timed once")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cache", default=os.environ.get("INFINIGRAM_EVAL_CACHE", str(Path.home() / ".cache" /
                                                                                    "infinigram_hf_eval")))
    args = ap.parse_args()
    cache = Path(args.cache) / "dense_backoff"
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="dense-backoff-"))
    log(f"compiling {args.base} and the working tree")
    base = Core(compile_core(base_sources(args.base, tmp / "base"), tmp / "base.so"))
    new = Core(compile_core(ROOT / "native", tmp / "new.so"))
    res: Dict[str, Any] = {"base": args.base, "date": time.strftime("%Y-%m-%d"), "rounds": args.rounds,
                           "workloads": {}}
    for name, w in workloads(cache, args.quick).items():
        dirs = shard_dirs(w["index"])
        ixs = {"base": base.open(dirs), "new": new.open(dirs)}
        cores = {"base": base, "new": new}
        qs = w["queries"]
        n_tok = sum(len(q) for q in qs)

        def run(who: str) -> list:
            return [cores[who].score(ixs[who], q) for q in qs]

        got, t_new = timed(lambda: run("new"))
        want, t_base = timed(lambda: run("base"))
        same = all(all(np.array_equal(a, b) for a, b in zip(x, y)) for x, y in zip(got, want))
        times = {"base": [t_base], "new": [t_new]}
        for r in range(args.rounds - 1):
            for who in (("base", "new") if r % 2 else ("new", "base")):
                if who == "base" and t_base > args.base_budget:
                    continue
                times[who].append(timed(lambda: run(who))[1])
        rec = {"tokens": n_tok, "same_answers": bool(same),
               "mean_suffix_len": round(float(np.mean(np.concatenate([g[2] for g in got]))), 1)}
        for who in ("base", "new"):
            med = float(np.median(times[who]))
            rec[who] = {"seconds": round(med, 4), "tokens_per_s": round(n_tok / med), "rounds": len(times[who])}
        rec["speedup"] = round(rec["base"]["seconds"] / rec["new"]["seconds"], 2)
        res["workloads"][name] = rec
        log(f"{name}: base {rec['base']['tokens_per_s']:,} tok/s, new {rec['new']['tokens_per_s']:,} tok/s, "
            f"x{rec['speedup']}, same={same}")
    # decoding states, one call per token, on a run corpus
    r = 5_000 if args.quick else 20_000
    path = built(cache / f"run{r}", [[1] * r, [2, 3, 1, 4]], 8)
    q = np.ones(r + 2_000, np.uint32)
    lens, stimes = {}, {}
    for who, core in (("new", new), ("base", base)):
        ix = core.open(shard_dirs(path))
        lens[who], stimes[who] = timed(lambda: core.walk_states(ix, q, 4, r + 1))
    steps = len(q)
    res["workloads"][f"states, run R={r:,}, one call per token"] = {
        "tokens": steps, "same_answers": bool(np.array_equal(lens["new"], lens["base"])),
        "base": {"seconds": round(stimes["base"], 3), "us_per_step": round(stimes["base"] / steps * 1e6, 1)},
        "new": {"seconds": round(stimes["new"], 3), "us_per_step": round(stimes["new"] / steps * 1e6, 1)},
        "speedup": round(stimes["base"] / stimes["new"], 2)}
    RESULTS.mkdir(exist_ok=True)
    if not args.quick:
        (RESULTS / "dense_backoff.json").write_text(json.dumps(res, indent=1) + "\n")
    print("| workload | tokens | base tok/s | new tok/s | new / base | same answers |")
    print("|---|---:|---:|---:|---:|---|")
    for name, rec in res["workloads"].items():
        if "tokens_per_s" in rec["base"]:
            b, n = f"{rec['base']['tokens_per_s']:,}", f"{rec['new']['tokens_per_s']:,}"
        else:
            b, n = f"{rec['base']['us_per_step']:,} µs/step", f"{rec['new']['us_per_step']:,} µs/step"
        print(f"| {name} | {rec['tokens']:,} | {b} | {n} | {rec['speedup']}× | {rec['same_answers']} |")


if __name__ == "__main__":
    main()
