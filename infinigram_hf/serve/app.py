"""The ASGI app (starlette): `build_app({name: index_like})`.

An *index-like* is anything with the query API of `InfiniGramIndex` (count_batch,
infgram_prob_batch, infgram_ntd_batch, score_batch, search_docs, get_doc, the metadata
properties); a fan-out over several machines qualifies. Endpoints (docs/SERVING.md):

    POST /                          the official infini-gram API's JSON shape
    POST /v1/{name}/op/{op}         batched ops, binary numpy body (infinigram_hf.index.wire);
                                    plain ASGI, beside starlette (BinaryOps)
    POST /v1/{name}/search          document search (JSON)
    GET  /v1/{name}/doc/{doc_id}    one document with its metadata
    GET  /v1/{name}/info, /info     metadata;   GET /health;   GET /metrics (Prometheus)

Every query runs in a worker thread (the C core releases the GIL) under a per-request time
budget -- except small decoding-step ops (INLINE_OPS, a few binary searches a row), which run on
the event loop because the thread hop cost more than they do: past it the answer is 504 and the C loop of a dense scoring is told to stop. Past
``max_inflight`` requests in progress the answer is 503 with Retry-After. Bad input of any kind
is a 4xx with a JSON ``{"error": message}``, never a traceback.
"""
from __future__ import annotations

import hmac
import json
import logging
import os
import time
from typing import Any, Awaitable, Callable, Mapping, Optional

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._core.errors import InfiniGramError
from .._core.interrupt import cancel_scope
from .._version import __version__
from ..index import wire
from . import official
from .metrics import Metrics
from .ops import IDEMPOTENT, OPS, Limits, ServedIndex

log = logging.getLogger("infinigram_hf.serve")
Handler = Callable[[Request], Awaitable[Response]]


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def _error(status: int, message: str, headers: Optional[dict] = None) -> JSONResponse:
    return JSONResponse({"error": message}, status, headers=headers)


def _failure(exc: Exception, where: str) -> tuple[int, str, Optional[dict]]:
    """(status, message, headers) of a request that raised `exc`: 4xx for bad input, 499 for a
    client that went away, 500 (logged, never sent as a traceback) for a bug."""
    if isinstance(exc, HTTPError):
        return exc.status, exc.message, exc.headers
    if isinstance(exc, (ValueError, wire.WireError)):
        return 400, str(exc), None
    if isinstance(exc, TypeError):  # wrong JSON types reaching an argument check
        return 400, f"bad argument: {exc}", None
    if isinstance(exc, InfiniGramError):
        return 422, str(exc), None
    if isinstance(exc, ClientDisconnect):
        return 499, "", None
    log.exception("internal error in %s", where, exc_info=exc)
    return 500, "internal error (logged by the server)", None


def _check_identity(s: ServedIndex, params: dict) -> None:
    """A client's ops carry the index identity it read from /info: another index's answers (a
    server restarted on other files under the same name) would be wrong for the decoding states
    and the metadata it keeps, so such a request is refused (409), never answered."""
    given = params.pop("identity", None) if isinstance(params, dict) else None
    if given is not None and s.identity is not None and given != s.identity:
        raise HTTPError(409, f"index {s.name!r} on this server is not the one this client opened (its files "
                             "changed, or the server restarted on other files): decoding states and metadata "
                             "the client holds are void; open the remote index again")


class _Guard:
    """The outermost ASGI layer: API-key check and the in-flight cap (503 + Retry-After).
    /health is always open (load balancers probe it); /metrics needs the key like the rest."""

    def __init__(self, app: Any, limits: Limits, api_key: Optional[str], metrics: Metrics):
        self.app, self.limits, self.api_key, self.metrics = app, limits, api_key, metrics
        self.inflight = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if self.api_key is not None and path != "/health":
            auth = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            given = auth[7:] if auth.startswith("Bearer ") else ""
            if not hmac.compare_digest(given.encode(), self.api_key.encode()):
                self.metrics.count("auth", 401)
                return await _error(401, "missing or wrong API key (Authorization: Bearer KEY)",
                                    {"WWW-Authenticate": "Bearer"})(scope, receive, send)
        if path in ("/health", "/metrics"):
            return await self.app(scope, receive, send)
        if self.inflight >= self.limits.max_inflight:
            self.metrics.count("saturated", 503)
            return await _error(503, f"the server is busy ({self.inflight} requests in progress); retry later",
                                {"Retry-After": "1"})(scope, receive, send)
        self.inflight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.inflight -= 1


async def _asgi_body(scope: dict, receive: Any, limit: int) -> bytes:
    """The request body read from ASGI messages, refused with 413 past `limit` bytes (declared
    or streamed); ClientDisconnect when the client goes away first."""
    for key, value in scope["headers"]:
        if key == b"content-length":
            if not value.isdigit():
                raise HTTPError(400, "bad Content-Length")
            if int(value) > limit:
                raise HTTPError(413, f"the body ({int(value)} bytes) is larger than the server's {limit} (--max-body)")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, f"the body is larger than the server's {limit} bytes (--max-body)")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


