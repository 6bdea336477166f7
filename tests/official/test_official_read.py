"""Official infini-gram (2.6.0) indexes served in place: every answer against brute force.

Fixtures: tests/official/data (built by the official indexer, see make_fixtures.py: u8 one shard;
u16, three shards, metadata) and corpora written here by our official writer (u8 / u16 / u32,
1-3 shards, runs and repeated document tails, so the end-of-file suffix falls inside ranges).
The reference parses the token files on its own (a separator before each document).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf import InfiniGramIndex
from infinigram_hf.build.official_writer import SEPARATORS, bytewise_suffix_array, pointer_width, write_official_index
from infinigram_hf import IndexFormatError

from conftest import Reference, assert_index_matches, assert_ntd_matches, assert_prob_matches, built_index

DATA = Path(__file__).resolve().parent / "data"
DTYPES = {1: "<u1", 2: "<u2", 4: "<u4"}


def parse_shard(path: Path, suffix: str, width: int) -> list[list[int]]:
    """Documents of one official shard, split at separators (the file starts with one)."""
    stream = np.fromfile(path / f"tokenized{suffix}", dtype=DTYPES[width]).astype(np.int64)
    sep = SEPARATORS[width]
    cuts = np.flatnonzero(stream == sep).tolist() + [len(stream)]
    assert cuts[0] == 0
    return [stream[a + 1:b].tolist() for a, b in zip(cuts, cuts[1:])]


def parse_index(path: Path, width: int) -> list[list[list[int]]]:
    suffixes = sorted(n[len("tokenized"):] for n in os.listdir(path) if n.startswith("tokenized"))
    return [parse_shard(path, s, width) for s in suffixes]


def check_against_brute(index: InfiniGramIndex, shards: list[list[list[int]]], vocab: int, n: int = 60) -> None:
    docs = [d for s in shards for d in s]
    ref = Reference(docs, vocab)
    assert_index_matches(index, ref, n=n, seed=1)
    assert_index_matches(index, ref, n=n, seed=2)
    for i, d in enumerate(docs):
        assert index.get_doc(i).token_ids.tolist() == d
    # every tail of every shard's last document: the end-of-file suffix is inside these ranges
    for s in shards:
        last = s[-1]
        for k in range(1, min(len(last), 6) + 1):
            q = last[-k:]
            assert index.count(q) == ref.count(q), q
            assert_ntd_matches(index.ngram_ntd(q), ref.ntd(q), len(q), f"tail {q}")
            for t in set(ref.ntd(q)) | {last[0]}:
                if t < vocab:
                    assert_prob_matches(index.ngram_prob(q, t), ref.ngram_prob(q, t), f"prob({q}, {t})")
                    assert_prob_matches(index.infgram_prob([7, *q], t), ref.infgram_prob([7, *q], t))


@pytest.mark.parametrize("name,width,vocab", [("u8_one_shard", 1, 255), ("u16_three_shards_meta", 2, 65001)])
def test_official_indexer_fixtures(name: str, width: int, vocab: int) -> None:
    path = DATA / name
    shards = parse_index(path, width)
    with InfiniGramIndex.open(path, vocab_size=vocab) as index:
        assert index.token_width == width
        check_against_brute(index, shards, vocab)
        if name.startswith("u16"):
            assert index.get_doc(0).metadata == {"path": "shard0.jsonl", "linenum": 0, "metadata": {"doc": "s0d0"}}
            last = index.num_docs - 1
            assert index.get_doc(last).metadata["metadata"]["doc"] == f"s2d{len(shards[2]) - 1}"


@pytest.mark.parametrize("name,width", [("u8_one_shard", 1), ("u16_three_shards_meta", 2)])
def test_our_writer_matches_the_official_indexer(name: str, width: int) -> None:
    """Our bytewise suffix sort gives the official indexer's tables byte for byte."""
    path = DATA / name
    for suffix in sorted(n[len("tokenized"):] for n in os.listdir(path) if n.startswith("tokenized")):
        stream = np.fromfile(path / f"tokenized{suffix}", dtype=DTYPES[width])
        ratio = pointer_width(stream.size * width)
        ptrs = (bytewise_suffix_array(stream) * width).astype("<u8").view(np.uint8).reshape(-1, 8)[:, :ratio]
        assert ptrs.tobytes() == (path / f"table{suffix}").read_bytes(), suffix


def test_official_engine_wrong_ntd_is_answered_right() -> None:
    """infini-gram 2.6.0 answers ntd([1]) on documents [1,2] [5,1] [1,4] [1] (the last one ends
    the shard with the prompt) as {eos: 4}; brute force says {2: 1, 4: 1, end: 2}."""
    with InfiniGramIndex.open(DATA / "u8_one_shard", vocab_size=255) as index:
        sep = index.separator_id
        got = index.ngram_ntd([1]).as_dict()
        ref = Reference([d for s in parse_index(DATA / "u8_one_shard", 1) for d in s], 255)
        assert got == ref.ntd([1])
        assert got[sep] >= 2 and got[2] >= 1 and got[4] >= 1


