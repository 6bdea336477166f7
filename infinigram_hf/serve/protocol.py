"""uvicorn's HTTP protocols with a deadline on reading a request's head.

uvicorn has none: a client that connects and sends nothing, or trickles header bytes
(slowloris), holds its connection and a slot forever (its keep-alive timeout only runs between
requests, and any byte restarts it). Here a timer is armed when a connection opens and after
each response, and disarmed once a whole request head has arrived; when it fires first, the
connection is closed. A slow *body* is the request's own time budget's business (the handler
reads it).

Two protocols carry it: `HttpToolsWithHeaderTimeout` (httptools, the C parser of uvicorn's
"standard" install; the serve command uses it when httptools is installed) and
`H11WithHeaderTimeout` (h11, pure Python, always there). Used as ``uvicorn.run(..., http=CLASS)``.
"""
from __future__ import annotations

import os
import socket
from typing import Any, Optional

from uvicorn.protocols.http.h11_impl import H11Protocol

try:  # the optional C parser (pip install httptools, or uvicorn[standard])
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - depends on the install
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

# seconds a client has to send a request head; the serve command sets it (--header-timeout)
HEADER_TIMEOUT_ENV = "INFINIGRAM_SERVE_HEADER_TIMEOUT"
MAX_HEAD_BYTES = 64 << 10  # a request head larger than this closes the connection
MAX_JOINED_BODY = 1 << 16  # a response body up to this size is written in one piece with its head


def header_timeout() -> float:
    """Read when a timer is armed, not at import: the serve command imports this module before
    it puts the configuration in the environment (a value read at import stayed at 10 s)."""
    return float(os.environ.get(HEADER_TIMEOUT_ENV, "10"))


class HeadWithBody:
    """The transport of one request cycle as its response sees it: the response head is held
    until the body's first write and goes out in the same write (one TCP segment for a small
    answer), as the ASGI spec asks ("must not start sending the response to the client until it
    has received at least one Response Body event"). uvicorn writes them apart, so a client reading
    a small answer woke twice and the server paid two sends: measured in eval/RESULTS.md (issue 16).
    Everything else is passed to the connection's transport."""

    __slots__ = ("_transport", "_cycle", "_head", "_head_seen")

    def __init__(self, transport: Any, cycle: Any):
        self._transport, self._cycle = transport, cycle
        self._head: Optional[bytes] = None
        self._head_seen = False

    def write(self, data: bytes) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            if len(data) <= MAX_JOINED_BODY:
                data = head + data
            else:  # (a large body is not copied to save one small segment)
                self._transport.write(head)
        elif not self._head_seen and self._cycle.response_started:
            # the first write once the response has started is its head (a 100 Continue comes
            # earlier); an answer to HEAD has no body write (httptools), so its head goes at once
            self._head_seen = True
            if self._cycle.scope.get("method") != "HEAD":
                self._head = bytes(data)
                return
        self._transport.write(data)

    def flush(self) -> None:
        """Write a held head (a cycle that ends without a body: the connection is closed next)."""
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HeaderDeadline:
    """Mixin for a uvicorn HTTP protocol (both keep the request in progress in ``self.cycle``, a
    new object once a request head has been parsed): closes connections whose request head does
    not arrive in time or outgrows MAX_HEAD_BYTES, sets TCP_NODELAY on every accepted socket, and
    writes each response's head and body together (`HeadWithBody`)."""

    _head_timer: Any = None
    _waiting_cycle: Any = None  # the request cycle when the timer was armed (a new one = head complete)
    _head_bytes = 0             # bytes received since then
    _wrapped_cycle: Any = None  # the last cycle given a HeadWithBody transport

    def _wrap_cycle(self) -> None:
        """Give a newly made request cycle (its ASGI task has not run yet) a `HeadWithBody`
        transport. A cycle missed here (two pipelined requests parsed from one read) keeps the
        plain transport: it answers the same, in two writes."""
        cycle = self.cycle  # type: ignore[attr-defined]
        if cycle is not None and cycle is not self._wrapped_cycle and not cycle.response_started:
            self._wrapped_cycle = cycle
            cycle.transport = HeadWithBody(cycle.transport, cycle)

    def _arm(self) -> None:
        self._disarm()
        self._head_bytes = 0
        self._waiting_cycle = self.cycle  # type: ignore[attr-defined]
        self._head_timer = self.loop.call_later(header_timeout(), self._head_too_slow)  # type: ignore[attr-defined]

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        transport = self.transport  # type: ignore[attr-defined]
        if self.cycle is self._waiting_cycle and not transport.is_closing():  # type: ignore[attr-defined]
            transport.close()

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # an answer is written as head + body: without TCP_NODELAY the body can wait for the
            # client's delayed ACK. Measured: with --workers 2 every answer took ~48 ms without
            # this line (1 worker: ~2 ms either way), ~2 ms with it.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        self._wrap_cycle()
        if self._head_timer is not None:
            if self.cycle is not self._waiting_cycle:  # type: ignore[attr-defined]
                self._disarm()  # a request head was parsed: the request's time budget takes over
            else:
                # httptools has no cap on a request head (h11 has 16 KiB): headers would pile up
                # in memory until the deadline. Checked after each chunk, so a head costs at most
                # the cap plus one read.
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():  # type: ignore[attr-defined]
                    self._disarm()
                    self.transport.close()  # type: ignore[attr-defined]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._wrap_cycle()  # h11 starts a pipelined request from here
        if not self.transport.is_closing():  # type: ignore[attr-defined]
            self._arm()

    def connection_lost(self, exc: Any) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]


class H11WithHeaderTimeout(HeaderDeadline, H11Protocol):
    """h11 (pure Python) with the request-head deadline."""


if HttpToolsProtocol is not None:
    class HttpToolsWithHeaderTimeout(HeaderDeadline, HttpToolsProtocol):
        """httptools (C) with the request-head deadline."""
else:  # pragma: no cover
    HttpToolsWithHeaderTimeout = None  # type: ignore[assignment,misc]


def best_protocol() -> str:
    """The import string of the protocol to serve with: httptools when installed, else h11."""
    name = "HttpToolsWithHeaderTimeout" if HttpToolsWithHeaderTimeout is not None else "H11WithHeaderTimeout"
    return f"{__name__}:{name}"

