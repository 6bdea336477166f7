"""The client's connection pool (infinigram_hf/index/http_pool.py) against a tiny raw server on
127.0.0.1: keep-alive reuse, a connection the server closed while idle, a dead port."""
from __future__ import annotations

import socket
import threading

import pytest

from infinigram_hf.index.http_pool import Pool

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def _serve(listener: socket.socket, close_after_each: bool, seen: list, stop: threading.Event) -> None:
    """Answer every request; with close_after_each, close the connection right after answering
    while still announcing keep-alive (as a keep-alive timeout does a moment later)."""
    listener.settimeout(0.1)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        except OSError:
            return
        seen.append(conn)
        with conn:
            conn.settimeout(10)
            buf = b""
            while True:
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    break
                if not chunk:
                    break
                buf += chunk
                while b"\r\n\r\n" in buf:
                    _, buf = buf.split(b"\r\n\r\n", 1)
                    conn.sendall(ANSWER)
                    if close_after_each:
                        break
                if close_after_each and not buf:
                    break


@pytest.mark.parametrize("close_after_each", [False, True])
def test_keep_alive_and_stale_connections(close_after_each: bool) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    seen: list = []
    stop = threading.Event()
    t = threading.Thread(target=_serve, args=(listener, close_after_each, seen, stop), daemon=True)
    t.start()
    pool = Pool("http", f"127.0.0.1:{listener.getsockname()[1]}", size=2)
    try:
        for _ in range(5):
            r = pool.request("GET", "/x", None, {}, 5.0)
            assert (r.status_code, r.content) == (200, b"ok")
        # one connection reused throughout; or a fresh one each time the pooled one had been closed
        assert len(seen) == (5 if close_after_each else 1)
    finally:
        pool.close()
        stop.set()
        t.join(timeout=10)
        listener.close()


def test_a_dead_port_is_an_oserror() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(OSError):
        Pool("http", f"127.0.0.1:{port}").request("GET", "/", None, {}, 2.0)


def _scripted(answers: list, trickle: bool = False):
    """A raw server on 127.0.0.1 that reads one request head per answer and writes the answer
    bytes as they are (one byte at a time with `trickle`); returns (port, connections seen, stop)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    seen: list = []
    stop = threading.Event()

    def run() -> None:
        pending = list(answers)
        while not stop.is_set() and pending:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            seen.append(conn)
            with conn:
                conn.settimeout(10)
                buf = b""
                while pending:
                    while b"\r\n\r\n" not in buf:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        buf += chunk
                    if b"\r\n\r\n" not in buf:
                        break
                    head, buf = buf.split(b"\r\n\r\n", 1)
                    length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")]
                    while length and len(buf) < length[0]:
                        buf += conn.recv(4096)
                    buf = buf[length[0]:] if length else buf
                    answer, close = pending.pop(0)
                    for i in range(len(answer)) if trickle else [None]:
                        conn.sendall(answer if i is None else answer[i:i + 1])
                    if close:
                        break
        listener.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return listener.getsockname()[1], seen, stop, t


@pytest.mark.parametrize("trickle", [False, True])
def test_answer_framing(trickle: bool) -> None:
    """Bodies framed by Content-Length, by chunked coding (with extensions and a trailer), by the
    connection's close; a 100 Continue before the answer; repeated headers joined; bytes arriving
    one at a time. A "Connection: close" answer's connection is not reused."""
    answers = [
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello", False),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0A\r\n0123456789\r\n0\r\n"
         b"Trailer: x\r\n\r\n", False),
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", True),
        (b"HTTP/1.0 200 OK\r\n\r\nuntil the end", True),
    ]
    port, seen, stop, t = _scripted(answers, trickle)
    pool = Pool("http", f"127.0.0.1:{port}")
    try:
        r = pool.request("POST", "/a", b"xyz", {"Content-Type": "text/plain"}, 10.0)
        assert (r.status_code, r.content, r.headers["x-a"]) == (200, b"hello", "1, 2")
        assert pool.request("GET", "/b", None, {}, 10.0).content == b"abc0123456789"
        assert pool.request("GET", "/c", None, {}, 10.0).status_code == 404
        r = pool.request("GET", "/d", None, {}, 10.0)
        assert (r.status_code, r.content) == (200, b"until the end")
        assert len(seen) == 2  # the close after the 404 made a new connection; the rest reused one
    finally:
        pool.close()
        stop.set()
        t.join(timeout=10)


@pytest.mark.parametrize("answer", [
    b"garbage\r\n\r\n", b"HTTP/1.1 2x0 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000,
])
def test_malformed_answers_are_http_exceptions(answer: bytes) -> None:
    import http.client

    port, _, stop, t = _scripted([(answer, True)])
    pool = Pool("http", f"127.0.0.1:{port}")
    try:
        with pytest.raises(http.client.HTTPException):
            pool.request("GET", "/", None, {}, 10.0)
    finally:
        pool.close()
        stop.set()
        t.join(timeout=10)


def test_requests_are_one_block_with_the_fixed_headers() -> None:
    pool = Pool("http", "127.0.0.1:1", headers={"Authorization": "Bearer k"})
    req = pool._request_bytes("POST", "/v1/x/op/count", b"BODY", {"Content-Type": "a/b"})
    assert req == (b"POST /v1/x/op/count HTTP/1.1\r\nHost: 127.0.0.1:1\r\nAuthorization: Bearer k\r\n"
                   b"Content-Type: a/b\r\nContent-Length: 4\r\n\r\nBODY")
    for bad in (lambda: pool._request_bytes("GET", "/a b", None, {}),
                lambda: pool._request_bytes("GET", "/", None, {"X": "a\r\nInjected: 1"}),
                lambda: Pool("ftp", "h:1")):
        with pytest.raises(ValueError):
            bad()
