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
