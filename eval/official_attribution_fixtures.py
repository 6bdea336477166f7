#!/usr/bin/env python3
"""Record the official engine's attribute() / creativity() (infini-gram 2.6.0) on a small
2-shard u16 corpus, for tests/trace/test_official_parity.py (which then checks parity on every
machine, the official engine installed or not).

Run (re-executes itself in the official venv, see eval/official_engine.py):
    python3 eval/official_attribution_fixtures.py  # -> tests/trace/fixtures/official_attribute.json

The index is written here in the official layout (tokenized.{s}: per document the separator
0xffff then its u16 ids, little-endian; offset.{s}: u64 byte offset of each separator; table.{s}:
every token-aligned byte offset sorted by the bytes that follow it, ceil(log2(bytes) / 8) bytes per
pointer). A corpus this small is sorted by Python directly, no indexer needed.
"""
from __future__ import annotations

import json
import math
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "tests" / "trace" / "fixtures" / "official_attribute.json"
sys.path.insert(0, str(HERE))
from official_trace_recording import glued_texts, made_by, open_engine, record_cases, run_in_official_venv  # noqa: E402

SEP = 0xFFFF
EOS = 65000  # never in the corpus
VOCAB = 65001


def corpus(seed: int = 0) -> list:
    """Two shards of documents with repeats; ids small and large (bytewise and numeric order
    differ for u16), 0 included (the official search misses matches sorting before every suffix)."""
    rng = random.Random(seed)
    alphabet = list(range(12)) + [255, 256, 300, 1000, 4097, 64999]
    pool: list = []
    shards: list = [[], []]
    for i in range(60):
        doc = [rng.choice(alphabet) for _ in range(rng.randint(0, 30))]
        if pool and rng.random() < 0.6:  # paste a piece of an earlier document
            src = rng.choice(pool)
            a = rng.randint(0, max(len(src) - 1, 0))
            doc[rng.randint(0, len(doc)):0] = src[a:a + rng.randint(2, 25)]
        pool.append(doc)
        shards[i % 2].append(doc)
    return shards


def write_official(d: Path, shards: list) -> None:
    for s, docs in enumerate(shards):
        stream, offsets = [], []
        for doc in docs:
            offsets.append(2 * len(stream))
            stream += [SEP] + doc
        data = b"".join(t.to_bytes(2, "little") for t in stream)
        ratio = max(1, math.ceil(math.log2(len(data)) / 8))
        table = sorted(range(0, len(data), 2), key=lambda p: data[p:])
        (d / f"tokenized.{s}").write_bytes(data)
        (d / f"offset.{s}").write_bytes(b"".join(o.to_bytes(8, "little") for o in offsets))
        (d / f"table.{s}").write_bytes(b"".join(p.to_bytes(ratio, "little") for p in table))


PARAMS = [dict(delim_ids=[], min_len=1, max_cnt=1000000, enforce_bow=False),
          dict(delim_ids=[3], min_len=1, max_cnt=1000000, enforce_bow=False),
          dict(delim_ids=[], min_len=3, max_cnt=4, enforce_bow=False),
          dict(delim_ids=[3, 256], min_len=2, max_cnt=1000000, enforce_bow=True),
          dict(delim_ids=[], min_len=1, max_cnt=2, enforce_bow=True)]
BOW = [0, 1, 4, 255, 300, 64999]


def main() -> None:
    run_in_official_venv(__file__)
    shards = corpus()
    with tempfile.TemporaryDirectory(prefix="ig-off-") as tmp:
        d = Path(tmp) / "idx"
        d.mkdir()
        write_official(d, shards)
        eng = open_engine(d, Path(tmp), eos=EOS, vocab=VOCAB, token_dtype="u16", bow=BOW)
        texts = glued_texts(shards, 40, [0, 1, 2, 3, 5, 7, 500, 256], 4, seed=1)
        cases = record_cases(eng, texts, PARAMS)
    out = {"made_by": made_by(__file__), "eos_token_id": EOS, "vocab_size": VOCAB, "bow_ids": BOW, "shards": shards, "cases": cases}
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes, {len(cases)} texts x {len(PARAMS)} parameter sets)")


if __name__ == "__main__":
    main()
