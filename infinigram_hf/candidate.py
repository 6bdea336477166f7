"""Public path kept for `infinigram_hf.candidate.hf_assisted_generate`; the adapter for
transformers' assisted loop lives in `infinigram_hf.hf.assisted`."""
from .hf.assisted import InfiniGramCandidateGenerator, hf_assisted_generate

__all__ = ["InfiniGramCandidateGenerator", "hf_assisted_generate"]
