"""The ∞-gram as a language model over an index (torch-free): `InfiniGramLM` (scoring,
smoothing, generation), the mixture of P_∞ with a neural distribution (weights, interpolated
perplexity of cached scores, λ tuning) and the speculative-decoding drafter."""
from .drafter import Draft, DraftTree, InfiniGramDrafter
from .mixture import EffectiveNBreakdown, LambdaFit, PerplexityResult, TokenScores, interpolate, tune_lambdas
from .learned_mixing import MixingFormatError, MixingModel
from .model import InfiniGramLM
from .smoothing import SmoothingParams

__all__ = ["InfiniGramLM", "SmoothingParams", "InfiniGramDrafter", "Draft", "DraftTree", "TokenScores",
           "PerplexityResult", "LambdaFit", "EffectiveNBreakdown", "interpolate", "tune_lambdas",
           "MixingModel", "MixingFormatError"]
