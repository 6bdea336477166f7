"""close() racing get_doc (issue 12): get_doc read a document's metadata after leaving the handle
guard, so close() could close docmeta.jsonl under it; the descriptor number was then reused by the
next file opened anywhere in the process and pread served that file's bytes as metadata (48 of
1.72M calls), or failed with EBADF (811), or blamed the index ("not valid JSON").

Now every read of index data happens while the call holds the C handle, and the metadata files
are closed with the handle's last reference: a call racing close() returns the right document or
raises "the index is closed", nothing else. Bounded: a fixed number of rounds, each a few ms.
"""
from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path

import pytest

from infinigram_hf import InfiniGramError, InfiniGramIndex
from infinigram_hf.build import build_index

N_DOCS = 40
ROUNDS = 60
THREADS = 4


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    import datasets

    base = tmp_path_factory.mktemp("close-race")
    docs = [[(7 * i + j) % 50 for j in range(5 + i % 7)] for i in range(N_DOCS)]
    ds = datasets.Dataset.from_dict({"input_ids": docs, "name": [f"doc-{i:04d}" for i in range(N_DOCS)]})
    build_index(ds, base / "ix", vocab_size=50, metadata_columns=["name"], max_shard_tokens=150,
                progress=False).close()
    # A file shaped like docmeta.jsonl, opened after each close() to take the freed descriptor
    # numbers the way any other file opened by a server would.
    decoy = base / "decoy.jsonl"
    decoy.write_text("".join('{"name": "DECOY-%04d"}\n' % i for i in range(N_DOCS)) * 4)
    return base


def test_get_doc_racing_close_returns_the_document_or_closed(index_dir) -> None:
    ix_path, decoy = index_dir / "ix", index_dir / "decoy.jsonl"
    with InfiniGramIndex.open(ix_path) as ref:
        assert ref.num_shards > 1
        want = [(ref.get_doc(d).token_ids.tolist(), ref.get_doc(d).metadata) for d in range(N_DOCS)]
    problems: list[str] = []
    calls = [0]
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so that calls land all around close()
    try:
        for round_ in range(ROUNDS):
            ix = InfiniGramIndex.open(ix_path)

            def hammer(seed: int, ix: InfiniGramIndex = ix) -> None:
                rng = random.Random(seed)
                for _ in range(100_000):
                    d = rng.randrange(N_DOCS)
                    try:
                        doc = ix.get_doc(d)
                    except InfiniGramError as exc:
                        if str(exc) != "the index is closed":
                            problems.append(f"doc {d}: {type(exc).__name__}: {exc}")
                        return
                    except Exception as exc:  # (EBADF was an OSError)
                        problems.append(f"doc {d}: {type(exc).__name__}: {exc}")
                        return
                    calls[0] += 1
                    if (doc.token_ids.tolist(), doc.metadata) != want[d]:
                        problems.append(f"doc {d}: got {doc.metadata}, want {want[d][1]}")
                        return

            threads = [threading.Thread(target=hammer, args=(round_ * THREADS + k,)) for k in range(THREADS)]
            for t in threads:
                t.start()
            time.sleep(0.001 * (round_ % 4))
            ix.close()
            decoys = [open(decoy, "rb") for _ in range(6)]
            for t in threads:
                t.join(timeout=60)
                assert not t.is_alive(), "a get_doc call hung after close()"
            for f in decoys:
                f.close()
            if len(problems) > 20:
                break
    finally:
        sys.setswitchinterval(old_interval)
    assert not problems, f"{len(problems)} bad answers in {calls[0]} calls: {problems[:5]}"
    assert calls[0] > 0