_WIRE_CTYPE = wire.CONTENT_TYPE.encode()


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value).encode()


class BinaryOps:
    """ASGI layer that answers /v1/{name}/op/{op} itself and passes every other path on.

    The binary ops carry decoding loops, one request a step: starlette's router, middleware
    stack, Request and Response objects cost more server CPU than such a step's query, so these
    requests skip them (same checks, errors and metrics as the starlette endpoints)."""

    def __init__(self, app: Any, handle: Callable[..., Awaitable[None]]):
        self.app, self.handle = app, handle

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            parts = scope["path"].split("/")
            if len(parts) == 5 and parts[1] == "v1" and parts[3] == "op" and parts[2] and parts[4]:
                return await self.handle(scope, receive, send, parts[2], parts[4])
        await self.app(scope, receive, send)


# The ops of decoding steps: a few binary searches per row (an extension of a cached state), plus
# for cache_ntd a distribution that is bounded by the vocabulary and cached by state. Small
# requests of them run on the event loop itself; everything else goes to a worker thread.
INLINE_OPS = frozenset({"count", "prob", "suffix_len", "states", "cache_prob", "cache_ntd", "rows_ntd"})
INLINE_MAX_ROWS = 64
INLINE_MAX_TOKENS = 1 << 13


def _small(arrays: dict) -> bool:
    """A request of a few rows and tokens (rows_ntd: rows in ``grown``, tokens in both parts)."""
    offsets, grown = arrays.get("offsets"), arrays.get("grown")
    rows = len(grown) if grown is not None else len(offsets) - 1 if offsets is not None else None
    tokens = sum(len(arrays[k]) for k in ("values", "tail_values") if k in arrays)
    return rows is not None and rows <= INLINE_MAX_ROWS and tokens <= INLINE_MAX_TOKENS


def _json_body(raw: bytes) -> dict:
    try:
        payload = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HTTPError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise HTTPError(400, "the body must be a JSON object")
    return payload


