"""Paths and file content shown in messages never drive the terminal: control characters (an
`ESC ] 0 ; title BEL ESC [ 2 J` in a link's target, a file name, a document) and invisible
bidi/format characters are shown escaped -- in the library's errors (InfiniGramError and the C
core's messages), in the CLI's error line and in its JSON output."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from infinigram_hf import InfiniGramIndex
from infinigram_hf._core.safe_text import printable, printable_json
from infinigram_hf.build import build_index
from infinigram_hf.cli import main
from infinigram_hf import IndexFormatError, InfiniGramError

EVIL = "\x1b]0;pwned\x07\x1b[2J\u202e\x9b"


def raw_controls(text: str) -> list:
    return [c for c in text if c in "\x1b\x07\u202e\x9b"]


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    assert printable(f"a{EVIL}b") == "a\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x9bb"
    assert printable("plain ünïcödé 漢字 — ok") == "plain ünïcödé 漢字 — ok"
    assert json.loads(printable_json(json.dumps(f"x{EVIL}", ensure_ascii=False))) == f"x{EVIL}"
    assert not raw_controls(printable_json(json.dumps(f"x{EVIL}", ensure_ascii=False)))


def test_package_errors_escape_their_messages() -> None:
    exc = IndexFormatError(f"/tmp/{EVIL}/meta.json: bad\nsecond line")
    assert not raw_controls(str(exc)) and "\\x1b]0;pwned\\x07" in str(exc) and "\nsecond line" in str(exc)
    assert not raw_controls(str(InfiniGramError(EVIL)))


@pytest.fixture()
def evil_tree(tmp_path) -> Path:
    """An index whose docmeta.jsonl is a link to a file outside it, in a directory whose name
    holds terminal escapes."""
    ix = tmp_path / "ix"
    build_index(["the cat", "the dog"], ix, progress=False)
    outside = tmp_path / EVIL.replace("\x9b", "")  # (a byte a file name can hold)
    outside.mkdir()
    (outside / "secret").write_text('{"a": 1}\n')
    shard = ix / "shard_00000"
    for name in ("docmeta.jsonl", "docmeta.idx"):
        (shard / name).unlink(missing_ok=True)
    (shard / "docmeta.jsonl").symlink_to(outside / "secret")
    return ix


def test_a_link_target_with_escapes_is_shown_escaped(evil_tree, capsys) -> None:
    with pytest.raises(IndexFormatError) as info:
        InfiniGramIndex.open(evil_tree)
    assert "symbolic link" in str(info.value) and not raw_controls(str(info.value))
    assert main(["query", str(evil_tree), "--ids", "1"]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "\\x1b]0;pwned\\x07\\x1b[2J" in err and not raw_controls(err)


def test_cli_errors_escape_paths(tmp_path, capsys) -> None:
    assert main(["info", str(tmp_path / f"no{EVIL}where")]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and not raw_controls(err)
    target = tmp_path / f"out{EVIL}"
    target.mkdir()
    (target / "file").write_text("x")
    src = tmp_path / "c.txt"
    src.write_text("the cat")
    assert main(["build", str(src), "--out", str(target), "--overwrite", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "not an infinigram_hf index" in err or "has no meta.json" in err
    assert not raw_controls(err)


def test_c_core_messages_are_escaped(tmp_path) -> None:
    ix = tmp_path / f"ix{EVIL.replace(chr(0x9b), '')}"
    build_index(["the cat"], ix, progress=False).close()
    tokens = ix / "shard_00000" / "tokens.bin"
    os.truncate(tokens, 70)
    with pytest.raises(IndexFormatError) as info:
        InfiniGramIndex.open(ix)
    assert "tokens.bin" in str(info.value) and not raw_controls(str(info.value))


def test_json_output_escapes_document_content(tmp_path, capsys) -> None:
    ix = tmp_path / "ix"
    build_index([f"hello {EVIL} world", "hello there"], ix, progress=False).close()
    assert main(["search", str(ix), "hello", "--disp-len", "0"]) == 0
    out = capsys.readouterr().out
    assert not raw_controls(out)
    docs = json.loads(out)["documents"]
    assert any(EVIL in d["snippet"] for d in docs)  # the same text once parsed
