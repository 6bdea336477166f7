"""Everything that imports torch or transformers: the logits processor, the perplexity of a
model interpolated with the ∞-gram, the speculative-decoding loop (`custom_generate`), the
adapter for transformers' assisted loop and the KV-cache helpers. Nothing is imported here:
`import infinigram_hf` stays torch-free, and its lazy names load these modules on first use."""
import importlib.util as _util

# One clear message instead of a ModuleNotFoundError from deep inside a module (the core
# installs with numpy and cffi alone; the adapters come with the [hf] extra).
_MISSING = [m for m in ("torch", "transformers") if _util.find_spec(m) is None]
if _MISSING:
    raise ImportError(
        f"infinigram_hf's HuggingFace adapters (the logits processor, perplexity, speculative decoding) "
        f"need {' and '.join(_MISSING)}, which {'is' if len(_MISSING) == 1 else 'are'} not installed: "
        f"pip install 'infinigram_hf[hf]'")
