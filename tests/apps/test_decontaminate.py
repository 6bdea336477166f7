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
