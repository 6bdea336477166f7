"""Opening index files: damaged files raise a package error naming the file (never a crash),
corrupted content gives answers without crashing, several directories open as one, and a closed
index or bad arguments raise clear errors."""
from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf import IndexFormatError, InfiniGramError, InfiniGramIndex
from infinigram_hf._core import format as fmt
from infinigram_hf.build import build_index

from conftest import Reference, assert_index_matches

DOCS = [[1, 2, 3, 1, 2, 4] * 5, [2, 2, 2, 2], [], [4, 3, 2, 1, 0, 1, 2] * 4, [1, 2], [3] * 9, [0, 1, 2, 3, 4] * 6]
VOCAB = 300  # 2-byte tokens
# Header fields of every binary file: (name, offset, size); see native/src/common.h.
HEADER_FIELDS = [("magic", 0, 8), ("version", 8, 4), ("width", 12, 4), ("count", 16, 8), ("aux1", 24, 8)]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A 4-shard index with per-document metadata, built once and copied by each test."""
    base = tmp_path_factory.mktemp("pristine")
    import datasets

    ds = datasets.Dataset.from_dict({"input_ids": DOCS, "id": [f"d{i}" for i in range(len(DOCS))]})
    build_index(ds, base / "ix", vocab_size=VOCAB, metadata_columns=["id"], max_shard_tokens=40,
                progress=False).close()
    return base / "ix"


@pytest.fixture
def index_copy(pristine, tmp_path) -> Path:
    dst = tmp_path / "ix"
    shutil.copytree(pristine, dst)
    return dst


def test_pristine_index_is_valid(pristine) -> None:
    with InfiniGramIndex.open(pristine) as ix:
        assert ix.num_shards == 4
        assert_index_matches(ix, Reference(DOCS, VOCAB))
        assert [ix.get_doc(i).metadata for i in range(len(DOCS))] == [{"id": f"d{i}"} for i in range(len(DOCS))]
        for shard in range(4):
            for name in fmt.SHARD_FILES + (fmt.DOCMETA_FILE, fmt.DOCMETA_INDEX_FILE):
                assert (pristine / fmt.shard_dir_name(shard) / name).is_file()


def expect_error_naming(path: Path, name: str) -> str:
    """Opening (and reading every document of) the index raises a package error naming `name`."""
    with pytest.raises(InfiniGramError) as err:
        with InfiniGramIndex.open(path) as ix:
            for d in range(ix.num_docs):
                ix.get_doc(d)
    msg = str(err.value)
    assert name in msg, msg
    return msg


# ---------------------------------------------------------------------------- damaged binary files


def _truncations(size: int) -> list[int]:
    return sorted({0, 1, 10, 63, 64, 65, size - 8, size - 1} - {size})


@pytest.mark.parametrize("name", fmt.SHARD_FILES)
def test_truncated_or_extended_shard_file(index_copy, name) -> None:
    for shard in (0, 2):
        path = index_copy / fmt.shard_dir_name(shard) / name
        original = path.read_bytes()
        for size in _truncations(len(original)):
            path.write_bytes(original[:size])
            expect_error_naming(index_copy, name)
        path.write_bytes(original + b"\0")
        expect_error_naming(index_copy, name)
        path.unlink()
        expect_error_naming(index_copy, name)
        path.mkdir()
        expect_error_naming(index_copy, name)
        path.rmdir()
        path.write_bytes(original)
        InfiniGramIndex.open(index_copy).close()


@pytest.mark.parametrize("name", fmt.SHARD_FILES)
@pytest.mark.parametrize("field, offset, size", HEADER_FIELDS, ids=[f[0] for f in HEADER_FIELDS])
def test_corrupt_header_field(index_copy, name, field, offset, size) -> None:
    path = index_copy / fmt.shard_dir_name(1) / name
    original = path.read_bytes()
    value = int.from_bytes(original[offset:offset + size], "little")
    for new in {value ^ 1, value + 1, 0, (1 << (8 * size)) - 1} - {value}:
        path.write_bytes(original[:offset] + new.to_bytes(size, "little") + original[offset + size:])
        expect_error_naming(index_copy, name)
    path.write_bytes(original)


def test_corrupt_num_docs_and_doc_offsets(index_copy) -> None:
    shard = index_copy / fmt.shard_dir_name(0)
    tokens = (shard / "tokens.bin").read_bytes()
    ndocs = struct.unpack_from("<Q", tokens, 32)[0]
    (shard / "tokens.bin").write_bytes(tokens[:32] + struct.pack("<Q", ndocs + 1) + tokens[40:])
    expect_error_naming(index_copy, "tokens.bin")
    (shard / "tokens.bin").write_bytes(tokens)
    docs = (shard / "docs.bin").read_bytes()
    last = len(docs) - 8
    (shard / "docs.bin").write_bytes(docs[:last] + struct.pack("<Q", 1) + docs[last + 8:])  # end != total
    expect_error_naming(index_copy, "docs.bin")
    (shard / "docs.bin").write_bytes(docs[:64] + struct.pack("<Q", 3) + docs[72:])  # first start != 0
    expect_error_naming(index_copy, "docs.bin")


def test_corrupt_unigram_entries(index_copy) -> None:
    path = index_copy / fmt.shard_dir_name(0) / "unigram.bin"
    original = path.read_bytes()
    n = (len(original) - 64) // 16
    for i in range(n):
        for field, new in ((0, VOCAB), (0, 2**63), (1, 0), (1, 12345)):
            off = 64 + 16 * i + 8 * field
            path.write_bytes(original[:off] + struct.pack("<Q", new) + original[off + 8:])
            expect_error_naming(index_copy, "unigram.bin")
    if n > 1:  # swap two entries: out of order
        path.write_bytes(original[:64] + original[80:96] + original[64:80] + original[96:])
        expect_error_naming(index_copy, "unigram.bin")


def test_shards_disagreeing_on_width_or_vocab(index_copy) -> None:
    path = index_copy / fmt.shard_dir_name(2) / "tokens.bin"
    original = path.read_bytes()
    path.write_bytes(original[:24] + struct.pack("<Q", VOCAB - 1) + original[32:])
    expect_error_naming(index_copy, "tokens.bin")


# ---------------------------------------------------------------------------- meta.json


def _meta_cases(meta: dict) -> list:
    def edit(**changes):
        m = json.loads(json.dumps(meta))
        m.update(changes)
        return json.dumps(m)

    def drop(key):
        m = dict(meta)
        del m[key]
        return json.dumps(m)

    text = json.dumps(meta)
    return [
        ("empty", ""), ("truncated", text[: len(text) // 2]), ("binary", b"\xff\xfe\x00garbage"),
        ("list", "[1, 2]"), ("null", "null"),
        ("format", edit(format="something-else")), ("version", edit(format_version=99)),
        ("version-str", edit(format_version="1")), ("no-vocab", drop("vocab_size")),
        ("no-shards", edit(shards=[])), ("bad-shard-dir", edit(shards=[{"dir": "../../etc"}] + meta["shards"][1:])),
        ("width", edit(token_width=3)), ("separator", edit(separator_id=255)),
        ("vocab-mismatch", edit(vocab_size=VOCAB + 1)), ("width-mismatch", edit(token_width=4, separator_id=2**32 - 1)),
        ("tokens-mismatch", edit(num_tokens=meta["num_tokens"] + 1)), ("docs-mismatch", edit(num_docs=0)),
        ("bool-count", edit(num_docs=True)), ("fewer-shards", edit(shards=meta["shards"][:2])),
        ("shard-order", edit(shards=[meta["shards"][1], meta["shards"][0]] + meta["shards"][2:])),
    ]


def test_corrupt_meta_json(index_copy) -> None:
    path = index_copy / fmt.META_FILE
    original = path.read_bytes()
    meta = json.loads(original)
    for case, content in _meta_cases(meta):
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        expect_error_naming(index_copy, fmt.META_FILE)
    path.write_bytes(b" " * (fmt.MAX_META_BYTES + 1))
    expect_error_naming(index_copy, fmt.META_FILE)
    path.unlink()
    expect_error_naming(index_copy, fmt.META_FILE)


def test_missing_shard_directory(index_copy) -> None:
    shutil.rmtree(index_copy / fmt.shard_dir_name(2))
    expect_error_naming(index_copy, fmt.shard_dir_name(2))


# ---------------------------------------------------------------------------- document metadata


def test_corrupt_docmeta_files(index_copy) -> None:
    shard = index_copy / fmt.shard_dir_name(1)
    idx, jsonl = shard / fmt.DOCMETA_INDEX_FILE, shard / fmt.DOCMETA_FILE
    idx_bytes, jsonl_bytes = idx.read_bytes(), jsonl.read_bytes()
    for size in _truncations(len(idx_bytes)):
        idx.write_bytes(idx_bytes[:size])
        expect_error_naming(index_copy, fmt.DOCMETA_INDEX_FILE)
    for field, offset, size in HEADER_FIELDS:
        value = int.from_bytes(idx_bytes[offset:offset + size], "little")
        idx.write_bytes(idx_bytes[:offset] + (value ^ 1).to_bytes(size, "little") + idx_bytes[offset + size:])
        expect_error_naming(index_copy, fmt.DOCMETA_INDEX_FILE)
    idx.write_bytes(idx_bytes[:-8] + struct.pack("<Q", 2**63))  # last offset past the file
    expect_error_naming(index_copy, fmt.DOCMETA_FILE)
    idx.write_bytes(idx_bytes[:72] + struct.pack("<Q", 10**6) + idx_bytes[80:])  # offsets decrease
    expect_error_naming(index_copy, fmt.DOCMETA_FILE)
    idx.write_bytes(idx_bytes)
    jsonl.write_bytes(jsonl_bytes[:-1])
    expect_error_naming(index_copy, fmt.DOCMETA_FILE)
    jsonl.write_bytes(b"X" + jsonl_bytes[1:])  # same size, a line is no longer JSON: found on reading
    expect_error_naming(index_copy, fmt.DOCMETA_FILE)
    jsonl.write_bytes(jsonl_bytes)
    idx.unlink()  # metadata without its index (or the reverse) is damage, not "no metadata"
    expect_error_naming(index_copy, fmt.DOCMETA_INDEX_FILE)
    idx.write_bytes(idx_bytes)
    jsonl.unlink()
    expect_error_naming(index_copy, fmt.DOCMETA_FILE)


# ---------------------------------------------------------------------------- corrupted content

QUERY_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from infinigram_hf import InfiniGramIndex, InfiniGramError

    prompts, outcomes = json.loads(sys.argv[1]), {"answered": 0, "refused": 0}
    for path in sys.argv[2:]:
        try:
            ix = InfiniGramIndex.open(path)
        except InfiniGramError:
            outcomes["refused"] += 1
            continue
        calls = []
        for p in prompts:
            calls += [lambda p=p: ix.count(p), lambda p=p: ix.find(p), lambda p=p: ix.ngram_ntd(p),
                      lambda p=p: ix.infgram_ntd(p), lambda p=p: ix.infgram_suffix_len(p),
                      lambda p=p: ix.ngram_prob(p, 2), lambda p=p: ix.infgram_prob(p, 3),
                      lambda p=p: ix.score(p + p), lambda p=p: ix.positions(p, limit=50)]
        calls += [lambda d=d: ix.get_doc(d) for d in range(ix.num_docs)]
        calls += [lambda s=s, q=q: ix.locate(s, q) for s in range(ix.num_shards) for q in range(0, 60, 3)]
        for call in calls:
            try:
                call()
                outcomes["answered"] += 1
            except (InfiniGramError, ValueError):  # a refusal is fine; a crash is not
                outcomes["refused"] += 1
        ix.close()
    print(json.dumps(outcomes))
""")


