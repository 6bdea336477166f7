#!/usr/bin/env python3
"""Build and query the *official* infini-gram engine (PyPI ``infini-gram==2.6.0``) offline.

The official package ships a compiled pybind11 extension (``cpp_engine``) and a
prebuilt Rust binary (``rust_indexing``) that builds the suffix array.  It is
installed into its own virtualenv so the dev venv is not disturbed::

    python3 eval/official_engine.py setup            # -> <cache>/venv-official
    python3 eval/official_engine.py build stdlib.reference
    python3 eval/official_engine.py build linux
    python3 eval/official_engine.py query stdlib.reference

(``build`` / ``query`` re-exec themselves with ``<cache>/venv-official/bin/python``
when ``infini_gram`` is not importable in the current interpreter; override the
interpreter with ``$INFINIGRAM_OFFICIAL_PYTHON``.)

Offline indexing of pre-tokenized arrays (verified against the 2.6.0 source,
``infini_gram/indexing.py``):

* Into an *empty* save dir write ``tokenized.0`` -- for each document the
  separator bytes ``ff ff`` followed by its u16 ids, little-endian -- and
  ``offset.0`` -- one u64 per document, the byte offset of its separator in
  ``tokenized.0``.  ``indexing.tokenize()`` then prints "Step 1 (tokenize):
  Skipped" (it checks only that both files exist, before importing
  transformers) and ``build_sa()`` builds ``table.0`` (suffix array, each
  pointer ``ceil(log2(ds_bytes)/8)`` bytes) with ``rust_indexing make-part`` /
  ``merge`` / ``concat``.
* Command: ``python -m infini_gram.indexing --data_dir <existing dir>
  --save_dir <dir> --version 4 --token_dtype u16 --shards 1 --cpus 2 --mem 8
  --ulimit <= hard RLIMIT_NOFILE``.  Paths must be absolute (build_sa does
  ``os.chdir`` into the package dir); ``--ulimit`` is passed to
  ``setrlimit(NOFILE, (u, u))`` and fails above the hard limit for non-root.
  The temp dirs ``parts-0`` / ``merged-0`` are created inside the save dir.
* The engine finds its files by *substring of the full path*
  (``"tokenized"``, ``"table"``, ``"offset"``, ``"metadata"``, ``"metaoff"``,
  ``"unigram"``), so no other file may sit in the index dir and the index dir
  path itself must not contain any of these words (checked here).
* Load: ``InfiniGramEngine(index_dir=..., eos_token_id=0, version=4,
  token_dtype='u16', ds_prefetch_depth=0, sa_prefetch_depth=0,
  od_prefetch_depth=0)``; ``eos_token_id`` must be < ``vocab_size`` (65535).

Index dirs: ``<cache>/official/<name>``; build figures are merged into
``eval/results/official_build.json`` (``--results``).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpora  # noqa: E402

OFFICIAL_VERSION = "2.6.0"
DOC_SEP = 0xFFFF
FORBIDDEN_SUBSTRINGS = ("tokenized", "table", "offset", "metadata", "metaoff", "unigram")
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = REPO_ROOT / "eval" / "results" / "official_build.json"


def _log(msg: str) -> None:
    print(f"[official {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- #
# venv
# --------------------------------------------------------------------------- #

def official_venv() -> Path:
    return corpora.cache_dir() / "venv-official"


def official_python() -> str:
    return os.environ.get("INFINIGRAM_OFFICIAL_PYTHON") or str(official_venv() / "bin" / "python")


def setup_venv(force: bool = False) -> str:
    """Create ``<cache>/venv-official`` with infini-gram==2.6.0, numpy, psutil."""
    venv = official_venv()
    py = venv / "bin" / "python"
    if force or not py.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"infini-gram=={OFFICIAL_VERSION}",
                    "numpy", "psutil"], check=True)
    out = subprocess.run([str(py), "-c", "import infini_gram, infini_gram.engine, os;"
                          "print(os.path.dirname(infini_gram.__file__))"],
                         check=True, capture_output=True, text=True).stdout.strip()
    _log(f"infini-gram {OFFICIAL_VERSION} installed in {venv} ({out})")
    return str(py)


def _have_infini_gram() -> bool:
    try:
        import infini_gram.engine  # noqa: F401
        import psutil  # noqa: F401
        return True
    except ImportError:
        return False


def _reexec_in_official_venv() -> None:
    if _have_infini_gram():
        return
    py = official_python()
    if not Path(py).exists():
        sys.exit(f"infini_gram not importable and {py} missing: run `python3 {__file__} setup` first")
    if os.environ.get("_INFINIGRAM_OFFICIAL_REEXEC"):
        sys.exit(f"infini_gram/psutil not importable in {py}")
    os.environ["_INFINIGRAM_OFFICIAL_REEXEC"] = "1"
    os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])


# --------------------------------------------------------------------------- #
# Input files
# --------------------------------------------------------------------------- #

def index_dir(name: str) -> Path:
    d = (corpora.cache_dir() / "official" / name).absolute()
    check_index_path(d)
    return d


def check_index_path(d: Path) -> None:
    bad = [w for w in FORBIDDEN_SUBSTRINGS if w in str(d)]
    if bad:
        raise ValueError(f"index dir {d} contains {bad}: the official engine matches its files "
                         f"by substring of the full path; choose another location")


def ds_with_separators(tokens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The ``tokenized.0`` array: for each doc ``0xFFFF`` then its tokens (u16)."""
    n_docs = len(offsets) - 1
    tokens = np.asarray(tokens, dtype=np.uint16)
    if n_docs and tokens.size and int(tokens.max()) >= DOC_SEP:
        raise ValueError("token id 65535 is reserved for the document separator")
    offsets = np.asarray(offsets, dtype=np.int64)
    sep_pos = offsets[:-1] + np.arange(n_docs, dtype=np.int64)  # position of doc i's separator
    ds = np.empty(len(tokens) + n_docs, dtype=np.uint16)
    is_sep = np.zeros(len(ds), dtype=bool)
    is_sep[sep_pos] = True
    ds[is_sep] = DOC_SEP
    ds[~is_sep] = tokens
    return ds


