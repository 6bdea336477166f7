"""Public path kept for `model.generate(..., custom_generate=infinigram_hf.speculative.generate)`;
the loop lives in `infinigram_hf.hf.speculative`."""
from .hf.speculative import SpeculativeStats, generate, speculative_generate

__all__ = ["generate", "speculative_generate", "SpeculativeStats"]
