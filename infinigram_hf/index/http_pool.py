"""A small pool of keep-alive HTTP/1.1 connections for `RemoteIndex`, on the standard library's
socket and ssl modules.

A decoding step is one request, and what the client spends on it counts against the step
(≤ 1 ms in all, issue 16). Measured per request on loopback (eval/RESULTS.md): httpx 1.3-1.4 ms
of client CPU, http.client 0.3 ms (its `email`-based header parser and per-response file object
are most of it; urllib3 is built on it), this exchange about 0.08 ms. So a request is written
here as one prebuilt block (request line, the pool's fixed headers, Content-Type/-Length, body:
one send), and the answer is read from a per-connection buffer: the status line, the headers,
then a body framed by Content-Length, by chunked transfer coding, or by the connection's close
(RFC 9112 section 6.3); 1xx interim answers are skipped. Errors are http.client's exception
classes, so callers handle one family: `RemoteDisconnected` when a pooled connection turns out
to have been closed by the server (retried once on a fresh connection), `IncompleteRead`,
`BadStatusLine`/`HTTPException` for a malformed answer, `TimeoutError` past the timeout.

Threads share the pool: each request takes a connection (or opens one) and gives it back after
reading the whole answer. TCP_NODELAY is set (Nagle's algorithm with the server's delayed ACK
costs ~40 ms a request when a request leaves in two segments).
"""
from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import urlsplit

# errors of a connection the server has closed while it sat in the pool (keep-alive expired)
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
MAX_HEAD = 64 << 10          # bytes of an answer's status line and headers
MAX_BODY = 1 << 31           # bytes of one answer's body
RECV = 1 << 16


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


