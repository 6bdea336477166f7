"""The server under bad input, oversized bodies, auth, time budgets, saturation, a slow client and
a crash: each gets the expected answer, and the server answers normally afterwards.

All traffic goes to 127.0.0.1; every wait is bounded; every child process is stopped.
"""
from __future__ import annotations

import concurrent.futures as cf
import socket
import time

import httpx
import numpy as np
import pytest

from infinigram_hf import InfiniGramError, build_index
from infinigram_hf.index import RemoteIndex, wire
from server_proc import Server, free_port, served

KEY = "s3cret-key"
RNG = np.random.default_rng(11)
DOCS = [RNG.integers(0, 12, size=int(RNG.integers(1, 50))).tolist() for _ in range(30)]
MAX_BODY = 8 << 20
# dense scoring of this many tokens takes far longer than the 0.25 s budget (about 0.3 µs a token)
LONG = 4_000_000


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("safety") / "ix"
    build_index(DOCS, out, vocab_size=12, progress=False).close()
    return str(out)


@pytest.fixture(scope="module")
def server(index_dir, tmp_path_factory):
    key_file = tmp_path_factory.mktemp("key") / "key.txt"
    key_file.write_text(KEY + "\n")
    with served({"ix": index_dir}, "--api-key-file", str(key_file), "--time-budget", "0.25", "--max-inflight", "2",
                "--max-body", str(MAX_BODY), "--max-batch", "100", "--header-timeout", "1",
                "--cors-origin", "https://allowed.example") as s:
        yield s


AUTH = {"Authorization": f"Bearer {KEY}"}


def _op(server, op: str, body: bytes, **headers) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/ix/op/{op}", content=body, timeout=30,
                      headers={**AUTH, "Content-Type": wire.CONTENT_TYPE, **headers})


def _healthy(server) -> None:
    assert httpx.get(server.url + "/health", timeout=10).json()["ok"] is True
    r = _op(server, "count", wire.encode({}, {"values": np.array([1, 2], np.uint32), "offsets": np.array([0, 2])}))
    assert r.status_code == 200, r.text
    assert wire.decode(r.content)[1]["counts"].shape == (1,)


def test_bad_input_is_a_4xx_with_a_message(server) -> None:
    good = {"values": np.array([1, 2, 3], np.uint32), "offsets": np.array([0, 3])}
    cases = [
        ("count", b""), ("count", b"garbage"), ("count", b"IGW1\xff\xff\xff\xff"),
        ("count", wire.MAGIC + (5).to_bytes(4, "little") + b"{nope"),
        ("count", wire.encode({}, {"values": good["values"]})),                      # offsets missing
        ("count", wire.encode({}, {"values": np.array([1.5]), "offsets": np.array([0, 1])})),  # floats
        ("count", wire.encode({}, {"values": np.array([-1], np.int64), "offsets": np.array([0, 1])})),
        ("count", wire.encode({}, {"values": good["values"], "offsets": np.array([0, 9])})),  # past the end
        ("count", wire.encode({}, {"values": good["values"], "offsets": np.array([2, 1, 3])})),
        ("count", wire.encode({}, {"values": np.zeros(101, np.uint32), "offsets": np.arange(102)})),  # > max-batch
        ("count", wire.encode({}, good) + b"trailing"),
        ("prob", wire.encode({}, good)),                                                 # tokens missing
        ("prob", wire.encode({"infinite": "yes"}, {**good, "tokens": np.array([1])})),
        ("ntd", wire.encode({"max_support": -3}, good)),
        ("score", wire.encode({}, {"values": np.array([99], np.uint32), "offsets": np.array([0, 1])})),
        ("draft_step", wire.encode({"drafter": {"evil": 1}}, {"seq": np.array([1, 2])})),
        ("draft_step", wire.encode({"drafter": {}}, {"seq": np.array([1, 2]), "state": np.array([1, 2])})),
        ("lm_score", wire.encode({"options": {"smoothing": 1}}, {"ids": np.array([1, 2])})),
        ("lm_score", wire.encode({"method": "nope"}, {"ids": np.array([1, 2])})),
        ("nope", wire.encode({}, good)),
        # rows_ntd: a state the C core refuses, shapes that disagree with the rows
        ("rows_ntd", wire.encode({}, {"grown": np.array([True]), "states": np.array([[5, 1, 0, 10 ** 9]]),
                                      "tail_values": np.array([1, 2], np.uint32), "tail_offsets": np.array([0, 2])})),
        ("rows_ntd", wire.encode({}, {"grown": np.array([True]), "states": np.array([[0, 1]]),
                                      "tail_values": np.array([1], np.uint32), "tail_offsets": np.array([0, 1])})),
        ("rows_ntd", wire.encode({}, {"grown": np.array([False, False]), **good})),
        ("rows_ntd", wire.encode({}, {"grown": np.array([1.0]), **good})),
        ("rows_ntd", wire.encode({}, {"grown": np.zeros(101, bool), "values": np.zeros(0, np.uint32),
                                      "offsets": np.zeros(102, np.int64)})),  # > max-batch
    ]
    for op, body in cases:
        r = _op(server, op, body)
        assert 400 <= r.status_code < 500, (op, body[:40], r.status_code, r.text)
        assert r.json()["error"] and "Traceback" not in r.text, r.text
    for path, payload in (("/", b"{bad json"), ("/", b"[1, 2]"), ("/", b'{"index": 3}'),
                          ("/v1/ix/search", b'{"query": [1], "maxnum": "ten"}'),
                          ("/v1/ix/search", b'{"query": [1], "max_clause_freq": 1e12}'),
                          ("/v1/ix/search", b'{"query": "text needs a tokenizer"}'),
                          ("/v1/ix/search", b'{"query": [1], "evil": 1}'),
                          ("/v1/missing/search", b'{"query": [1]}')):
        r = httpx.post(server.url + path, content=payload, headers=AUTH, timeout=30)
        assert 400 <= r.status_code < 500 and r.json()["error"], (path, payload, r.text)
    for path in ("/v1/ix/doc/99999", "/v1/ix/doc/-1", "/v1/missing/info", "/../../etc/passwd",
                 "/v1/ix/../../../etc/passwd", "/v1/ix/op/..%2f..%2fmeta.json"):
        r = httpx.get(server.url + path, headers=AUTH, timeout=30)
        assert 400 <= r.status_code < 500, (path, r.status_code)
        assert "vocab_size" not in r.text  # no file of the index (or anything else) is ever sent
    _healthy(server)


