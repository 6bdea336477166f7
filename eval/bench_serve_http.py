"""The HTTP layer alone, against a previous version of the package, in the same run: server CPU
per request (the previous server: h11 + starlette; this one: httptools + uvloop + BinaryOps)
and client CPU per request (the previous client: http.client; this one: the socket pool), on a
one-row count op and on GET /health. 2000 requests per cell, 3 interleaved rounds, medians.

    python eval/bench_serve_http.py --old /path/to/old --out eval/results/bench_serve_http.json

--old is a directory holding the previous version's ``infinigram_hf`` package (built): its
server is started with it on PYTHONPATH and its ``index/http_pool.py`` is loaded for the client.
"""
import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(1, str(HERE))
from bench_serve import cpu_seconds
import numpy as np
from infinigram_hf.index import wire
from infinigram_hf.index.http_pool import Pool as NewPool
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--old", required=True)
ap.add_argument("--index", default="/tmp/bench_serve/stdlib-reference", help="built by eval/bench_serve.py")
ap.add_argument("--out", type=Path, default=HERE / "results" / "bench_serve_http.json")
args = ap.parse_args()
spec = importlib.util.spec_from_file_location("old_pool", f"{args.old}/infinigram_hf/index/http_pool.py")
old_pool = importlib.util.module_from_spec(spec)
sys.modules["old_pool"] = old_pool  # (dataclasses look their module up)
spec.loader.exec_module(old_pool)
IDX = args.index
def start(pythonpath):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    env = dict(os.environ); env.pop("PYTHONPATH", None)
    if pythonpath: env["PYTHONPATH"] = pythonpath
    # `python -m` puts the working directory first on sys.path, before PYTHONPATH: the previous
    # server must start in its own directory, or it runs this checkout's package (it did until
    # 2026-11-24 s6, so the "before server" rows of the first run were this server)
    p = subprocess.Popen([sys.executable, "-m", "infinigram_hf.cli", "serve", IDX, "--name", "ix", "--port", str(port)],
                         env=env, stdout=subprocess.DEVNULL, cwd=pythonpath or None)
    for _ in range(600):
        try: socket.create_connection(("127.0.0.1", port), 1).close(); break
        except OSError: time.sleep(0.1)
    return p, port
servers = {"old server": start(args.old), "new server": start(None)}
body = wire.encode({}, {"values": np.arange(5, 10, dtype=np.uint32), "offsets": np.array([0, 5])})
hdr = {"Content-Type": wire.CONTENT_TYPE}
res = {}
try:
    for rnd in range(3):
        for sname, (proc, port) in servers.items():
            for cname, cls in (("http.client pool", old_pool.Pool), ("socket pool", NewPool)):
                pool = cls("http", f"127.0.0.1:{port}")
                for path, b, m in (("/v1/ix/op/count", body, "POST"), ("/health", None, "GET")):
                    for _ in range(50): pool.request(m, path, b, hdr if b else {}, 10)
                    N = 2000; s0 = cpu_seconds(proc.pid); c0 = time.thread_time()
                    for _ in range(N): pool.request(m, path, b, hdr if b else {}, 10)
                    key = f"{sname} | {cname} | {m} {path}"
                    res.setdefault(key, []).append(((cpu_seconds(proc.pid) - s0) / N * 1e6, (time.thread_time() - c0) / N * 1e6))
                pool.close()
finally:
    for p, _ in servers.values():
        p.terminate(); p.wait()
out = {k: {"server_cpu_us": round(statistics.median(a for a, _ in v)), "client_cpu_us": round(statistics.median(c for _, c in v))} for k, v in res.items()}
for k, v in out.items(): print(k, v)
json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg(), "cells": out}, open(args.out, "w"), indent=1)
