"""Regenerate the committed official-format fixtures with the official indexer itself.

    OFFICIAL_PYTHON=/path/to/venv-with-infini-gram-2.6.0/bin/python python tests/official/make_fixtures.py

Our writer (infinigram_hf.build.official_writer) writes tokenized/offset/metadata; the official
indexer (``python -m infini_gram.indexing``, which skips tokenizing when those exist) builds every
table. The tests parse these files independently and compare every answer with brute force, and
check that our writer produces the same tables byte for byte.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from infinigram_hf.build.official_writer import token_stream, _record

HERE = Path(__file__).resolve().parent / "data"
OFFICIAL_PYTHON = os.environ.get("OFFICIAL_PYTHON", "/work/official/venv/bin/python")
DTYPE = {1: "u8", 2: "u16"}


def corpus(rng: np.random.Generator, n_docs: int, ids: list[int]) -> list[list[int]]:
    docs = [list(rng.choice(ids, size=int(rng.integers(0, 14)))) for _ in range(n_docs)]
    docs += [[1, 2], [5, 1], [1, 4], [1]]  # the official engine's end-of-shard ntd case (ntd([1]))
    return [[int(t) for t in d] for d in docs]


def build(name: str, width: int, shards: list[list[list[int]]], metadata: bool) -> None:
    out = HERE / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for s, docs in enumerate(shards):
        stream, offsets = token_stream(docs, width)
        (out / f"tokenized.{s}").write_bytes(stream.tobytes())
        (out / f"offset.{s}").write_bytes(offsets.tobytes())
        if metadata:
            lines = [_record({"path": f"shard{s}.jsonl", "linenum": i, "metadata": {"doc": f"s{s}d{i}"}})
                     for i in range(len(docs))]
            (out / f"metadata.{s}").write_bytes(b"".join(lines))
            moff = np.concatenate([[0], np.cumsum([len(x) for x in lines])[:-1]]).astype("<u8")
            (out / f"metaoff.{s}").write_bytes(moff.tobytes())
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as temp:
        cmd = [OFFICIAL_PYTHON, "-m", "infini_gram.indexing", "--data_dir", empty, "--temp_dir", temp,
               "--save_dir", str(out), "--version", "4", "--token_dtype", DTYPE[width], "--shards", str(len(shards)),
               "--cpus", "1", "--mem", "1", "--ulimit", "1024"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode or "went wrong" in res.stdout:
            sys.exit(f"official indexer failed:\n{res.stdout}\n{res.stderr}")


def main() -> None:
    rng = np.random.default_rng(15)
    build("u8_one_shard", 1, [corpus(rng, 40, list(range(12)) + [254])], metadata=False)
    # ids whose byte order differs from their numeric order (1 < 256 numerically, not bytewise)
    wide = [0, 1, 2, 5, 255, 256, 257, 258, 511, 512, 700, 4097, 65000]
    build("u16_three_shards_meta", 2, [corpus(rng, 30, wide) for _ in range(3)], metadata=True)


if __name__ == "__main__":
    main()
