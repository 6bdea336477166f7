"""A tokenizer saved in an index may name code of its own (`auto_map` in tokenizer_config.json).
Loading it never runs that code and never asks on stdin whether to (transformers prompts, and
waits, when trust_remote_code is not given): every place that loads an index's tokenizer passes
trust_remote_code=False and refuses the tokenizer with a ValueError. Checked in a child process
whose stdin stays open, so a prompt would show in its output (and wait for its alarm)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infinigram_hf.build import build_index

CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from infinigram_hf import InfiniGramIndex
    from infinigram_hf.cli import main
    from infinigram_hf.lm import InfiniGramLM
    from infinigram_hf.index.search import search_docs
    from infinigram_hf._core.tokenization import resolve_tokenizer

    ix_dir = Path(sys.argv[1])
    ix = InfiniGramIndex.open(ix_dir)
    for name, call in (
        ("resolve_tokenizer", lambda: resolve_tokenizer(str(ix_dir / "tokenizer"))),
        ("search_docs", lambda: search_docs(ix, "def f")),
        ("InfiniGramLM", lambda: InfiniGramLM(ix).score("def f")),
    ):
        try:
            call()
            print(name, "loaded")
        except ValueError as exc:
            print(name, "refused:", str(exc).splitlines()[0][:100])
    print("cli", main(["query", str(ix_dir), "--text", "def f", "--repeat", "1"]))
    sys.stdout.flush()
""")


@pytest.fixture()
def index_with_remote_code_tokenizer(tmp_path, bpe_tokenizer) -> Path:
    ix = tmp_path / "ix"
    build_index(["def f(x): return x"] * 5, ix, tokenizer=bpe_tokenizer, progress=False).close()
    tok_dir = ix / "tokenizer"
    config_path = tok_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "EvilTokenizer"  # not a class transformers has: only the code names it
    config["auto_map"] = {"AutoTokenizer": ["someone/repo--evil.EvilTokenizer", "someone/repo--evil.EvilTokenizer"]}
    config_path.write_text(json.dumps(config))
    (tok_dir / "evil.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'w').write('x')\n")
    (tok_dir / "tokenizer.json").unlink()  # (the CLI reads tokenizer.json itself when it is there)
    return ix


def test_remote_code_in_a_saved_tokenizer_is_refused_without_a_prompt(index_with_remote_code_tokenizer) -> None:
    ix = index_with_remote_code_tokenizer
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(ix)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=120)  # (stdin stays open: a prompt would wait on it)
    finally:
        proc.kill()
    assert "Do you wish to run the custom code" not in out, out
    assert "resolve_tokenizer refused" in out and "search_docs refused" in out and "InfiniGramLM refused" in out, out
    assert "cli 2" in out, out
    assert not (ix.parent / "RAN").exists()
