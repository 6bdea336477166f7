"""Size and count arguments are range-checked before anything is allocated, and every bad
argument is a ValueError naming it (issue 12, findings 9 and 17).

Before: InfiniGramDrafter(max_draft=10**9) allocated 7.45 GiB; lm.levels(max_depth=2**40) asked
numpy for 112 TiB before the core's range check; n_threads, max_support, max_entries, locate's
shard and the LM's k / max_context / cache_entries past the C integer types were OverflowErrors;
search_docs on 100,000-deep or self-referential lists a RecursionError; temperature=NaN sampled
at temperature 1; tree(width=-1, max_nodes=-1) was accepted; the logits processor took 1-D / 3-D
ids and batches whose rows did not match. The checks are one shared helper
(infinigram_hf/_core/args.py).
"""
from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import UNDER_ASAN, make_index

from infinigram_hf import InfiniGramDrafter, InfiniGramLM
from infinigram_hf._core.args import float_arg, int_arg, short_repr


@pytest.fixture(scope="module")
def ix(tmp_path_factory):
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 20, size=60).tolist() for _ in range(10)]
    index = make_index(docs, tmp_path_factory.mktemp("args"), vocab_size=24, max_shard_tokens=300)
    yield index
    index.close()


def _deep(n: int) -> list:
    x: list = [1]
    for _ in range(n):
        x = [x]
    return x


def _self_referential() -> list:
    x: list = [[1]]
    x.append(x)
    return [x]


def _cases(index):
    lm = InfiniGramLM(index, max_context=8)
    drafter = InfiniGramDrafter(index, max_draft=4)
    return {
        "n_threads": lambda: index.count_batch([[1]], n_threads=2**31),
        "max_support": lambda: index.infgram_ntd([1], max_support=2**63),
        "max_entries": lambda: index.infgram_ntd_batch([[1]], max_entries=2**63),
        "shard": lambda: index.locate(2**40, 0),
        "position": lambda: index.locate(0, 2**64),
        "limit": lambda: index.positions([1], limit=-1),
        "k": lambda: lm.score([1, 2, 3], "backoff", k=2**40),
        "max_context": lambda: InfiniGramLM(index, max_context=2**63),
        "cache_entries": lambda: InfiniGramLM(index, cache_entries=2**64),
        "temperature": lambda: lm.generate([1, 2], max_new_tokens=3, temperature=float("nan")),
        "top_p": lambda: lm.generate([1, 2], max_new_tokens=3, top_p=float("nan")),
        "decay": lambda: lm.score([1, 2], "backoff", decay=float("nan")),
        "chunk_size": lambda: lm.generate([1, 2], max_new_tokens=3, chunk_size=10**12),
        "width": lambda: drafter.tree([1, 2, 3], width=-1),
        "max_nodes": lambda: drafter.tree([1, 2, 3], max_nodes=-1),
        "min_prob": lambda: drafter.tree([1, 2, 3], min_prob=float("nan")),
        "max_tokens": lambda: drafter.draft([1, 2, 3], max_tokens=1.5),
        "max_draft": lambda: InfiniGramDrafter(index, max_draft=10**9),
        "max_depth": lambda: lm.levels([1, 2, 3], max_depth=2**40),
        "begin": lambda: lm.levels([1, 2, 3], begin=-5),
        "end": lambda: lm.levels([1, 2, 3], end=10**12),
        "chunk_rows": lambda: lm.levels([1, 2, 3], chunk_rows=0),
        "max_spans": lambda: index.search_docs([1], max_spans=-1),
        "query clause 0, n-gram 0": lambda: index.search_docs(_deep(100_000)),
        "query clause 0, n-gram 1": lambda: index.search_docs(_self_referential()),
    }


CASE_NAMES = [
    "n_threads", "max_support", "max_entries", "shard", "position", "limit", "k", "max_context", "cache_entries",
    "temperature", "top_p", "decay", "chunk_size", "width", "max_nodes", "min_prob", "max_tokens", "max_draft",
    "max_depth", "begin", "end", "chunk_rows", "max_spans", "query clause 0, n-gram 0", "query clause 0, n-gram 1"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bad_argument_is_a_value_error_naming_it(ix, name):
    call = _cases(ix)[name]
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value).startswith(name), str(info.value)
    assert len(str(info.value)) < 400  # (never a 4,000-digit integer or a 100,000-deep list)


