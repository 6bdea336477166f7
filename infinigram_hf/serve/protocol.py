"""uvicorn's h11 protocol with a deadline on reading a request's head.

uvicorn has none: a client that connects and sends nothing, or trickles header bytes
(slowloris), holds its connection and a slot forever (its keep-alive timeout only runs between
requests, and any byte restarts it). Here a timer is armed when a connection opens and after
each response, and disarmed once a whole request head has arrived; when it fires first, the
connection is closed. A slow *body* is the request's own time budget's business (the handler
reads it). Used as ``uvicorn.run(..., http=H11WithHeaderTimeout)``.
"""
from __future__ import annotations

import os
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

# seconds a client has to send a request head; the serve command sets it (--header-timeout)
HEADER_TIMEOUT_S = float(os.environ.get("INFINIGRAM_SERVE_HEADER_TIMEOUT", "10"))


class H11WithHeaderTimeout(H11Protocol):
    """H11Protocol that closes connections whose request head does not arrive in time."""

    _head_timer: Any = None
    _waiting_cycle: Any = None  # the request cycle when the timer was armed (a new one = head complete)

    def _arm(self) -> None:
        self._disarm()
        self._waiting_cycle = self.cycle
        self._head_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.cycle is self._waiting_cycle and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # an answer is written as head + body: without TCP_NODELAY the body can wait for the
            # client's delayed ACK. Measured: with --workers 2 every answer took ~48 ms without
            # this line (1 worker: ~2 ms either way), ~2 ms with it.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self.cycle is not self._waiting_cycle:
            self._disarm()  # a request head was parsed: the request's time budget takes over

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Any) -> None:
        self._disarm()
        super().connection_lost(exc)
