"""`infinigram-hf search`: CNF syntax, text and --ids queries, JSON output, bad input."""
from __future__ import annotations

import json

import pytest

from infinigram_hf.build import build_index
from infinigram_hf.cli import main
from infinigram_hf.cli.common import parse_ids
from infinigram_hf.cli.index_commands import parse_cnf


@pytest.fixture(scope="module")
def byte_index(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-search")
    texts = ["import os\nimport sys\n", "def main():\n    return os.getcwd()\n", "print('hi')\n"]
    build_index(texts, d / "ix", progress=False).close()
    return d / "ix"


def run(capsys, *argv):
    rc = main(["search", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else err)


def test_parse_cnf():
    assert parse_cnf("a AND b OR c", str) == [["a"], ["b", "c"]]
    assert parse_cnf("1,2 OR 3 AND 4", parse_ids) == [[[1, 2], [3]], [[4]]]
    assert parse_cnf("x y", str) == [["x y"]]


def test_text_query(byte_index, capsys):
    rc, out = run(capsys, byte_index, "os AND sys OR main")
    assert rc == 0
    assert out["count"] == 2 and not out["approximate"]
    assert [d["doc_id"] for d in out["documents"]] == [0, 1]
    assert out["documents"][0]["spans"][0] == {"offset": 7, "length": 2, "clause": 0, "term": 0}
    assert out["documents"][0]["snippet"] == "import os\nimport sys\n"
    rc, out = run(capsys, byte_index, "import AND sys", "--max-diff-tokens", 6)
    assert rc == 0 and out["count"] == 0


def test_ids_query_and_all_ids(byte_index, capsys):
    rc, out = run(capsys, byte_index, "--ids", "111,115 AND 109 OR 120", "--all-ids", "--maxnum", 1)
    assert rc == 0
    assert out["query"]["cnf_ids"] == [[[111, 115]], [[109], [120]]]
    assert out["doc_ids"] == [0, 1] and len(out["documents"]) == 1


@pytest.mark.parametrize("argv, msg", [
    (["a AND  AND b"], "empty term"),
    ([], "exactly one"),
    (["x", "--ids", "1"], "exactly one"),
    (["--ids", "1,x"], "integers"),
    (["--ids", "999"], "outside the vocabulary"),
    (["x", "--maxnum", "-1"], "maxnum"),
])
def test_bad_input_exits_2(byte_index, capsys, argv, msg):
    rc, err = run(capsys, byte_index, *argv)
    assert rc == 2 and msg in err
