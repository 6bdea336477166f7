"""The server's connection protocol (serve/protocol.py), without a server process."""
from __future__ import annotations

import asyncio
import socket

import pytest

pytest.importorskip("uvicorn")

from uvicorn.config import Config  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from infinigram_hf.serve.protocol import (H11WithHeaderTimeout, HEADER_TIMEOUT_ENV,  # noqa: E402
                                          HttpToolsWithHeaderTimeout, best_protocol)

PROTOCOLS = [H11WithHeaderTimeout] + ([HttpToolsWithHeaderTimeout] if HttpToolsWithHeaderTimeout else [])


class _Transport(asyncio.Transport):
    def __init__(self, sock: socket.socket):
        super().__init__()
        self.sock, self.closed = sock, False

    def get_extra_info(self, name, default=None):
        return {"socket": self.sock, "peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def write(self, data) -> None:
        pass

    def set_protocol(self, protocol) -> None:
        pass


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda c: c.__name__)
def test_connections_get_tcp_nodelay_and_a_header_deadline(protocol, monkeypatch) -> None:
    """Regression: with --workers 2 answers waited ~48 ms each for a delayed ACK (Nagle's
    algorithm on the accepted sockets); every connection now sets TCP_NODELAY. Regression: the
    deadline was read when the module was imported, before the serve command set it (it stayed
    at 10 s whatever --header-timeout said); it is now read when a timer is armed."""
    monkeypatch.setenv(HEADER_TIMEOUT_ENV, "3.5")
    loop = asyncio.new_event_loop()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    try:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
        async def app(scope, receive, send):  # never called: no request is sent
            raise AssertionError

        config = Config(app=app, http=protocol, log_level="warning")
        config.load()
        proto = protocol(config=config, server_state=ServerState(), app_state={}, _loop=loop)
        transport = _Transport(conn)
        proto.connection_made(transport)
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert proto._head_timer is not None  # armed until a request head arrives
        assert 3.0 < proto._head_timer.when() - loop.time() <= 3.5  # the configured deadline
        proto._head_too_slow()
        assert transport.closed
        proto.connection_lost(None)
    finally:
        for s in (client, conn, server):
            s.close()
        loop.close()


def test_httptools_is_used_when_installed() -> None:
    """The serve command runs uvicorn with the C parser (httptools) when it is installed: h11,
    pure Python, cost more server CPU than a decoding step's query (eval/RESULTS.md)."""
    pytest.importorskip("httptools")
    assert best_protocol().endswith(":HttpToolsWithHeaderTimeout")
