"""The one door to Ray: importing it with a clear message, and connecting to a cluster."""
from __future__ import annotations

from typing import Any, Optional


def require_ray() -> Any:
    """The `ray` module, or ImportError saying how to install it."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("infinigram_hf.distributed needs Ray: pip install 'infinigram-hf[ray]'") from exc
    return ray


def connect(address: Optional[str] = None, **init_kw: Any) -> Any:
    """ray.init(address) unless this process is already connected; returns the ray module.

    address None starts a local runtime (all this machine's CPUs unless num_cpus= says fewer);
    "auto" or "HOST:PORT" joins a running cluster."""
    ray = require_ray()
    if not ray.is_initialized():
        init_kw.setdefault("include_dashboard", False)
        init_kw.setdefault("log_to_driver", False)
        ray.init(address=address, **init_kw)
    return ray


def quiet_data_context() -> Any:
    """Ray Data's context for a build: documents kept in their order (so document ids equal a
    single-machine build's) and no progress bars of its own (the build shows one)."""
    ray = require_ray()
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    return ctx
