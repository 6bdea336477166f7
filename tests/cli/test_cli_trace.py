"""`infinigram-hf trace | creativity` on a byte-level index: JSON equal to the Python API, the
HTML page written, the terminal view, and bad input exiting 2 with one line."""
from __future__ import annotations

import json

import pytest

from infinigram_hf.build import build_index
from infinigram_hf.cli import main
from infinigram_hf.tracing import word_start_ids

DOCS = ["the quick brown fox jumps over the lazy dog\n", "a lazy dog sleeps over the quick fox all day\n"]


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    ix = build_index(DOCS, tmp_path_factory.mktemp("cli") / "ix", tokenizer=None, progress=False)
    yield ix
    ix.close()


def test_trace_json_equals_the_api(capsys, index):
    text = " the lazy dog sleeps over the quick brown zebra"
    rc, out, _ = run(capsys, "trace", index.paths[0], "--text", text, "--min-len", "5")
    assert rc == 0
    got = json.loads(out)
    want = index.attribute(list(text.encode()), min_len=5, word_starts=word_start_ids(None))
    assert [(s["start"], s["end"], s["count"]) for s in got["spans"]] == [(s.start, s.end, s.count) for s in want.spans]
    assert [s["text"] for s in got["spans"]] == [" the lazy dog", " lazy dog sleeps over the quick", " quick brown"]
    assert got["spans"][1]["docs"][0]["match"] == got["spans"][1]["text"] and got["spans"][1]["docs"][0]["doc_id"] == 1


def test_trace_html_and_terminal(capsys, index, tmp_path):
    f = tmp_path / "in.txt"
    f.write_text(" over the lazy dog, then <i>nothing</i>\n", encoding="utf-8")
    page = tmp_path / "out.html"
    rc, out, err = run(capsys, "trace", index.paths[0], "--file", f, "--html", page, "--min-len", "4")
    assert rc == 0 and out == "" and "wrote" in err
    html = page.read_text(encoding="utf-8")
    assert 'class="span' in html and "<i>" not in html
    rc, out, _ = run(capsys, "trace", index.paths[0], "--file", f, "--show", "--no-word-starts")
    assert rc == 0 and "verbatim spans" in out and "[[" in out


def test_creativity(capsys, index):
    text = "the quick brown fox sleeps"
    rc, out, _ = run(capsys, "creativity", index.paths[0], "--text", text, "--n", "5", "100", "--per-token")
    got = json.loads(out)
    c = index.creativity(list(text.encode()))
    assert rc == 0 and got["tokens"] == len(text) and got["match_len"] == c.match_len.tolist()
    assert got["creativity_index"] == {"5": c.index(5), "100": 1.0}


@pytest.mark.parametrize("argv, msg", [
    (["--file", "/nonexistent/x.txt"], "file not found"),
    (["--text", "x", "--min-len", "0"], "min_len"),
])
def test_bad_input_exits_2(capsys, index, argv, msg):
    rc, _, err = run(capsys, "trace", index.paths[0], *argv)
    assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1
