"""The metadata properties of an index that answers them from one dict: a `RemoteIndex` from
its server's /info, a `ShardRouter` (infinigram_hf.distributed) from the index's meta.json.
(`InfiniGramIndex` reads the C core's figures instead.)"""
from __future__ import annotations

from typing import Any, Optional


class IndexFacts:
    """Mixin: `_facts()` returns the dict; the properties read it."""

    def _facts(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def num_tokens(self) -> int:
        """Tokens in the corpus, document separators excluded."""
        return int(self._facts()["num_tokens"])

    @property
    def num_docs(self) -> int:
        """Documents in the corpus."""
        return int(self._facts()["num_docs"])

    @property
    def vocab_size(self) -> int:
        """Valid token ids are 0 .. vocab_size - 1."""
        return int(self._facts()["vocab_size"])

    @property
    def separator_id(self) -> int:
        """Reserved id between documents; next-token distributions report end-of-document under it."""
        return int(self._facts()["separator_id"])

    @property
    def token_width(self) -> int:
        """Bytes per stored token id."""
        return int(self._facts()["token_width"])

    @property
    def eos_token_id(self) -> Optional[int]:
        """The tokenizer's EOS id recorded at build time (None without one)."""
        return self._facts().get("eos_token_id")

    @property
    def tokenizer_name(self) -> Optional[str]:
        """Name of the tokenizer the index was built with."""
        return self._facts().get("tokenizer_name")

    @property
    def vocab_fingerprint(self) -> Optional[str]:
        """sha256 of the tokenizer's (token, id) table."""
        return self._facts().get("vocab_fingerprint")


__all__ = ["IndexFacts"]
