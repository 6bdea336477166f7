"""issue 13, friction in build_index: a DatasetDict is refused naming its splits (or split= picks
one), token ids without vocab_size= say to pass it, one flat id array with offsets= builds as the
list of documents, an existing empty directory is a fine out_dir, and num_proc works from a
script without a __main__ guard."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from infinigram_hf import build_index

datasets = pytest.importorskip("datasets")


def test_dataset_dict_needs_a_split(scratch_dir) -> None:
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a cat", "a dog"]}),
                               "test": datasets.Dataset.from_dict({"text": ["a bird"]})})
    with pytest.raises(ValueError, match=r"DatasetDict with splits \['train', 'test'\].*split="):
        build_index(dd, scratch_dir / "dd-refused", progress=False)
    assert not (scratch_dir / "dd-refused").exists()
    with build_index(dd, scratch_dir / "dd-train", split="train", progress=False) as ix:
        assert ix.num_docs == 2 and ix.count(list(b"a ")) == 2
    with pytest.raises(ValueError, match="not in the DatasetDict"):
        build_index(dd, scratch_dir / "dd-bad", split="validation", progress=False)
    with pytest.raises(ValueError, match="split= applies to a datasets.DatasetDict"):
        build_index(["x"], scratch_dir / "dd-list", split="train", progress=False)


def test_input_ids_without_vocab_size_say_to_pass_it(scratch_dir) -> None:
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 300], [5]]})
    with pytest.raises(ValueError, match="pass vocab_size="):
        build_index(ds, scratch_dir / "ids-refused", progress=False)
    with build_index(ds, scratch_dir / "ids-ok", vocab_size=400, progress=False) as ix:
        assert ix.count([2, 300]) == 1


def test_flat_array_with_offsets(scratch_dir) -> None:
    docs = [[1, 2, 3], [], [2, 3, 4, 2, 3]]
    flat = np.array(sum(docs, []), dtype=np.uint16)
    offsets = np.cumsum([0] + [len(d) for d in docs])
    with build_index(flat, scratch_dir / "flat", offsets=offsets, vocab_size=10, progress=False) as ix, \
            build_index(docs, scratch_dir / "lists", vocab_size=10, progress=False) as ref:
        assert ix.num_docs == 3 and ix.count([2, 3]) == ref.count([2, 3]) == 3
        assert [ix.get_doc(i).token_ids.tolist() for i in range(3)] == docs
    with pytest.raises(ValueError, match="offsets must rise from 0"):
        build_index(flat, scratch_dir / "flat-bad", offsets=[0, 3, 99], vocab_size=10, progress=False)


def test_an_empty_directory_is_a_fine_out_dir(scratch_dir) -> None:
    out = scratch_dir / "empty-out"
    out.mkdir()
    with build_index(["abc"], out, progress=False) as ix:
        assert ix.num_docs == 1


SCRIPT = textwrap.dedent('''
    # no `if __name__ == "__main__":` guard, as in a notebook cell turned into a script
    import sys
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from infinigram_hf import build_index

    texts = [f"document {i} says {i % 7} and {i % 5}" for i in range(400)]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw)
    ix = build_index(texts, sys.argv[1], tokenizer=tok, num_proc=2, batch_size=50, progress=False)
    assert ix.num_docs == 400 and ix.count(tok.encode("document 7 says 0")) == 1
    print("built", ix.num_docs)
''')


def test_num_proc_in_a_script_without_a_main_guard(tmp_path) -> None:
    script = tmp_path / "build_it.py"
    script.write_text(SCRIPT, encoding="utf-8")
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "ix")], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "built 400" in r.stdout
