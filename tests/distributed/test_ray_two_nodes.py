"""Two Ray "nodes" on this machine (a head on 127.0.0.2 and a worker on 127.0.0.3, each with its
own temp dir and a custom resource naming it): a distributed build whose shard tasks run on
both, and a router whose shard groups live one per node answering like the local index.

The nodes are `ray start --block` processes this test starts and stops itself (SIGTERM to each,
never `ray stop`, which would stop every Ray of the machine). Skipped without Ray."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from ray_support import assert_same_answers, queries, ray_or_skip

ray = ray_or_skip()

from infinigram_hf import InfiniGramIndex  # noqa: E402
from infinigram_hf.distributed import ShardRouter, build_index  # noqa: E402

HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
START_TIMEOUT_S = 90


def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def _ray_start(args: list[str], temp_dir: Path, log: Path) -> subprocess.Popen:
    ray_bin = Path(sys.executable).with_name("ray")
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    with open(log, "wb") as out:
        return subprocess.Popen([str(ray_bin), "start", "--block", "--temp-dir", str(temp_dir), "--num-cpus", "1",
                                 "--object-store-memory", str(80 << 20), "--disable-usage-stats", *args],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to each `ray start` process (it stops its node's processes), at once; SIGKILL to
    the process group of one still there after 20 s."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


@pytest.fixture(scope="module")
def two_nodes():
    base = Path(tempfile.mkdtemp(prefix="igray-", dir="/tmp"))  # (short: Ray's socket paths must fit)
    port = _free_port(HEAD_IP)
    procs = []
    try:
        procs.append(_ray_start(["--head", "--node-ip-address", HEAD_IP, "--port", str(port), "--include-dashboard=false",
                                 "--resources", '{"node_a": 1}'], base / "a", base / "head.log"))
        deadline = time.monotonic() + START_TIMEOUT_S
        while socket.socket().connect_ex((HEAD_IP, port)) != 0:
            assert procs[0].poll() is None and time.monotonic() < deadline, (base / "head.log").read_text()[-2000:]
            time.sleep(0.5)
        procs.append(_ray_start(["--address", f"{HEAD_IP}:{port}", "--node-ip-address", WORKER_IP,
                                 "--resources", '{"node_b": 1}'], base / "b", base / "worker.log"))
        ray.init(address=f"{HEAD_IP}:{port}", _node_ip_address=HEAD_IP, log_to_driver=False, configure_logging=False)
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            assert time.monotonic() < deadline, (base / "worker.log").read_text()[-2000:]
            time.sleep(0.5)
        yield base
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop(list(reversed(procs)))
        shutil.rmtree(base, ignore_errors=True)


def test_build_and_fan_out_over_two_nodes(two_nodes, scratch_dir):
    rng = np.random.default_rng(7)
    docs = [list(rng.integers(0, 4, size=rng.integers(0, 30))) for _ in range(120)]
    out = scratch_dir / f"ix-{uuid.uuid4().hex[:8]}"
    built = build_index(docs, out, vocab_size=4, shard_tokens=400, progress=False)
    with built:
        assert built.num_shards >= 4
        nodes = {s["node"] for s in built.meta["build"]["ray"]["shard_stats"]}
        assert nodes <= {HEAD_IP, WORKER_IP}  # (Ray picks; spread is asked for, not promised)
    local = InfiniGramIndex.open(out)
    half = local.num_shards // 2
    groups = [list(range(half)), list(range(half, local.num_shards))]
    placement = [{"resources": {"node_a": 0.01}}, {"resources": {"node_b": 0.01}}]
    with local, ShardRouter.start(out, groups, placement=placement, num_cpus=0) as router:
        assert [i["node"] for i in router.infos] == [HEAD_IP, WORKER_IP]
        assert_same_answers(router, local, queries(range(4), 2, extra=[[0, 1, 2, 3, 3, 2], [1, 1, 1]]), range(4),
                            docs=range(0, len(docs), 11))
