"""One decoding step over HTTP, before/after in the same run: where the step's time goes, and its floor.

Each measurement is a child process run with one version of the package (the previous one from
--old, or this checkout), which starts its own servers on loopback (1 worker each) and times, per
request (wall: median; CPU: mean over the cell, client thread + server process from
/proc/PID/task/*/schedstat, in ns):

- ``raw``: a bare uvloop protocol answering a fixed 3 kB body (eval/serve_floor_apps.py): the
  floor of a round trip between two Python processes on this machine;
- ``echo``: a bare ASGI app answering the same body through uvicorn and the package's HTTP
  protocol (the server's floor without any app code);
- ``rows_ntd``: the decoding step of `RemoteRowStates.ntd` at --batch rows, each row growing one
  held-out token per step (the request the processor sends);
- ``local``: the same step in-process (`RowStates.ntd`), which the remote step replaces.

Old and new alternate for --rounds rounds; medians of the rounds are reported.

    python eval/bench_serve_step.py --old /tmp/old_checkout --batch 8 --rounds 5 \
        --out eval/results/bench_serve_step.json
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen) -> None:
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def sched_ns(pid: int) -> int:
    """CPU time of every thread of a process so far (ns, from the scheduler's own accounting)."""
    total = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            total += int(Path(f).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def worker(args: argparse.Namespace) -> dict:
    """Runs inside the child: the cells for the package version on sys.path."""
    import numpy as np

    sys.path.insert(1, str(HERE))
    from bench_serve import contexts

    from infinigram_hf import InfiniGramIndex
    from infinigram_hf.index.http_pool import Pool
    from infinigram_hf.index.row_states import RowStates

    py, procs = sys.executable, []

    def start(cmd: list) -> tuple:
        port = free_port()
        p = subprocess.Popen([c.replace("PORT", str(port)) for c in cmd], stdout=subprocess.DEVNULL,
                             env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
                                 os.environ.get("PYTHONPATH"), str(HERE)]))))
        procs.append(p)
        wait_port(port, p)
        return p, port

    out: dict = {}
    try:
        raw = start([py, str(HERE / "serve_floor_apps.py"), "PORT"])
        echo = start([py, "-m", "uvicorn", "serve_floor_apps:app", "--port", "PORT", "--loop", "uvloop",
                      "--http", "infinigram_hf.serve.protocol:HttpToolsWithHeaderTimeout",
                      "--no-access-log", "--log-level", "warning", "--no-server-header"])
        srv = start([py, "-m", "infinigram_hf.cli", "serve", args.index, "--name", "ix", "--port", "PORT",
                     "--workers", "1"])
        B, N = args.batch, args.steps
        ctxs = [c for c in contexts(20 * B, 7 + B) if len(c) >= 64 + max(N, args.proc_steps)][:B]
        rows_all = np.array([c[:64 + N] for c in ctxs], dtype=np.int64)
        starts = np.zeros(B, dtype=np.int64)
        body, hdr = b"y" * 1144, {"Content-Type": "application/x-infinigram-arrays"}
        remote, local = InfiniGramIndex.open(f"http://127.0.0.1:{srv[1]}/ix"), InfiniGramIndex.open(args.index)
        for name, proc in (("raw", raw[0]), ("echo", echo[0]), ("rows_ntd", srv[0]), ("local", None)):
            if name in ("raw", "echo"):
                pool = Pool("http", f"127.0.0.1:{(raw if name == 'raw' else echo)[1]}")
                step = lambda k, pool=pool: pool.request("POST", "/v1/ix/op/x", body, hdr, 10)  # noqa: E731
            else:
                rs = remote.suffix_cache().row_states() if name == "rows_ntd" else RowStates(local.suffix_cache())
                step = lambda k, rs=rs: rs.ntd(rows_all[:, :64 + k], starts)  # noqa: E731
            for k in range(5):  # warm-up (and the first step of rows_ntd: whole contexts)
                step(0)
            if name in ("rows_ntd", "local"):
                rs.reset()
                step(0)
            walls = []
            s0, c0 = sched_ns(proc.pid) if proc else 0, time.thread_time_ns()
            for k in range(1, N):
                t0 = time.perf_counter_ns()
                step(k)
                walls.append(time.perf_counter_ns() - t0)
            c1, s1 = time.thread_time_ns(), sched_ns(proc.pid) if proc else 0
            out[name] = {"wall_us": statistics.median(walls) / 1e3, "client_cpu_us": (c1 - c0) / (N - 1) / 1e3,
                         "server_cpu_us": (s1 - s0) / (N - 1) / 1e3}
        if args.processor:
            out.update(processor_cells(args, local, remote, ctxs, srv[0], (raw, echo)))
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    return out