def run_queries_in_child(prompts: list, dirs: list, timeout: float = 120) -> dict:
    """Run QUERY_CHILD on the index dirs; fail (not crash pytest) if it dies or hangs."""
    try:
        proc = subprocess.run([sys.executable, "-c", QUERY_CHILD, json.dumps(prompts), *dirs],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"queries on corrupted indexes hung for {timeout} s (heap damage or an endless loop)")
    assert proc.returncode == 0, f"child died with {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", fmt.SHARD_FILES)
def test_bit_flips_in_content_never_crash(pristine, tmp_path, name) -> None:
    """Random bit flips after the header: any answer or a package error, run in a child process
    so that a segfault fails this test instead of killing pytest."""
    rng = random.Random(name)
    dirs = []
    for trial in range(8):
        dst = tmp_path / f"ix{trial}"
        shutil.copytree(pristine, dst)
        for shard in range(4):
            path = dst / fmt.shard_dir_name(shard) / name
            data = bytearray(path.read_bytes())
            for _ in range(1 + trial * 3):
                i = rng.randrange(64, len(data))
                data[i] ^= 1 << rng.randrange(8)
            path.write_bytes(bytes(data))
        dirs.append(str(dst))
    prompts = [[], [1], [1, 2], [2, 2, 2], [4, 3, 2, 1], [0, 1, 2, 3, 4, 0], [3] * 12, [299]]
    outcome = run_queries_in_child(prompts, dirs)
    assert outcome["answered"] + outcome["refused"] > 0