_ALLOC_CHILD = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # an allocation attempt fails fast
    from infinigram_hf import InfiniGramDrafter, InfiniGramLM, build_index
    ix = build_index([[1, 2, 3, 1, 2]], sys.argv[1], vocab_size=8, progress=False)
    lm = InfiniGramLM(ix, max_context=4)
    calls = {
        "max_draft": lambda: InfiniGramDrafter(ix, max_draft=10**9),
        "max_depth": lambda: lm.levels([1, 2, 3], max_depth=2**40),
        "chunk_rows": lambda: lm.levels([1, 2, 3], chunk_rows=2**40),
        "max_nodes": lambda: InfiniGramDrafter(ix).best_first(InfiniGramDrafter(ix).infgram_state(
            __import__("numpy").array([1, 2], dtype="int64")), max_nodes=10**12, max_depth=4),
        "chunk_size": lambda: lm.generate([1, 2], max_new_tokens=10**12, chunk_size=10**12, eod=False),
        "k": lambda: InfiniGramDrafter(ix).children(InfiniGramDrafter(ix).infgram_state(
            __import__("numpy").array([1, 2], dtype="int64")), 10**12),
    }
    for name, call in calls.items():
        try:
            call()
            print(name, "no error")
        except ValueError as e:
            print(name, "ValueError", str(e).split(" ")[0])
        except BaseException as e:
            print(name, type(e).__name__)
""")


@pytest.mark.skipif(UNDER_ASAN, reason="ASan needs more address space than the limit")
def test_sizes_are_checked_before_allocating(tmp_path):
    """Under a 3 GiB address-space limit (a child process), each call is refused by name: the
    huge allocations it used to attempt would fail with MemoryError instead."""
    res = subprocess.run([sys.executable, "-c", _ALLOC_CHILD, str(tmp_path / "ix")], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in res.stdout.strip().splitlines())
    assert lines == {name: f"ValueError {name}" for name in lines}, res.stdout
    assert len(lines) == 6


def test_lambda_tuning_grid_and_iterations_are_bounded():
    from infinigram_hf import TokenScores, tune_lambdas

    scores = TokenScores.from_arrays(neural_logprob=np.log(np.full(4, 0.5)), infgram_prob=np.full(4, 0.5),
                                     sparse=[True, False, True, False], effective_n=[1, 1, 1, 1])
    for kw, name in (({"method": "grid", "grid_step": 1e-300}, "grid_step"), ({"tol": float("nan")}, "tol"),
                     ({"max_iter": 10**12}, "max_iter")):
        with pytest.raises(ValueError, match=f"^{name} must be"):
            tune_lambdas(scores, **kw)
    assert 0 <= tune_lambdas(scores, method="grid", grid_step=0.5).lambda_dense <= 1


def test_processor_refuses_ids_and_scores_that_do_not_match(ix):
    torch = pytest.importorskip("torch")
    from infinigram_hf import InfiniGramLogitsProcessor

    proc = InfiniGramLogitsProcessor(ix)
    scores = torch.zeros(2, 24)
    for ids, sc in ((torch.tensor([1, 2, 3]), scores[:1]), (torch.ones(2, 3, 4, dtype=torch.long), scores),
                    (torch.ones(2, 3, dtype=torch.long), torch.zeros(3, 24)),
                    (torch.ones(2, 3, dtype=torch.long), torch.zeros(2, 3, 24))):
        with pytest.raises(ValueError, match="input_ids must be"):
            proc(ids, sc)
    assert proc(torch.ones(2, 3, dtype=torch.long), scores).shape == (2, 24)


def test_shared_helper():
    assert int_arg("x", np.int64(5), 0, 9) == 5
    for bad in (True, 1.0, "3", None, 10, -1, 2**70):
        with pytest.raises(ValueError, match="^x must be an int in"):
            int_arg("x", bad, 0, 9)
    assert float_arg("y", 1, 0.0, 2.0) == 1.0
    for bad in (math.nan, math.inf, -math.inf, True, "1", 10**400, 3.0):
        with pytest.raises(ValueError, match="^y must be a finite number"):
            float_arg("y", bad, 0.0, 2.0)
    with pytest.raises(ValueError, match=r"\(0.0, 1.0\]"):
        float_arg("y", 0.0, 0.0, 1.0, lo_open=True)
    assert len(short_repr(10**3000)) < 100 and len(short_repr(_deep(100_000))) < 100
    assert short_repr(_self_referential())
