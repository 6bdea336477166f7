"""issue 13, bug 2: documents come back with their text -- get_doc(i).text on a byte index and
on an index that saved its tokenizer, and search_docs(ids, decode=True) for an id query."""
from __future__ import annotations

from infinigram_hf.build import build_index

from conftest import bpe_tokenizer  # noqa: F401  (fixture)

DOCS = ["the cat sat on the mat", "a dog sat on the mat", "ünïcödé"]


def test_byte_index_documents_have_text(scratch_dir) -> None:
    with build_index(DOCS, scratch_dir / "bytes-text", progress=False) as ix:
        assert [ix.get_doc(i).text for i in range(3)] == DOCS
        assert ix.get_doc(0, decode=False).text is None
        res = ix.search_docs(list(b" mat"), decode=True)
        assert sorted(d.text for d in res.documents) == sorted(DOCS[:2])
        assert all(d.text is None for d in ix.search_docs(list(b" mat")).documents)  # ids: no text by default
        assert ix.tokenizer.encode("cat") == list(b"cat")


def test_saved_tokenizer_decodes_documents(scratch_dir, bpe_tokenizer) -> None:
    with build_index(DOCS, scratch_dir / "bpe-text", tokenizer=bpe_tokenizer, progress=False) as ix:
        assert ix.get_doc(1).text == DOCS[1]
        ids = bpe_tokenizer.encode(" mat", add_special_tokens=False)
        res = ix.search_docs(ids, decode=True)
        assert sorted(d.text for d in res.documents) == sorted(DOCS[:2])
        assert ix.tokenizer.get_vocab() == bpe_tokenizer.get_vocab()


def test_index_of_ids_has_no_text(scratch_dir) -> None:
    with build_index([[1, 2, 3]], scratch_dir / "ids-text", vocab_size=10, progress=False) as ix:
        assert ix.get_doc(0).text is None and ix.tokenizer is None
        assert ix.search_docs([2, 3], decode=True).documents[0].text is None
