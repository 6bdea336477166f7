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


class _Recorder(_Transport):
    def __init__(self, sock: socket.socket):
        super().__init__(sock)
        self.writes: list = []

    def write(self, data) -> None:
        self.writes.append(bytes(data))

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _answers(protocol, requests: bytes, app) -> list:
    """The transport writes of one connection fed `requests` (a real protocol object, no server)."""
    loop = asyncio.new_event_loop()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    try:
        config = Config(app=app, http=protocol, log_level="warning")
        config.load()
        proto = protocol(config=config, server_state=ServerState(), app_state={}, _loop=loop)
        transport = _Recorder(conn)
        proto.connection_made(transport)
        proto.data_received(requests)
        loop.run_until_complete(asyncio.sleep(0.05))  # the ASGI tasks run
        proto.connection_lost(None)
        return transport.writes
    finally:
        for s in (client, conn, server):
            s.close()
        loop.close()


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda c: c.__name__)
def test_an_answer_leaves_in_one_write(protocol) -> None:
    """Regression (issue 16): uvicorn wrote an answer's head and its body apart, two segments
    that woke the client twice per decoding step; the head now waits for the body (as the ASGI
    spec asks) and both go in one write. An answer to HEAD (no body write) still has its head."""
    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"5")]})
        await send({"type": "http.response.body", "body": b"hello"})

    get = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    writes = [w for w in _answers(protocol, get, app) if w]
    assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 200") and writes[0].endswith(b"\r\n\r\nhello")
    head = b"HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n"
    writes = [w for w in _answers(protocol, head, app) if w]
    assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 200") and writes[0].endswith(b"\r\n\r\n")
    # two requests in one read (pipelined): both answered, in order, each complete
    writes = b"".join(_answers(protocol, get + get, app))
    assert writes.count(b"HTTP/1.1 200") == 2 and writes.endswith(b"hello")


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda c: c.__name__)
def test_a_held_head_is_written_when_the_app_fails(protocol) -> None:
    """An app that starts an answer and then raises: the connection is closed, and the head it
    had started is not lost in the buffer (it goes out before the close)."""
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        raise RuntimeError("boom")

    writes = [w for w in _answers(protocol, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", app) if w]
    assert writes and writes[0].startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda c: c.__name__)
def test_large_and_streamed_answers_keep_their_bytes_and_order(protocol) -> None:
    """The head is joined only to a small first body write (a large body is not copied for it);
    a streamed answer's later chunks go out as they come. Every byte arrives, in order."""
    big = bytes(range(256)) * 400  # 100 kB, past MAX_JOINED_BODY

    async def app(scope, receive, send):
        await receive()
        if scope["path"] == "/big":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(big)).encode())]})
            await send({"type": "http.response.body", "body": big})
        else:
            await send({"type": "http.response.start", "status": 200, "headers": []})  # chunked
            for part in (b"ab", b"cd", b""):
                await send({"type": "http.response.body", "body": part, "more_body": part != b""})

    writes = [w for w in _answers(protocol, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n", app) if w]
    assert len(writes) == 2 and writes[0].startswith(b"HTTP/1.1 200") and writes[0].endswith(b"\r\n\r\n")
    assert writes[1] == big
    writes = [w for w in _answers(protocol, b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n", app) if w]
    joined = b"".join(writes)
    assert writes[0].startswith(b"HTTP/1.1 200") and b"\r\n\r\n2\r\nab\r\n" in writes[0]  # head + first chunk
    assert joined.endswith(b"2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n") and len(writes) >= 2