def test_garbage_tokens_in_a_tiny_vocabulary_never_crash(tmp_path) -> None:
    """Tokens rewritten to ids far outside a 3-id vocabulary: a next-token walk then meets more
    distinct "tokens" than vocab_size + 1, which must not overflow the per-shard merge buffers."""
    rng = random.Random(7)
    docs = [[rng.randrange(3) for _ in range(300)] for _ in range(8)]
    build_index(docs, tmp_path / "ix", vocab_size=3, max_shard_tokens=700, progress=False).close()
    for shard in sorted((tmp_path / "ix").glob("shard_*")):
        path = shard / "tokens.bin"
        data = bytearray(path.read_bytes())
        for i in range(64, len(data) - 1):
            if data[i] != 255 and rng.random() < 0.5:
                data[i] = rng.randrange(3, 255)
        path.write_bytes(bytes(data))
    prompts = [[], [0], [1], [2], [0, 1], [2, 2]]
    run_queries_in_child(prompts, [str(tmp_path / "ix")])


# ---------------------------------------------------------------------------- opening


def test_several_directories_open_as_one(tmp_path) -> None:
    a_docs, b_docs, c_docs = DOCS[:3], DOCS[3:], [[7, 7, 1], [1, 2]]
    paths = []
    for name, docs, cap in (("a", a_docs, None), ("b", b_docs, 40), ("c", c_docs, None)):
        build_index(docs, tmp_path / name, vocab_size=VOCAB, max_shard_tokens=cap, progress=False).close()
        paths.append(tmp_path / name)
    with InfiniGramIndex.open(paths) as ix:
        assert ix.paths == paths
        assert ix.num_shards == sum(InfiniGramIndex.open(p).num_shards for p in paths)
        ref = Reference(a_docs + b_docs + c_docs, VOCAB)
        assert_index_matches(ix, ref, n=60)
        assert [ix.get_doc(i).token_ids.tolist() for i in range(ix.num_docs)] == [list(d) for d in ref.docs]
        for q in ([1, 2], [2], []):
            assert ix.count(q) == sum(InfiniGramIndex.open(p).count(q) for p in paths)
    with InfiniGramIndex.open([str(paths[0])]) as one:  # a list of one, as str
        assert one.num_docs == len(a_docs)
    build_index([[1]], tmp_path / "other", vocab_size=VOCAB + 1, progress=False).close()
    with pytest.raises(ValueError, match="vocab_size"):
        InfiniGramIndex.open([paths[0], tmp_path / "other"])
    with pytest.raises(ValueError):
        InfiniGramIndex.open([])