def random_shards(rng: np.random.Generator, n_shards: int, ids: list[int]) -> list[list[list[int]]]:
    shards = []
    for _ in range(n_shards):
        docs = [list(rng.choice(ids, size=int(rng.integers(0, 10)))) for _ in range(int(rng.integers(1, 12)))]
        if rng.random() < 0.5:  # a run: every tail of it repeats
            docs.append([int(rng.choice(ids))] * int(rng.integers(2, 30)))
        if rng.random() < 0.5 and docs[-1]:  # the last document's tail repeated elsewhere
            docs.insert(0, list(docs[-1][-3:]) + [int(rng.choice(ids))])
        shards.append([[int(t) for t in d] for d in docs])
    return shards


WIDTH_IDS = {
    1: (255, [0, 1, 2, 3, 254]),
    2: (65535, [0, 1, 2, 255, 256, 257, 512, 65534]),
    4: (70000, [0, 1, 256, 257, 65536, 65537, 69999]),
}


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("seed", range(4))
def test_written_official_indexes(tmp_path: Path, width: int, seed: int) -> None:
    rng = np.random.default_rng(1000 * width + seed)
    vocab, ids = WIDTH_IDS[width]
    shards = random_shards(rng, 1 + seed % 3, ids)
    path = write_official_index(tmp_path / "off", shards, width)
    with InfiniGramIndex.open(path, vocab_size=vocab, token_width=width) as index:
        check_against_brute(index, shards, vocab, n=40)


