"""`infinigram-hf serve INDEX [INDEX...]`: serve indexes over HTTP (needs the [serve] extra)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import CLIError


def add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve indexes over HTTP (official-API-compatible and batched endpoints)",
                       description="Serve indexes over HTTP (README 'Serving an index', docs/SERVING.md). "
                                   "Loopback only unless --host says otherwise.")
    p.add_argument("indexes", nargs="+", metavar="INDEX", help="index directories")
    p.add_argument("--name", action="append", help="the name of each index in URLs (default: its directory's name)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="worker processes (each maps the indexes; pages are shared)")
    p.add_argument("--threads", type=int, default=None, help="query threads per worker (default 2 x cores)")
    p.add_argument("--api-key-file", type=Path, help="a file holding the API key clients must send as a Bearer token")
    p.add_argument("--cors-origin", action="append", default=[], help="allow this browser origin (none by default)")
    p.add_argument("--max-body", type=int, default=64 << 20, help="request body cap in bytes (413 past it)")
    p.add_argument("--max-batch", type=int, default=4096, help="rows per batched request")
    p.add_argument("--max-inflight", type=int, default=64, help="requests in progress per worker (503 past it)")
    p.add_argument("--time-budget", type=float, default=30.0, help="seconds per request (504 past it)")
    p.add_argument("--header-timeout", type=float, default=10.0, help="seconds a client has to send a request head")
    p.add_argument("--log-level", default="warning")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    try:
        from ..serve.ops import Limits
        from ..serve.run import index_names, serve
    except ImportError as exc:
        raise CLIError(f"serving needs the [serve] extra (pip install 'infinigram_hf[serve]'): {exc}") from None
    from ..index import InfiniGramIndex

    for name, value, lo in (("--port", args.port, 0), ("--workers", args.workers, 1), ("--max-body", args.max_body, 1),
                            ("--max-batch", args.max_batch, 1), ("--max-inflight", args.max_inflight, 1)):
        if value < lo:
            raise CLIError(f"{name} must be at least {lo}, got {value}")
    if not (args.time_budget > 0 and args.header_timeout > 0):
        raise CLIError("--time-budget and --header-timeout must be positive")
    indexes = index_names(args.indexes, args.name)
    for path in indexes.values():  # fail here, with the file named, rather than in every worker
        InfiniGramIndex.open(path).close()
    api_key = None
    if args.api_key_file is not None:
        api_key = args.api_key_file.read_text().strip()
        if not api_key:
            raise CLIError(f"{args.api_key_file}: the API key file is empty")
    limits = Limits(max_body_bytes=args.max_body, max_batch=args.max_batch, time_budget_s=args.time_budget,
                    max_inflight=args.max_inflight)
    print(f"serving {', '.join(indexes)} on http://{args.host}:{args.port}/ (Ctrl-C stops)", flush=True)
    serve(indexes, host=args.host, port=args.port, workers=args.workers, limits=limits, api_key=api_key,
          cors_origins=args.cors_origin, threads=args.threads, header_timeout=args.header_timeout,
          log_level=args.log_level)
    return 0


COMMANDS = [add_serve]
