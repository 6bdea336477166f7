"""build_index from every kind of source, the metadata it records, its size on disk, sharding,
multi-process tokenization and overwrite semantics; each index checked against brute force."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import infinigram_hf
from infinigram_hf import InfiniGramIndex
from infinigram_hf._core import format as fmt
from infinigram_hf._core import tokenization as tk
from infinigram_hf.build.shard_writer import shard_peak_bytes
from infinigram_hf.build.pipeline import build_index, max_shard_len

from conftest import (Reference, assert_index_matches, built_index, make_index, sample_ngrams, stdlib_files,
                      stdlib_texts)

TEXTS = [
    "the cat sat on the mat",
    "the cat ate the rat",
    "",
    "a dog, a cat; the end.",
    "ünïcödé text — with “quotes” and 漢字",
    "the cat sat on the mat again and again and again",
]
META = {"id": [f"doc-{i}" for i in range(len(TEXTS))], "url": [f"https://example.org/{i}" for i in range(len(TEXTS))],
        "n": list(range(len(TEXTS)))}


def encode(tok, texts):
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def build(source, path: Path, **kw) -> InfiniGramIndex:
    kw.setdefault("progress", False)
    return build_index(source, path, **kw)


# ---------------------------------------------------------------------------- datasets + tokenizers


def test_dataset_with_metadata_and_hf_tokenizer(tmp_path, bpe_tokenizer) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": TEXTS, **META})
    ix = build(ds, tmp_path / "ix", tokenizer=bpe_tokenizer, metadata_columns=["id", "url", "n"], batch_size=2)
    ref = Reference(encode(bpe_tokenizer, TEXTS), len(bpe_tokenizer))
    assert_index_matches(ix, ref)
    assert ix.vocab_size == len(bpe_tokenizer) == 300 and ix.token_width == 2
    assert ix.eos_token_id == bpe_tokenizer.eos_token_id
    for i in range(len(TEXTS)):
        doc = ix.get_doc(i)
        assert doc.token_ids.tolist() == list(ref.docs[i])
        assert doc.metadata == {"id": f"doc-{i}", "url": f"https://example.org/{i}", "n": i}
    # The tokenizer is saved inside the index and reloads with the same vocabulary.
    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(str(tmp_path / "ix" / "tokenizer"))
    assert tk.vocab_fingerprint(saved) == ix.vocab_fingerprint == tk.vocab_fingerprint(bpe_tokenizer)
    ix.close()


def test_raw_tokenizers_tokenizer_gives_the_same_index(tmp_path, bpe_tokenizer) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": TEXTS, **META})
    a = build(ds, tmp_path / "a", tokenizer=bpe_tokenizer)
    b = build(ds, tmp_path / "b", tokenizer=bpe_tokenizer.backend_tokenizer)
    assert a.vocab_fingerprint == b.vocab_fingerprint and a.vocab_size == b.vocab_size
    assert_same_shard_files(tmp_path / "a", tmp_path / "b")
    assert all(b.get_doc(i).metadata == {} for i in range(b.num_docs))  # no metadata asked for


def test_tokenizer_by_local_path(tmp_path, bpe_tokenizer) -> None:
    bpe_tokenizer.save_pretrained(str(tmp_path / "tok"))
    ix = build(TEXTS, tmp_path / "ix", tokenizer=str(tmp_path / "tok"))
    assert ix.tokenizer_name == str(tmp_path / "tok")
    assert_index_matches(ix, Reference(encode(bpe_tokenizer, TEXTS), 300))


def test_iterable_dataset(tmp_path, bpe_tokenizer) -> None:
    datasets = pytest.importorskip("datasets")

    def rows():
        for i, t in enumerate(TEXTS):
            yield {"body": t, "source": f"s{i}"}

    ds = datasets.IterableDataset.from_generator(rows)
    ix = build(ds, tmp_path / "ix", tokenizer=bpe_tokenizer, text_column="body", metadata_columns=["source"],
               batch_size=4)
    assert_index_matches(ix, Reference(encode(bpe_tokenizer, TEXTS), 300))
    assert [ix.get_doc(i).metadata for i in range(len(TEXTS))] == [{"source": f"s{i}"} for i in range(len(TEXTS))]


def test_missing_text_column_is_a_value_error(tmp_path, bpe_tokenizer) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"body": TEXTS})
    with pytest.raises(ValueError, match="text"):
        build(ds, tmp_path / "ix", tokenizer=bpe_tokenizer)
    with pytest.raises(ValueError, match="nope"):
        build(ds, tmp_path / "ix", tokenizer=bpe_tokenizer, text_column="body", metadata_columns=["nope"])
    assert not (tmp_path / "ix").exists()


# ---------------------------------------------------------------------------- strings and files


def test_iterable_of_strings_byte_level(tmp_path) -> None:
    ix = build((t for t in TEXTS), tmp_path / "ix", batch_size=2)  # a generator: streamed, length unknown
    assert ix.tokenizer_name == tk.BYTES_NAME and ix.token_width == 1 and ix.vocab_size == 255
    assert ix.separator_id == 255
    assert_index_matches(ix, Reference([list(t.encode()) for t in TEXTS], 255))


def test_txt_jsonl_files_and_directory(tmp_path, bpe_tokenizer) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.txt").write_text(TEXTS[0], encoding="utf-8")
    (corpus / "sub" / "b.txt").write_text(TEXTS[4], encoding="utf-8")
    rows = [{"text": t, "id": i, "lang": "en"} for i, t in enumerate(TEXTS[1:4])]
    (corpus / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n", encoding="utf-8")
    (corpus / "ignored.bin").write_bytes(b"\x00\x01")

    # A single .txt file: one document, its path as metadata.
    one = build(corpus / "a.txt", tmp_path / "one", tokenizer=bpe_tokenizer)
    assert one.num_docs == 1 and one.get_doc(0).metadata == {"path": str(corpus / "a.txt")}
    assert one.get_doc(0).token_ids.tolist() == encode(bpe_tokenizer, [TEXTS[0]])[0]

    # A .jsonl file: one document per non-empty line, with metadata columns.
    jl = build(str(corpus / "c.jsonl"), tmp_path / "jl", tokenizer=bpe_tokenizer, metadata_columns=["id", "lang"])
    assert_index_matches(jl, Reference(encode(bpe_tokenizer, TEXTS[1:4]), 300))
    assert [jl.get_doc(i).metadata for i in range(3)] == [{"id": i, "lang": "en"} for i in range(3)]

    # A directory: its .txt / .jsonl files (recursively, sorted), other files ignored.
    d = build(corpus, tmp_path / "dir", tokenizer=bpe_tokenizer)
    expect = [TEXTS[0]] + TEXTS[1:4] + [TEXTS[4]]  # a.txt, c.jsonl, sub/b.txt
    assert_index_matches(d, Reference(encode(bpe_tokenizer, expect), 300))

    # A list of paths.
    lst = build([corpus / "sub" / "b.txt", corpus / "a.txt"], tmp_path / "list")
    assert [lst.get_doc(i).token_ids.tolist() for i in range(2)] == [list(TEXTS[4].encode()), list(TEXTS[0].encode())]

    with pytest.raises(FileNotFoundError):
        build([corpus / "missing.txt"], tmp_path / "x")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        build(bad, tmp_path / "x")
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------------------- pre-tokenized


def test_pretokenized_lists_and_arrays(tmp_path) -> None:
    docs = [[5, 6, 7, 5, 6], [], [65535, 5], [6] * 30]
    ref = Reference(docs, 70000)
    for i, source in enumerate([
        docs,
        [np.asarray(d, dtype=np.int64) for d in docs],
        [np.asarray(d, dtype=np.uint32) for d in docs],
        iter(docs),
    ]):
        ix = build(source, tmp_path / f"ix{i}", vocab_size=70000)
        assert ix.token_width == 4 and ix.tokenizer_name is None and ix.vocab_fingerprint is None
        assert_index_matches(ix, ref)
        ix.close()
    grid = np.array([[1, 2, 3], [3, 2, 1], [1, 2, 2]], dtype=np.uint16)
    g = build(grid, tmp_path / "grid", vocab_size=4)
    assert g.token_width == 1 and g.num_docs == 3
    assert_index_matches(g, Reference(grid.tolist(), 4))


@pytest.mark.parametrize("docs, vocab, match", [
    ([[0, 1], [10]], 10, "10"),
    ([[0, -3]], 10, "-3"),
    ([[0, 2**40]], 2**32 - 2, str(2**40)),
    ([np.array([0.5, 1.0])], 10, "integer"),
    ([np.array([0, 1], dtype=np.uint16), np.array([3, 12], dtype=np.uint16)], 10, "12"),  # checked in C
])
def test_pretokenized_bad_ids(tmp_path, docs, vocab, match) -> None:
    with pytest.raises(ValueError, match=match):
        build(docs, tmp_path / "ix", vocab_size=vocab)
    assert not (tmp_path / "ix").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temp dir left either


def test_bad_build_arguments(tmp_path) -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        build([[1]], tmp_path / "a", vocab_size=2**32 - 1)
    with pytest.raises(ValueError, match="vocab_size"):
        build([[1]], tmp_path / "a", vocab_size=0)
    with pytest.raises(ValueError, match="tokenizer"):
        build(["text"], tmp_path / "a", vocab_size=300)
    with pytest.raises(ValueError, match="memory"):
        build([[1]], tmp_path / "a", vocab_size=5, memory_budget="lots")
    with pytest.raises(ValueError, match="max_shard_tokens"):
        build([[1]], tmp_path / "a", vocab_size=5, max_shard_tokens=0)
    with pytest.raises(ValueError, match="does not fit"):
        build([[1] * 10], tmp_path / "a", vocab_size=5, max_shard_tokens=5)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- real text, bytes


@pytest.fixture(scope="module")
def stdlib_byte_index(tmp_path_factory):
    """Byte-level index of a few standard-library modules, one document per file."""
    path = tmp_path_factory.mktemp("stdlib") / "ix"
    ix = build(stdlib_files(4), path)
    yield ix
    ix.close()


def test_byte_level_real_text_matches_brute_force(stdlib_byte_index) -> None:
    ix = stdlib_byte_index
    docs = [list(t.encode("utf-8")) for t in stdlib_texts(4)]
    ref = Reference(docs, 255)
    assert_index_matches(ix, ref, n=60)
    for word in ("def ", "return", "import ", "\n    ", "self.", "zzzqqq"):
        q = list(word.encode())
        assert ix.count(q) == ref.count(q) == sum(t.count(word) for t in stdlib_texts(4)), word
    assert [ix.get_doc(i).metadata["path"] for i in range(ix.num_docs)] == [str(p) for p in stdlib_files(4)]


def test_meta_json_fields(stdlib_byte_index, tmp_path, bpe_tokenizer) -> None:
    ix = stdlib_byte_index
    meta = json.loads((ix.paths[0] / "meta.json").read_text())
    assert meta["format"] == fmt.FORMAT_NAME and meta["format_version"] == fmt.FORMAT_VERSION == 1
    assert meta["tokenizer_name"] == tk.BYTES_NAME and meta["vocab_fingerprint"].startswith("sha256:")
    assert (meta["vocab_size"], meta["token_width"], meta["separator_id"]) == (255, 1, 255)
    assert meta["num_tokens"] == ix.num_tokens == sum(len(t.encode()) for t in stdlib_texts(4))
    assert meta["num_docs"] == ix.num_docs == 4
    assert [s["dir"] for s in meta["shards"]] == ["shard_00000"]
    shard = meta["shards"][0]
    assert (shard["num_tokens"], shard["num_docs"], shard["total_len"]) == (ix.num_tokens, 4, ix.num_tokens + 4)
    build_params = meta["build"]
    for key in ("created", "memory_budget", "max_shard_len", "text_column", "metadata_columns", "seconds",
                "infinigram_hf_version"):
        assert key in build_params, key
    assert build_params["memory_budget"] == 4 << 30 and build_params["infinigram_hf_version"] == infinigram_hf.__version__

    hf = build(TEXTS, tmp_path / "hf", tokenizer=bpe_tokenizer, memory_budget="64MiB", max_shard_tokens=1000)
    m = hf.meta
    assert m["vocab_fingerprint"] == tk.vocab_fingerprint(bpe_tokenizer)
    assert m["tokenizer_name"] == tk.tokenizer_name(bpe_tokenizer) and hf.tokenizer_name == m["tokenizer_name"]
    assert (m["vocab_size"], m["token_width"], m["separator_id"]) == (300, 2, 65535)
    assert m["build"]["memory_budget"] == 64 << 20 and m["build"]["max_shard_len"] == 1000
    assert m["eos_token_id"] == bpe_tokenizer.eos_token_id


def test_bytes_per_token_on_disk(stdlib_byte_index) -> None:
    """No more than token width + suffix-array pointer width per token, plus a little."""
    ix = stdlib_byte_index
    shard = ix.meta["shards"][0]
    sa_width = shard["sa_width"]
    assert sa_width == max(1, (int(shard["total_len"] - 1).bit_length() + 7) // 8)  # the smallest that fits
    # Beyond the two arrays: 64-byte headers, 8 bytes per document, 16 per distinct token,
    # meta.json and the per-file metadata: a few KB whatever the corpus size.
    extra = ix.disk_bytes() - (ix.token_width + sa_width) * ix.num_tokens
    assert extra <= 8192, extra
    per_token = ix.disk_bytes() / ix.num_tokens
    assert per_token <= ix.token_width + sa_width + 0.3, per_token
    # The official engine stores 2-byte tokens and ceil(log2(2N)/8)-byte pointers.
    official = 2 + (int(2 * ix.num_tokens).bit_length() + 7) // 8
    assert per_token <= official


# ---------------------------------------------------------------------------- sharding


def test_memory_budget_and_max_shard_tokens_shard_without_changing_answers(tmp_path, stdlib_byte_index) -> None:
    files = stdlib_files(4)
    one = stdlib_byte_index
    longest = max(len(t.encode()) for t in stdlib_texts(4)) + 1
    budget = int(shard_peak_bytes(0, 1)) + 7 * longest + 100  # room for about one file per shard
    cap = max_shard_len(budget, 1)
    assert cap >= longest
    by_budget = build(files, tmp_path / "budget", memory_budget=budget)
    assert by_budget.num_shards >= 2
    for s in by_budget.meta["shards"]:
        assert s["total_len"] <= cap and shard_peak_bytes(s["total_len"], 1) <= budget
    by_cap = build(files, tmp_path / "cap", max_shard_tokens=longest)
    assert by_cap.num_shards >= 2
    assert all(s["total_len"] <= longest for s in by_cap.meta["shards"])
    ref = Reference([list(t.encode()) for t in stdlib_texts(4)], 255)
    for q in sample_ngrams(ref, n=60, seed=1):
        want = one.ngram_ntd(q)
        for ix in (by_budget, by_cap):
            assert ix.count(q) == one.count(q)
            got = ix.ngram_ntd(q)
            assert got.as_dict() == want.as_dict() and got.total == want.total
            assert ix.infgram_suffix_len(q + [7]) == one.infgram_suffix_len(q + [7])
    ids = [t for q in sample_ngrams(ref, n=10, seed=2) for t in q]
    for ix in (by_budget, by_cap):
        a, b = ix.score(ids), one.score(ids)
        assert np.array_equal(a.counts, b.counts) and np.array_equal(a.prompt_counts, b.prompt_counts)
        assert np.array_equal(a.suffix_len, b.suffix_len) and np.array_equal(a.sparse, b.sparse)
        assert [ix.get_doc(i).token_ids.tolist() for i in range(4)] == [one.get_doc(i).token_ids.tolist() for i in range(4)]
        assert [ix.get_doc(i).metadata for i in range(4)] == [one.get_doc(i).metadata for i in range(4)]
    with pytest.raises(ValueError, match="too small"):
        build(files, tmp_path / "tiny", memory_budget=1000)


# ---------------------------------------------------------------------------- processes


def assert_same_shard_files(a: Path, b: Path) -> None:
    ma, mb = json.loads((a / "meta.json").read_text()), json.loads((b / "meta.json").read_text())
    assert ma["shards"] == mb["shards"]
    for s in ma["shards"]:
        for name in fmt.SHARD_FILES:
            assert (a / s["dir"] / name).read_bytes() == (b / s["dir"] / name).read_bytes(), (s["dir"], name)


def test_num_proc_2_gives_the_same_index(tmp_path, bpe_tokenizer) -> None:
    texts = [t[i:i + 300] for t in stdlib_texts(3) for i in range(0, len(t), 300)][:120]
    one = build(texts, tmp_path / "p1", tokenizer=bpe_tokenizer, batch_size=7, num_proc=1)
    two = build(texts, tmp_path / "p2", tokenizer=bpe_tokenizer, batch_size=7, num_proc=2)
    assert one.num_tokens == two.num_tokens and one.num_docs == two.num_docs == len(texts)
    assert_same_shard_files(tmp_path / "p1", tmp_path / "p2")
    assert [two.get_doc(i).token_ids.tolist() for i in range(len(texts))] == encode(bpe_tokenizer, texts)


# ---------------------------------------------------------------------------- overwrite


def test_overwrite_semantics(tmp_path) -> None:
    out = tmp_path / "ix"
    first = build([[1, 2, 3]], out, vocab_size=10)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError):
        build([[4, 5]], out, vocab_size=10)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    second = build([[4, 5], [4]], out, vocab_size=10, overwrite=True)
    assert second.count([4]) == 2 and second.count([1]) == 0
    # The old handle still answers from its own (now unlinked) mapped files.
    assert first.count([1, 2]) == 1
    first.close()
    assert InfiniGramIndex.open(out).num_docs == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix"]  # no temp or old dir left

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        build([[1]], plain, vocab_size=5)
    assert (plain / "keep.txt").read_text() == "mine"


def test_make_index_helper(tmp_path, scratch_dir) -> None:
    ix = make_index([[1, 2], [2, 3]], tmp_path, vocab_size=4, max_shard_tokens=3)
    assert ix.num_shards == 2 and ix.count([2]) == 2
    with built_index([[1]], scratch_dir, vocab_size=2) as tmp_ix:
        path = tmp_ix.paths[0]
        assert tmp_ix.count([1]) == 1
    assert tmp_ix.closed and not path.exists()
