"""`infinigram-hf serve` refuses bad arguments with one line and exit status 2, before starting."""
from __future__ import annotations

import pytest

from infinigram_hf import build_index
from infinigram_hf.cli import main


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "ix"
    build_index([[1, 2, 3]], out, vocab_size=5, progress=False).close()
    return str(out)


def test_bad_arguments_exit_2(index_dir, tmp_path, capsys) -> None:
    empty = tmp_path / "key"
    empty.write_text("\n")
    cases = [
        # regression: a repeatable option (--name) was refused as "'--' is not a valid value"
        ([index_dir, "--name", "a", "--name", "b"], "one --name per index"),
        ([index_dir, index_dir, "--name", "a", "--name", "a"], "distinct"),
        ([str(tmp_path / "missing")], "missing"),
        ([index_dir, "--api-key-file", str(empty)], "empty"),
        ([index_dir, "--workers", "0"], "--workers"),
        ([index_dir, "--time-budget", "0"], "--time-budget"),
    ]
    for args, words in cases:
        assert main(["serve", *args]) == 2, args
        err = capsys.readouterr().err
        assert "serve: error:" in err and words in err, (args, err)