def write_inputs(tokens: np.ndarray, offsets: np.ndarray, save_dir: Path) -> Dict[str, int]:
    """Write ``tokenized.0`` and ``offset.0`` into an empty ``save_dir``."""
    save_dir = Path(save_dir).absolute()
    check_index_path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    if any(save_dir.iterdir()):
        raise FileExistsError(f"{save_dir} is not empty")
    n_docs = len(offsets) - 1
    ds = ds_with_separators(tokens, offsets)
    od = ((np.asarray(offsets[:-1], dtype=np.uint64) + np.arange(n_docs, dtype=np.uint64))
          * np.uint64(2)).astype("<u8")
    ds.astype("<u2").tofile(save_dir / "tokenized.0")
    od.tofile(save_dir / "offset.0")
    return {"ds_bytes": int(ds.nbytes), "docs": int(n_docs)}


# --------------------------------------------------------------------------- #
# Build with measurement
# --------------------------------------------------------------------------- #

class TreeMonitor:
    """Polls a process tree with psutil: peak RSS of the largest process, peak
    summed RSS of the tree, the same for anonymous memory (RSS - file-backed
    shared), and peak bytes under a directory."""

    def __init__(self, pid: int, watch_dir: Optional[Path] = None, interval: float = 0.1):
        import psutil
        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.watch_dir = watch_dir
        self.interval = interval
        self.peak_rss_max_proc = 0
        self.peak_rss_max_proc_name = ""
        self.peak_rss_tree = 0
        self.peak_anon_max_proc = 0
        self.peak_anon_tree = 0
        self.peak_dir_bytes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join()

    def _run(self):
        last_du = 0.0
        while not self._stop.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except self.psutil.NoSuchProcess:
                break
            tot = tot_anon = 0
            for p in procs:
                try:
                    mi = p.memory_info()
                except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                    continue
                anon = mi.rss - getattr(mi, "shared", 0)
                tot += mi.rss
                tot_anon += anon
                if mi.rss > self.peak_rss_max_proc:
                    self.peak_rss_max_proc = mi.rss
                    try:
                        self.peak_rss_max_proc_name = " ".join(p.cmdline()[:2])
                    except Exception:
                        pass
                self.peak_anon_max_proc = max(self.peak_anon_max_proc, anon)
            self.peak_rss_tree = max(self.peak_rss_tree, tot)
            self.peak_anon_tree = max(self.peak_anon_tree, tot_anon)
            self.samples += 1
            now = time.time()
            if self.watch_dir is not None and now - last_du > 1.0:
                last_du = now
                self.peak_dir_bytes = max(self.peak_dir_bytes, _dir_bytes(self.watch_dir))
            self._stop.wait(self.interval)


