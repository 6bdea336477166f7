"""The index layer: `InfiniGramIndex` (the Python face of the C core: ids in, numpy out),
batched queries, decoding states (`SuffixCache`), union and difference of indexes, document
search and the result types. Imports only `infinigram_hf._core`; knows nothing of the LM,
torch or transformers."""
from .difference import DifferenceIndex
from .infinigram_index import InfiniGramIndex
from .results import (BatchNextTokenDistributions, BatchProbResult, BatchScoreResult, Document, FindResult,
                      NextTokenDistribution, ProbResult, ScoreResult)
from .search import DocumentMatch, SearchResult
from .states import DecodingState, SuffixCache

__all__ = ["InfiniGramIndex", "DifferenceIndex", "SuffixCache", "DecodingState", "Document", "DocumentMatch",
           "SearchResult", "FindResult", "ProbResult", "NextTokenDistribution", "ScoreResult", "BatchProbResult",
           "BatchNextTokenDistributions", "BatchScoreResult"]
