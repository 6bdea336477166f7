"""Running the app: uvicorn (httptools and uvloop when installed, else h11 and asyncio; either with a
header-read deadline), one or several worker processes.

Each worker opens the indexes itself (an mmap: the page cache holds the files once, whatever the
number of workers). Workers are started by uvicorn from an import string, so the configuration
travels in an environment variable (JSON), read by `app_from_env`.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional, Sequence

from .ops import Limits

CONFIG_ENV = "INFINIGRAM_SERVE_CONFIG"


def index_names(paths: Sequence[str], names: Optional[Sequence[str]] = None) -> dict[str, str]:
    """{name: path}: the names given (--name, one per index), else each directory's own name."""
    if names and len(names) != len(paths):
        raise ValueError(f"give one --name per index ({len(paths)}), got {len(names)}")
    out: dict[str, str] = {}
    for i, p in enumerate(paths):
        name = names[i] if names else Path(p).resolve().name
        if not name or "/" in name or name in out:
            raise ValueError(f"index names must be distinct and non-empty without '/', got {name!r}")
        out[name] = str(Path(p).resolve())
    return out


def app_from_env() -> Any:
    """The app of one worker, from the configuration the serve command put in the environment."""
    from ..index import InfiniGramIndex
    from .app import build_app

    cfg = json.loads(os.environ[CONFIG_ENV])
    indexes = {name: InfiniGramIndex.open(path) for name, path in cfg["indexes"].items()}
    return build_app(indexes, limits=Limits(**cfg["limits"]), api_key=cfg.get("api_key"),
                     cors_origins=tuple(cfg.get("cors_origins", ())), threads=cfg.get("threads"))


def serve(indexes: dict[str, str], *, host: str = "127.0.0.1", port: int = 8000, workers: int = 1,
          limits: Limits = Limits(), api_key: Optional[str] = None, cors_origins: Sequence[str] = (),
          threads: Optional[int] = None, header_timeout: float = 10.0, log_level: str = "warning") -> None:
    """Serve {name: index directory} until interrupted."""
    import uvicorn

    from .protocol import HEADER_TIMEOUT_ENV, best_protocol

    os.environ[CONFIG_ENV] = json.dumps({"indexes": indexes, "limits": asdict(limits), "api_key": api_key,
                                         "cors_origins": list(cors_origins), "threads": threads})
    os.environ[HEADER_TIMEOUT_ENV] = str(header_timeout)
    metrics_dir = None
    if workers > 1:  # every worker's counts in every scrape (prometheus_client multiprocess mode)
        metrics_dir = tempfile.mkdtemp(prefix="infinigram-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        uvicorn.run("infinigram_hf.serve.run:app_from_env", factory=True, host=host, port=port, workers=workers,
                    http=best_protocol(), loop="auto", log_level=log_level,
                    timeout_keep_alive=5, access_log=False, proxy_headers=False,
                    server_header=False)
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