class _Connection:
    """One keep-alive connection: its socket and the bytes received but not yet read."""

    def __init__(self, scheme: str, host: str, port: int, timeout: float, ssl_context: Optional[ssl.SSLContext]):
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "https":
                sock = (ssl_context or ssl.create_default_context()).wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.buf = bytearray()

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> bool:
        """Receive more bytes into the buffer; False at the end of the stream."""
        chunk = self.sock.recv(RECV)
        self.buf += chunk
        return bool(chunk)

    def _line(self, limit: int) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            if len(self.buf) > limit:
                raise http.client.LineTooLong("an answer's line")
            if not self._fill():
                raise http.client.IncompleteRead(bytes(self.buf))

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise http.client.IncompleteRead(bytes(self.buf), n - len(self.buf))
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def _head(self) -> tuple[int, str, dict]:
        """(status, HTTP version, headers with lower-case names) of the next answer."""
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                break
            if len(self.buf) > MAX_HEAD:
                raise http.client.LineTooLong(f"an answer's head (over {MAX_HEAD} bytes)")
            if not self._fill():
                if not self.buf:  # closed before a byte of the answer: the server dropped it
                    raise http.client.RemoteDisconnected("the server closed the connection without answering")
                raise http.client.IncompleteRead(bytes(self.buf))
        lines = self.buf[:i].decode("latin-1").split("\r\n")
        del self.buf[:i + 4]
        parts = lines[0].split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
            raise http.client.BadStatusLine(lines[0])
        headers: dict = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name[-1] in " \t":
                raise http.client.HTTPException(f"malformed header line {line[:80]!r}")
            key, val = name.lower(), value.strip()
            headers[key] = f"{headers[key]}, {val}" if key in headers else val
        return int(parts[1]), parts[0], headers

    def _chunked(self) -> bytes:
        out = bytearray()
        while True:
            size_line = self._line(MAX_HEAD).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise http.client.HTTPException(f"bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                while self._line(MAX_HEAD):  # trailer fields, up to the empty line
                    pass
                return bytes(out)
            if len(out) + size > MAX_BODY:
                raise http.client.HTTPException("the answer's body is too large")
            out += self._exactly(size)
            if self._line(2):
                raise http.client.HTTPException("a chunk does not end with CRLF")

    def exchange(self, request: bytes, method: str) -> tuple[Response, bool]:
        """Send one request, read its whole answer: (response, whether the connection must close)."""
        self.sock.sendall(request)
        while True:
            status, version, headers = self._head()
            if not 100 <= status < 200 or status == 101:
                break
        conn = headers.get("connection", "").lower()
        close = "close" in conn or (version == "HTTP/1.0" and "keep-alive" not in conn)
        if method == "HEAD" or status in (101, 204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked()
        elif "content-length" in headers:
            length = headers["content-length"].split(",")[0].strip()
            if not length.isdigit() or int(length) > MAX_BODY:
                raise http.client.HTTPException(f"bad Content-Length {length[:40]!r}")
            body = self._exactly(int(length))
        else:  # delimited by the close of the connection
            while self._fill():
                if len(self.buf) > MAX_BODY:
                    raise http.client.HTTPException("the answer's body is too large")
            body, close = bytes(self.buf), True
            self.buf.clear()
        return Response(status, body, headers), close


class Pool:
    """Keep-alive connections to one host, shared by threads (at most `size` kept idle).

    `headers` are sent with every request (prebuilt once); `ssl_context` for https (default:
    the system's trusted certificates)."""

    def __init__(self, scheme: str, netloc: str, size: int = 16, headers: Optional[dict] = None,
                 ssl_context: Optional[ssl.SSLContext] = None):
        if scheme not in ("http", "https"):
            raise ValueError(f"scheme must be http or https, got {scheme!r}")
        parts = urlsplit(f"{scheme}://{netloc}")
        if not parts.hostname:
            raise ValueError(f"no host in {netloc!r}")
        self.scheme, self.netloc, self.size, self.ssl_context = scheme, netloc, size, ssl_context
        self.host, self.port = parts.hostname, parts.port or (443 if scheme == "https" else 80)
        self.headers = dict(headers or {})
        fixed = {"Host": netloc, **self.headers}
        self._fixed = "".join(f"{_token(k)}: {_value(v)}\r\n" for k, v in fixed.items()).encode("latin-1")
        self._heads: dict = {}
        self._idle: list = []
        self._lock = threading.Lock()
        self._closed = False

    def _request_bytes(self, method: str, path: str, body: Optional[bytes], headers: dict) -> bytes:
        key = (method, path, *headers.items())
        head = self._heads.get(key)
        if head is None:  # checked and built once per (method, path, headers): a decoding loop repeats one
            if not path.startswith("/") or any(c in path for c in " \r\n"):
                raise ValueError(f"bad request path {path!r}")
            extra = "".join(f"{_token(k)}: {_value(v)}\r\n" for k, v in headers.items())
            head = f"{_token(method)} {path} HTTP/1.1\r\n".encode("latin-1") + self._fixed + extra.encode("latin-1")
            if len(self._heads) >= 256:
                self._heads.clear()
            self._heads[key] = head
        if body is None:
            return head + b"\r\n"
        return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)

    def request(self, method: str, path: str, body: Optional[bytes], headers: dict, timeout: float) -> Response:
        """One request and its whole answer. Raises OSError / http.client.HTTPException on a
        transport failure (TimeoutError when a socket operation outlived `timeout`)."""
        request = self._request_bytes(method, path, body, headers)
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        while True:
            if conn is None:
                conn = _Connection(self.scheme, self.host, self.port, timeout, self.ssl_context)
            try:
                conn.sock.settimeout(timeout)
                response, close = conn.exchange(request, method)
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
        if not close:
            with self._lock:
                if not self._closed and len(self._idle) < self.size:
                    self._idle.append(conn)
                    conn = None
        if conn is not None:
            conn.close()
        return response

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _token(s: str) -> str:
    if not s or any(c in s for c in " \t\r\n:"):
        raise ValueError(f"bad HTTP method or header name {s!r}")
    return s


def _value(v: Any) -> str:
    s = str(v)
    if "\r" in s or "\n" in s:
        raise ValueError("a header value must not contain CR or LF")
    return s
