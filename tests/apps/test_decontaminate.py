"""Decontamination (paper App. B): overlap against a brute-force count, the threshold boundary,
short documents, units, lowercase, datasets, the report, and the CLI."""
from __future__ import annotations

import json

import pytest

from infinigram_hf.cli import main as cli_main
from infinigram_hf.decontaminate import Decontaminator, decontaminate

EVAL = ["one two three four five six seven eight nine ten"]


def brute_overlap(doc: str, eval_texts, n: int) -> float:
    grams = set()
    for t in eval_texts:
        w = t.split()
        grams |= {tuple(w[i:i + n]) for i in range(len(w) - n + 1)} if len(w) >= n else {tuple(w)}
    w = doc.split()
    mine = [tuple(w[i:i + n]) for i in range(len(w) - n + 1)] if len(w) >= n else [tuple(w)]
    return sum(g in grams for g in mine) / len(mine)


def test_overlap_and_threshold_boundary():
    deco = Decontaminator(EVAL, n=3, threshold=0.8, unit="whitespace")
    docs = ["one two three four five six x", "one two three four five six seven eight",
            "zero one two three four", "x y z w", "one two"]
    for d in docs:
        assert deco.overlap(d) == pytest.approx(brute_overlap(d, EVAL, 3))
    # 4 of 5 trigrams -> exactly 0.8 -> dropped; 3 of 4 -> 0.75 -> kept
    assert deco.overlap("one two three four five six x") == pytest.approx(0.8)
    assert deco.is_contaminated("one two three four five six x")
    assert not deco.is_contaminated("zero one two three four")
    kept, rep = deco.filter_list(docs)
    assert rep.total == 5 and rep.dropped == 2 and rep.dropped_indices == [0, 1] and rep.kept == 3
    assert kept == docs[2:]


def test_short_documents_and_units():
    deco = Decontaminator(["a b"], n=13, unit="whitespace")
    assert deco.is_contaminated("a b") and not deco.is_contaminated("a c")
    assert Decontaminator(["Hello, World"], n=2).is_contaminated("hello , world") is False
    assert Decontaminator(["Hello, World"], n=2, lowercase=True).is_contaminated("hello, world")
    assert Decontaminator(["abcdef"], n=3, unit="chars").overlap("xbcde") == pytest.approx(2 / 3)
    assert Decontaminator(["a b c"], n=2, unit=lambda t: t.split()).is_contaminated("a b c")
    assert Decontaminator(EVAL).overlap("") == 0.0
    with pytest.raises(ValueError, match="threshold"):
        Decontaminator(EVAL, threshold=0)
    with pytest.raises(ValueError, match="unit"):
        Decontaminator(EVAL, unit="sentences")


def test_decontaminate_dicts_and_datasets():
    from datasets import Dataset

    ref = [{"text": EVAL[0], "id": 1}, {"text": "something else entirely here", "id": 2}]
    kept, rep = decontaminate(ref, EVAL, n=5)
    assert [d["id"] for d in kept] == [2] and rep.dropped == 1 and rep.ratio_dropped == 0.5
    ds, rep = Decontaminator(EVAL, n=5).filter_dataset(Dataset.from_list(ref))
    assert ds["id"] == [2] and rep.dropped_indices == [0]


def test_cli(tmp_path, capsys):
    (tmp_path / "eval.txt").write_text(EVAL[0])
    rows = [{"text": EVAL[0] + " eleven", "src": "a"}, {"text": "unrelated words only", "src": "b"}]
    (tmp_path / "ref.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "doc.txt").write_text("one two three four five six seven eight nine ten eleven")
    rc = cli_main(["decontaminate", "--eval", str(tmp_path / "eval.txt"), "--input", str(tmp_path / "ref.jsonl"),
                   str(tmp_path / "doc.txt"), "--output", str(tmp_path / "kept.jsonl"), "--n", "5"])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["total"] == 3 and rep["dropped"] == 2 and rep["kept"] == 1
    kept = [json.loads(line) for line in (tmp_path / "kept.jsonl").read_text().splitlines()]
    assert kept == [rows[1]]


def test_index_decontaminator_matches_brute_force_ngram_counts(tmp_path):
    """IndexDecontaminator's overlap equals the share of the document's token n-grams with a
    non-zero brute-force count, and documents at or over the threshold are dropped."""
    import numpy as np

    from conftest import Reference, make_index
    from infinigram_hf.decontaminate import IndexDecontaminator

    rng = np.random.default_rng(0)
    corpus = [rng.integers(0, 6, 60).tolist() for _ in range(4)]
    index = make_index(corpus, tmp_path, vocab_size=6)
    ref = Reference(corpus, 6)
    docs = [corpus[0][5:40], rng.integers(0, 6, 30).tolist(), corpus[1][:3], [5, 5, 5, 5, 5, 5, 5], []]
    for n in (1, 3, 5):
        deco = IndexDecontaminator(index, n=n, threshold=0.8)
        for d in docs:
            grams = [d[i:i + n] for i in range(len(d) - n + 1)] if len(d) >= n else ([d] if d else [])
            want = sum(ref.count(g) > 0 for g in grams) / len(grams) if grams else 0.0
            assert deco.overlap(d) == pytest.approx(want), (n, d)
        kept, report = deco.filter_list(docs)
        assert report.total == len(docs) and 0 in report.dropped_indices
        assert len(kept) == report.kept
    with pytest.raises(ValueError, match="threshold"):
        IndexDecontaminator(index, threshold=0)
