"""A small pool of keep-alive HTTP/1.1 connections (the standard library's http.client) for
`RemoteIndex`.

httpx was the first choice; per request it took 1.3-1.4 ms of client CPU, against 0.3-0.4 ms for
http.client on the same requests (loopback, a loaded 2-core machine: eval/RESULTS.md). That
difference alone was over the ≤ 1 ms budget of a decoding step, so the client uses http.client.
Threads share the pool: each request takes a connection (or opens one), and gives it back after
reading the whole answer. TCP_NODELAY is set, because a POST goes out as two writes (head, then
body), and with Nagle's algorithm the body waits for the server's delayed ACK (~40 ms).
"""
from __future__ import annotations

import http.client
import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

# errors of a connection the server has closed while it sat in the pool (keep-alive expired)
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


@dataclass
class Response:
    status_code: int
    content: bytes
    headers: dict = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class Pool:
    """Keep-alive connections to one host, shared by threads (at most `size` kept idle)."""

    def __init__(self, scheme: str, netloc: str, size: int = 16, headers: Optional[dict] = None):
        self.scheme, self.netloc, self.size = scheme, netloc, size
        self.headers = dict(headers or {})
        self._idle: list = []
        self._lock = threading.Lock()
        self._closed = False

    def _new(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.netloc, timeout=timeout)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def request(self, method: str, path: str, body: Optional[bytes], headers: dict, timeout: float) -> Response:
        """One request and its whole answer. Raises OSError / http.client.HTTPException on a
        transport failure (TimeoutError when a socket operation outlived `timeout`)."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        while True:
            if conn is None:
                conn = self._new(timeout)
            try:
                conn.sock.settimeout(timeout)
                conn.request(method, path, body=body, headers={**self.headers, **headers})
                r = conn.getresponse()
                content = r.read()
            except STALE:
                conn.close()
                if reused:  # the server closed it while idle: once more on a new connection
                    conn, reused = None, False
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            break
        if r.will_close:
            conn.close()
        else:
            with self._lock:
                if not self._closed and len(self._idle) < self.size:
                    self._idle.append(conn)
                    conn = None
            if conn is not None:
                conn.close()
        return Response(r.status, content, {k.lower(): v for k, v in r.getheaders()})

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
