"""`infinigram-hf convert` both ways: official -> ours -> official is byte for byte, and every
converted index answers as the original (brute force)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from infinigram_hf import InfiniGramIndex
from infinigram_hf.build.convert import official_to_ours, ours_to_official
from infinigram_hf.cli import main

from conftest import Reference, assert_index_matches, built_index

DATA = Path(__file__).resolve().parent / "data"


def files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


@pytest.mark.parametrize("name,vocab", [("u8_one_shard", 255), ("u16_three_shards_meta", 65001)])
def test_round_trip_is_byte_for_byte(tmp_path: Path, name: str, vocab: int) -> None:
    ours = official_to_ours(DATA / name, tmp_path / "ours", vocab_size=vocab, progress=False)
    back = ours_to_official(ours, tmp_path / "back", progress=False)
    assert files(back) == files(DATA / name)
    with InfiniGramIndex.open(DATA / name, vocab_size=vocab) as theirs, InfiniGramIndex.open(ours) as mine:
        docs = [theirs.get_doc(i).token_ids.tolist() for i in range(theirs.num_docs)]
        assert [mine.get_doc(i).token_ids.tolist() for i in range(mine.num_docs)] == docs
        assert [mine.get_doc(i).metadata for i in range(3)] == \
            [({"official_record": theirs.get_doc(i).metadata and _raw(DATA / name, i)} if name.startswith("u16") else {})
             for i in range(3)]
        assert_index_matches(mine, Reference(docs, vocab), n=30)


def _raw(path: Path, doc: int) -> str:
    data = (path / "metadata.0").read_bytes()
    offs = np.fromfile(path / "metaoff.0", dtype="<u8").tolist() + [len(data)]
    return data[offs[doc]:offs[doc + 1]].decode()


def test_ours_to_official_and_back(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    docs = [[int(t) for t in rng.integers(0, 300, size=int(rng.integers(0, 15)))] for _ in range(40)]
    with built_index(docs, tmp_path / "src", vocab_size=300, max_shard_tokens=200) as index:
        assert index.num_shards > 1
        off = ours_to_official(index.paths[0], tmp_path / "off", progress=False)
    with InfiniGramIndex.open(off, vocab_size=300) as theirs:
        assert_index_matches(theirs, Reference(docs, 300), n=40)
    again = official_to_ours(off, tmp_path / "again", vocab_size=300, progress=False)
    with InfiniGramIndex.open(again) as mine:
        assert_index_matches(mine, Reference(docs, 300), n=40)


def test_cli_convert(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["convert", str(DATA / "u8_one_shard"), str(tmp_path / "ours"), "--vocab-size", "255",
                 "--no-progress"]) == 0
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "back"), "--no-progress"]) == 0
    assert files(tmp_path / "back") == files(DATA / "u8_one_shard")
    assert main(["convert", str(DATA / "u8_one_shard"), str(tmp_path / "x")]) == 2
    assert "vocab_size" in capsys.readouterr().err
