"""A real `infinigram-hf serve` in a child process on a free loopback port, for the tests.

    with served({"a": path}, "--time-budget", "2") as url:     # url = "http://127.0.0.1:PORT"
        RemoteIndex(url + "/a")

The child is always stopped (terminate, then kill) and waited for: no process outlives a test.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from typing import Iterator, Mapping

import httpx

STARTUP_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, indexes: Mapping[str, str], *args: str, port: int | None = None):
        self.indexes, self.args, self.port = dict(indexes), args, port
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> "Server":
        for _ in range(3):  # a port taken between free_port() and the bind: try another
            port = self.port or free_port()
            cmd = [sys.executable, "-m", "infinigram_hf.cli", "serve", *self.indexes.values(), "--port", str(port)]
            for name in self.indexes:
                cmd += ["--name", name]
            self.proc = subprocess.Popen(cmd + list(self.args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
            self.url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + STARTUP_S
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                        return self
                except httpx.TransportError:
                    time.sleep(0.1)
            err = self.stop()
            if "address already in use" not in err.lower():
                raise RuntimeError(f"the server did not start: {err[-2000:]}")
        raise RuntimeError("no free port")

    def stop(self) -> str:
        """Stop the child (terminate, then kill) and return its stderr."""
        if self.proc is None:
            return ""
        p, self.proc = self.proc, None
        if p.poll() is None:
            p.terminate()
        try:
            _, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate(timeout=10)
        return (err or b"").decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def served(indexes: Mapping[str, str], *args: str) -> Iterator[Server]:
    server = Server(indexes, *args).start()
    try:
        yield server
    finally:
        server.stop()
