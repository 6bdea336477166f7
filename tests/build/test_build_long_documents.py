"""memory_budget bounds one long document too: a document is taken into the shard writer a piece
(of _ingest.CHUNK_TOKENS ids) at a time, so beyond the document as the source holds it the build
needs the budget plus a constant, whatever the document's length. Measured in a child process
(peak RSS, Linux), and the pieces give the same index as whole documents."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import UNDER_ASAN
from infinigram_hf.build import ingest as _ingest
from infinigram_hf.build import build_index

# Builds one document that fills a shard of a 64 MiB budget, given as text (byte tokenizer), a
# list of ints or an int64 array, and prints the peak RSS during the build above the RSS before
# it (the document itself already made).
CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from infinigram_hf.build.pipeline import build_index, max_shard_len

    def rss(field):
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) << 10 for l in f if l.startswith(field))

    out, kind, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    build_index([[1, 2, 3]], out + "-warm", vocab_size=200, progress=False)  # lazy imports, allocator
    build_index(["warm"], out + "-warm-text", progress=False)
    n = max_shard_len(budget, 1) - 1
    if kind == "text":
        doc, kw = "ab" * (n // 2), {}
    elif kind == "list":
        doc, kw = [i % 200 for i in range(n)], {"vocab_size": 200}
    else:
        doc = np.arange(n, dtype=np.int64)
        np.remainder(doc, 200, out=doc)
        kw = {"vocab_size": 200}
    open("/proc/self/clear_refs", "w").write("5")  # peak RSS := RSS now
    before = rss("VmRSS")
    ix = build_index([doc], out, memory_budget=budget, progress=False, **kw)
    print(rss("VmHWM") - before, ix.num_tokens)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS from /proc")
@pytest.mark.skipif(UNDER_ASAN, reason="ASan's own memory is not the build's")
@pytest.mark.parametrize("kind", ["text", "list", "array"])
def test_one_long_document_stays_within_the_budget(tmp_path, kind) -> None:
    budget = 64 << 20
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "ix"), kind, str(budget)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    extra, tokens = map(int, proc.stdout.split())
    assert tokens > 8_000_000
    # Before: 171 MiB (list) to 239 MiB (text) above the RSS before the build.
    assert extra <= budget + (32 << 20), f"{extra >> 20} MiB for a {budget >> 20} MiB budget"


def files(path: Path) -> dict:
    return {p.relative_to(path): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != "meta.json"}


def test_documents_in_pieces_give_the_same_index(tmp_path, monkeypatch) -> None:
    rng = np.random.default_rng(5)
    docs = [rng.integers(0, 300, size=int(n)).tolist() for n in (5, 0, 40, 1, 33, 7, 64, 2)]
    docs.append(np.asarray(docs[2], dtype=np.uint16))
    texts = ["short", "a longer text of ünïcödé — 漢字 words", "", "x" * 50]
    want = build_index(docs, tmp_path / "whole", vocab_size=300, progress=False, max_shard_tokens=120)
    want_text = build_index(texts, tmp_path / "whole-text", progress=False)
    monkeypatch.setattr(_ingest, "CHUNK_TOKENS", 4)  # most documents now go in pieces
    got = build_index(docs, tmp_path / "pieces", vocab_size=300, progress=False, max_shard_tokens=120)
    got_text = build_index(texts, tmp_path / "pieces-text", progress=False)
    assert got.num_shards == want.num_shards > 1
    assert files(tmp_path / "pieces") == files(tmp_path / "whole")
    assert files(tmp_path / "pieces-text") == files(tmp_path / "whole-text")
    for i, d in enumerate(docs):
        assert got.get_doc(i).token_ids.tolist() == list(map(int, d))
    assert got_text.get_doc(1).token_ids.tolist() == list(texts[1].encode())
    for ix in (want, want_text, got, got_text):
        ix.close()


def test_a_long_document_that_does_not_fit_a_shard_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(_ingest, "CHUNK_TOKENS", 4)
    with pytest.raises(ValueError, match="document 1 of 30 tokens does not fit a shard of 20"):
        build_index([[1, 2], [3] * 30], tmp_path / "ix", vocab_size=10, max_shard_tokens=20, progress=False)
    with pytest.raises(ValueError, match="token id 12 of document 1|token id 12 is outside"):
        build_index([[1, 2], [3] * 10 + [12]], tmp_path / "ix", vocab_size=10, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_add_part_refuses_misuse(tmp_path) -> None:
    from infinigram_hf.build.shard_writer import ShardWriter

    w = ShardWriter(tmp_path / "s", 1, 10)
    w.add_part(np.array([1, 2], dtype=np.uint8), end=False)
    with pytest.raises(ValueError, match="not ended"):
        w.add(np.array([1], dtype=np.uint8), np.array([0, 1]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        w.add_part(np.array([11], dtype=np.uint8), end=True)
    w.add_part(np.array([3], dtype=np.uint8), end=True)
    assert (w.num_docs, w.total_len) == (1, 4)
    w.add_part(np.array([4], dtype=np.uint8), end=False)
    w.add_part(np.zeros(0, dtype=np.uint8), end=True)
    assert (w.num_docs, w.total_len) == (2, 6)
    w.add_part(np.array([5], dtype=np.uint8), end=False)
    with pytest.raises(ValueError, match="not ended"):
        w.finish()  # (and the writer is spent)


def test_a_finished_long_document_shard(tmp_path) -> None:
    from infinigram_hf.build.shard_writer import ShardWriter

    w = ShardWriter(tmp_path / "s", 1, 10)
    w.add_part(np.array([1, 2], dtype=np.uint8), end=False)
    w.add_part(np.array([3], dtype=np.int64), end=True)
    w.add(np.array([4], dtype=np.uint8), np.array([0, 1]))
    assert w.finish() == {"dir": "s", "num_tokens": 4, "num_docs": 2, "total_len": 6, "sa_width": 1}
