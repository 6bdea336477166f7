"""The index layer: `InfiniGramIndex` (the Python face of the C core: ids in, numpy out),
batched queries, decoding states (`SuffixCache`), union and difference of indexes, document
search, the result types, and `RemoteIndex` (an index on an `infinigram-hf serve` server;
standard library HTTP only). Imports only `infinigram_hf._core`; knows nothing of the LM,
torch or transformers."""
from .difference import DifferenceIndex
from .infinigram_index import InfiniGramIndex
from .remote import RemoteIndex
from .results import (BatchNextTokenDistributions, BatchProbResult, BatchScoreResult, Document, FindResult,
                      NextTokenDistribution, ProbResult, ScoreResult)
from .search import DocumentMatch, SearchResult
from .states import DecodingState, SuffixCache



def is_index(obj: object) -> bool:
    """Whether obj answers the index query API: a local `InfiniGramIndex` or a `RemoteIndex`."""
    return isinstance(obj, (InfiniGramIndex, RemoteIndex))


__all__ = ["InfiniGramIndex", "RemoteIndex", "is_index", "DifferenceIndex", "SuffixCache", "DecodingState", "Document", "DocumentMatch",
           "SearchResult", "FindResult", "ProbResult", "NextTokenDistribution", "ScoreResult", "BatchProbResult",
           "BatchNextTokenDistributions", "BatchScoreResult"]
