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
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

try:  # the optional C parser (pip install httptools, or uvicorn[standard])
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - depends on the install
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

# seconds a client has to send a request head; the serve command sets it (--header-timeout)
HEADER_TIMEOUT_ENV = "INFINIGRAM_SERVE_HEADER_TIMEOUT"
MAX_HEAD_BYTES = 64 << 10  # a request head larger than this closes the connection


def header_timeout() -> float:
    """Read when a timer is armed, not at import: the serve command imports this module before
    it puts the configuration in the environment (a value read at import stayed at 10 s)."""
    return float(os.environ.get(HEADER_TIMEOUT_ENV, "10"))


class HeaderDeadline:
    """Mixin for a uvicorn HTTP protocol (both keep the request in progress in ``self.cycle``, a
    new object once a request head has been parsed): closes connections whose request head does
    not arrive in time or outgrows MAX_HEAD_BYTES, and sets TCP_NODELAY on every accepted socket."""

    _head_timer: Any = None
    _waiting_cycle: Any = None  # the request cycle when the timer was armed (a new one = head complete)
    _head_bytes = 0             # bytes received since then

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