def test_binary_op_paths_answer_like_the_other_endpoints(server) -> None:
    """The op endpoint is plain ASGI beside starlette (BinaryOps): a wrong method, an unknown index
    or op, a missing key get the same JSON errors as starlette's endpoints, and are counted."""
    body = wire.encode({}, {"values": np.array([1], np.uint32), "offsets": np.array([0, 1])})
    r = httpx.get(f"{server.url}/v1/ix/op/count", headers=AUTH, timeout=30)
    assert r.status_code == 405 and r.headers["allow"] == "POST" and "POST" in r.json()["error"]
    r = httpx.post(f"{server.url}/v1/missing/op/count", content=body, headers=AUTH, timeout=30)
    assert r.status_code == 404 and "no index named 'missing'" in r.json()["error"]
    r = httpx.post(f"{server.url}/v1/ix/op/count", content=body, timeout=30)
    assert r.status_code == 401
    r = _op(server, "count", body)
    assert r.status_code == 200 and r.headers["content-type"] == wire.CONTENT_TYPE
    assert int(r.headers["content-length"]) == len(r.content)
    m = httpx.get(server.url + "/metrics", headers=AUTH, timeout=10).text
    assert 'infinigram_requests_total{endpoint="op:count",status="405"}' in m
    assert 'infinigram_requests_total{endpoint="op:count",status="200"}' in m
    _healthy(server)


