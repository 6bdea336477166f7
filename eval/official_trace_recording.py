"""What the scripts that record the official engine's attribute() / creativity() as test fixtures
share (official_attribution_fixtures.py, official_format_trace_fixtures.py): running in the
official venv, the engine over an index directory, the texts traced and the cases recorded.
"""
from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any, Sequence

import official_engine


def run_in_official_venv(script: str) -> None:
    """Return when infini_gram is importable here; else run `script` again (same arguments) with
    the official venv's Python (eval/official_engine.py setup), or exit saying why not."""
    try:
        import infini_gram.engine  # noqa: F401
        return
    except ImportError:
        pass
    py = official_engine.official_python()
    if os.environ.get("_IG_FIXTURES_REEXEC") or not Path(py).exists():
        sys.exit(f"infini_gram is not importable (tried {py}); see eval/official_engine.py setup")
    os.environ["_IG_FIXTURES_REEXEC"] = "1"
    os.execv(py, [py, os.path.abspath(script)] + sys.argv[1:])


def made_by(script: str) -> str:
    """The fixture's provenance line: the script and the official engine's version."""
    import infini_gram

    return f"eval/{Path(script).name} with infini-gram {getattr(infini_gram, '__version__', '2.6.0')}"


def glued_texts(shards: list, n: int, extra: Sequence[int], max_extra: int, seed: int) -> list:
    """n texts, each 1-4 pieces: mostly a piece of a corpus document, else 1..max_extra ids drawn
    from `extra` (spans across pieces, and misses)."""
    rng = random.Random(seed)
    docs = [d for sh in shards for d in sh if d]
    out = []
    for _ in range(n):
        x: list = []
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.7:
                d = rng.choice(docs)
                a = rng.randint(0, len(d) - 1)
                x += d[a:rng.randint(a + 1, len(d))]
            else:
                x += [rng.choice(extra) for _ in range(rng.randint(1, max_extra))]
        out.append(x)
    return out


def open_engine(index_dir: Path, scratch: Path, *, eos: int, vocab: int, token_dtype: str, bow: Sequence[int]) -> Any:
    """The official engine over index_dir (no prefetching, unigram log-probabilities
    precomputed), with the word-start ids `bow` written to scratch/bow.txt."""
    from infini_gram.engine import InfiniGramEngine

    bow_file = scratch / "bow.txt"
    bow_file.write_text("\n".join(map(str, bow)) + "\n")
    return InfiniGramEngine(index_dir=str(index_dir), eos_token_id=eos, vocab_size=vocab, version=4,
                            token_dtype=token_dtype, ds_prefetch_depth=0, sa_prefetch_depth=0, od_prefetch_depth=0,
                            bow_ids_path=str(bow_file), precompute_unigram_logprobs=True)


def record_cases(eng: Any, texts: list, params: list) -> list:
    """Per text: its creativity() and its attribute() spans under each parameter set."""
    cases = []
    for x in texts:
        case = {"input_ids": x, "creativity": list(eng.creativity(input_ids=x)["rs"]), "attribute": []}
        for p in params:
            res = eng.attribute(input_ids=x, **p)
            assert "error" not in res, res
            case["attribute"].append({"params": p, "spans": [
                {"l": s["l"], "r": s["r"], "count": s["count"], "unigram_logprob_sum": s["unigram_logprob_sum"],
                 "docs": [[dd["s"], dd["ptr"]] for dd in s["docs"]]} for s in res["spans"]]})
        cases.append(case)
    return cases
