"""infinigram_hf: the ∞-gram language model (unbounded-n n-gram counts from a suffix array),
served into HuggingFace decoding."""
from .errors import IndexFormatError, InfiniGramError, TokenizerMismatchError
from .build import build_index
from .index import InfiniGramIndex
from .difference import DifferenceIndex
from .search import DocumentMatch, SearchResult
from .results import Document, FindResult, NextTokenDistribution, ProbResult, ScoreResult
# Interpolation with neural LMs (torch is imported only when a model is scored). Note that
# `infinigram_hf.perplexity` is the function; its module is importable as `from
# infinigram_hf.perplexity import ...`.
from .interpolation import EffectiveNBreakdown, LambdaFit, PerplexityResult, TokenScores, interpolate, tune_lambdas
from .perplexity import perplexity, token_scores, with_index
# The standalone ∞-gram LM: generation, smoothed perplexity (infinigram_hf.lm, .smoothing).
from .lm import InfiniGramLM
from .smoothing import SmoothingParams
# Speculative decoding: the drafter is torch-free; the decoding loop is imported on first use.
from .drafter import Draft, DraftTree, InfiniGramDrafter

__version__ = "0.1.0"


def __getattr__(name: str):
    # The logits processor needs torch and transformers: imported on first use only.
    if name == "InfiniGramLogitsProcessor":
        from .processor import InfiniGramLogitsProcessor
        return InfiniGramLogitsProcessor
    if name in ("speculative_generate", "SpeculativeStats"):
        from . import speculative
        return getattr(speculative, name)
    if name == "InfiniGramCandidateGenerator":
        from .candidate import InfiniGramCandidateGenerator
        return InfiniGramCandidateGenerator
    raise AttributeError(f"module 'infinigram_hf' has no attribute {name!r}")


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
    "PerplexityResult",
    "TokenScores",
    "LambdaFit",
    "EffectiveNBreakdown",
    "InfiniGramLM",
    "SmoothingParams",
    "__version__",
]
