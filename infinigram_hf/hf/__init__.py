"""Everything that imports torch or transformers: the logits processor, the perplexity of a
model interpolated with the ∞-gram, the speculative-decoding loop (`custom_generate`), the
adapter for transformers' assisted loop and the KV-cache helpers. Nothing is imported here:
`import infinigram_hf` stays torch-free, and its lazy names load these modules on first use."""
