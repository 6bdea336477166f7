"""`infinigram-hf build | query | info` on tiny corpora, checked against brute force; bad input
exits 2 with one line; and the demo runs end to end on a few files."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf._core.format import official_bytes_per_token
from infinigram_hf.cli import main
from infinigram_hf.cli.common import parse_ids, to_json

from conftest import Reference, stdlib_texts, train_bpe_tokenizer

DOCS = ["the cat sat on the mat\n", "the cat ate the rat\n", "a dog sat on the mat, the end"]
JSONL = [{"text": "the cat sat on a hat", "id": "j0"}, {"text": "ünïcödé cat — 漢字", "id": "j1"}]


def run(capsys, *argv) -> tuple[int, object, str]:
    """main(argv) -> (exit status, parsed JSON stdout or raw stdout, stderr)."""
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    try:
        return rc, json.loads(out), err
    except json.JSONDecodeError:
        return rc, out, err


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    for i, text in enumerate(DOCS):
        (d / f"doc{i}.txt").write_text(text, encoding="utf-8")
    (d / "more.jsonl").write_text("".join(json.dumps(r) + "\n" for r in JSONL), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def byte_index(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ix") / "bytes"
    assert main(["build", str(corpus), "-o", str(out), "--metadata-columns", "id", "--quiet"]) == 0
    return out


def byte_docs() -> list[list[int]]:
    # Files in sorted path order: doc0.txt, doc1.txt, doc2.txt, more.jsonl (one document per line).
    return [list(t.encode()) for t in DOCS] + [list(r["text"].encode()) for r in JSONL]


# ---------------------------------------------------------------------------- build / query / info


def test_build_prints_a_summary(corpus, tmp_path, capsys) -> None:
    rc, out, err = run(capsys, "build", corpus, "--out", tmp_path / "ix")
    assert rc == 0
    assert out.startswith(f"built {tmp_path / 'ix'}: ") and "bytes/token" in out
    rc, out, _ = run(capsys, "build", corpus, "--out", tmp_path / "ix", "--overwrite", "--quiet")
    assert rc == 0 and out == ""


@pytest.mark.parametrize("text", ["the cat", "the ", "t", "sat on the mat", "cat — 漢", "zebra", "mat, the end"])
def test_query_text_matches_brute_force(byte_index, capsys, text) -> None:
    ref = Reference(byte_docs(), 255)
    ids = list(text.encode())
    rc, out, _ = run(capsys, "query", byte_index, "--text", text, "--top", "300", "--repeat", "2")
    assert rc == 0
    assert out["query"]["ids"] == ids
    assert out["count"] == ref.count(ids)
    for kind, ref_prob in (("ngram_prob", ref.ngram_prob(ids[:-1], ids[-1])),
                           ("infgram_prob", ref.infgram_prob(ids[:-1], ids[-1]))):
        got = out[kind]
        assert (got["count"], got["prompt_count"], got["suffix_len"], got["sparse"]) == (
            ref_prob.count, ref_prob.prompt_count, ref_prob.suffix_len, ref_prob.sparse)
        assert got["effective_n"] == got["suffix_len"] + 1
    want_ntd = ref.ntd(ids)
    assert {e["token_id"]: e["count"] for e in out["ngram_ntd"]["top"]} == want_ntd
    assert out["ngram_ntd"]["total"] == sum(want_ntd.values())
    want_inf, suffix_len = ref.infgram_ntd(ids)
    assert {e["token_id"]: e["count"] for e in out["infgram_ntd"]["top"]} == want_inf
    assert out["infgram_ntd"]["suffix_len"] == suffix_len
    assert out["infgram_ntd"]["sparse"] == (len(want_inf) == 1)
    assert set(out["latency_ms"]) == {"open", "tokenize", "count", "ngram_prob", "infgram_prob",
                                      "ngram_ntd", "infgram_ntd"}
    assert all(v >= 0 for v in out["latency_ms"].values())


def test_query_ids_top_and_end_of_document(byte_index, capsys) -> None:
    ids = list(b"the end")  # ends its document: the next "token" is the separator
    rc, out, _ = run(capsys, "query", byte_index, "--ids", ",".join(map(str, ids)), "--top", "1")
    assert rc == 0 and out["query"]["text"] is None and out["query"]["tokens"][-1] == "d"
    assert out["count"] == 1
    assert out["ngram_ntd"]["top"] == [{"token_id": 255, "token": "<end of document>", "count": 1, "prob": 1.0}]
    rc, out, _ = run(capsys, "query", byte_index, "--ids", "", "--top", "2")  # empty: the unigram
    assert rc == 0 and out["count"] == sum(map(len, byte_docs()))
    assert out["ngram_prob"] is None and out["infgram_ntd"]["suffix_len"] == 0
    assert len(out["infgram_ntd"]["top"]) == 2
    most_common = Counter(t for d in byte_docs() for t in d).most_common(1)[0]
    assert out["infgram_ntd"]["top"][0]["token_id"] == most_common[0]
    assert out["infgram_ntd"]["top"][0]["count"] == most_common[1]


def test_info(byte_index, capsys) -> None:
    rc, out, _ = run(capsys, "info", byte_index)
    assert rc == 0
    n = sum(map(len, byte_docs()))
    assert (out["num_tokens"], out["num_docs"], out["num_shards"]) == (n, 5, 1)
    assert (out["vocab_size"], out["token_width"], out["separator_id"]) == (255, 1, 255)
    assert out["tokenizer_name"] == "bytes-utf8" and out["document_metadata"] is True
    files = out["shards"][0]["file_bytes"]
    assert out["disk_bytes"] >= sum(files.values())
    assert out["tokens_and_sa_bytes_per_token"] == (files["tokens.bin"] + files["sa.bin"]) / n
    assert out["official_engine_bytes_per_token"] == official_bytes_per_token(n, 255) == 3


def test_official_bytes_per_token() -> None:
    assert official_bytes_per_token(7_400_000, 32000) == 5   # the figure for the stdlib
    assert official_bytes_per_token(3 << 30, 50257) == 7     # the paper's scale
    assert official_bytes_per_token(1000, 128256) == 4 + 2


def test_metadata_columns_reach_the_index(byte_index) -> None:
    from infinigram_hf import InfiniGramIndex

    with InfiniGramIndex.open(byte_index) as ix:
        assert ix.get_doc(0).metadata["path"].endswith("doc0.txt")
        assert ix.get_doc(4).metadata == {"id": "j1"}


def test_dataset_and_tokenizer_json(tmp_path, capsys) -> None:
    datasets = pytest.importorskip("datasets")
    texts = stdlib_texts(2)
    raw = train_bpe_tokenizer(texts, vocab_size=400)
    raw.save(str(tmp_path / "tokenizer.json"))
    ds = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"content": texts, "name": ["a", "b"]})})
    ds.save_to_disk(str(tmp_path / "ds"))
    out = tmp_path / "ix"
    rc, _, err = run(capsys, "build", "--dataset", tmp_path / "ds", "--text-column", "content",
                     "--metadata-columns", "name", "--tokenizer", tmp_path / "tokenizer.json", "-o", out, "-q")
    assert rc == 0, err
    assert (out / "tokenizer").is_dir()
    ref = Reference([raw.encode(t).ids for t in texts], 400)
    # --text is tokenized with the tokenizer saved in the index
    rc, res, _ = run(capsys, "query", out, "--text", "def ", "--repeat", "1")
    ids = raw.encode("def ").ids
    assert rc == 0 and res["query"]["ids"] == ids and res["count"] == ref.count(ids)
    assert "".join(res["query"]["tokens"]) == "def "
    # the same tokenizer given explicitly passes the fingerprint check; bytes does not
    rc, res, _ = run(capsys, "query", out, "--text", "def ", "--tokenizer", out / "tokenizer")
    assert rc == 0 and res["count"] == ref.count(ids)
    rc, _, err = run(capsys, "query", out, "--text", "def ", "--tokenizer", "bytes")
    assert rc == 2 and "not the one the index was built with" in err
    rc, res, _ = run(capsys, "info", out)
    assert res["tokenizer_saved"] and res["vocab_size"] == 400 and res["token_width"] == 2
    rc, _, err = run(capsys, "build", "--dataset", tmp_path / "ds", "--split", "test", "-o", tmp_path / "x")
    assert rc == 2 and "train" in err


def test_npy_token_ids(tmp_path, capsys) -> None:
    np.save(tmp_path / "a.npy", np.array([1, 2, 3, 1, 2], dtype=np.int32))
    np.save(tmp_path / "b.npy", np.array([[1, 2, 9], [4, 1, 2]], dtype=np.uint16))
    rc, _, err = run(capsys, "build", tmp_path / "a.npy", tmp_path / "b.npy", "--vocab-size", 10,
                     "-o", tmp_path / "ix", "-q")
    assert rc == 0, err
    rc, out, _ = run(capsys, "query", tmp_path / "ix", "--ids", "1,2")
    assert rc == 0 and out["count"] == 4 and out["query"]["tokens"] is None
    assert {e["token_id"]: e["count"] for e in out["ngram_ntd"]["top"]} == {3: 1, 9: 1, 255: 2}
    rc, _, err = run(capsys, "build", tmp_path / "a.npy", "-o", tmp_path / "iy")
    assert rc == 2 and "--vocab-size" in err


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("argv, message", [
    (["query", "{ix}", "--ids", "1,x"], "--ids must be comma-separated integers"),
    (["query", "{ix}", "--ids", "300"], "outside the vocabulary"),
    (["query", "{ix}", "--ids", "255"], "separator"),
    (["query", "{ix}", "--ids", "-1"], "outside the vocabulary"),
    (["query", "{tmp}/nope", "--ids", "1"], "index directory not found"),
    (["query", "{tmp}", "--ids", "1"], "not an infinigram_hf index"),
    (["query", "{ix}", "--text", "a", "--repeat", "0"], "--repeat"),
    (["info", "{tmp}"], "not an infinigram_hf index"),
    (["build", "{corpus}", "-o", "{ix}"], "already exists; pass --overwrite"),
    (["build", "{tmp}/missing.txt", "-o", "{tmp}/new"], "source not found"),
    (["build", "-o", "{tmp}/new"], "nothing to index"),
    (["build", "{corpus}", "-o", "{tmp}/new", "--memory-budget", "lots"], "cannot parse memory size"),
    (["build", "{corpus}", "-o", "{tmp}/new", "--vocab-size", "10"], "--vocab-size"),
    (["build", "--dataset", "{corpus}", "-o", "{tmp}/new"], "--dataset"),
    (["build", "{corpus}", "--dataset", "{corpus}", "-o", "{tmp}/new"], "not both"),
])
def test_bad_input_exits_2_with_one_line(byte_index, corpus, tmp_path, capsys, argv, message) -> None:
    argv = [a.format(ix=byte_index, tmp=tmp_path, corpus=corpus) for a in argv]
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (argv, out, err)
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert err.startswith(f"infinigram-hf {argv[0]}: error: ")
    assert not (tmp_path / "new").exists()


def test_usage_errors_exit_2(capsys) -> None:
    for argv in ([], ["query"], ["query", "ix"], ["frobnicate"], ["query", "ix", "--text", "a", "--ids", "1"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    capsys.readouterr()


def test_console_script_reports_without_traceback(byte_index, tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "infinigram_hf.cli", "query", str(byte_index), "--ids", "999"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "outside the vocabulary" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "infinigram_hf.cli", "query", str(byte_index), "--text", "cat"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout)["count"] == 4


def test_helpers() -> None:
    assert parse_ids("1, 2,3") == [1, 2, 3] and parse_ids("") == [] and parse_ids("4 5") == [4, 5]
    assert to_json({"a": 1, "b": "x"}) == '{"a": 1, "b": "x"}'
    assert to_json({"a": [1, 2], "b": {"c": None}}) == '{\n  "a": [1, 2],\n  "b": {"c": null}\n}'
    assert json.loads(to_json({"top": [{"x": i} for i in range(3)], "s": "é"})) == {
        "top": [{"x": 0}, {"x": 1}, {"x": 2}], "s": "é"}


# ---------------------------------------------------------------------------- the demo


def test_demo_runs_on_a_few_files(tmp_path) -> None:
    # --no-model: the neural section (a tiny GPT-2 trained on first use) is covered by the
    # processor / perplexity tests; here the index sections are what is checked.
    cmd = [sys.executable, "-m", "infinigram_hf.demo", "--max-files", "20", "--out", str(tmp_path / "demo"),
           "--runs", "1", "--no-progress", "--no-model"]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for heading in ("Counting n-grams", "next-token distributions", "Sparse vs non-sparse", "Backoff",
                    "Dense scoring", "Where does an n-gram come from"):
        assert heading in out
    assert "20 .py files" in out and "bytes/token" in out and "demo finished" in out
    # A second run reuses the cached tokenizer and index.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and "cached" in proc.stdout
