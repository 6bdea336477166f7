"""Public path kept for `infinigram_hf.smoothing.fit` / `SmoothingParams`; smoothing lives in
`infinigram_hf.lm.smoothing`."""
from .lm.smoothing import SmoothingParams, fit

__all__ = ["SmoothingParams", "fit"]
