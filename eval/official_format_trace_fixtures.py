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
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "official" / "data"
OUT = HERE.parent / "tests" / "trace" / "fixtures" / "official_format_trace.json"
sys.path.insert(0, str(HERE))
import official_engine  # noqa: E402

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


def texts(shards: list, extra: list, seed: int) -> list:
    """Pieces of documents glued together with a few other ids (spans across pieces, misses)."""
    rng = random.Random(seed)
    docs = [d for sh in shards for d in sh if d]
    out = []
    for _ in range(30):
        x: list = []
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.7:
                d = rng.choice(docs)
                a = rng.randint(0, len(d) - 1)
                x += d[a:rng.randint(a + 1, len(d))]
            else:
                x += [rng.choice(extra) for _ in range(rng.randint(1, 3))]
        out.append(x)
    return out


def params(delims: list) -> list:
    return [dict(delim_ids=[], min_len=1, max_cnt=1000000, enforce_bow=False),
            dict(delim_ids=delims, min_len=1, max_cnt=1000000, enforce_bow=False),
            dict(delim_ids=[], min_len=2, max_cnt=3, enforce_bow=False),
            dict(delim_ids=delims, min_len=1, max_cnt=1000000, enforce_bow=True),
            dict(delim_ids=[], min_len=2, max_cnt=5, enforce_bow=True)]


def main() -> None:
    try:
        import infini_gram.engine  # noqa: F401
    except ImportError:  # run again in the official venv
        py = official_engine.official_python()
        if os.environ.get("_IG_FIXTURES_REEXEC") or not Path(py).exists():
            sys.exit(f"infini_gram is not importable (tried {py}); see eval/official_engine.py setup")
        os.environ["_IG_FIXTURES_REEXEC"] = "1"
        os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])
    import infini_gram
    from infini_gram.engine import InfiniGramEngine

    out: dict = {"made_by": f"eval/official_format_trace_fixtures.py with infini-gram "
                            f"{getattr(infini_gram, '__version__', '2.6.0')}", "indexes": {}}
    for k, (name, (dtype, width, vocab, eos, bow, delims)) in enumerate(FIXTURES.items()):
        shards = parse(DATA / name, width)
        with tempfile.TemporaryDirectory(prefix="ig-") as tmp:
            d = Path(tmp) / "idx"  # (the engine classifies files by words of the whole path)
            shutil.copytree(DATA / name, d)
            bow_file = Path(tmp) / "bow.txt"
            bow_file.write_text("\n".join(map(str, bow)) + "\n")
            eng = InfiniGramEngine(index_dir=str(d), eos_token_id=eos, vocab_size=vocab, version=4, token_dtype=dtype,
                                   ds_prefetch_depth=0, sa_prefetch_depth=0, od_prefetch_depth=0,
                                   bow_ids_path=str(bow_file), precompute_unigram_logprobs=True)
            extra = sorted({t for sh in shards for d_ in sh for t in d_})[:6] + [vocab - 2]
            cases = []
            for x in texts(shards, extra, seed=k):
                case = {"input_ids": x, "creativity": list(eng.creativity(input_ids=x)["rs"]), "attribute": []}
                for p in params(delims):
                    res = eng.attribute(input_ids=x, **p)
                    assert "error" not in res, res
                    case["attribute"].append({"params": p, "spans": [
                        {"l": s["l"], "r": s["r"], "count": s["count"], "unigram_logprob_sum": s["unigram_logprob_sum"],
                         "docs": [[dd["s"], dd["ptr"]] for dd in s["docs"]]} for s in res["spans"]]})
                cases.append(case)
        out["indexes"][name] = {"token_width": width, "vocab_size": vocab, "eos_token_id": eos, "bow_ids": bow,
                                "cases": cases}
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
