"""The HTTP server (`infinigram-hf serve`): starlette + uvicorn, imported only here.

`build_app({name: index_like})` makes the ASGI app (reusable: anything with the index query API
can be served, e.g. a fan-out over machines); `serve()` runs it. The client is
`infinigram_hf.index.RemoteIndex` (standard library only), which needs none of this.
"""
from .app import build_app
from .ops import Limits, ServedIndex

__all__ = ["build_app", "Limits", "ServedIndex"]