def test_oversized_bodies_get_413(server) -> None:
    big = b"x" * (MAX_BODY + 1)
    assert _op(server, "count", big).status_code == 413
    r = _op(server, "count", iter([big[:MAX_BODY // 2], big[MAX_BODY // 2:]]))  # chunked: no Content-Length
    assert r.status_code == 413 and "max-body" in r.json()["error"]
    _healthy(server)


def test_api_key(server) -> None:
    body = wire.encode({}, {"values": np.array([1], np.uint32), "offsets": np.array([0, 1])})
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = httpx.post(f"{server.url}/v1/ix/op/count", content=body, headers=headers, timeout=30)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    assert httpx.get(server.url + "/info", timeout=10).status_code == 401
    assert httpx.get(server.url + "/metrics", timeout=10).status_code == 401
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200  # probes need no key
    with pytest.raises(InfiniGramError, match="401"):
        RemoteIndex(server.url + "/ix", timeout=10)
    with RemoteIndex(server.url + "/ix", api_key=KEY, timeout=10) as r:
        assert r.count([1]) == sum(d.count(1) for d in DOCS)


def test_cors_only_for_the_origins_given(server) -> None:
    ok = httpx.get(server.url + "/health", headers={"Origin": "https://allowed.example"}, timeout=10)
    assert ok.headers.get("access-control-allow-origin") == "https://allowed.example"
    other = httpx.get(server.url + "/health", headers={"Origin": "https://evil.example"}, timeout=10)
    assert "access-control-allow-origin" not in other.headers


def _long_score() -> bytes:
    return wire.encode({}, {"values": RNG.integers(0, 12, LONG).astype(np.uint8), "offsets": np.array([0, LONG])})


def test_time_budget_gives_504_and_stops_the_query(server) -> None:
    r = _op(server, "score", _long_score())
    assert r.status_code == 504 and "time budget" in r.json()["error"]
    _healthy(server)
    m = httpx.get(server.url + "/metrics", headers=AUTH, timeout=10).text
    assert 'infinigram_requests_total{endpoint="op:score",status="504"}' in m


def test_client_timeout_is_a_clear_error(server) -> None:
    with RemoteIndex(server.url + "/ix", api_key=KEY, timeout=0.05, retries=2) as r:
        t0 = time.monotonic()
        with pytest.raises(InfiniGramError, match="did not answer"):
            r.score_batch([RNG.integers(0, 12, LONG // 4)])
        assert time.monotonic() - t0 < 10  # bounded (a hang would fail here, not block the suite)
    _healthy(server)


def test_saturation_gives_503_with_retry_after(server) -> None:
    body = _long_score()
    with cf.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: _op(server, "score", body), range(6)))
    codes = sorted(a.status_code for a in answers)
    assert set(codes) <= {503, 504} and 503 in codes, codes
    assert all(a.headers["Retry-After"] == "1" for a in answers if a.status_code == 503)
    _healthy(server)


def test_slow_clients_are_disconnected(server) -> None:
    """slowloris: one connection sends nothing, one trickles a header byte at a time; both are
    closed after --header-timeout (1 s) while normal requests are answered meanwhile."""
    host, port = server.url.rsplit("//", 1)[1].split(":")
    idle = socket.create_connection((host, int(port)), timeout=10)
    slow = socket.create_connection((host, int(port)), timeout=10)
    try:
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        closed_slow = False
        deadline = time.monotonic() + 8
        slow.settimeout(0.2)
        while time.monotonic() < deadline and not closed_slow:
            try:
                slow.sendall(b"X")
                if slow.recv(1024) == b"":
                    closed_slow = True
            except socket.timeout:
                pass
            except OSError:  # reset or broken pipe: closed by the server
                closed_slow = True
            _healthy(server)
        assert closed_slow
        idle.settimeout(8)
        assert idle.recv(1024) == b""  # closed without a request ever arriving
    finally:
        idle.close()
        slow.close()
    _healthy(server)


def test_huge_request_heads_close_the_connection(server) -> None:
    """Regression: under httptools (no head cap of its own) a 200 kB header block was read into
    memory; past 64 KiB of head the connection is now closed (h11 refuses past 16 KiB)."""
    host, port = server.url.rsplit("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        closed = False
        try:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            for _ in range(200):
                s.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
            s.sendall(b"\r\n")
            answer = s.recv(65536)
            closed = answer == b"" or not answer.startswith(b"HTTP/1.1 200")
        except OSError:  # reset or broken pipe: closed by the server
            closed = True
        assert closed
    _healthy(server)


def test_server_killed_mid_request(index_dir) -> None:
    server = Server({"ix": index_dir}, "--time-budget", "30").start()
    try:
        r = RemoteIndex(server.url + "/ix", timeout=20, retries=2)
        with cf.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(r.score_batch, [RNG.integers(0, 12, LONG)])
            time.sleep(0.3)  # (the request is on its way or being answered)
            server.kill()
            with pytest.raises(InfiniGramError, match="did not answer"):
                fut.result(timeout=30)
        with pytest.raises(InfiniGramError):  # and later calls fail the same clear way
            r.count([1])
        r.close()
    finally:
        server.stop()
    from infinigram_hf import InfiniGramIndex
    with InfiniGramIndex.open(index_dir) as ix:  # the index is untouched (a new server would serve it)
        assert ix.count([1]) == sum(d.count(1) for d in DOCS)


def test_a_server_on_other_files_refuses_the_old_clients(tmp_path) -> None:
    """A client keeps decoding states (suffix-array ranges) and metadata from the index it
    opened. A server restarted under the same name on other files must refuse its requests (409,
    a clear InfiniGramError), not answer them: a kept state that happens to fit the new index's
    ranges would pass the C checks and give wrong distributions. A restart on the same files is
    the same index: the client goes on."""
    out = tmp_path / "ix"
    build_index(DOCS, out, vocab_size=12, progress=False).close()
    port = free_port()
    server = Server({"ix": str(out)}, port=port).start()
    r = RemoteIndex(server.url + "/ix", timeout=20, retries=2)
    try:
        want = r.count([1, 2])
        server.stop()
        server = Server({"ix": str(out)}, port=port).start()      # same files: the same index
        assert r.count([1, 2]) == want
        server.stop()
        build_index(DOCS[::-1][:20], out, vocab_size=12, progress=False, overwrite=True).close()
        server = Server({"ix": str(out)}, port=port).start()      # other files, same name
        with pytest.raises(InfiniGramError, match="409.*not the one this client opened"):
            r.count([1, 2])
        r.close()
        with RemoteIndex(server.url + "/ix", timeout=20) as fresh:  # opening again is fine
            assert fresh.count([1, 2]) == sum(sum(1 for i in range(len(d) - 1) if d[i:i + 2] == [1, 2])
                                              for d in DOCS[::-1][:20])
    finally:
        server.stop()
