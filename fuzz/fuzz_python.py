"""Coverage-guided fuzzing of the Python face with atheris (pip install atheris).

Two targets, picked by the first argument:

  cnf  the CNF query parsers: the CLI syntax (`infinigram-hf search INDEX 'a AND b OR c'` and
       `--ids '1,2 OR 3 AND 4'`, run through the CLI's own search command) and the Python forms of
       `search_docs` / `parse_query` (text, ids, nested lists, tuples, numpy arrays, junk), with
       arbitrary options.
  api  every query method of InfiniGramIndex, its batches, SuffixCache, DifferenceIndex and
       InfiniGramLM, with arbitrary Python objects as ids, batches and options.

A call may answer or refuse its arguments (ValueError -- TokenizerMismatchError is one --,
TypeError, OverflowError) or raise a package error (InfiniGramError); anything else -- an
IndexError, a MemoryError, a crash, a hang (atheris's -timeout), more than -rss_limit_mb of
memory -- is a finding. The remaining arguments go to libFuzzer, e.g.

    python fuzz/fuzz_python.py api -max_total_time=60 build/fuzz/work/py_api fuzz/corpus/py_api
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import traceback
from pathlib import Path

import atheris
import numpy as np

with atheris.instrument_imports():
    import infinigram_hf.index.batch  # noqa: F401
    import infinigram_hf.cli as cli
    import infinigram_hf.index.states  # noqa: F401
    import infinigram_hf.lm.model as lm_mod
    import infinigram_hf.index.search as search_mod
    from infinigram_hf import InfiniGramIndex
    from infinigram_hf.build import build_index
    from infinigram_hf import InfiniGramError

# A refused argument: ValueError (the package's errors for bad values name the argument),
# TypeError / OverflowError (a value of the wrong type, or an int too large for its C type,
# refused before any work), or a package error. MemoryError is not on the list: no argument
# may make a call allocate without bound.
ALLOWED = (ValueError, TypeError, OverflowError, InfiniGramError)
TMP = Path(tempfile.mkdtemp(prefix="igfuzz-py-"))
TEXTS = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog", "", "mat mat mat"]
TEXT_INDEX = TEXT_IX = IDS_IX = MINUS_IX = LM = None


def setup() -> None:
    global TEXT_INDEX, TEXT_IX, IDS_IX, MINUS_IX, LM
    TEXT_INDEX = str(TMP / "text")
    TEXT_IX = build_index(TEXTS, TEXT_INDEX, progress=False, max_shard_tokens=40)  # bytes, 3 shards
    docs = [[1, 2, 3, 1, 2, 4] * 3, [2, 2, 2], [], [4, 3, 2, 1, 0, 1, 2], [299, 1, 2]]
    IDS_IX = build_index(docs, TMP / "ids", vocab_size=300, progress=False, ntd_cache_min_cost=2)
    MINUS_IX = build_index(docs[:2], TMP / "minus", vocab_size=300, progress=False)
    LM = lm_mod.InfiniGramLM(IDS_IX, max_context=8)


# ------------------------------------------------------------------ arbitrary Python values


def value(fdp: atheris.FuzzedDataProvider, depth: int = 0):
    """An arbitrary value: ints (small, huge, negative), floats (nan, inf), str, bytes, None, bools,
    numpy scalars and arrays of any dtype and rank, lists / tuples / dicts of values."""
    k = fdp.ConsumeIntInRange(0, 16 if depth < 3 else 6)
    if k == 0:
        return fdp.ConsumeIntInRange(-2, 8)
    if k == 1:
        return fdp.ConsumeInt(9)
    if k == 2:
        return fdp.ConsumeFloat()
    if k == 3:
        return fdp.ConsumeBool()
    if k == 4:
        return None
    if k == 5:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 8))
    if k == 6:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 4))
    if k in (7, 8):
        n = fdp.ConsumeIntInRange(0, 4)
        items = [value(fdp, depth + 1) for _ in range(n)]
        return items if k == 7 else tuple(items)
    if k == 9:
        dtype = fdp.PickValueInList(["int8", "uint8", "int32", "uint32", "int64", "uint64", "float32", "bool"])
        shape = [fdp.ConsumeIntInRange(0, 4) for _ in range(fdp.ConsumeIntInRange(0, 2))]
        raw = np.array([fdp.ConsumeIntInRange(-3, 301) for _ in range(int(np.prod(shape)) if shape else 1)])
        return raw.reshape(shape).astype(dtype) if shape else raw[0].astype(dtype)
    if k in (10, 11, 12):  # mostly-valid ids
        return [fdp.ConsumeIntInRange(0, 5) for _ in range(fdp.ConsumeIntInRange(0, 8))]
    if k == 13:
        return np.int64(fdp.ConsumeIntInRange(-1, 300))
    if k == 14:
        return {fdp.ConsumeUnicodeNoSurrogates(3): value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 2))}
    if k == 15:
        return [[fdp.ConsumeIntInRange(0, 5) for _ in range(fdp.ConsumeIntInRange(0, 5))]
                for _ in range(fdp.ConsumeIntInRange(0, 4))]
    return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12))


def size_value(fdp: atheris.FuzzedDataProvider):
    """A count / limit / option: mostly small sane ints, sometimes any value."""
    if fdp.ConsumeIntInRange(0, 3):
        return fdp.ConsumeIntInRange(0, 6)
    return value(fdp, 2)


COLLECT = bool(os.environ.get("FZ_COLLECT"))  # survey mode: report each new kind of finding, go on
_seen: set = set()


def call(fn, *args, **kw) -> None:
    try:
        fn(*args, **kw)
    except ALLOWED:
        pass
    except Exception as exc:
        if not COLLECT:
            raise
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        key = (type(exc).__name__, tb.filename, tb.lineno)
        if key not in _seen:
            _seen.add(key)
            print(f"FINDING {type(exc).__name__} at {tb.filename}:{tb.lineno}: {exc} "
                  f"[{getattr(fn, '__qualname__', fn)} args={args!r:.200} kw={kw!r:.100}]", flush=True)


# ------------------------------------------------------------------ targets


def test_cnf(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 3)
    if mode in (0, 1):  # the CLI: text on the byte-level index, or --ids
        text = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 40))
        argv = ["search", TEXT_INDEX, "--maxnum", str(fdp.ConsumeIntInRange(0, 3))]
        argv += ["--", text] if mode == 0 else [f"--ids={text}"]
        if fdp.ConsumeBool():
            argv[2:2] = ["--max-diff-tokens", str(fdp.ConsumeIntInRange(-2, 20))]
        out, errs = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(errs):
            try:
                rc = cli.main(argv)
            except SystemExit as exc:  # argparse refusing an option
                rc = exc.code
        assert rc in (0, 2), (rc, argv, errs.getvalue())
        return
    query = value(fdp)
    if mode == 2:
        ix = TEXT_IX if fdp.ConsumeBool() else IDS_IX
        kw = {}
        for name in ("maxnum", "max_clause_freq", "max_diff_tokens", "seed"):
            if fdp.ConsumeIntInRange(0, 3) == 0:
                kw[name] = size_value(fdp)
        call(search_mod.search_docs, ix, query, **kw)
    else:
        call(search_mod.parse_query, query, None, fdp.ConsumeIntInRange(1, 400))


def test_api(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    ix = IDS_IX
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        op = fdp.ConsumeIntInRange(0, 24)
        a = value(fdp)
        if op == 0:
            call(ix.count, a)
        elif op == 1:
            call(ix.find, a)
        elif op == 2:
            call(ix.ngram_ntd, a)
        elif op == 3:
            call(ix.infgram_ntd, a, max_support=size_value(fdp) if fdp.ConsumeBool() else None)
        elif op == 4:
            call(ix.infgram_suffix_len, a)
        elif op == 5:
            call(ix.ngram_prob, a, size_value(fdp))
        elif op == 6:
            call(ix.infgram_prob, a, size_value(fdp))
        elif op == 7:
            call(ix.score, a)
        elif op in (8, 9, 10, 11):
            kw = {}
            if fdp.ConsumeIntInRange(0, 3) == 0:
                kw[fdp.PickValueInList(["offsets", "lengths"])] = value(fdp)
            if fdp.ConsumeBool():
                kw["n_threads"] = size_value(fdp)
            if op == 8:
                call(ix.count_batch, a, **kw)
            elif op == 9:
                call(ix.infgram_prob_batch, a, value(fdp), **kw)
            elif op == 10:
                call(ix.score_batch, a, **kw)
            else:
                if fdp.ConsumeBool():
                    kw["max_support"] = size_value(fdp)
                call(ix.infgram_ntd_batch, a, **kw)
        elif op == 12:
            call(ix.get_doc, a)
        elif op == 13:
            call(ix.locate, a, size_value(fdp))
        elif op == 14:
            call(ix.positions, a, limit=size_value(fdp))
        elif op == 15:
            cache = ix.suffix_cache(max_states=4, max_distributions=2)
            for _ in range(3):
                call(cache.ntd, a)
                call(cache.prob, a, size_value(fdp))
                call(cache.states, [a, value(fdp)])
                a = value(fdp)
        elif op == 16:
            call(lambda: ix.difference(MINUS_IX).count(a))
            call(lambda: ix.difference(MINUS_IX).infgram_ntd(a))
            call(lambda: ix.difference(MINUS_IX).score(a))
            call(lambda: lm_mod.InfiniGramLM(ix.difference(MINUS_IX), max_context=4).score(a, "backoff"))
        elif op in (17, 18, 19, 20):
            method = fdp.PickValueInList(["kn", "wb", "infgram", "backoff", "interpolated", "ikn", "bogus"])
            opts = {}
            for name in ("k", "decay", "floor", "eod", "max_context", "order"):
                if fdp.ConsumeIntInRange(0, 4) == 0:
                    opts[name] = size_value(fdp) if name != "decay" else fdp.ConsumeFloat()
            if op == 17:
                call(LM.score, a, method, **opts)
            elif op == 18:
                call(LM.distribution, a, method, **opts)
            elif op == 19:
                call(LM.generate, a, fdp.ConsumeIntInRange(0, 8), method=method, seed=fdp.ConsumeIntInRange(0, 9))
            else:
                call(LM.levels, a)
        elif op == 21:
            call(LM.count_of_counts, size_value(fdp), size_value(fdp))
        elif op == 22:
            call(lm_mod.InfiniGramLM, ix, max_context=size_value(fdp), cache_entries=size_value(fdp))
        elif op == 23:
            call(search_mod.doc_spans, ix, size_value(fdp), a)
        else:
            call(infinigram_hf.index.states.init_state, ix, a)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("cnf", "api"):
        sys.exit(__doc__)
    target = test_cnf if sys.argv[1] == "cnf" else test_api
    setup()
    atheris.Setup([sys.argv[0]] + sys.argv[2:], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
