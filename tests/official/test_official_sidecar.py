"""Sidecars of official indexes (`infinigram-hf prepare`, `open(..., cache_dir=)`): with one, the
official files answer every query as before (brute force), and the smoothed LM, count-of-counts
and difference() work on them (brute force / LM reference); the official directory is never
written to (hashes before and after); a stale sidecar is refused; an interrupted build leaves
nothing behind."""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf import IndexFormatError, InfiniGramIndex
from infinigram_hf.build.official_writer import write_official_index
from infinigram_hf.index import official_sidecar
from infinigram_hf.index.official_sidecar import StaleSidecarError, prepare_sidecar
from infinigram_hf.lm import InfiniGramLM
from infinigram_hf.lm.smoothing import SmoothingParams
from lm_reference import EOD, LMReference, random_corpus
from test_official_read import DATA, WIDTH_IDS, check_against_brute, parse_index, random_shards


def tree_digest(path: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mode of every file under path (and the names: a new file shows)."""
    return {str(p.relative_to(path)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
            for p in sorted(path.rglob("*")) if p.is_file()}


def read_only_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for p in dst.iterdir():
        p.chmod(0o444)
    dst.chmod(0o555)
    return dst


def writable(path: Path) -> None:
    path.chmod(0o755)
    for p in path.iterdir():
        p.chmod(0o644)


@pytest.mark.parametrize("name,width,vocab", [("u8_one_shard", 1, 255), ("u16_three_shards_meta", 2, 65001)])
def test_official_indexer_fixtures_with_a_sidecar(tmp_path: Path, name: str, width: int, vocab: int) -> None:
    off = read_only_copy(DATA / name, tmp_path / "off")
    before = tree_digest(off)
    side = tmp_path / "side"
    with InfiniGramIndex.open(off, vocab_size=vocab, cache_dir=side) as index:  # built at first open
        assert index.meta["sidecar"] == str(side)
        check_against_brute(index, parse_index(off, width), vocab)
        if name.startswith("u16"):  # the official metadata still come from the official files
            assert index.get_doc(0).metadata == {"path": "shard0.jsonl", "linenum": 0, "metadata": {"doc": "s0d0"}}
    assert (side / "sidecar.json").is_file()
    assert sorted(p.name for p in (side / "shard_00000").iterdir()) == ["ntdcache.bin", "sa.bin", "unigram.bin"]
    with InfiniGramIndex.open(off, vocab_size=vocab, cache_dir=side) as index:  # found, not built again
        check_against_brute(index, parse_index(off, width), vocab, n=20)
    assert tree_digest(off) == before
    writable(off)


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("seed", range(3))
def test_written_official_indexes_with_a_sidecar(tmp_path: Path, width: int, seed: int) -> None:
    rng = np.random.default_rng(2000 * width + seed)
    vocab, ids = WIDTH_IDS[width]
    shards = random_shards(rng, 1 + seed % 3, ids)
    path = write_official_index(tmp_path / "off", shards, width)
    before = tree_digest(path)
    prepare_sidecar(path, tmp_path / "side", vocab_size=vocab, token_width=width, progress=False)
    with InfiniGramIndex.open(path, vocab_size=vocab, token_width=width, cache_dir=tmp_path / "side") as index:
        check_against_brute(index, shards, vocab, n=40)
    assert tree_digest(path) == before


def official_of(docs: list, tmp_path: Path, n_shards: int, width: int = 1) -> Path:
    per = -(-len(docs) // n_shards)
    return write_official_index(tmp_path / "off", [docs[i:i + per] for i in range(0, len(docs), per)], width)


V = 4


@pytest.mark.parametrize("seed,shards", [(0, 1), (1, 3), (2, 2)])
def test_smoothed_lm_and_count_of_counts_match_brute_force(tmp_path: Path, seed: int, shards: int) -> None:
    docs = random_corpus(seed, vocab=3)
    ref = LMReference(docs, V)
    path = official_of(docs, tmp_path, shards)
    with InfiniGramIndex.open(path, vocab_size=V, token_width=1) as bare:
        with pytest.raises(ValueError, match="prepare"):
            InfiniGramLM(bare)
    with InfiniGramIndex.open(path, vocab_size=V, token_width=1, cache_dir=tmp_path / "side") as index:
        lm = InfiniGramLM(index)
        raw, cont, types = lm.count_of_counts(7, kmax=4)
        wr, wc, wt = ref.count_of_counts(7, 4)
        assert np.array_equal(raw, wr) and np.array_equal(cont, wc) and np.array_equal(types, wt)
        rng = random.Random(seed)
        query = [rng.randrange(V) for _ in range(14)]
        params = [SmoothingParams(d1=np.full(3, 0.5), d2=np.full(3, 1.0), d3=np.full(3, 1.5), theta=np.zeros(3)),
                  SmoothingParams.witten_bell_params()]
        for p in params:
            for eod in (False, True):
                s = lm.score(query, "kn", smoothing=p, eod=eod)
                for i, t in enumerate(query):
                    assert s.probs[i] == pytest.approx(ref.smooth_dist(query[:i], p, 100, eod)[t], rel=1e-9)
                d = lm.distribution(query[:5], "kn", smoothing=p, eod=eod)
                want = ref.smooth_dist(query[:5], p, 100, eod)
                for w in range(V):
                    assert d[w] == pytest.approx(want[w], rel=1e-9)
                assert d[V] == pytest.approx(want.get(EOD, 0.0), abs=1e-15)


def test_difference_of_official_indexes(tmp_path: Path) -> None:
    docs = random_corpus(5, vocab=3, n_docs=8)
    removed = docs[2:5]
    kept = docs[:2] + docs[5:]
    full = official_of(docs, tmp_path / "a", 2)
    part = official_of(removed, tmp_path / "b", 1)
    with InfiniGramIndex.open(full, vocab_size=V, token_width=1) as a, \
            InfiniGramIndex.open(part, vocab_size=V, token_width=1) as b:
        with pytest.raises(ValueError, match="prepare"):
            a.difference(b)
    with InfiniGramIndex.open(full, vocab_size=V, token_width=1, cache_dir=tmp_path / "sa") as a, \
            InfiniGramIndex.open(part, vocab_size=V, token_width=1, cache_dir=tmp_path / "sb") as b:
        diff = a.difference(b)
        ref = LMReference(kept, V)
        EOD_ID = b.separator_id if hasattr(b, 'separator_id') else 255
        rng = random.Random(0)
        for _ in range(60):
            q = [rng.randrange(V) for _ in range(rng.randrange(1, 4))]
            want = sum(1 for d in kept for i in range(len(d) - len(q) + 1) if d[i:i + len(q)] == q)
            assert diff.count(q) == want, q
            assert diff.ngram_ntd(q).as_dict() == {(EOD_ID if t == EOD else t): c
                                                  for t, c in ref.followers(tuple(q), True).items()}, q


def test_a_stale_sidecar_is_refused(tmp_path: Path) -> None:
    docs = [[1, 2, 3, 1, 2], [3, 3, 1], [2, 1, 0, 2]]
    off = write_official_index(tmp_path / "off", [docs], 1)
    side = prepare_sidecar(off, tmp_path / "side", vocab_size=5, progress=False)
    with pytest.raises(StaleSidecarError, match="vocab_size"):  # another vocabulary
        InfiniGramIndex.open(off, vocab_size=6, token_width=1, cache_dir=side)
    shutil.copytree(off, tmp_path / "copy")  # a copy (new mtimes, same bytes) is still the same index
    with InfiniGramIndex.open(tmp_path / "copy", vocab_size=5, token_width=1, cache_dir=side) as index:
        assert index.count([1, 2]) == 2
    other = write_official_index(tmp_path / "other", [[[1, 2, 3, 1, 2], [3, 3, 1], [2, 1, 0, 3]]], 1)
    for name in os.listdir(other):  # the same sizes, other content: rebuilt by the official indexer
        shutil.copyfile(other / name, off / name)
    with pytest.raises(StaleSidecarError, match="tokenized.0 differs") as info:
        InfiniGramIndex.open(off, vocab_size=5, token_width=1, cache_dir=side)
    assert "prepare" in str(info.value) and str(side) in str(info.value)
    prepare_sidecar(off, side, vocab_size=5, token_width=1, overwrite=True, progress=False)
    with InfiniGramIndex.open(off, vocab_size=5, token_width=1, cache_dir=side) as index:
        assert index.count([0, 3]) == 1
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x").write_text("x")
    with pytest.raises(IndexFormatError, match="sidecar.json"):  # a directory that is no sidecar
        InfiniGramIndex.open(off, vocab_size=5, token_width=1, cache_dir=tmp_path / "junk")
    with pytest.raises(ValueError, match="only replaces a sidecar"):
        prepare_sidecar(off, tmp_path / "junk", vocab_size=5, token_width=1, overwrite=True, progress=False)
    assert (tmp_path / "junk" / "x").read_text() == "x"
    with pytest.raises(ValueError, match="never written inside"):
        prepare_sidecar(off, off / "side", vocab_size=5, token_width=1, progress=False)
    # a sidecar whose fingerprint matches but whose files do not (copied from another one)
    small = write_official_index(tmp_path / "small", [[[1, 2], [3]]], 1)
    prepare_sidecar(small, tmp_path / "side_small", vocab_size=5, progress=False)
    for name in ("sa.bin", "unigram.bin"):
        shutil.copyfile(tmp_path / "side_small" / "shard_00000" / name, side / "shard_00000" / name)
    with pytest.raises(IndexFormatError, match="sa.bin.*stale sidecar"):
        InfiniGramIndex.open(off, vocab_size=5, token_width=1, cache_dir=side)


def test_an_interrupted_build_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    off = tmp_path / "off"
    shutil.copytree(DATA / "u16_three_shards_meta", off)
    calls = []

    def interrupted(*args, **kw):  # the second shard is interrupted
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kw)

    real = official_sidecar._add_shard
    monkeypatch.setattr(official_sidecar, "_add_shard", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_sidecar(off, tmp_path / "cache" / "side", vocab_size=65001, progress=False)
    assert os.listdir(tmp_path / "cache") == []
    monkeypatch.setattr(official_sidecar, "_add_shard", real)
    prepare_sidecar(off, tmp_path / "cache" / "side", vocab_size=65001, progress=False)
    assert sorted(os.listdir(tmp_path / "cache")) == ["side"]
    meta = json.loads((tmp_path / "cache" / "side" / "sidecar.json").read_text())
    assert meta["shard_dirs"] == ["shard_00000", "shard_00001", "shard_00002"]


def test_prepare_command(tmp_path: Path) -> None:
    from infinigram_hf.cli import main

    off = tmp_path / "off"
    shutil.copytree(DATA / "u8_one_shard", off)
    before = tree_digest(off)
    assert main(["prepare", str(off), "--out", str(tmp_path / "side"), "--vocab-size", "255", "--no-progress"]) == 0
    assert main(["prepare", str(off), "--out", str(tmp_path / "side"), "--vocab-size", "255", "--no-progress"]) == 0
    with InfiniGramIndex.open(off, vocab_size=255, cache_dir=tmp_path / "side") as index:
        lm = InfiniGramLM(index)
        assert lm.count_of_counts(2)[2][0] == len({t for d in parse_index(off, 1)[0] for t in d})
    assert tree_digest(off) == before
    assert stat.S_ISDIR((tmp_path / "side").stat().st_mode)


def test_a_union_with_our_own_index(tmp_path: Path) -> None:
    from infinigram_hf import build_index

    docs = random_corpus(7, vocab=3)
    theirs, ours = docs[:3], docs[3:]
    path = official_of(theirs, tmp_path, 2)
    build_index([np.asarray(d, dtype=np.int64) for d in ours], tmp_path / "ours", vocab_size=V, progress=False).close()
    with InfiniGramIndex.open([path, tmp_path / "ours"], vocab_size=V, token_width=1,
                              cache_dir=tmp_path / "side") as index:
        lm = InfiniGramLM(index)
        raw, cont, types = lm.count_of_counts(5, kmax=3)
        wr, wc, wt = LMReference(docs, V).count_of_counts(5, 3)
        assert np.array_equal(raw, wr) and np.array_equal(cont, wc) and np.array_equal(types, wt)
        p = SmoothingParams.witten_bell_params()
        q = docs[0][:6]
        s = lm.score(q, "kn", smoothing=p)
        for i, t in enumerate(q):
            assert s.probs[i] == pytest.approx(LMReference(docs, V).smooth_dist(q[:i], p, 100)[t], rel=1e-9)
