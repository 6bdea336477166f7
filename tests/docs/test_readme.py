"""Every ```python and ```bash block of README.md runs (issue 13: a README example never rots).

The blocks run in order, in one working directory and (python) one namespace, as a reader would
paste them. The directory is the documented fixture (`make_workdir`), where the Hub is replaced by
local stand-ins with the names the README uses:

- ``gpt2/``: a byte-level BPE tokenizer (300 ids, EOS ``<|endoftext|>``, no pad token -- as
  GPT-2) trained on a few standard-library modules, and a tiny random GPT-2 with that vocabulary,
  saved with save_pretrained (``from_pretrained("gpt2")`` finds the local directory first);
  ``my_tokenizer/`` is the same tokenizer;
- ``corpus.jsonl`` (``text``, ``url``), ``val.jsonl``, ``test.jsonl``: documents of those modules;
  ``corpus/``, ``heldout/``, ``test/``: the same as .txt files; ``val.txt``, ``heldout.txt``: one
  text each; ``saved_ds/``: a dataset saved with save_to_disk (``text``, ``id``, ``url``);
  ``tokens.npy``: token ids.

A block preceded by ``<!-- readme-test: skip (why) -->`` is reported as skipped with that reason;
any other block that raises (python) or exits non-zero (bash) fails its test. In bash blocks,
``infinigram-hf`` runs in-process (its ``main``; a command that never returns, such as a server,
needs the skip marker), ``python`` is this interpreter, and other commands run as they are.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest

from readme_blocks import Block, bash_commands, parse_blocks

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = parse_blocks(README.read_text(encoding="utf-8"))
MODULES = ("textwrap", "heapq", "bisect", "colorsys", "keyword", "fnmatch", "glob", "shlex")


def _texts() -> list:
    import importlib

    return [Path(importlib.import_module(m).__file__).read_text(encoding="utf-8") for m in MODULES]


def make_workdir(d: Path) -> None:
    """The fixture the README's blocks run in (see the module docstring)."""
    import datasets
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    texts = _texts()
    train, val, test = texts[:5], texts[5:7], texts[7:]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=1024, n_embd=32, n_layer=2, n_head=2,
                     bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    GPT2LMHeadModel(cfg).save_pretrained(d / "gpt2")
    tok.save_pretrained(d / "gpt2")
    tok.save_pretrained(d / "my_tokenizer")

    def jsonl(name: str, docs: list) -> None:
        rows = [{"text": t, "url": f"https://example.org/{m}.py"} for m, t in docs]
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    jsonl("corpus.jsonl", list(zip(MODULES[:5], train)))
    jsonl("val.jsonl", list(zip(MODULES[5:7], val)))
    jsonl("test.jsonl", list(zip(MODULES[7:], test)))
    for folder, docs, names in (("corpus", train, MODULES[:5]), ("heldout", val, MODULES[5:7]),
                                ("test", test, MODULES[7:])):
        (d / folder).mkdir()
        for m, t in zip(names, docs):
            (d / folder / f"{m}.txt").write_text(t, encoding="utf-8")
    (d / "val.txt").write_text(val[0], encoding="utf-8")
    (d / "heldout.txt").write_text(val[1], encoding="utf-8")
    datasets.Dataset.from_dict({"text": train, "id": list(MODULES[:5]),
                                "url": [f"https://example.org/{m}.py" for m in MODULES[:5]]}).save_to_disk(
        str(d / "saved_ds"))
    np.save(d / "tokens.npy", np.array(tok.encode(train[0]), dtype=np.uint16))


class Session:
    """The shared working directory and namespace; blocks run at most once, in README order."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.namespace: dict = {"__name__": "__readme__"}
        self.results: dict = {}  # block index -> None (ran) or the error text

    def run_upto(self, i: int) -> None:
        for k in range(i + 1):
            if k not in self.results and BLOCKS[k].skip is None:
                self.results[k] = self._run(BLOCKS[k])

    def _run(self, block: Block) -> "str | None":
        cwd = os.getcwd()
        os.chdir(self.workdir)
        try:
            if block.lang == "python":
                exec(compile(block.code, f"README.md:{block.line}", "exec"), self.namespace)
            else:
                for argv in bash_commands(block.code):
                    self._run_command(argv)
            return None
        except BaseException as exc:  # (SystemExit from a script too)
            if isinstance(exc, KeyboardInterrupt):
                raise
            return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
        finally:
            os.chdir(cwd)

    @staticmethod
    def _run_command(argv: list) -> None:
        if argv[0] == "infinigram-hf":
            from infinigram_hf.cli import main

            rc = main(argv[1:])
            if rc != 0:
                raise AssertionError(f"{' '.join(argv)!r} exited {rc}")
            return
        if argv[0] in ("python", "python3"):
            argv = [sys.executable] + argv[1:]
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        if r.returncode != 0:
            raise AssertionError(f"{' '.join(argv)!r} exited {r.returncode}: {r.stderr[-2000:]}")


@pytest.fixture(scope="module")
def session(tmp_path_factory, monkeypatch_module) -> Session:
    d = tmp_path_factory.mktemp("readme")
    make_workdir(d)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_EVALUATE_OFFLINE"):
        monkeypatch_module.setenv(var, "1")
    monkeypatch_module.setenv("HF_DATASETS_CACHE", str(d / ".hf-datasets-cache"))
    yield Session(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_readme_has_the_blocks() -> None:
    assert sum(b.lang == "python" for b in BLOCKS) >= 5 and any(b.lang == "bash" for b in BLOCKS)


@pytest.mark.parametrize("i", range(len(BLOCKS)), ids=[b.name for b in BLOCKS])
def test_readme_block_runs(session: Session, i: int) -> None:
    block = BLOCKS[i]
    if block.skip is not None:
        pytest.skip(f"README.md:{block.line}: {block.skip}")
    session.run_upto(i)
    err = session.results[i]
    if err is not None:
        pytest.fail(f"README.md:{block.line} ({block.lang} block) failed:\n{err}", pytrace=False)
