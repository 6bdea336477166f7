"""`infinigram-hf fit-mixing` and `infinigram-hf perplexity` (issue 20): the CLI's numbers equal
the library's, and bad arguments or files are refused with a clear message."""
from __future__ import annotations

import json

import pytest

from hf_tiny import TEXTS, tiny_index, tiny_model, tiny_tok  # noqa: F401
from infinigram_hf import MixingModel
from infinigram_hf.cli import main as cli_main
from infinigram_hf.hf.perplexity import token_scores
from infinigram_hf.lm.mixture import interpolate


@pytest.fixture(scope="module")
def files(tiny_model, tiny_tok, tmp_path_factory):
    d = tmp_path_factory.mktemp("climix")
    tiny_model.save_pretrained(d / "model")
    tiny_tok.save_pretrained(d / "model")
    (d / "val.txt").write_text(TEXTS[2][:1500], encoding="utf-8")
    (d / "test.txt").write_text(TEXTS[3][:1200], encoding="utf-8")
    return d


def run_json(capsys, argv) -> dict:
    assert cli_main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_fit_then_perplexity_equal_the_library(files, tiny_index, tiny_model, tiny_tok, capsys):
    ix = str(tiny_index.paths[0])
    out = files / "mixing.json"
    for levels, want_levels in ([], ["3"]), (["--levels", "none"], []):  # the default fit mixes level "3" in
        fit = run_json(capsys, ["fit-mixing", ix, "--model", str(files / "model"), "--data", str(files / "val.txt"),
                                "--family", "logistic", "--out", str(out), "--no-progress"] + levels)
        assert fit["family"] == "logistic" and fit["levels"] == want_levels and out.is_file()
        got = run_json(capsys, ["perplexity", ix, "--model", str(files / "model"), "--data", str(files / "test.txt"),
                                "--mixing", str(out), "--no-progress"])
        scores = token_scores(tiny_model, tiny_tok, [(files / "test.txt").read_text(encoding="utf-8")], tiny_index,
                              progress=False, levels=tuple(want_levels) or None)
        want = interpolate(scores, mixing=MixingModel.load(out))
        assert got["perplexity"] == pytest.approx(want.perplexity, rel=1e-6)
        assert got["mixing"] == "logistic" and got.get("levels", []) == want_levels
    two = run_json(capsys, ["perplexity", ix, "--model", str(files / "model"), "--data", str(files / "test.txt"),
                            "--lambda-sparse", "0.6", "--lambda-dense", "0.2", "--no-progress"])
    assert two["perplexity"] == pytest.approx(interpolate(scores, 0.6, 0.2).perplexity, rel=1e-6)


def test_bad_arguments_are_refused(files, tiny_index, capsys):
    ix = str(tiny_index.paths[0])
    base = ["perplexity", ix, "--model", str(files / "model"), "--data", str(files / "test.txt")]
    assert cli_main(base + ["--mixing", str(files / "nope.json")]) != 0
    assert "not found" in capsys.readouterr().err
    bad = files / "bad.json"
    bad.write_text('{"format": "other"}')
    assert cli_main(base + ["--mixing", str(bad)]) != 0
    assert "bad.json" in capsys.readouterr().err
    assert cli_main(base + ["--mixing", str(bad), "--lambda-sparse", "0.5"]) != 0
    assert "not both" in capsys.readouterr().err
    assert cli_main(base + ["--lambda-dense", "2"]) != 0
    assert "lambda" in capsys.readouterr().err


def test_fit_with_levels_then_perplexity(files, tiny_index, tiny_model, tiny_tok, capsys):
    ix = str(tiny_index.paths[0])
    out = files / "orders.json"
    fit = run_json(capsys, ["fit-mixing", ix, "--model", str(files / "model"), "--data", str(files / "val.txt"),
                            "--levels", "L-1", "1", "--hidden", "4", "--out", str(out), "--no-progress"])
    assert fit["levels"] == ["L-1", "1"] and MixingModel.load(out).levels == ("L-1", "1")
    got = run_json(capsys, ["perplexity", ix, "--model", str(files / "model"), "--data", str(files / "test.txt"),
                            "--mixing", str(out), "--no-progress"])
    scores = token_scores(tiny_model, tiny_tok, [(files / "test.txt").read_text(encoding="utf-8")], tiny_index,
                          progress=False, levels=("L-1", "1"))
    assert got["perplexity"] == pytest.approx(interpolate(scores, mixing=MixingModel.load(out)).perplexity, rel=1e-6)
    assert got["levels"] == ["L-1", "1"]
    base = ["fit-mixing", ix, "--model", str(files / "model"), "--data", str(files / "val.txt"), "--out", str(out)]
    assert cli_main(base + ["--levels", "L-9"]) != 0
    assert "levels" in capsys.readouterr().err
    assert cli_main(base + ["--levels", "1", "--family", "two-lambda"]) != 0
    assert "two-lambda" in capsys.readouterr().err