def processor_cells(args: argparse.Namespace, local, remote, ctxs: list, server, floors: tuple) -> dict:
    """The processor's step (`InfiniGramLogitsProcessor` over 32k-vocabulary scores, each row
    growing one held-out token a step, as eval/bench_serve.py): in-process (``proc_local``), over
    the remote index (``proc_remote``), and in-process followed by one round trip to the raw /
    the bare ASGI floor server (``proc_raw``, ``proc_echo``: what any server would add to a step
    made this way, at this load). Rounds of the four alternate; wall = median step, CPU = mean."""
    import torch

    from infinigram_hf import InfiniGramLogitsProcessor
    from infinigram_hf.index.http_pool import Pool

    torch.set_num_threads(1)
    B, steps = len(ctxs), args.proc_steps
    scores = torch.randn(B, 32000 + 64, generator=torch.Generator().manual_seed(0))
    ids = [torch.tensor([c[:k] for c in ctxs]) for k in range(64, 64 + steps)]
    body, hdr = b"y" * 1144, {"Content-Type": "application/x-infinigram-arrays"}
    pools = {"proc_raw": Pool("http", f"127.0.0.1:{floors[0][1]}"), "proc_echo": Pool("http", f"127.0.0.1:{floors[1][1]}")}
    pids = {"proc_raw": floors[0][0].pid, "proc_echo": floors[1][0].pid, "proc_remote": server.pid}
    cells: dict = {}
    for _ in range(args.proc_rounds):
        for name in ("proc_local", "proc_raw", "proc_echo", "proc_remote"):
            proc = InfiniGramLogitsProcessor(remote if name == "proc_remote" else local, 0.5, 0.3)
            pool = pools.get(name)
            walls = []
            pid = pids.get(name)
            s0, c0 = sched_ns(pid) if pid else 0, time.thread_time_ns()
            for x in ids:
                t0 = time.perf_counter_ns()
                proc(x, scores)
                if pool is not None:
                    pool.request("POST", "/v1/ix/op/x", body, hdr, 10)
                walls.append(time.perf_counter_ns() - t0)
            c1, s1 = time.thread_time_ns(), sched_ns(pid) if pid else 0
            cells.setdefault(name, []).append((statistics.median(walls) / 1e3, (c1 - c0 + s1 - s0) / steps / 1e3))
    return {name: {"wall_us": statistics.median(w for w, _ in v), "cpu_us": statistics.median(c for _, c in v)}
            for name, v in cells.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", help="a directory holding the previous version's infinigram_hf package (built)")
    ap.add_argument("--index", default="/tmp/bench_serve/stdlib-reference", help="built by eval/bench_serve.py")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_serve_step.json")
    ap.add_argument("--processor", action="store_true", help="also the processor's whole step (see processor_cells)")
    ap.add_argument("--proc-steps", type=int, default=100)
    ap.add_argument("--proc-rounds", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    variants = {"new": str(ROOT)}
    if args.old:
        variants = {"old": str(Path(args.old).resolve()), **variants}
    runs: dict = {v: [] for v in variants}
    loads = [os.getloadavg()[0]]
    for rnd in range(args.rounds):
        for v, pkg in variants.items():
            # the child (and the servers it starts) import the package from `pkg` (cwd and
            # PYTHONPATH: `python -m` puts the working directory first on sys.path)
            env = dict(os.environ, PYTHONPATH=pkg)
            cmd = [sys.executable, str(HERE / "bench_serve_step.py"), "--worker", "--index", args.index,
                   "--batch", str(args.batch), "--steps", str(args.steps), "--proc-steps", str(args.proc_steps),
                   "--proc-rounds", str(args.proc_rounds)] + (["--processor"] if args.processor else [])
            r = subprocess.run(cmd, cwd=pkg, env=env, capture_output=True, text=True, check=True)
            runs[v].append(json.loads(r.stdout.strip().splitlines()[-1]))
            loads.append(os.getloadavg()[0])
            print(v, rnd, runs[v][-1], flush=True)
    summary = {v: {cell: {m: statistics.median(r[cell][m] for r in rs) for m in rs[0][cell]} for cell in rs[0]}
               for v, rs in runs.items()}
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "batch": args.batch, "steps": args.steps,
           "rounds": args.rounds, "load_1min": loads, "summary": summary, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    print(f"batch {args.batch}, load {min(loads):.1f}-{max(loads):.1f}")
    for v, cells in summary.items():
        for cell, m in cells.items():
            print(f"{v:4s} {cell:9s} " + "  ".join(f"{k} {x:7.1f}" for k, x in m.items()))


if __name__ == "__main__":
    main()
