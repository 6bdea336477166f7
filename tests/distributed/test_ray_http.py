"""The router behind the issue-16 HTTP server: RemoteIndex -> server -> ShardRouter -> shard
group actors, and generate() with the logits processor gives the tokens it gives in process.

Skipped without Ray or without the server (infinigram_hf.serve)."""
from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest

from ray_support import ray_or_skip

ray = ray_or_skip()
serve = pytest.importorskip("infinigram_hf.serve", reason="the HTTP server (issue 16) is not in this tree")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("transformers")

from hf_tiny import TEXTS, tiny_index, tiny_model, tiny_tok  # noqa: E402,F401
from infinigram_hf.distributed import ShardRouter, build_index  # noqa: E402


@pytest.fixture(scope="module")
def ray_runtime():
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 << 20, _node_ip_address="127.0.0.2",
             log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def routed_url(ray_runtime, tiny_tok, tiny_index, tmp_path_factory):
    """The TEXTS built on Ray in several shards, two shard groups, served over loopback HTTP."""
    import socket

    from infinigram_hf.serve.app import build_app

    out = tmp_path_factory.mktemp("rayhttp") / f"ix-{uuid.uuid4().hex[:6]}"
    longest = max(len(tiny_index.get_doc(i).token_ids) for i in range(tiny_index.num_docs))
    with build_index(TEXTS, out, tokenizer=tiny_tok, shard_tokens=longest + 1, progress=False) as built:
        assert built.num_shards >= 2
    router = ShardRouter.start(out, groups=2, num_cpus=0.1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app({"code": router}), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/code"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        router.close()


def test_remote_index_over_the_router_answers_and_generates_as_in_process(routed_url, tiny_index, tiny_model,
                                                                         tiny_tok):
    from transformers import LogitsProcessorList

    from infinigram_hf import InfiniGramLogitsProcessor
    from infinigram_hf.index import RemoteIndex

    with RemoteIndex(routed_url) as remote:
        assert (remote.num_tokens, remote.num_docs) == (tiny_index.num_tokens, tiny_index.num_docs)
        for text in ("def ", "return x", "import os\n"):
            ids = tiny_tok.encode(text, add_special_tokens=False)
            assert remote.count(ids) == tiny_index.count(ids)
            a, b = remote.infgram_ntd(ids), tiny_index.infgram_ntd(ids)
            assert (a.as_dict(), a.suffix_len, a.sparse) == (b.as_dict(), b.suffix_len, b.sparse)
            np.testing.assert_array_equal(remote.score(ids).probs, tiny_index.score(ids).probs)
        enc = tiny_tok(["def f(x):", "import"], return_tensors="pt", padding=True, padding_side="left")
        outs = []
        for ix in (tiny_index, remote):
            proc = InfiniGramLogitsProcessor(ix, lambda_sparse=0.9, lambda_dense=0.5, tokenizer=tiny_tok)
            outs.append(tiny_model.generate(**enc, logits_processor=LogitsProcessorList([proc]), max_new_tokens=12,
                                            do_sample=False, pad_token_id=tiny_tok.pad_token_id).tolist())
        assert outs[0] == outs[1]


def test_speculative_decoding_search_and_documents_over_the_router(routed_url, tiny_index, tiny_model, tiny_tok):
    """The drafter's steps, trees, documents and search go through RemoteIndex -> server ->
    ShardRouter too: the same tokens and the same drafts as in process."""
    import torch

    from infinigram_hf import speculative_generate
    from infinigram_hf.index import RemoteIndex

    a, b = tiny_tok.encode(TEXTS[0][:300]), tiny_tok.encode(TEXTS[1][:300])
    n = min(len(a), len(b), 40)
    ids = torch.tensor([a[:n], b[:n]])
    mask = torch.ones_like(ids)
    with RemoteIndex(routed_url) as remote:
        for tree in (False, True):
            local, st_l = speculative_generate(tiny_model, ids, tiny_index, attention_mask=mask, max_new_tokens=16,
                                               do_sample=False, draft_tree=tree, return_stats=True)
            rem, st_r = speculative_generate(tiny_model, ids, remote, attention_mask=mask, max_new_tokens=16,
                                             do_sample=False, draft_tree=tree, return_stats=True)
            assert torch.equal(local, rem)
            assert (st_l.steps, st_l.drafted, st_l.accepted) == (st_r.steps, st_r.drafted, st_r.accepted)
            assert st_r.drafted > 0
        q = tiny_tok.encode("return", add_special_tokens=False)
        x, y = tiny_index.search_docs(q, maxnum=3), remote.search_docs(q, maxnum=3)
        assert (x.count, x.doc_ids.tolist(), x.anchor_count) == (y.count, y.doc_ids.tolist(), y.anchor_count)
        assert [np.array_equal(u.spans, v.spans) for u, v in zip(x.documents, y.documents)] == [True] * len(x.documents)
        for d in (0, tiny_index.num_docs - 1):
            assert np.array_equal(remote.get_doc(d).token_ids, tiny_index.get_doc(d).token_ids)