def test_opening_what_is_not_an_index(tmp_path) -> None:
    for path in (tmp_path / "missing", tmp_path):
        with pytest.raises(IndexFormatError, match="meta.json"):
            InfiniGramIndex.open(path)
    f = tmp_path / "file.txt"
    f.write_text("hello")
    with pytest.raises(IndexFormatError, match="meta.json"):
        InfiniGramIndex.open(f)


def test_closed_index_raises(tmp_path) -> None:
    build_index(DOCS, tmp_path / "ix", vocab_size=VOCAB, progress=False).close()
    ix = InfiniGramIndex.open(tmp_path / "ix")
    ix.close()
    ix.close()  # idempotent
    assert ix.closed and "closed" in repr(ix)
    calls = [lambda: ix.count([1]), lambda: ix.find([1]), lambda: ix.ngram_ntd([1]), lambda: ix.infgram_ntd([1]),
             lambda: ix.ngram_prob([1], 2), lambda: ix.infgram_prob([1], 2), lambda: ix.infgram_suffix_len([1]),
             lambda: ix.score([1, 2]), lambda: ix.get_doc(0), lambda: ix.locate(0, 0), lambda: ix.positions([1])]
    for call in calls:
        with pytest.raises(InfiniGramError, match="closed"):
            call()
    with InfiniGramIndex.open(tmp_path / "ix") as ctx:
        assert ctx.count([1, 2]) > 0
    assert ctx.closed


@pytest.mark.parametrize("bad", [[VOCAB], [-1], [2**32], [2**64], [1.0, 2.0], np.array([0.5]), [[1, 2]],
                                 np.ones((2, 2), dtype=np.int32), [65535]],
                         ids=["vocab", "negative", "2^32", "2^64", "floats", "float-array", "2d", "2d-array", "sep"])
def test_bad_ids_raise_value_error(tmp_path, bad) -> None:
    build_index(DOCS, tmp_path / "ix", vocab_size=VOCAB, progress=False).close()
    with InfiniGramIndex.open(tmp_path / "ix") as ix:
        for call in (ix.count, ix.find, ix.ngram_ntd, ix.infgram_ntd, ix.infgram_suffix_len, ix.score,
                     ix.positions, lambda q: ix.ngram_prob(q, 1), lambda q: ix.infgram_prob([1], q)):
            with pytest.raises(ValueError):
                call(bad)
        for doc_id in (-1, len(DOCS), 1.0, "0", None):
            with pytest.raises(ValueError):
                ix.get_doc(doc_id)
        for shard, pos in ((-1, 0), (1, 0), (0, -1), (0, 10**6)):
            with pytest.raises(ValueError):
                ix.locate(shard, pos)


def test_meta_json_that_is_a_directory(index_copy) -> None:
    (index_copy / fmt.META_FILE).unlink()
    (index_copy / fmt.META_FILE).mkdir()
    expect_error_naming(index_copy, fmt.META_FILE)
