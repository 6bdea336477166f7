"""The core installs and answers queries without the [hf] extra (issue 13, packaging): in a child
process where torch, transformers, datasets, tokenizers, tqdm, evaluate and matplotlib cannot be
imported, an index is built, queried, searched, used as a standalone LM and through the CLI; the
adapters and loading a tokenizer by name fail with one message naming `infinigram_hf[hf]`."""
from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKER = textwrap.dedent('''
    import importlib.abc, sys
    BLOCKED = {"torch", "transformers", "datasets", "tokenizers", "tqdm", "evaluate", "matplotlib"}

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    import importlib.util
    _find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in BLOCKED else _find_spec(name, *a)
''')

SCRIPT = textwrap.dedent('''
    import json, sys, tempfile
    from pathlib import Path
    import numpy as np
    import infinigram_hf
    from infinigram_hf import InfiniGramIndex, InfiniGramLM, build_index
    from infinigram_hf.cli import main

    d = Path(tempfile.mkdtemp())
    docs = ["the cat sat on the mat", "the cat ate", "a dog sat on the mat"]
    ix = build_index(docs, d / "bytes")                    # progress bar on: none without tqdm
    assert ix.count(list(b"the cat")) == 2
    assert ix.infgram_ntd(list(b"the cat ")).as_dict() == {ord("s"): 1, ord("a"): 1}
    assert ix.get_doc(2).text == docs[2]
    assert ix.search_docs(list(b" mat")).count == 2
    lm = InfiniGramLM(ix)
    assert lm.perplexity(["the cat sat"], method="kn").perplexity > 1
    assert lm.generate("the ", 5, seed=0).text is not None
    ids = build_index([np.array([1, 2, 3, 1, 2], dtype=np.uint16)], d / "ids", vocab_size=10, progress=False)
    assert ids.count([1, 2]) == 2 and ids.tokenizer is None
    assert main(["query", str(d / "bytes"), "--text", "the ", "--repeat", "1"]) == 0
    for what in ("InfiniGramLogitsProcessor", "perplexity", "speculative_generate"):
        try:
            getattr(infinigram_hf, what)
        except ImportError as exc:
            assert "infinigram_hf[hf]" in str(exc), exc
        else:
            raise AssertionError(what + " imported without torch")
    try:
        build_index(docs, d / "named", tokenizer="gpt2")
    except ImportError as exc:
        assert "infinigram_hf[hf]" in str(exc), exc
    else:
        raise AssertionError("a tokenizer by name loaded without transformers")
    print("core ok:", sorted(m for m in ("torch", "transformers", "datasets", "tqdm", "tokenizers") if m in sys.modules))
''')


def test_core_builds_and_queries_without_the_hf_extra() -> None:
    r = subprocess.run([sys.executable, "-c", BLOCKER + SCRIPT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "core ok: []" in r.stdout, r.stdout


def test_metadata_core_requirements_license_and_urls() -> None:
    import importlib.metadata as md

    meta = md.metadata("infinigram_hf")
    core = sorted(r.split(">")[0].split("=")[0].strip() for r in meta.get_all("Requires-Dist") if "extra ==" not in r)
    assert core == ["cffi", "numpy"]
    hf = " ".join(r for r in meta.get_all("Requires-Dist") if "extra == \"hf\"" in r)
    assert all(m in hf for m in ("torch", "transformers", "datasets", "tokenizers", "tqdm"))
    assert meta.get("License-Expression") == "MIT" and meta.get_all("Project-URL")