def _dir_bytes(d: Path) -> int:
    tot = 0
    for dirpath, _, files in os.walk(d):
        for f in files:
            try:
                tot += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return tot


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def build_index(name: str, cpus: int = 2, mem_gib: int = 8, force: bool = False,
                save_dir: Optional[Path] = None) -> dict:
    """Build the official index of the tokenized corpus ``name``; return figures."""
    import shutil
    save_dir = Path(save_dir).absolute() if save_dir else index_dir(name)
    if save_dir.exists():
        if not force and (save_dir / "table.0").exists():
            raise FileExistsError(f"{save_dir}/table.0 exists (use --force to rebuild)")
        shutil.rmtree(save_dir)
    data_dir = corpora.cache_dir() / "official" / "_empty_data_dir"
    data_dir.mkdir(parents=True, exist_ok=True)
    check_index_path(data_dir)

    tokens, offsets = corpora.load_tokens(name)
    n_tok, n_docs = int(len(tokens)), int(len(offsets) - 1)
    _log(f"{name}: {n_tok:,} tokens, {n_docs:,} docs -> {save_dir}")
    t0 = time.time()
    inp = write_inputs(tokens, offsets, save_dir)
    t_write = time.time() - t0
    del tokens

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    ulimit = 1048576 if hard == resource.RLIM_INFINITY else min(1048576, hard)
    cmd = [official_python(), "-m", "infini_gram.indexing",
           "--data_dir", str(data_dir), "--save_dir", str(save_dir),
           "--version", "4", "--token_dtype", "u16", "--shards", "1",
           "--cpus", str(cpus), "--mem", str(mem_gib), "--ulimit", str(ulimit)]
    use_time = Path("/usr/bin/time").exists()
    full_cmd = (["/usr/bin/time", "-v"] if use_time else []) + cmd
    _log("running: " + " ".join(cmd))
    log_path = corpora.cache_dir() / "official" / f"{name}.build.log"
    load_before = os.getloadavg()
    t0 = time.time()
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(full_cmd, stdout=logf, stderr=subprocess.STDOUT)
        mon = TreeMonitor(proc.pid, watch_dir=save_dir).start()
        rc = proc.wait()
        wall = time.time() - t0
        mon.stop()
    load_after = os.getloadavg()
    log = log_path.read_text()
    if rc != 0:
        raise RuntimeError(f"official indexing failed (rc={rc}), see {log_path}:\n{log[-3000:]}")
    steps = {}
    for line in log.splitlines():
        line = line.strip()
        for key in ("Step 2.1 (make-part): Done", "Step 2.2 (merge): Done", "Step 2.3 (concat): Done"):
            if line.startswith(key) and "Took" in line:
                steps[key.split(" (")[1].split(")")[0]] = float(line.rsplit("Took", 1)[1].split()[0])
    time_maxrss_kb = None
    cpu_times = {}
    for line in log.splitlines():
        line = line.strip()
        if line.startswith("Maximum resident set size"):
            time_maxrss_kb = int(line.rsplit(":", 1)[1])
        elif line.startswith("User time (seconds)"):
            cpu_times["user_seconds"] = float(line.rsplit(":", 1)[1])
        elif line.startswith("System time (seconds)"):
            cpu_times["sys_seconds"] = float(line.rsplit(":", 1)[1])
    if "Step 1 (tokenize): Skipped" not in log:
        raise RuntimeError("official indexing did not skip tokenization")

    files = {p.name: p.stat().st_size for p in sorted(save_dir.iterdir())}
    assert set(files) == {"tokenized.0", "offset.0", "table.0"}, files
    total = sum(files.values())
    ds_tok = files["tokenized.0"] // 2
    res = {
        "engine": f"infini-gram=={OFFICIAL_VERSION} (PyPI, prebuilt rust_indexing)",
        "date": time.strftime("%Y-%m-%d"),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "corpus": name,
        "tokens": n_tok,
        "docs": n_docs,
        "ds_tokens_incl_separators": ds_tok,
        "command": " ".join(cmd),
        "cpus": cpus, "mem_gib": mem_gib,
        "machine": {"nproc": os.cpu_count(), "cpu": _cpu_model(),
                    "mem_total_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
        "write_inputs_seconds": round(t_write, 2),
        "build_wall_seconds": round(wall, 2),
        "build_step_seconds": steps,
        "build_cpu_seconds": cpu_times,
        "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
        "loadavg_1_5_15_after": [round(x, 2) for x in load_after],
        "peak_rss_largest_process_bytes": mon.peak_rss_max_proc,
        "peak_rss_largest_process": mon.peak_rss_max_proc_name,
        "peak_rss_largest_process_time_v_bytes": time_maxrss_kb * 1024 if time_maxrss_kb else None,
        "peak_rss_process_tree_bytes": mon.peak_rss_tree,
        "peak_anon_rss_largest_process_bytes": mon.peak_anon_max_proc,
        "peak_anon_rss_process_tree_bytes": mon.peak_anon_tree,
        "peak_index_dir_disk_bytes_during_build": mon.peak_dir_bytes,
        "psutil_samples": mon.samples,
        "files_bytes": files,
        "index_bytes_total": total,
        "bytes_per_token": round(total / max(n_tok, 1), 4),
        "sa_pointer_bytes": files["table.0"] // max(ds_tok, 1),
        "index_dir": str(save_dir),
        "build_log": str(log_path),
    }
    _log(f"{name}: built in {wall:.1f}s, peak RSS (largest proc) {mon.peak_rss_max_proc / 2**20:.0f} MiB, "
         f"{res['bytes_per_token']:.3f} B/token on disk")
    return res


# --------------------------------------------------------------------------- #
# Loading / queries
# --------------------------------------------------------------------------- #

def load_engine(name_or_dir: str, eos_token_id: int = corpora.EOS_TOKEN_ID, **kw):
    """``InfiniGramEngine`` over ``<cache>/official/<name>`` (or an explicit dir)."""
    from infini_gram.engine import InfiniGramEngine
    d = Path(name_or_dir)
    if not d.is_absolute():
        d = index_dir(name_or_dir)
    check_index_path(d)
    args = dict(index_dir=str(d), eos_token_id=eos_token_id, version=4, token_dtype="u16",
                ds_prefetch_depth=0, sa_prefetch_depth=0, od_prefetch_depth=0)
    args.update(kw)
    return InfiniGramEngine(**args)


def _brute_positions(ds: np.ndarray, q: Sequence[int]) -> np.ndarray:
    """Start positions of q in ds (exact, vectorised)."""
    n = len(q)
    if n == 0:
        return np.arange(len(ds))
    pos = np.flatnonzero(ds[:len(ds) - n + 1] == q[0])
    for k in range(1, n):
        pos = pos[ds[pos + k] == q[k]]
    return pos


def _brute_next(ds: np.ndarray, pos: np.ndarray, n: int, eos: int) -> Dict[int, int]:
    nxt_idx = pos + n
    out: Dict[int, int] = {}
    at_end = nxt_idx >= len(ds)
    nxt = np.where(at_end, DOC_SEP, ds[np.minimum(nxt_idx, len(ds) - 1)]).astype(np.int64)
    nxt[nxt == DOC_SEP] = eos
    vals, cnts = np.unique(nxt, return_counts=True)
    for v, c in zip(vals, cnts):
        out[int(v)] = int(c)
    return out


def smoke_test(name: str, n_queries: int = 12, seed: int = 0, bench: int = 300) -> dict:
    """Check count / ntd / prob / infgram_prob / infgram_ntd against brute force
    over the corpus array and time a few hundred queries."""
    eng = load_engine(name)
    tokens, offsets = corpora.load_tokens(name)
    ds = ds_with_separators(tokens, offsets)
    rng = np.random.default_rng(seed)
    eos = corpora.EOS_TOKEN_ID
    checks = []
    t_load = time.time()

    # the whole array: count([]) = number of suffixes incl. separators
    c0 = eng.count([])
    assert c0["count"] == len(ds), (c0, len(ds))
    for i in range(n_queries):
        n = int(rng.integers(1, 9))
        start = int(rng.integers(0, len(tokens) - n))
        q = [int(x) for x in tokens[start:start + n]]
        pos = _brute_positions(ds, q)
        r = eng.count(q)
        assert r["count"] == len(pos) and r["approx"] is False, (q, r, len(pos))
        d = eng.ntd(q, max_support=1000)
        bn = _brute_next(ds, pos, n, eos)
        assert d["prompt_cnt"] == len(pos)
        if not d["approx"]:
            got = {t: v["cont_cnt"] for t, v in d["result_by_token_id"].items()}
            assert got == bn, (q, got, bn)
        cont = max(bn, key=bn.get)
        p = eng.prob(q, cont)
        assert p["prompt_cnt"] == len(pos)
        if cont != eos:
            assert p["cont_cnt"] == bn[cont], (p, bn[cont])
        if i == 0:
            # end-of-document semantics: ntd reports the doc end as eos_token_id,
            # but prob(q, eos) searches q+[eos] literally (eos never occurs in ds)
            di = int(rng.integers(0, len(offsets) - 1))
            tail = [int(x) for x in tokens[offsets[di + 1] - 3:offsets[di + 1]]]
            dt = eng.ntd(tail, max_support=1000)
            pe = eng.prob(tail, eos)
            bt = _brute_next(ds, _brute_positions(ds, tail), 3, eos)
            eos_obs = {"doc_tail": tail, "ntd_eos_cont_cnt": dt["result_by_token_id"].get(eos, {}).get("cont_cnt"),
                       "brute_doc_ends": bt.get(eos, 0), "prob_eos": pe}
        checks.append({"query": q, "count": r["count"], "ntd_support": len(d["result_by_token_id"]),
                       "ntd_approx": d["approx"], "top_next": cont, "prob": p["prob"]})

    # infgram_prob on long prompts: suffix_len = longest suffix with count > 0
    inf_checks = []
    for i in range(4):
        L = 40
        start = int(rng.integers(0, len(tokens) - L - 1))
        prompt = [int(x) for x in tokens[start:start + L]]
        prompt = [int(rng.integers(1, corpora.VOCAB_SIZE)) for _ in range(3)] + prompt  # unseen-ish prefix
        cont = int(tokens[start + L])
        r = eng.infgram_prob(prompt, cont)
        s = r["suffix_len"]
        assert eng.count(prompt[len(prompt) - s:])["count"] > 0
        if s < len(prompt):
            assert eng.count(prompt[len(prompt) - s - 1:])["count"] == 0
        pos = _brute_positions(ds, prompt[len(prompt) - s:])
        assert r["prompt_cnt"] == len(pos)
        bn = _brute_next(ds, pos, s, eos)
        assert r["cont_cnt"] == bn.get(cont, 0)
        nd = eng.infgram_ntd(prompt, max_support=1000)
        assert nd["suffix_len"] == s and nd["prompt_cnt"] == r["prompt_cnt"]
        inf_checks.append({"prompt_len": len(prompt), "cont": cont, **r,
                           "infgram_ntd_support": len(nd["result_by_token_id"])})

    # latency
    lat = {}
    qs = []
    for i in range(bench):
        n = int(rng.integers(1, 11))
        start = int(rng.integers(0, len(tokens) - n))
        qs.append([int(x) for x in tokens[start:start + n]])
    t0 = time.perf_counter()
    for q in qs:
        eng.count(q)
    lat["count_1to10gram_ms"] = (time.perf_counter() - t0) / bench * 1e3
    t0 = time.perf_counter()
    for q in qs:
        eng.ntd(q, max_support=1000)
    lat["ntd_1to10gram_maxsupport1000_ms"] = (time.perf_counter() - t0) / bench * 1e3
    prompts = []
    for i in range(bench):
        start = int(rng.integers(0, len(tokens) - 101))
        prompts.append(([int(x) for x in tokens[start:start + 100]], int(tokens[start + 100])))
    t0 = time.perf_counter()
    for p, c in prompts:
        eng.infgram_prob(p, c)
    lat["infgram_prob_100tok_incorpus_prompt_ms"] = (time.perf_counter() - t0) / bench * 1e3
    # random prompts (mostly short matches)
    rprompts = [([int(x) for x in rng.integers(1, corpora.VOCAB_SIZE, 100)], 1) for _ in range(bench)]
    t0 = time.perf_counter()
    for p, c in rprompts:
        eng.infgram_prob(p, c)
    lat["infgram_prob_100tok_random_prompt_ms"] = (time.perf_counter() - t0) / bench * 1e3
    _log(f"{name}: all checks passed; latency (ms): " + json.dumps({k: round(v, 4) for k, v in lat.items()}))
    return {"corpus": name, "count_empty": c0, "eos_semantics": eos_obs, "checks": checks, "infgram_checks": inf_checks,
            "latency_ms": {k: round(v, 4) for k, v in lat.items()},
            "latency_note": "single-threaded Python loop, warm page cache, prefetch depths 0"}


def merge_results(path: Path, key: str, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault(key, {}).update(value)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")


# --------------------------------------------------------------------------- #
# CLI
# --------------------------------------------------------------------------- #

def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup").add_argument("--force", action="store_true")
    p = sub.add_parser("build", help="write tokenized.0/offset.0 and build table.0 (measured)")
    p.add_argument("name", help="tokenized corpus: stdlib, stdlib.reference, linux, ...")
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--mem", type=int, default=8, help="GiB passed as --mem")
    p.add_argument("--force", action="store_true")
    p.add_argument("--results", default=str(DEFAULT_RESULTS))
    p.add_argument("--no-smoke", action="store_true")
    p = sub.add_parser("query", help="brute-force-checked smoke queries + latency")
    p.add_argument("name")
    p.add_argument("--results", default=str(DEFAULT_RESULTS))
    a = ap.parse_args(argv)

    if a.cmd == "setup":
        setup_venv(force=a.force)
        return
    _reexec_in_official_venv()
    if a.cmd == "build":
        res = build_index(a.name, cpus=a.cpus, mem_gib=a.mem, force=a.force)
        merge_results(Path(a.results), a.name, {"build": res})
        print(json.dumps(res, indent=1))
        if not a.no_smoke:
            q = smoke_test(a.name)
            merge_results(Path(a.results), a.name, {"queries": q})
    elif a.cmd == "query":
        q = smoke_test(a.name)
        merge_results(Path(a.results), a.name, {"queries": q})
        print(json.dumps(q, indent=1))


if __name__ == "__main__":
    main()
