"""issue 13, friction in the index: text queries with the index's tokenizer, integer arrays of
any width on count's fast path, ngram_ntd(max_support=), result fields named alike, and an index
that pickles / deep-copies by path with a stable fingerprint for `datasets.map`."""
from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import numpy as np
import pytest

from infinigram_hf import InfiniGramIndex, build_index

DOCS = ["the cat sat on the mat", "the cat ate", "a dog sat on the mat"]


@pytest.fixture(scope="module")
def ix(tmp_path_factory):
    index = build_index(DOCS, tmp_path_factory.mktemp("habits") / "ix", progress=False)
    yield index
    index.close()


def test_text_is_accepted_where_ids_are(ix) -> None:
    assert ix.count("the cat") == ix.count(list(b"the cat")) == 2
    assert ix.infgram_prob("the cat ", "s") == ix.infgram_prob(list(b"the cat "), ord("s"))
    assert ix.infgram_ntd("the cat ").as_dict() == ix.infgram_ntd(list(b"the cat ")).as_dict()
    assert ix.ngram_ntd("on the ").as_dict() == {ord("m"): 2}
    assert np.array_equal(ix.score("the mat").probs, ix.score(list(b"the mat")).probs)
    with pytest.raises(ValueError, match="not one"):
        ix.infgram_prob("the", "at")


def test_integer_arrays_of_any_width(ix) -> None:
    q = list(b"sat on")
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32, np.int64):
        assert ix.count(np.array(q, dtype=dt)) == 2, dt
    assert ix.count(np.array(q, dtype=np.uint32)[::2]) == ix.count(q[::2])  # a strided view
    with pytest.raises(ValueError):
        ix.count(np.array([-1, 3], dtype=np.int64))


def test_ngram_ntd_takes_max_support(ix) -> None:
    exact = ix.ngram_ntd(list(b"the "))
    capped = ix.ngram_ntd(list(b"the "), max_support=2)
    assert capped.approximate and not exact.approximate and capped.suffix_len == exact.suffix_len


def test_result_fields_are_named_alike(ix) -> None:
    p = ix.infgram_prob(list(b"the "), ord("c"))
    d = ix.infgram_ntd(list(b"the "))
    assert d.prompt_count == d.total == p.prompt_count
    b = ix.infgram_ntd_batch([list(b"the "), list(b"a ")])
    assert b.prompt_counts.tolist() == b.total.tolist() == [d.total, ix.count(list(b"a "))]
    s = ix.score(list(b"the cat"))
    assert s.counts.shape == s.prompt_counts.shape == (7,)


def test_pickle_and_deepcopy_reopen_by_path(ix) -> None:
    for clone in (pickle.loads(pickle.dumps(ix)), copy.deepcopy(ix)):
        assert clone is not ix and clone.paths == ix.paths and clone.count("the") == ix.count("the")
        clone.close()
    union = InfiniGramIndex.open([ix.paths[0], ix.paths[0]])
    assert pickle.loads(pickle.dumps(union)).count("cat") == 2 * ix.count("cat")


def test_datasets_fingerprint_is_stable(ix) -> None:
    fingerprint = pytest.importorskip("datasets.fingerprint")
    again = InfiniGramIndex.open(ix.paths[0])
    assert fingerprint.Hasher.hash(ix) == fingerprint.Hasher.hash(again)
    code = ("import sys; from datasets.fingerprint import Hasher; from infinigram_hf import InfiniGramIndex; "
            "print(Hasher.hash(InfiniGramIndex.open(sys.argv[1])))")
    out = subprocess.run([sys.executable, "-c", code, str(ix.paths[0])], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == fingerprint.Hasher.hash(ix)


def test_difference_index_pickles(ix, tmp_path) -> None:
    removed = build_index(DOCS[1:2], tmp_path / "removed", progress=False)
    diff = ix.difference(removed)
    clone = pickle.loads(pickle.dumps(diff))
    assert clone.count(list(b"the cat")) == diff.count(list(b"the cat")) == 1
    clone.close()
