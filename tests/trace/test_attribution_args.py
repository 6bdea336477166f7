"""attribute() / creativity(): argument checks name the argument; edge cases (empty texts,
unseen tokens, the smallest token id that the official engine's search misses)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import make_index


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    ix = make_index([[0, 5], [1, 2, 3, 4], [1, 2, 3, 9]], tmp_path_factory.mktemp("attr"), vocab_size=10)
    yield ix
    ix.close()


@pytest.mark.parametrize("kw, match", [
    (dict(min_len=0), "min_len"),
    (dict(max_count=0), "max_count"),
    (dict(max_docs=-1), "max_docs"),
    (dict(delimiters=[10]), "delimiters"),
    (dict(word_starts=np.ones(3, dtype=bool)), "word_starts"),
    (dict(context=-1), "context"),
])
def test_bad_arguments_name_themselves(index, kw, match):
    with pytest.raises(ValueError, match=match):
        index.attribute([1, 2], **kw)


def test_separator_and_out_of_vocabulary_ids_are_refused(index):
    with pytest.raises(ValueError, match="separator"):
        index.attribute([1, index.separator_id])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        index.creativity([1, 10])


def test_empty_texts(index):
    assert index.attribute([]).spans == ()
    c = index.creativity([])
    assert c.match_len.tolist() == [] and np.isnan(c.index(1))
    assert [len(a.spans) for a in index.attribute_batch([[], [1, 2], []])] == [0, 1, 0]


def test_smallest_id_is_found(index):
    # The official engine (2.6.0) answers creativity([0, 3]) = [0, 1] on such a corpus: a query
    # sorting before every suffix is never compared. Ours: [1, 1].
    assert index.creativity([0, 3]).rs.tolist() == [1, 2]
    assert [(s.start, s.end) for s in index.attribute([0, 3]).spans] == [(0, 1), (1, 2)]


def test_ranking_and_merging(index):
    a = index.attribute([1, 2, 3, 4, 7, 2, 3, 9], context=None)
    assert [(s.start, s.end) for s in a.spans] == [(0, 4), (5, 8)]
    assert [(s.start, s.end) for s in a.ranked()] == [(0, 4), (5, 8)]
    assert a.merged() == [(0, 4, [0]), (5, 8, [1])]
    assert a.spans[0].docs[0].window is None and a.spans[0].docs[0].doc_id == 1
    overlapping = index.attribute([5, 1, 2, 3, 9])  # [0,5]: no; spans (0,1) (1,5)
    assert overlapping.merged()[-1][1] == 5
