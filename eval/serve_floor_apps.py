"""Servers for the floor of a decoding step over HTTP (eval/bench_serve_step.py): what a round
trip costs when the server does no work, answering every request with a fixed body of the size of
a batch-8 `rows_ntd` answer.

- ``app``: a bare ASGI app, run by uvicorn with the package's HTTP protocol (the server's floor:
  uvicorn + httptools + uvloop, no app code);
- ``python serve_floor_apps.py PORT``: a raw uvloop protocol that parses just enough HTTP/1.1
  (head, Content-Length body) to answer -- the floor of two Python processes on loopback.
"""
import asyncio
import os
import sys

BODY = b"x" * int(os.environ.get("FLOOR_BODY_BYTES", "3062"))
HEADERS = [(b"content-type", b"application/x-infinigram-arrays"), (b"content-length", str(len(BODY)).encode())]
RAW_ANSWER = (b"HTTP/1.1 200 OK\r\ncontent-type: application/x-infinigram-arrays\r\ncontent-length: %d\r\n\r\n"
              % len(BODY)) + BODY


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


class RawHTTP(asyncio.Protocol):
    def connection_made(self, transport):
        self.t, self.buf = transport, b""

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buf[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            self.t.write(RAW_ANSWER)


if __name__ == "__main__":
    import socket

    import uvloop

    async def main(port):
        server = await asyncio.get_running_loop().create_server(RawHTTP, "127.0.0.1", port)
        for s in server.sockets:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await server.serve_forever()

    uvloop.run(main(int(sys.argv[1])))
