"""Load test of `infinigram-hf serve` on loopback, against in-process calls in the same run.

Index: stdlib.reference (7.2M tokens, the eval BPE; eval/corpora.py), built once into --work.
One request = the ∞-gram next-token distribution of a held-out context of 100-500 tokens
(`RemoteIndex.infgram_ntd`, the binary op; in-process: `InfiniGramIndex.infgram_ntd`).

For 1, 8 and 64 concurrent clients (spread over up to 8 client processes, threads inside each;
one pooled keep-alive RemoteIndex per process), every client sends requests back to back for
--seconds; latencies of every request, errors counted. The in-process peer runs the same
queries from as many threads of one process. The server runs in its own process (--workers);
its memory (RSS and PSS of the server and its workers, from /proc) is sampled every second.

Then the processor: `InfiniGramLogitsProcessor` at batch 1 and 8 over a 32k-vocabulary score
row, the context growing one held-out token per step (what generate() does), on the local index
and on the remote one; the difference of the medians is what the remote index adds per step.

    python eval/bench_serve.py --seconds 60 --workers 2     # -> eval/results/bench_serve.json
    python eval/bench_serve.py --processor-only --workers 1 --out eval/results/bench_serve_processor.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(1, str(HERE))


def build(work: Path) -> Path:
    import corpora
    from infinigram_hf import build_index

    out = work / "stdlib-reference"
    if (out / "meta.json").is_file():
        return out
    tokens, offsets = corpora.load_tokens("stdlib.reference")
    offsets = np.asarray(offsets, dtype=np.int64)
    shutil.rmtree(out, ignore_errors=True)
    build_index((np.asarray(tokens[offsets[i]:offsets[i + 1]]) for i in range(len(offsets) - 1)), out,
                vocab_size=corpora.VOCAB_SIZE, progress=False, memory_budget="4GiB").close()
    return out


def contexts(n: int, seed: int = 0) -> list[list[int]]:
    import corpora

    held, hoff = corpora.load_tokens("stdlib.heldout")
    hoff = np.asarray(hoff, dtype=np.int64)
    docs = [np.asarray(held[hoff[i]:hoff[i + 1]], dtype=np.int64) for i in range(len(hoff) - 1)]
    docs = [d for d in docs if len(d) > 700]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        d = docs[int(rng.integers(len(docs)))]
        L = int(rng.integers(100, 501))
        a = int(rng.integers(0, len(d) - L))
        out.append([int(t) for t in d[a:a + L]])
    return out


# ---------------------------------------------------------------------------- clients


def _client_proc(url: str, n_threads: int, seconds: float, start: Any, ready: Any, seed: int, q: Any) -> None:
    from infinigram_hf import InfiniGramIndex

    ctxs = contexts(200, seed)
    ix = InfiniGramIndex.open(url)
    ix.infgram_ntd(ctxs[0])  # connected and warm
    ready.put(1)
    while start.value == 0:
        time.sleep(0.005)
    start_at = start.value
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        mine, errs, i = [], [], k
        while time.time() < start_at:
            time.sleep(0.001)
        end = start_at + seconds
        while time.time() < end:
            t0 = time.perf_counter()
            try:
                ix.infgram_ntd(ctxs[i % len(ctxs)])
                mine.append(time.perf_counter() - t0)
            except Exception as exc:  # counted and reported, never hidden
                errs.append(f"{type(exc).__name__}: {exc}"[:200])
            i += 7
        with lock:
            lat.extend(mine)
            errors.extend(errs)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ix.close()
    q.put((lat, errors))


def remote_phase(url: str, clients: int, seconds: float) -> dict:
    procs = min(clients, 8)
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    ctx = mp.get_context("spawn")
    q, ready = ctx.Queue(), ctx.Queue()
    start = ctx.Value("d", 0.0)
    ps = [ctx.Process(target=_client_proc, args=(url, n, seconds, start, ready, 100 + i, q)) for i, n in enumerate(per)]
    for p in ps:
        p.start()
    for _ in ps:  # every process has imported, connected and sent one request
        ready.get(timeout=300)
    start.value = time.time() + 0.2
    lat: list[float] = []
    errors: list[str] = []
    for _ in ps:
        a, e = q.get(timeout=seconds + 120)
        lat += a
        errors += e
    for p in ps:
        p.join(timeout=30)
    return summarize(lat, errors, seconds, clients, procs)


def local_phase(index_dir: Path, clients: int, seconds: float) -> dict:
    from infinigram_hf import InfiniGramIndex

    ix = InfiniGramIndex.open(index_dir)
    ctxs = contexts(200, 100)
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start_at = time.time() + 0.5

    def worker(k: int) -> None:
        mine, i = [], k
        while time.time() < start_at:
            time.sleep(0.001)
        while time.time() < start_at + seconds:
            t0 = time.perf_counter()
            ix.infgram_ntd(ctxs[i % len(ctxs)])
            mine.append(time.perf_counter() - t0)
            i += 7
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ix.close()
    return summarize(lat, errors, seconds, clients, 1)


def summarize(lat: list, errors: list, seconds: float, clients: int, procs: int) -> dict:
    a = np.sort(np.asarray(lat)) * 1000 if lat else np.zeros(1)
    return {"clients": clients, "client_processes": procs, "requests": len(lat), "errors": len(errors),
            "error_samples": errors[:5], "req_per_s": len(lat) / seconds, "p50_ms": float(np.percentile(a, 50)),
            "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a[-1])}


# ---------------------------------------------------------------------------- server memory


def tree_pids(pid: int) -> list[int]:
    out = [pid]
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().split(") ", 1)[1].split()[1]) == pid:
                    out += tree_pids(int(p.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def memory_mib(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of the process and its children in MiB (PSS counts shared index pages once)."""
    rss = pss = 0
    for p in tree_pids(pid):
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            pass
    return rss / 1024, pss / 1024