def build_app(indexes: Mapping[str, Any], *, limits: Limits = Limits(), api_key: Optional[str] = None,
              cors_origins: tuple = (), threads: Optional[int] = None) -> Any:
    """The ASGI app serving `indexes` ({name: index_like}); run it with any ASGI server
    (`infinigram_hf.serve.run` uses uvicorn with a header-read deadline)."""
    served = {name: ServedIndex(name, ix, limits) for name, ix in indexes.items()}
    metrics = Metrics()
    n_threads = threads or max(2, 2 * (os.cpu_count() or 1))
    limiter: list = []  # made inside the event loop (anyio objects belong to one)

    def lookup(name: str) -> ServedIndex:
        s = served.get(name)
        if s is None:
            raise HTTPError(404, f"no index named {name!r}; this server has {sorted(served)}")
        return s

    async def run_query(fn: Callable[[], Any]) -> Any:
        """fn() in a worker thread, within the time budget; 504 past it (the C loop is told to stop)."""
        if not limiter:
            limiter.append(anyio.CapacityLimiter(n_threads))
        flag: list = []

        def work() -> Any:
            with cancel_scope() as f:
                flag.append(f)
                return fn()

        try:
            with anyio.fail_after(limits.time_budget_s):
                return await anyio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=limiter[0])
        except TimeoutError:
            if flag:
                flag[0][0] = 1
            raise HTTPError(504, f"the query took longer than the server's time budget of "
                                 f"{limits.time_budget_s:g} s (--time-budget)") from None

    def endpoint(label: Callable[[Request], str]) -> Callable[[Handler], Handler]:
        """Errors -> JSON 4xx/5xx (never a traceback), and metrics by endpoint."""
        def wrap(fn: Handler) -> Handler:
            async def handler(request: Request) -> Response:
                t0 = time.perf_counter()
                name = label(request)
                try:
                    resp = await fn(request)
                except Exception as exc:  # noqa: BLE001 - mapped to a status by _failure
                    status, message, headers = _failure(exc, name)
                    resp = Response(status_code=499) if status == 499 else _error(status, message, headers)
                metrics.observe(name, resp.status_code, time.perf_counter() - t0)
                return resp
            return handler
        return wrap

    async def binary_op(scope: dict, receive: Any, send: Any, name: str, op_name: str) -> None:
        """POST /v1/{name}/op/{op} as plain ASGI (see BinaryOps): the body, the op, the answer."""
        t0 = time.perf_counter()
        label = "op:" + (op_name if op_name in OPS else "unknown")
        try:
            if scope["method"] != "POST":
                raise HTTPError(405, f"{scope['method']} is not allowed here: POST a {wire.CONTENT_TYPE} body",
                                {"Allow": "POST"})
            s = lookup(name)
            fn = OPS.get(op_name)
            if fn is None:
                raise HTTPError(404, f"no op {op_name!r}; ops: {sorted(OPS)}")
            params, arrays = wire.decode(await _asgi_body(scope, receive, limits.max_body_bytes))
            _check_identity(s, params)
            if op_name in INLINE_OPS and _small(arrays):
                # A decoding step's query takes microseconds: handing it to a worker thread and back
                # cost more than the query (about 0.8 ms of CPU a request, measured), so it runs here.
                out_params, out_arrays = fn(s, params, arrays)
            else:
                out_params, out_arrays = await run_query(lambda: fn(s, params, arrays))
            status, body, ctype, extra = 200, wire.encode(out_params, out_arrays), _WIRE_CTYPE, None
        except Exception as exc:  # noqa: BLE001 - mapped to a status by _failure
            status, message, extra = _failure(exc, label)
            body, ctype = (b"", None) if status == 499 else (_json_bytes({"error": message}), b"application/json")
        metrics.observe(label, status, time.perf_counter() - t0)
        if status == 499:
            return  # nobody to answer
        headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (extra or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    @endpoint(lambda r: "official")
    async def official_api(request: Request) -> Response:
        payload = _json_body(await _asgi_body(request.scope, request.receive, limits.max_body_bytes))
        name = payload.get("index", payload.get("corpus"))
        if not isinstance(name, str):
            raise HTTPError(400, f"index must be a string naming one of {sorted(served)}")
        s = lookup(name)
        return JSONResponse(await run_query(lambda: official.answer(s, payload, lookup)))

    @endpoint(lambda r: "search")
    async def search(request: Request) -> Response:
        s = lookup(request.path_params["name"])
        p = _json_body(await _asgi_body(request.scope, request.receive, limits.max_body_bytes))
        unknown = set(p) - {"query", "maxnum", "max_clause_freq", "max_diff_tokens", "seed", "max_spans"}
        if unknown:
            raise HTTPError(400, f"unknown fields {sorted(unknown)}")
        maxnum = p.get("maxnum", 10)
        if not isinstance(maxnum, int) or isinstance(maxnum, bool) or not 0 <= maxnum <= limits.max_docs:
            raise HTTPError(400, f"maxnum must be an int in [0, {limits.max_docs}] (--max-docs)")
        freq = p.get("max_clause_freq", 50_000)
        if not isinstance(freq, int) or isinstance(freq, bool) or not 1 <= freq <= limits.max_clause_freq:
            raise HTTPError(400, f"max_clause_freq must be an int in [1, {limits.max_clause_freq}]")

        def go() -> dict:
            r = s.index.search_docs(p.get("query"), maxnum, max_clause_freq=freq,
                                    max_diff_tokens=p.get("max_diff_tokens"), seed=p.get("seed", 0),
                                    max_spans=p.get("max_spans", 1_000_000), decode=False)
            return {"count": r.count, "approximate": r.approximate, "doc_ids": r.doc_ids.tolist(),
                    "estimate": r.estimate, "anchor_clause": r.anchor_clause, "anchor_count": r.anchor_count,
                    "anchor_used": r.anchor_used, "spans_capped": r.spans_capped,
                    "cnf": [[list(g) for g in c] for c in r.cnf],
                    "documents": [{"doc_id": d.doc_id, "token_ids": d.token_ids.tolist(), "metadata": d.metadata,
                                   "shard": d.shard, "spans": d.spans.tolist(), "spans_capped": d.spans_capped}
                                  for d in r.documents]}
        return JSONResponse(await run_query(go))

    @endpoint(lambda r: "doc")
    async def doc(request: Request) -> Response:
        s = lookup(request.path_params["name"])
        d = await run_query(lambda: s.index.get_doc(request.path_params["doc_id"]))
        return JSONResponse({"doc_id": d.doc_id, "token_ids": d.token_ids.tolist(), "metadata": d.metadata,
                             "shard": d.shard})

    @endpoint(lambda r: "info")
    async def index_info(request: Request) -> Response:
        return JSONResponse(lookup(request.path_params["name"]).info())

    @endpoint(lambda r: "info")
    async def info(request: Request) -> Response:
        return JSONResponse({"version": __version__, "indexes": {n: s.info() for n, s in served.items()},
                             "limits": limits.__dict__, "ops": sorted(OPS), "idempotent": sorted(IDEMPOTENT),
                             "official_query_types": list(official.QUERY_TYPES)})

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "indexes": sorted(served), "pid": os.getpid()})

    async def prometheus(request: Request) -> Response:
        body, ctype = metrics.render()
        return Response(body, media_type=ctype)

    routes = [
        Route("/", official_api, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/info", info, methods=["GET"]),
        Route("/v1/{name}/info", index_info, methods=["GET"]),
        Route("/v1/{name}/search", search, methods=["POST"]),
        Route("/v1/{name}/doc/{doc_id:int}", doc, methods=["GET"]),
    ]
    app: Any = BinaryOps(Starlette(routes=routes), binary_op)
    if cors_origins:  # none unless asked (--cors-origin)
        from starlette.middleware.cors import CORSMiddleware
        app = CORSMiddleware(app, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                             allow_headers=["Authorization", "Content-Type"])
    return _Guard(app, limits, api_key, metrics)
