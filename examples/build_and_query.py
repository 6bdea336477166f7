"""Build an ∞-gram index from a `datasets.Dataset` with a locally trained tokenizer, then query it.

Runs offline: the corpus is a slice of the Python standard library's own .py files and the BPE
tokenizer is trained on them with `tokenizers`.

    python examples/build_and_query.py                 # index in a temporary directory
    python examples/build_and_query.py --out my_index  # keep it (then: infinigram-hf info my_index)
"""
from __future__ import annotations

import argparse
import sysconfig
import tempfile
from pathlib import Path

import datasets
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import infinigram_hf


def stdlib_dataset(max_files: int) -> datasets.Dataset:
    """A text dataset with one row per standard-library file, and its path as metadata."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py"))[:max_files]
    return datasets.Dataset.from_dict({
        "text": [p.read_text(encoding="utf-8", errors="replace") for p in files],
        "path": [p.name for p in files],
    })


def train_bpe(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained in a few seconds, wrapped as an HF tokenizer."""
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    raw.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="index directory (default: a temporary one)")
    parser.add_argument("--max-files", type=int, default=100, help="standard-library files to index")
    args = parser.parse_args()

    ds = stdlib_dataset(args.max_files)
    tok = train_bpe(ds["text"], vocab_size=8000)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "index"
        # Builds the suffix array in C; the index is published atomically at `out`.
        index = infinigram_hf.build_index(ds, out, tokenizer=tok, metadata_columns=["path"],
                                          overwrite=True, progress=False)
        with index:
            print(index)

            query = tok.encode("\ndef main(", add_special_tokens=False)
            print("count('\\ndef main(')            =", index.count(query))

            prompt = tok.encode("\nimport", add_special_tokens=False)
            ntd = index.infgram_ntd(prompt)  # exact distribution of the longest matching suffix
            top = sorted(ntd.as_dict().items(), key=lambda kv: -kv[1])[:5]
            print(f"next after '\\nimport' (n={ntd.effective_n}):",
                  ", ".join(f"{tok.decode([t])!r}: {c}" for t, c in top))

            token = tok.encode(" os", add_special_tokens=False)[0]
            p = index.infgram_prob(prompt, token)
            print(f"P_inf(' os' | '\\nimport')      = {p.prob:.3f} ({p.count}/{p.prompt_count}, sparse={p.sparse})")

            snippet = tok.encode("import os\nimport sys\n\ndef main():\n    pass\n", add_special_tokens=False)
            scores = index.score(snippet)  # P_inf of every token given all before it
            print("dense scores                   =", [round(float(x), 2) for x in scores.probs])

            shard, pos = index.positions(query, limit=1)[0]
            doc_id, offset = index.locate(shard, pos)
            doc = index.get_doc(doc_id)
            print(f"first occurrence               = document {doc_id} ({doc.metadata['path']}), token {offset}")

        # Byte level (tokenizer=None): ids are UTF-8 bytes, for character-level work.
        byte_index = infinigram_hf.build_index(ds, Path(tmp) / "bytes", progress=False)
        with byte_index:
            print(byte_index)
            print("count(b'def main(')            =", byte_index.count(list(b"def main(")))


if __name__ == "__main__":
    main()