def rss_slope(mem: list) -> float:
    """Least-squares slope of the server's RSS over the run, in MiB per minute (flat: about 0)."""
    if len(mem) < 2:
        return 0.0
    t = np.array([m[0] for m in mem]) - mem[0][0]
    return float(np.polyfit(t / 60.0, np.array([m[1] for m in mem]), 1)[0])


class MemorySampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.samples, self.stop = pid, [], threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.samples.append((time.time(),) + memory_mib(self.pid))


# ---------------------------------------------------------------------------- processor step


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its children (workers) so far."""
    total = 0
    for p in tree_pids(pid):
        try:
            f = Path(f"/proc/{p}/stat").read_text().split(") ", 1)[1].split()
            total += int(f[11]) + int(f[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def processor_steps(local: Any, remote: Any, batch: int, steps: int, rounds: int, server_pid: int) -> dict:
    import torch

    from infinigram_hf import InfiniGramLogitsProcessor

    ctxs = [c for c in contexts(20 * batch, 7 + batch) if len(c) >= 64 + steps][:batch]
    assert len(ctxs) == batch, "not enough long held-out contexts for --steps"
    width = 32000 + 64
    scores = torch.randn(batch, width, generator=torch.Generator().manual_seed(0))
    out = {}
    for name, ix in (("local", local), ("remote", remote)):
        per_round, cpu = [], []
        for _ in range(rounds):
            proc = InfiniGramLogitsProcessor(ix, 0.5, 0.3)
            times = []
            client_cpu, s0 = 0.0, cpu_seconds(server_pid)
            for k in range(64, 64 + steps):
                ids = torch.tensor([c[:k] for c in ctxs])
                c0, t0 = time.process_time(), time.perf_counter()
                proc(ids, scores)
                times.append(time.perf_counter() - t0)
                client_cpu += time.process_time() - c0
            # CPU per step: the call in this process, plus the server's over the round (what a
            # quiet machine would take; the wall time here includes waiting for a CPU)
            cpu.append((client_cpu + cpu_seconds(server_pid) - s0) / steps * 1000)
            per_round.append(statistics.median(times) * 1000)
        out[f"{name}_ms"] = statistics.median(per_round)
        out[f"{name}_cpu_ms"] = statistics.median(cpu)
    out["added_ms"] = out["remote_ms"] - out["local_ms"]
    out["added_cpu_ms"] = out["remote_cpu_ms"] - out["local_cpu_ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_serve"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--processor-only", action="store_true", help="skip the load test")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_serve.json")
    args = ap.parse_args()
    torch_threads = 1
    import torch
    torch.set_num_threads(torch_threads)

    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    index_dir = build(args.work)
    print(f"index {index_dir} ready in {time.perf_counter() - t0:.1f} s", flush=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "infinigram_hf.cli", "serve", str(index_dir), "--name", "stdlib",
                               "--port", str(port), "--workers", str(args.workers), "--max-inflight", "256"],
                              stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/stdlib"
    res: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": args.seconds,
                           "workers": args.workers, "cores": os.cpu_count(), "load_before": os.getloadavg(),
                           "remote": [], "local": []}
    try:
        import httpx
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        sampler = MemorySampler(server.pid)
        sampler.start()
        for c in ([] if args.processor_only else args.clients):
            r = remote_phase(url, c, args.seconds)
            print("remote", r, flush=True)
            res["remote"].append(r)
            loc = local_phase(index_dir, c, args.seconds)
            print("local ", loc, flush=True)
            res["local"].append(loc)
        sampler.stop.set()  # (its /proc scans would count as CPU of the processor steps)
        sampler.join()
        mem = sampler.samples or [(time.time(),) + memory_mib(server.pid)]
        res["server_memory_mib"] = {"first_rss": mem[0][1], "last_rss": mem[-1][1], "max_rss": max(m[1] for m in mem),
                                    "first_pss": mem[0][2], "last_pss": mem[-1][2], "max_pss": max(m[2] for m in mem),
                                    "samples": len(mem), "rss_slope_mib_per_min": rss_slope(mem),
                                    "series": [[round(t - mem[0][0], 1), round(r, 1), round(q, 1)] for t, r, q in mem]}
        from infinigram_hf import InfiniGramIndex
        local, remote = InfiniGramIndex.open(index_dir), InfiniGramIndex.open(url)
        res["processor"] = {b: processor_steps(local, remote, b, args.steps, args.rounds, server.pid) for b in (1, 8)}
        print("processor", res["processor"], flush=True)
        res["load_after"] = os.getloadavg()
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k not in ("remote", "local")}, indent=1))


if __name__ == "__main__":
    main()
