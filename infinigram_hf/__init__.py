"""infinigram_hf: the ∞-gram language model (unbounded-n n-gram counts from a suffix array),
served into HuggingFace decoding.

The public names are the ones below (README, "Architecture"). Importing the package needs numpy
and cffi only: the names that need torch or transformers (infinigram_hf/hf/) and the build
pipeline (tqdm, tokenizer processes) are imported on first use.
"""
from typing import Any

from ._core.errors import IndexFormatError, InfiniGramError, TokenizerMismatchError
from ._version import __version__
from .index import (DifferenceIndex, Document, DocumentMatch, FindResult, InfiniGramIndex, NextTokenDistribution,
                    ProbResult, ScoreResult, SearchResult, SuffixCache)
from .lm import (Draft, DraftTree, EffectiveNBreakdown, InfiniGramDrafter, InfiniGramLM, LambdaFit, PerplexityResult,
                 MixingModel, SmoothingParams, TokenScores, interpolate, tune_lambdas)

# name -> module that defines it, imported on first access (PEP 562)
_LAZY = {
    "build_index": ".build",
    "InfiniGramLogitsProcessor": ".hf.processor",
    "perplexity": ".hf.perplexity",
    "token_scores": ".hf.perplexity",
    "with_index": ".hf.perplexity",
    "fit_mixing": ".hf.fit_mixing",
    "MixingFit": ".hf.fit_mixing",
    "speculative_generate": ".hf.speculative",
    "SpeculativeStats": ".hf.speculative",
    "InfiniGramCandidateGenerator": ".hf.assisted",
    "trace": ".tracing",
    "Trace": ".tracing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'infinigram_hf' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "InfiniGramIndex",
    "build_index",
    "InfiniGramError",
    "IndexFormatError",
    "TokenizerMismatchError",
    "Document",
    "FindResult",
    "NextTokenDistribution",
    "ProbResult",
    "ScoreResult",
    "DifferenceIndex",
    "DocumentMatch",
    "SearchResult",
    "SuffixCache",
    "InfiniGramLogitsProcessor",
    "InfiniGramDrafter",
    "Draft",
    "DraftTree",
    "speculative_generate",
    "SpeculativeStats",
    "InfiniGramCandidateGenerator",
    "perplexity",
    "token_scores",
    "with_index",
    "interpolate",
    "tune_lambdas",
    "fit_mixing",
    "MixingFit",
    "MixingModel",
    "PerplexityResult",
    "TokenScores",
    "LambdaFit",
    "EffectiveNBreakdown",
    "InfiniGramLM",
    "SmoothingParams",
    "trace",
    "Trace",
    "__version__",
]