def test_batches_states_and_dense_scoring(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    vocab, ids = WIDTH_IDS[2]
    shards = random_shards(rng, 2, ids)
    path = write_official_index(tmp_path / "off", shards, 2)
    ref = Reference([d for s in shards for d in s], vocab)
    queries = [d[i:i + 3] for s in shards for d in s for i in range(0, max(len(d) - 1, 1), 2)][:40] + [[], [3]]
    with InfiniGramIndex.open(path, vocab_size=vocab) as index:
        assert index.count_batch(queries).tolist() == [ref.count(q) for q in queries]
        batch = index.infgram_ntd_batch(queries)
        for i, q in enumerate(queries):
            want, k = ref.infgram_ntd(q)
            assert_ntd_matches(batch[i], want, k, f"batch {q}")
        seq = [t for q in queries[:8] for t in q]
        scored = index.score_batch([seq, seq[:5]])
        for j, w in enumerate(ref.score(seq)):
            assert (int(scored[0].counts[j]), int(scored[0].prompt_counts[j])) == (w.count, w.prompt_count)
        cache = index.suffix_cache()
        for n in range(1, len(seq) + 1):  # decoding states, extended one token at a time from the cache
            ctx = seq[:n]
            assert cache.state(ctx).suffix_len == ref.suffix_len(ctx)
            want, k = ref.infgram_ntd(ctx)
            assert_ntd_matches(cache.ntd(ctx), want, k, f"state ntd {ctx}")
            assert_prob_matches(cache.prob(ctx, seq[0]), ref.infgram_prob(ctx, seq[0]))


def test_union_with_our_own_index(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vocab, ids = WIDTH_IDS[2]
    theirs = random_shards(rng, 2, ids)
    ours_docs = [[int(t) for t in rng.choice(ids, size=6)] for _ in range(5)]
    off = write_official_index(tmp_path / "off", theirs, 2)
    ref = Reference([d for s in theirs for d in s] + ours_docs, vocab)
    with built_index(ours_docs, tmp_path / "ours", vocab_size=vocab) as ours, \
            InfiniGramIndex.open([off, ours.paths[0]]) as index:
        assert_index_matches(index, ref, n=40, seed=5)


def test_missing_or_inconsistent_arguments(tmp_path: Path) -> None:
    path = DATA / "u16_three_shards_meta"
    with pytest.raises(ValueError, match="vocab_size"):
        InfiniGramIndex.open(path)
    with pytest.raises(ValueError, match="does not fit"):
        InfiniGramIndex.open(path, vocab_size=70000)
    with pytest.raises(IndexFormatError, match="vocab_size is 100"):  # ids 256.. occur
        InfiniGramIndex.open(path, vocab_size=100)
    with pytest.raises(ValueError, match="eos_token_id"):
        InfiniGramIndex.open(path, vocab_size=65001, eos_token_id=70000)
    with pytest.raises((ValueError, IndexFormatError)):
        InfiniGramIndex.open(path, vocab_size=200, token_width=1)


@pytest.mark.parametrize("damage", ["truncate_table", "drop_offset", "bad_offset", "short_tokens", "stray"])
def test_damaged_official_index_is_refused(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "off"
    shutil.copytree(DATA / "u16_three_shards_meta", path)
    if damage == "truncate_table":
        data = (path / "table.1").read_bytes()
        (path / "table.1").write_bytes(data[:-1])
    elif damage == "drop_offset":
        (path / "offset.2").unlink()
    elif damage == "bad_offset":
        raw = bytearray((path / "offset.0").read_bytes())
        raw[8:16] = (10**9).to_bytes(8, "little")
        (path / "offset.0").write_bytes(bytes(raw))
    elif damage == "short_tokens":
        data = (path / "tokenized.0").read_bytes()
        (path / "tokenized.0").write_bytes(data[:-2])
    else:
        (path / "tokenized.9").write_bytes(b"\xff\xff\x01\x00")
    with pytest.raises((IndexFormatError, ValueError)) as info:
        InfiniGramIndex.open(path, vocab_size=65001, token_width=2)
    assert str(path) in str(info.value)


def test_nothing_is_written_into_the_official_directory(tmp_path: Path) -> None:
    path = tmp_path / "off"
    shutil.copytree(DATA / "u8_one_shard", path)
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir()}
    with InfiniGramIndex.open(path, vocab_size=255) as index:
        index.infgram_ntd([1, 2])
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir()} == before


def test_links_inside_an_official_directory_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "off"
    shutil.copytree(DATA / "u8_one_shard", path)
    (path / "table.0").rename(tmp_path / "elsewhere")
    (path / "table.0").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(IndexFormatError, match="link"):
        InfiniGramIndex.open(path, vocab_size=255)


def test_search_docs_positions_and_locate(tmp_path: Path) -> None:
    """Document search (CNF, distance), positions and locate against brute force."""
    rng = np.random.default_rng(11)
    vocab, ids = WIDTH_IDS[2]
    shards = random_shards(rng, 3, ids)
    docs = [d for s in shards for d in s]
    path = write_official_index(tmp_path / "off", shards, 2)
    ref = Reference(docs, vocab)
    with InfiniGramIndex.open(path, vocab_size=vocab) as index:
        for q in ([1], [256, 1], [1, 256], [65534]):
            want = sorted({d for d, _ in ref.occurrences(q)})
            res = index.search_docs(q, maxnum=100)
            assert res.count == len(want) and res.doc_ids.tolist() == want, q
            occ = sorted(index.locate(s, p) for s, p in index.positions(q))
            assert occ == sorted(ref.occurrences(q)), q
        a, b = [1], [256]
        both = sorted({d for d, _ in ref.occurrences(a)} & {d for d, _ in ref.occurrences(b)})
        assert index.search_docs([[a], [b]], maxnum=100).doc_ids.tolist() == both
        either = sorted({d for d, _ in ref.occurrences(a)} | {d for d, _ in ref.occurrences(b)})
        assert index.search_docs([[a, b]], maxnum=100).doc_ids.tolist() == either


CORRUPT_CHILD = """
import sys
from infinigram_hf import InfiniGramIndex, InfiniGramError
for path in sys.argv[1:]:
    try:
        ix = InfiniGramIndex.open(path, vocab_size=65001, token_width=2)
    except (InfiniGramError, ValueError):
        continue
    for q in ([], [1], [256, 1], [1, 2, 5], [65000]):
        ix.count(q); ix.ngram_ntd(q); ix.infgram_ntd(q + [7]); ix.score(q + [1, 2])
    for d in range(ix.num_docs):
        ix.get_doc(d)
    ix.search_docs([1], maxnum=5)
    ix.close()
"""


def test_corrupted_official_files_never_crash(tmp_path: Path) -> None:
    """Random bytes overwritten in the table, tokens or offsets: a clear error or answers, never a
    crash (checked in a child process)."""
    import subprocess
    import sys

    paths = []
    for seed in range(8):
        rng = np.random.default_rng(seed)
        path = tmp_path / f"off{seed}"
        shutil.copytree(DATA / "u16_three_shards_meta", path)
        for name in rng.choice(["table.0", "tokenized.1", "offset.2", "table.2", "metaoff.0"], size=2, replace=False):
            raw = bytearray((path / name).read_bytes())
            for i in rng.integers(0, len(raw), size=8):
                raw[int(i)] = int(rng.integers(0, 256))
            (path / name).write_bytes(bytes(raw))
        paths.append(str(path))
    res = subprocess.run([sys.executable, "-c", CORRUPT_CHILD, *paths], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
