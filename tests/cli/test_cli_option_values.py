"""Option values the CLI cannot use are refused with one line and exit status 2:
`--ids=--` (argparse stores [] for it: `run_search` then crashed with AttributeError, found by
fuzzing, fuzz/regressions/py_cnf/attributeerror-ids-double-dash-parsed-as-list) and ids written
with non-ASCII digits (int() reads '١٢' as 12)."""
from __future__ import annotations

import pytest

from infinigram_hf.build import build_index
from infinigram_hf.cli import main
from infinigram_hf.cli.common import CLIError, parse_ids


@pytest.fixture(scope="module")
def byte_index(tmp_path_factory):
    out = tmp_path_factory.mktemp("cliopt") / "ix"
    build_index(["the cat sat on the mat", "the dog"], out, progress=False).close()
    return str(out)


@pytest.mark.parametrize("argv", [
    ["search", "{ix}", "--ids=--"],
    ["search", "--max-diff-tokens", "2", "{ix}", "--maxnum", "1", "--ids=--"],  # the fuzzer's input
    ["query", "{ix}", "--ids=--"],
    ["query", "{ix}", "--text=--"],
])
def test_a_double_dash_value_is_refused(byte_index, capsys, argv) -> None:
    assert main([a.format(ix=byte_index) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "'--' is not a valid value" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("text", ["١٢", "１２", "1,٣", "²", "1_000", "0x10", "1e3", "9" * 21])
def test_ids_must_be_ascii_integers(text) -> None:
    with pytest.raises(CLIError, match="ASCII digits"):
        parse_ids(text)


def test_ids_still_parse() -> None:
    assert parse_ids("1,2, 3") == [1, 2, 3] and parse_ids("") == [] and parse_ids("-1 +2") == [-1, 2]


def test_non_ascii_ids_on_the_command_line(byte_index, capsys) -> None:
    assert main(["query", byte_index, "--ids", "١١٦,١٠٤"]) == 2  # 't', 'h' in Arabic-Indic digits
    assert "ASCII digits" in capsys.readouterr().err
    assert main(["search", byte_index, "--ids", "116,104 OR ١٠٤"]) == 2
    assert "ASCII digits" in capsys.readouterr().err
