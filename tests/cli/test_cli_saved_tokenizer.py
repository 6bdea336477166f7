"""issue 13, bug 1: the CLI's LM commands on an index built with an HF tokenizer, without
--tokenizer (the saved tokenizer.json is read with `tokenizers` alone), and `analyze` without
matplotlib refusing before any work."""
from __future__ import annotations

import json
import sys

import pytest

from infinigram_hf.cli import main

from conftest import bpe_tokenizer, stdlib_texts  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def bpe_index(bpe_tokenizer, tmp_path_factory):
    from infinigram_hf.build import build_index

    out = tmp_path_factory.mktemp("cli-bpe") / "ix"
    build_index([t[:4000] for t in stdlib_texts(2)], out, tokenizer=bpe_tokenizer, progress=False).close()
    return out


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_generate_uses_the_saved_tokenizer(bpe_index, capsys) -> None:
    rc, out, err = run(capsys, "generate", bpe_index, "--prompt", "def ", "--max-new-tokens", "8", "--seed", "0",
                       "--json")
    assert rc == 0, err
    assert json.loads(out)["text"]


def test_lm_perplexity_uses_the_saved_tokenizer(bpe_index, capsys) -> None:
    rc, out, err = run(capsys, "lm-perplexity", bpe_index, "--text", "def f(x): return x")
    assert rc == 0, err
    assert json.loads(out)["perplexity"] > 1


def test_analyze_runs_with_the_saved_tokenizer(bpe_index, tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    (tmp_path / "held.txt").write_text(stdlib_texts(3)[2][:1500], encoding="utf-8")
    rc, out, err = run(capsys, "analyze", bpe_index, "--texts", tmp_path / "held.txt", "--out", tmp_path / "plots",
                       "--no-progress")
    assert rc == 0, err
    assert json.loads(out)["tokens"] > 0


def test_analyze_without_matplotlib_names_the_extra_first(bpe_index, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # (import matplotlib now fails)
    monkeypatch.setattr("infinigram_hf.cli.analysis_commands.open_index",
                        lambda *_: pytest.fail("analyze opened the index before checking for matplotlib"))
    rc, _, err = run(capsys, "analyze", bpe_index, "--texts", tmp_path, "--out", tmp_path / "plots")
    assert rc == 2 and "infinigram_hf[plots]" in err and "Traceback" not in err


def test_repeatable_options_take_their_values(bpe_index, capsys) -> None:
    """--text / --stop / --contains (action="append") were refused as "'--' is not a valid value"."""
    rc, out, err = run(capsys, "lm-perplexity", bpe_index, "--text", "def f(x):", "--text", "return x")
    assert rc == 0 and json.loads(out)["texts"] == 2, err
    rc, out, err = run(capsys, "generate", bpe_index, "--prompt", "def ", "--stop", "\n", "--max-new-tokens", "5",
                       "--seed", "1")
    assert rc == 0, err
