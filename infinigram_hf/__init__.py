"""infinigram_hf: the ∞-gram language model (unbounded-n n-gram counts from a suffix array),
served into HuggingFace decoding."""
from .errors import IndexFormatError, InfiniGramError, TokenizerMismatchError
from .build import build_index
from .index import InfiniGramIndex
from .difference import DifferenceIndex
from .search import DocumentMatch, SearchResult
from .results import Document, FindResult, NextTokenDistribution, ProbResult, ScoreResult

__version__ = "0.1.0"

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
    "__version__",
]
