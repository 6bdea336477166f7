"""build_index's arguments and documents: a bad one is a ValueError naming it (the document by
its number), before anything is written; num_proc is capped at the CPUs this process may use
(with a warning) and no tokenizer pool is started where it cannot pay."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from infinigram_hf.build import pipeline as build_mod
from infinigram_hf.build.pipeline import build_index, parse_size, tokenizer_processes
from infinigram_hf._core.tokenization import ByteTokenizer


def build(docs, out, **kw):
    kw.setdefault("progress", False)
    return build_index(docs, out, **kw)


@pytest.mark.parametrize("docs, match", [
    ([None], r"document 0 is NoneType None, not a sequence of token ids"),
    ([1, 2, 3], r"document 0 is int 1, not a sequence of token ids \(one document of ids is \[\[1, 2, 3\]\]"),
    ([[1, 2], {"a": 1}], r"document 1 is dict"),
    ([[1, 2], [1, None]], r"document 1: token ids must be integers, got object"),
    ([[1, 2], [1.5, 2.0]], r"document 1: token ids must be integers, got float64"),
    ([[1, 2], [[1, 2], [3]]], r"document 1: cannot be read as token ids"),
    ([[1, 2], [True, False]], r"document 1: token ids must be integers, got bool"),
    ([[0], [1, -1]], r"token id -1 of document 1 is outside the vocabulary"),
    ([[0], [1, 2 ** 70]], r"document 1: token ids must be integers, got object"),
    ([np.float32([1, 2])], r"document 0: token ids must be integers, got float32"),
    ([np.int64(3)], r"document 0 is int64 (np\.int64\()?3\)?, not a sequence"),
    ([np.array(3)], r"document 0 is ndarray array\(3\), not a sequence"),
])
def test_bad_documents_name_the_document(tmp_path, docs, match) -> None:
    with pytest.raises(ValueError, match=match):
        build(docs, tmp_path / "ix", vocab_size=10)
    assert list(tmp_path.iterdir()) == []


def test_documents_of_other_sequence_types_are_taken(tmp_path) -> None:
    import array

    docs = [range(3), array.array("i", [1, 2]), (4, 5), np.array([[6, 7]]), [np.int64(8)], []]
    with build(docs, tmp_path / "ix", vocab_size=10) as ix:
        assert [ix.get_doc(i).token_ids.tolist() for i in range(6)] == [[0, 1, 2], [1, 2], [4, 5], [6, 7], [8], []]


@pytest.mark.parametrize("kw, match", [
    ({"vocab_size": 1.5}, "vocab_size must be an int, got float"),
    ({"vocab_size": "10"}, "vocab_size must be an int, got str"),
    ({"vocab_size": True}, "vocab_size must be an int, got bool"),
    ({"vocab_size": 0}, "vocab_size must be at least 1"),
    ({"vocab_size": 10, "max_shard_tokens": 2.5}, "max_shard_tokens must be an int"),
    ({"vocab_size": 10, "batch_size": 0}, "batch_size must be at least 1"),
    ({"vocab_size": 10, "num_proc": "2"}, "num_proc must be an int"),
    ({"vocab_size": 10, "num_proc": -1}, "num_proc must be at least 1"),
    ({"vocab_size": 10, "memory_budget": "1" + "0" * 400}, "memory_budget: cannot parse"),
    ({"vocab_size": 10, "memory_budget": 10 ** 400}, "memory_budget: memory size .* is too large"),
    ({"vocab_size": 10, "memory_budget": "1e400"}, "memory_budget: cannot parse"),
    ({"vocab_size": 10, "memory_budget": "٤GiB"}, "memory_budget: cannot parse"),  # Arabic-Indic 4
    ({"vocab_size": 10, "memory_budget": True}, "memory_budget must be a number of bytes"),
    ({"vocab_size": 10, "memory_budget": float("inf")}, "memory_budget: cannot parse"),
    ({"vocab_size": 10, "memory_budget": "9" * 30 + "TiB"}, "memory_budget: memory size .* is too large"),
])
def test_bad_arguments_are_value_errors_naming_them(tmp_path, kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        build([[1, 2]], tmp_path / "ix", **kw)
    assert list(tmp_path.iterdir()) == []


def test_sizes_still_parse() -> None:
    assert parse_size("4GiB") == 4 << 30 and parse_size("1.5k") == 1536 and parse_size(" 512 MB ") == 512 << 20
    assert parse_size(np.int64(1 << 20)) == 1 << 20 and parse_size(".5KiB") == 512


# ---------------------------------------------------------------------------- num_proc


def test_num_proc_is_capped_at_the_usable_cpus_with_a_warning(monkeypatch) -> None:
    monkeypatch.setattr(build_mod, "usable_cpus", lambda: 2)
    hf_like = object()
    with pytest.warns(RuntimeWarning, match="num_proc=1000 is more than the 2 CPUs"):
        assert tokenizer_processes(hf_like, 1000, None, 100) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tokenizer_processes(hf_like, 2, None, 100) == 2
        assert tokenizer_processes(hf_like, 2, 10, 100) == 1  # one batch: no pool
        assert tokenizer_processes(ByteTokenizer(), 2, 10 ** 6, 100) == 1  # a memcpy: no pool


def test_usable_cpus_follows_the_affinity_mask() -> None:
    if hasattr(os, "sched_getaffinity"):
        assert build_mod.usable_cpus() == len(os.sched_getaffinity(0))


def test_no_pool_is_started_for_bytes_or_a_single_batch(tmp_path, monkeypatch, bpe_tokenizer) -> None:
    started = []
    real = build_mod.multiprocessing.get_context

    def spy(kind):
        started.append(kind)
        return real(kind)

    monkeypatch.setattr(build_mod.multiprocessing, "get_context", spy)
    with pytest.warns(RuntimeWarning, match="num_proc=1000"):
        build(["a text"] * 10, tmp_path / "bytes", num_proc=1000).close()
    # An iterator (length unknown) of one batch: the pool would start only at a second batch.
    build(iter(["def f(x): return x"] * 10), tmp_path / "bpe", tokenizer=bpe_tokenizer, num_proc=2,
          batch_size=100).close()
    assert started == []
