#!/usr/bin/env python3
"""Record the official engine's attribute() / creativity() (infini-gram 2.6.0) on the committed
official-format indexes of tests/official/data (built by the official indexer itself: u8 one
shard; u16 three shards with metadata), for tests/trace/test_official_format.py, which opens the
same directories in place and checks parity on every machine, the official engine installed or
not.

Run (re-executes itself in the official venv, see eval/official_engine.py):
    python3 eval/official_format_trace_fixtures.py   # -> tests/trace/fixtures/official_format_trace.json
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "official" / "data"
OUT = HERE.parent / "tests" / "trace" / "fixtures" / "official_format_trace.json"
sys.path.insert(0, str(HERE))
from official_trace_recording import glued_texts, made_by, open_engine, record_cases, run_in_official_venv  # noqa: E402

# name: (token_dtype, bytes per token, vocab_size, eos_token_id, word-start ids, delimiters)
FIXTURES = {
    "u8_one_shard": ("u8", 1, 255, 254, [0, 1, 4, 7, 254], [3]),
    "u16_three_shards_meta": ("u16", 2, 65001, 65000, [0, 1, 256, 511, 4097], [2, 700]),
}


def parse(d: Path, width: int) -> list:
    """Documents of every shard (the token file starts each document with a separator)."""
    sep = (1 << (8 * width)) - 1
    shards = []
    for s in range(len(list(d.glob("tokenized.*")))):
        raw = (d / f"tokenized.{s}").read_bytes()
        toks = [int.from_bytes(raw[i:i + width], "little") for i in range(0, len(raw), width)]
        docs, cur = [], None
        for t in toks:
            if t == sep:
                if cur is not None:
                    docs.append(cur)
                cur = []
            else:
                cur.append(t)
        docs.append(cur)
        shards.append(docs)
    return shards


def params(delims: list) -> list:
    return [dict(delim_ids=[], min_len=1, max_cnt=1000000, enforce_bow=False),
            dict(delim_ids=delims, min_len=1, max_cnt=1000000, enforce_bow=False),
            dict(delim_ids=[], min_len=2, max_cnt=3, enforce_bow=False),
            dict(delim_ids=delims, min_len=1, max_cnt=1000000, enforce_bow=True),
            dict(delim_ids=[], min_len=2, max_cnt=5, enforce_bow=True)]


def main() -> None:
    run_in_official_venv(__file__)
    out: dict = {"made_by": made_by(__file__), "indexes": {}}
    for k, (name, (dtype, width, vocab, eos, bow, delims)) in enumerate(FIXTURES.items()):
        shards = parse(DATA / name, width)
        with tempfile.TemporaryDirectory(prefix="ig-") as tmp:
            d = Path(tmp) / "idx"  # (the engine classifies files by words of the whole path)
            shutil.copytree(DATA / name, d)
            eng = open_engine(d, Path(tmp), eos=eos, vocab=vocab, token_dtype=dtype, bow=bow)
            # pieces of documents glued together with a few other ids (spans across pieces, misses)
            extra = sorted({t for sh in shards for d_ in sh for t in d_})[:6] + [vocab - 2]
            cases = record_cases(eng, glued_texts(shards, 30, extra, 3, seed=k), params(delims))
        out["indexes"][name] = {"token_width": width, "vocab_size": vocab, "eos_token_id": eos, "bow_ids": bow,
                                "cases": cases}
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
